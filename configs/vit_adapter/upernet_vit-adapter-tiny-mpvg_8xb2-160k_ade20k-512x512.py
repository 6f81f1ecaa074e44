# UperNet ViT-Adapter-Ti with MPVG, from mmlape's DeiT-Ti MPVG checkpoint.
# ViT-Adapter has no final ViT norm; MPVG's backbone takes reading (b) of
# docs/recipes.md ("MPVG in ViT-Adapter"): the last ViT output gets
# LN(x_L) + LN'_last(pos_0), both norms from the checkpoint, before the
# pyramid adds it (here the 1/32 level, fed by the last interaction).
# Reading (a) (the PVG join alone) is the -pvg config's backbone with this
# checkpoint.
_base_ = './upernet_vit-adapter-tiny_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='MPVG'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-mpvg_in1k.pth')))
