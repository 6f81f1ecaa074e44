# T2T-ViT-7 with MPVG: PVG plus the PE added again at the last LayerNorm.
_base_ = './t2t-vit-7_8xb64_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='MPVG')))
