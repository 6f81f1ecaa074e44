# Segmenter ViT-Ti with MPVG (no class token), from mmlape's DeiT-Ti MPVG
# checkpoint. The PE is added again after the final norm, per token, before
# the mask-transformer decoder.
_base_ = './segmenter_vit-tiny_mask_8xb1-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='MPVG'),
        init_cfg=dict(checkpoint='pretrained/deit-tiny-mpvg_in1k.pth')))
