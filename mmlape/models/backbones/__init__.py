from .vit import LaPEViT, PatchEmbed

__all__ = ['LaPEViT', 'PatchEmbed']
