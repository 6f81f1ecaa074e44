from .pos_shapes import CLASSES, generate_pos_shapes

__all__ = ['CLASSES', 'generate_pos_shapes']
