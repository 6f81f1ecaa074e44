# Mask R-CNN ViT-Adapter-S with PVG, from mmlape's DeiT-S PVG checkpoint.
_base_ = './mask-rcnn_vit-adapter-small_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/deit-small-pvg_in1k.pth')))
