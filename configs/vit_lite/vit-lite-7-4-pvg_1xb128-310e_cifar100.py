# ViT-Lite-7/4 with PVG: GAP instead of a class token, layer-wise PE from
# layer 1 on.
_base_ = './vit-lite-7-4_1xb128-310e_cifar100.py'

model = dict(backbone=dict(pe_join=dict(type='PVG')))
