from .swin import LaPESwin
from .vit import LaPEViT, PatchEmbed
from .vit_adapter import LaPEViTAdapter

__all__ = ['LaPEViT', 'LaPEViTAdapter', 'PatchEmbed', 'LaPESwin']
