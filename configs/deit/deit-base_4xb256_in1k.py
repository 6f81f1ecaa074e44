# DeiT-B: the DeiT-Ti recipe with the base architecture.
_base_ = './deit-tiny_4xb256_in1k.py'

model = dict(backbone=dict(arch='deit-base'), head=dict(in_channels=768))
# An H200 steps DeiT-B at ~2,600 img/s (eager): about 14 workers of ~190 img/s.
auto_num_workers = dict(floor=5, ceiling=16)
