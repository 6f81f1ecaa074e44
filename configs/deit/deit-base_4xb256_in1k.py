# DeiT-B: the DeiT-Ti recipe with the base architecture.
_base_ = './deit-tiny_4xb256_in1k.py'

model = dict(backbone=dict(arch='deit-base'), head=dict(in_channels=768))
