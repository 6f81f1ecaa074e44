# Mask R-CNN ViT-Adapter-Ti from mmlape's DeiT-Ti MPVG checkpoint. ViT-Adapter
# has no final ViT norm, so MPVG's last-norm term has no place here: the
# backbone runs MPVG's layer-wise (PVG) join with the MPVG-pretrained weights.
_base_ = './mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-mpvg_in1k.pth')))
