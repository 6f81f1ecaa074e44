# The demo with MPVG (GAP, no class token).
_base_ = './deit-demo_pos-shapes.py'

model = dict(backbone=dict(pe_join=dict(type='MPVG')))
