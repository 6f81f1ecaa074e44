# UperNet ViT-Adapter-B with PVG, from mmlape's DeiT-B PVG checkpoint.
_base_ = './upernet_vit-adapter-base_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/deit-base-pvg_in1k.pth')))
