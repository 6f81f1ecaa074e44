# CeiT-Ti with PVG as the MPVG paper counts it (6.361M parameters, Table
# 1): no class token, and CeiT's LCA kept, pooling the GAP token of every
# layer (README.md, "Which CeiT-Ti the paper built").
_base_ = './ceit-tiny_4xb256_in1k.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        pooling=dict(type='LCA', layer_token='gap'),
    ))
