# UperNet ViT-Adapter-Ti from mmlape's DeiT-Ti PVG checkpoint.
_base_ = './upernet_vit-adapter-tiny_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-pvg_in1k.pth')))
