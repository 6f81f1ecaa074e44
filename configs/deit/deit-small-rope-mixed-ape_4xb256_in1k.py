# DeiT-Small with RoPE-Mixed and DeiT's learnable absolute PE beside it (the
# RoPE-ViT paper's RoPE-Mixed + APE).
_base_ = './deit-small-rope-mixed_4xb256_in1k.py'

model = dict(backbone=dict(ape_type='learnable'))
