# DeiT-Ti on ImageNet-1K with mmlape's ViT (default PE join), trained with
# the official DeiT/LaPE recipe (docs/recipes.md lists every setting and its
# source): 300 epochs, batch 1024 (4 GPUs x 256) with repeated augmentation
# (3 repeats), AdamW lr 5e-4 * 1024 / 512, weight decay 0.05 except on 1-D
# parameters (norms, PE norms, biases), the PE (a rotary PE's frequencies,
# rope_freqs, too) and the class token, no gradient clipping, per-epoch
# cosine to 1e-5 with 5 warm-up epochs from 1e-6, label smoothing 0.1, Mixup
# 0.8 / CutMix 1.0, RandAugment m9 mstd 0.5, random erasing 0.25, drop path
# 0.1, classifier trunc_normal(0.02).
# The official code trains under autocast: on GPUs pass --amp.
_base_ = 'mmpretrain::deit/deit-tiny_4xb256_in1k.py'

# mmlape registers its modules; mmlape.hosts.applied makes checkpoints load
# safely under any entry point (mmpretrain's, mmdet's, mmseg's tools too).
custom_imports = dict(
    imports=['mmlape', 'mmlape.hosts.applied'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='LaPEViT',
        arch='deit-tiny',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1,
        pe_join=dict(type='Default')),
    head=dict(
        in_channels=192,
        init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.)))

# Loaders (README "Feeding the GPU"): mmlape's tools start clamp(CPUs per
# training process - 1, floor, ceiling) workers on every dataloader;
# num_workers is the default that host tools, which ignore the key, use.
# Ceiling: an H200 steps DeiT-Ti at ~8,700 img/s (eager), one worker of
# this pipeline makes ~190-210 img/s: 42-46 workers would be needed.
auto_num_workers = dict(floor=5, ceiling=48)
# Every image of a batch has one size: the loader stacks the batch
# (default_collate), so the data preprocessor moves and normalises
# one tensor, not each image in turn.
train_dataloader = dict(
    batch_size=256,
    collate_fn=dict(type='default_collate'),
    num_workers=5,
    pin_memory=True,
    persistent_workers=True,
    drop_last=True,
    sampler=dict(type='RepeatAugSampler', num_repeats=3, shuffle=True))
# Evaluation batches of 1.5 x 256, as the official DeiT, LaPE and CeiT
# main.py make them (mmpretrain's: 64). No image's result depends on the
# others of its batch (a GPU may pick kernels that round differently).
val_dataloader = dict(
    batch_size=384,
    num_workers=5,
    pin_memory=True,
    persistent_workers=True,
    collate_fn=dict(type='default_collate'))
test_dataloader = val_dataloader

# One label an image: mmpretrain's data preprocessor, with a batch's
# targets made in one go instead of image by image (the same values), and
# the pinned batch copied to the GPU while the host makes them.
data_preprocessor = dict(type='LaPEClsDataPreprocessor', non_blocking=True)

# mmpretrain's top-k accuracy, with a batch's predictions and labels
# copied to the host in one go instead of two copies an image (on a GPU
# each copy waits for the device; the same results).
val_evaluator = dict(type='LaPEAccuracy', topk=(1, 5))
test_evaluator = val_evaluator

# cuDNN picks its fastest convolution algorithms for the one input size,
# as the official training scripts set it (mmpretrain's default: False).
env_cfg = dict(cudnn_benchmark=True)

# The parameters with equal options share one optimizer group (mmengine's
# constructor gives each its own; DeiT-Ti: 3 groups instead of 176): the
# optimizer's host work per step follows the groups (README "Feeding
# the GPU").
optim_wrapper = dict(
    constructor='LaPEOptimWrapperConstructor',
    optimizer=dict(
        type='AdamW',
        lr=5e-4 * 1024 / 512,
        weight_decay=0.05,
        eps=1e-8,
        betas=(0.9, 0.999),
        fused=True),
    paramwise_cfg=dict(
        _delete_=True,
        flat_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0),
            '.rope_freqs': dict(decay_mult=0.0),
        }),
    clip_grad=None)

param_scheduler = [
    dict(
        type='LaPEDeiTCosineLR',
        warmup_epochs=5,
        warmup_lr=1e-6,
        min_lr=1e-5,
        cosine_epochs=300,
        lag_epochs=1,
        by_epoch=True)
]

train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)
# The official code scales the lr with the global batch (lr x batch x
# processes / 512): the lr above is that rule at this recipe's 1024, and the
# runner scales it by the run's global batch / 1024, at any process count
# (tools/dist_train.sh CONFIG 8 trains at 2048 with lr 5e-4 x 2048 / 512).
auto_scale_lr = dict(base_batch_size=1024, enable=True)

default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
