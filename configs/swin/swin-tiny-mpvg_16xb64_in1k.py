# Swin-Ti with MPVG: PVG plus the PE, carried to the last stage, added again
# after the last LayerNorm (before GAP).
_base_ = './swin-tiny_16xb64_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='MPVG')))
