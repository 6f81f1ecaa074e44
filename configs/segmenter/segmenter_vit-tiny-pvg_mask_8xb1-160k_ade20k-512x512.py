# Segmenter ViT-Ti with PVG (no class token), from mmlape's DeiT-Ti PVG
# checkpoint.
_base_ = './segmenter_vit-tiny_mask_8xb1-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-pvg_in1k.pth')))
