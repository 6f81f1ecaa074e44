# DeiT-Base with PVG: GAP instead of a class token, layer-wise PE from
# layer 1 on.
_base_ = './deit-base_4xb256_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='PVG')))
