# ViT-Lite-7/4 with LaPE (hierarchical, every layer).
_base_ = './vit-lite-7-4_1xb128-310e_cifar100.py'

model = dict(backbone=dict(pe_join=dict(type='LaPE')))
