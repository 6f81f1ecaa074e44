# CeiT-Ti with MPVG: PVG (GAP instead of LCA) plus the PE added again at
# the last LayerNorm.
_base_ = './ceit-tiny_4xb256_in1k.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='MPVG'),
        with_cls_token=False,
        out_type='avg_featmap'))
