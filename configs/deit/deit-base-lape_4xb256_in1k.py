# DeiT-Base with LaPE (hierarchical, every layer).
_base_ = './deit-base_4xb256_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='LaPE')))
