# Mask R-CNN ViT-Adapter-Ti with MPVG, from mmlape's DeiT-Ti MPVG checkpoint.
# ViT-Adapter has no final ViT norm; MPVG's backbone takes reading (b) of
# docs/recipes.md ("MPVG in ViT-Adapter"): the last ViT output gets
# LN(x_L) + LN'_last(pos_0), both norms from the checkpoint, before the
# pyramid adds it. Reading (a) (the PVG join alone) is the -pvg config's
# backbone with this checkpoint.
_base_ = './mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='MPVG'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-mpvg_in1k.pth')))
