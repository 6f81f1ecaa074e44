from .dense import COCO_CLASSES, generate_ade20k, generate_coco_instances
from .pos_shapes import CLASSES, generate_pos_shapes

__all__ = [
    'CLASSES', 'COCO_CLASSES', 'generate_ade20k', 'generate_coco_instances',
    'generate_pos_shapes'
]
