# DeiT-S: the DeiT-Ti recipe with the small architecture.
_base_ = './deit-tiny_4xb256_in1k.py'

model = dict(backbone=dict(arch='deit-small'), head=dict(in_channels=384))
