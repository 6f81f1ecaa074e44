# T2T-ViT-7 with PVG: GAP instead of a class token, layer-wise PE from
# layer 1 on.
_base_ = './t2t-vit-7_8xb64_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='PVG')))
