# Swin-Ti with PVG: the PE at the input and, on this staged backbone, the
# layer-wise PE from layer 0 on (the MPVG paper); GAP as in every Swin.
_base_ = './swin-tiny_16xb64_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='PVG')))
