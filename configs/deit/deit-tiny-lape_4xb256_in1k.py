# DeiT-Tiny with LaPE (hierarchical, every layer).
_base_ = './deit-tiny_4xb256_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='LaPE')))
