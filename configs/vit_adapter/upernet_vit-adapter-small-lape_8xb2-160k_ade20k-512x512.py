# UperNet ViT-Adapter-S with LaPE, from mmlape's DeiT-S LaPE checkpoint.
_base_ = './upernet_vit-adapter-small_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='LaPE'),
        init_cfg=dict(checkpoint='pretrained/deit-small-lape_in1k.pth')))
