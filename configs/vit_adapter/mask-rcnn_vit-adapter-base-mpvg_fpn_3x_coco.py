# Mask R-CNN ViT-Adapter-B with MPVG, from mmlape's DeiT-B MPVG checkpoint.
# Reading (b) of docs/recipes.md ("MPVG in ViT-Adapter"), as in
# ./mask-rcnn_vit-adapter-tiny-mpvg_fpn_3x_coco.py.
_base_ = './mask-rcnn_vit-adapter-base_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='MPVG'),
        init_cfg=dict(checkpoint='pretrained/deit-base-mpvg_in1k.pth')))
