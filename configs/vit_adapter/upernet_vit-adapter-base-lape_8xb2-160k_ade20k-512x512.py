# UperNet ViT-Adapter-B with LaPE, from mmlape's DeiT-B LaPE checkpoint.
_base_ = './upernet_vit-adapter-base_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='LaPE'),
        init_cfg=dict(checkpoint='pretrained/deit-base-lape_in1k.pth')))
