from .dense import COCO_CLASSES, generate_ade20k, generate_coco_instances
from .imagenet import generate_imagenet, imagenet_wnid
from .pos_shapes import CLASSES, generate_pos_shapes
from .texture import natural_image

__all__ = [
    'CLASSES', 'COCO_CLASSES', 'generate_ade20k', 'generate_coco_instances',
    'generate_imagenet', 'generate_pos_shapes', 'imagenet_wnid',
    'natural_image'
]
