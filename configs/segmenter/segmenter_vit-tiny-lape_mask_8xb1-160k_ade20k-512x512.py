# Segmenter ViT-Ti with LaPE, from mmlape's DeiT-Ti LaPE checkpoint.
_base_ = './segmenter_vit-tiny_mask_8xb1-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='LaPE'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-lape_in1k.pth')))
