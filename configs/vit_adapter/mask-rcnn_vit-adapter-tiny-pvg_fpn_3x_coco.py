# Mask R-CNN ViT-Adapter-Ti with PVG, from mmlape's DeiT-Ti PVG checkpoint.
_base_ = './mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-pvg_in1k.pth')))
