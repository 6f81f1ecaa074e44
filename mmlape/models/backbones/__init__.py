from .vit import LaPEViT, PatchEmbed
from .vit_adapter import LaPEViTAdapter

__all__ = ['LaPEViT', 'LaPEViTAdapter', 'PatchEmbed']
