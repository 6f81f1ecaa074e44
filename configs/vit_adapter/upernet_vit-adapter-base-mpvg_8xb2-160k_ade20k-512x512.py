# UperNet ViT-Adapter-B with MPVG, from mmlape's DeiT-B MPVG checkpoint.
# Reading (b) of docs/recipes.md ("MPVG in ViT-Adapter"), as in
# ./upernet_vit-adapter-tiny-mpvg_8xb2-160k_ade20k-512x512.py.
_base_ = './upernet_vit-adapter-base_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='MPVG'),
        init_cfg=dict(checkpoint='pretrained/deit-base-mpvg_in1k.pth')))
