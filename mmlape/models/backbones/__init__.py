from .base import LaPEBackbone
from .dense_swin import LaPEDenseSwin
from .seg_vit import LaPESegViT
from .swin import LaPESwin
from .t2t_vit import LaPET2TViT
from .vit import LaPEViT, PatchEmbed
from .vit_adapter import LaPEViTAdapter

__all__ = [
    'LaPEBackbone', 'LaPEViT', 'LaPEViTAdapter', 'PatchEmbed', 'LaPESwin',
    'LaPESegViT', 'LaPET2TViT', 'LaPEDenseSwin'
]
