# ViT-Lite-7/4 with MPVG: PVG plus the PE added again at the last
# LayerNorm.
_base_ = './vit-lite-7-4_1xb128-310e_cifar100.py'

model = dict(backbone=dict(pe_join=dict(type='MPVG')))
