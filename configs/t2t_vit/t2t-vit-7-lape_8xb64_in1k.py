# T2T-ViT-7 with LaPE (hierarchical, every layer): each layer normalises
# the fixed sinusoid with its own LayerNorm.
_base_ = './t2t-vit-7_8xb64_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='LaPE')))
