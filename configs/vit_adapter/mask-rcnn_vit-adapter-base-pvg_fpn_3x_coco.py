# Mask R-CNN ViT-Adapter-B with PVG, from mmlape's DeiT-B PVG checkpoint.
_base_ = './mask-rcnn_vit-adapter-base_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/deit-base-pvg_in1k.pth')))
