from .base import LaPEBackbone
from .seg_vit import LaPESegViT
from .swin import LaPESwin
from .vit import LaPEViT, PatchEmbed
from .vit_adapter import LaPEViTAdapter

__all__ = [
    'LaPEBackbone', 'LaPEViT', 'LaPEViTAdapter', 'PatchEmbed', 'LaPESwin',
    'LaPESegViT'
]
