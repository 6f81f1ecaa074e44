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

# Loaders (docs/speed.md "Feeding the GPU"): mmlape's tools start
# clamp(CPUs per training process - 1, floor, ceiling) workers on every
# dataloader;
# num_workers is the default that host tools, which ignore the key, use.
# Ceiling: one worker of this pipeline makes ~60 img/s, an H200 steps
# the model at ~77 img/s (fp16, batch 8): 2 workers; 4 leave room
# for the pipeline's varying cost.
auto_num_workers = dict(floor=2, ceiling=4)
train_dataloader = dict(
    num_workers=4, pin_memory=True, persistent_workers=True)
val_dataloader = dict(num_workers=4, pin_memory=True, persistent_workers=True)
test_dataloader = val_dataloader

# The recipe's global batch (8 processes x 1): the official code trains
# at a fixed lr, so another global batch is a warning at the start.
auto_scale_lr = dict(enable=False, base_batch_size=8)

default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
