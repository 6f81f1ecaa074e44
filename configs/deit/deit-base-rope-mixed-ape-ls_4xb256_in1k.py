# DeiT-Base with RoPE-Mixed, DeiT's learnable absolute PE beside it, and layer
# scale: the architecture of timm's
# `vit_base_patch16_rope_mixed_ape_224.naver_in1k` (the RoPE-ViT paper's model,
# trained with layer scale on the DeiT-III recipe), so that its public weights
# load (docs/model_zoo.md). Training with this config follows the DeiT recipe
# of its base, not DeiT-III's.
_base_ = './deit-base-rope-mixed-ls_4xb256_in1k.py'

model = dict(backbone=dict(ape_type='learnable'))
