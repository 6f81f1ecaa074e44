# Mask R-CNN ViT-Adapter-B with LaPE, from mmlape's DeiT-B LaPE checkpoint.
_base_ = './mask-rcnn_vit-adapter-base_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='LaPE'),
        init_cfg=dict(checkpoint='pretrained/deit-base-lape_in1k.pth')))
