# CCT-7/3x1 with LaPE (hierarchical, every layer; CCT has no class token,
# so the PE stream covers the patches only).
_base_ = './cct-7-3x1_1xb128-300e_cifar100.py'

model = dict(backbone=dict(pe_join=dict(type='LaPE')))
