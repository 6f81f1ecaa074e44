# T2T-ViT-7 on ImageNet-1K with mmlape's ViT (default PE join: the fixed
# sinusoid added once, at the input), the official T2T-ViT recipe for the
# lite models as the MPVG paper trains them: 310 epochs (300 + 10 cool-down
# epochs at the minimum lr), batch 512 (8 GPUs x 64), AdamW lr 1e-3, weight
# decay 0.03 (none on biases, norms, the class token and PE norms), 10
# warm-up epochs from 1e-6, cosine to 1e-5, label smoothing 0.1,
# Mixup 0.8 / CutMix 1.0, RandAugment m9 mstd 0.5, random erasing 0.25,
# drop path 0.1, model EMA 0.99996. Data pipeline and EMA come from
# mmpretrain's T2T-ViT config.
_base_ = 'mmpretrain::t2t_vit/t2t-vit-t-14_8xb64_in1k.py'

# mmlape registers its modules; mmlape.hosts.applied makes checkpoints load
# safely under any entry point (mmpretrain's, mmdet's, mmseg's tools too).
custom_imports = dict(
    imports=['mmlape', 'mmlape.hosts.applied'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='LaPEViT',
        arch='t2t-vit-7',
        img_size=224,
        drop_path_rate=0.1,
        pe_join=dict(type='Default')),
    head=dict(in_channels=256))

# Loaders (README "Feeding the GPU"): mmlape's tools start clamp(CPUs per
# training process - 1, floor, ceiling) workers on every dataloader;
# num_workers is the default that host tools, which ignore the key, use.
# Ceiling as DeiT-Ti's (48, the workers an H200 needs at DeiT-Ti's
# speed): this model was not timed on a GPU; the ceiling binds only on
# nodes with more than 49 CPUs per GPU.
auto_num_workers = dict(floor=5, ceiling=48)
# Every image of a batch has one size: the loader stacks the batch
# (default_collate), so the data preprocessor moves and normalises
# one tensor, not each image in turn.
train_dataloader = dict(
    num_workers=5,
    pin_memory=True,
    persistent_workers=True,
    collate_fn=dict(type='default_collate'))
val_dataloader = dict(
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
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.03, fused=True),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0),
            '.pe_norm': dict(decay_mult=0.0),
            '.pe_join.last_norm': dict(decay_mult=0.0),
        }))

param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        begin=0,
        end=10,
        convert_to_iter_based=True),
    # after epoch 300 the lr stays at eta_min (the official cool-down)
    dict(
        type='CosineAnnealingLR',
        T_max=290,
        eta_min=1e-5,
        by_epoch=True,
        begin=10,
        end=300),
]

train_cfg = dict(by_epoch=True, max_epochs=310, val_interval=1)
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))

# mmpretrain's T2T-ViT model average (momentum 4e-5, every step), updated
# with one multi-tensor operation, not one per parameter (the same values).
custom_hooks = [
    dict(
        type='EMAHook',
        momentum=4e-5,
        priority='ABOVE_NORMAL',
        ema_type='LaPEExponentialMovingAverage')
]
auto_scale_lr = dict(base_batch_size=512)
