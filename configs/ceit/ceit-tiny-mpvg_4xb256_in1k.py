# CeiT-Ti with MPVG as the MPVG paper counts it (6.361M parameters, Table
# 1): PVG's model (LCA over the GAP token of every layer, no class token)
# plus the PE added again at the last LayerNorm, the norm after LCA.
_base_ = './ceit-tiny_4xb256_in1k.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='MPVG'),
        pooling=dict(type='LCA', layer_token='gap'),
    ))
