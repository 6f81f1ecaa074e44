# UperNet ViT-Adapter-Ti from mmlape's DeiT-Ti MPVG checkpoint.
# ViT-Adapter has no final ViT norm, so MPVG's last-norm term has no place
# here: the backbone runs MPVG's layer-wise (PVG) join with MPVG weights.
_base_ = './upernet_vit-adapter-tiny_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-mpvg_in1k.pth')))
