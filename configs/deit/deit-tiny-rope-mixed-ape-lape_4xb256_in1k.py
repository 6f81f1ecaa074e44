# DeiT-Tiny with RoPE-Mixed + APE, the absolute PE joined by LaPE
# (hierarchical, every layer).
_base_ = './deit-tiny-rope-mixed-ape_4xb256_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='LaPE')))
