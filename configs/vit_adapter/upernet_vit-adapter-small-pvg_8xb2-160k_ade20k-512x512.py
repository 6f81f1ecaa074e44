# UperNet ViT-Adapter-S with PVG, from mmlape's DeiT-S PVG checkpoint.
_base_ = './upernet_vit-adapter-small_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/deit-small-pvg_in1k.pth')))
