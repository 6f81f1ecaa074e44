# Segmenter (mask transformer) with mmlape's ViT-Ti (default PE join) on
# ADE20K, mmseg's recipe: 512x512 crops, 160k iterations, batch 8 (8 GPUs x
# 1), SGD lr 0.001, poly schedule, slide inference (512 crops, stride 480).
# The encoder (../_base_/models/segmenter_vit-tiny.py) is initialised from
# mmlape's ImageNet DeiT-Ti of the same join.
_base_ = [
    'mmseg::segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py',
    '../_base_/models/segmenter_vit-tiny.py',
]

model = dict(
    # The encoder is a DeiT: normalise as it was trained (ImageNet mean and
    # std), as Segmenter does for DeiT encoders; mmseg's 127.5/127.5 belongs
    # to the ViT checkpoint of its own config.
    data_preprocessor=dict(
        mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]),
    pretrained=None,
    backbone={{_base_.segmenter_vit_tiny}})

default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
