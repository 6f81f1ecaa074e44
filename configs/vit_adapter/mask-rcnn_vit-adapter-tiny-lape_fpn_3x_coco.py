# Mask R-CNN ViT-Adapter-Ti with LaPE, from mmlape's DeiT-Ti LaPE checkpoint.
_base_ = './mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='LaPE'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-lape_in1k.pth')))
