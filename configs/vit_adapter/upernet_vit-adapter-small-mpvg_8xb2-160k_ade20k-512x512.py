# UperNet ViT-Adapter-S with MPVG, from mmlape's DeiT-S MPVG checkpoint.
# Reading (b) of docs/recipes.md ("MPVG in ViT-Adapter"), as in
# ./upernet_vit-adapter-tiny-mpvg_8xb2-160k_ade20k-512x512.py.
_base_ = './upernet_vit-adapter-small_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='MPVG'),
        init_cfg=dict(checkpoint='pretrained/deit-small-mpvg_in1k.pth')))
