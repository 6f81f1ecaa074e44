# DeiT-Small with MPVG: PVG plus the PE added again at the last LayerNorm.
_base_ = './deit-small_4xb256_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='MPVG')))
