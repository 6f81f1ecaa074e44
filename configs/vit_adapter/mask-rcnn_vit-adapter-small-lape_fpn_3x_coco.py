# Mask R-CNN ViT-Adapter-S with LaPE, from mmlape's DeiT-S LaPE checkpoint.
_base_ = './mask-rcnn_vit-adapter-small_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='LaPE'),
        init_cfg=dict(checkpoint='pretrained/deit-small-lape_in1k.pth')))
