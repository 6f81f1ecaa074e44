# CCT-7/3x1 with MPVG (not in the papers): PVG plus the PE added again at
# the last LayerNorm, on every token before the sequence pooling.
_base_ = './cct-7-3x1_1xb128-300e_cifar100.py'

model = dict(backbone=dict(pe_join=dict(type='MPVG')))
