# DeiT-Tiny with RoPE-Mixed + APE, the absolute PE joined by MPVG (GAP, no
# class token).
_base_ = './deit-tiny-rope-mixed-ape_4xb256_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='MPVG')))
