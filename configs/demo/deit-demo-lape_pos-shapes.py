# The demo with LaPE.
_base_ = './deit-demo_pos-shapes.py'

model = dict(backbone=dict(pe_join=dict(type='LaPE')))
