# CCT-7/3x1 with PVG (not in the papers): CCT has no class token and its
# sequence pooling stays; layer-wise PE from layer 1 on.
_base_ = './cct-7-3x1_1xb128-300e_cifar100.py'

model = dict(backbone=dict(pe_join=dict(type='PVG')))
