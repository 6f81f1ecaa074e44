# Mask R-CNN ViT-Adapter-S with MPVG, from mmlape's DeiT-S MPVG checkpoint.
# Reading (b) of docs/recipes.md ("MPVG in ViT-Adapter"), as in
# ./mask-rcnn_vit-adapter-tiny-mpvg_fpn_3x_coco.py.
_base_ = './mask-rcnn_vit-adapter-small_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='MPVG'),
        init_cfg=dict(checkpoint='pretrained/deit-small-mpvg_in1k.pth')))
