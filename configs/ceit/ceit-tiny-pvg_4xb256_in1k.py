# CeiT-Ti with PVG. PVG removes the class token that CeiT's LCA pools, so
# GAP replaces LCA (mmlape's resolution, docs/recipes.md).
_base_ = './ceit-tiny_4xb256_in1k.py'

model = dict(
    backbone=dict(
        pe_join=dict(
            type='PVG'), with_cls_token=False, out_type='avg_featmap'))
