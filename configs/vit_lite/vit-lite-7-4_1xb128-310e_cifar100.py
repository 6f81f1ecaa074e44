# ViT-Lite-7/4 on CIFAR-100 (32x32) with mmlape's ViT (default PE join),
# the official Compact-Transformers CIFAR-100 recipe: 310 epochs (300 + 10
# cool-down epochs at the minimum lr), batch 128, AdamW lr 6e-4, weight
# decay 0.06 (none on biases and norms; the PE and the class token are
# decayed, as in the official code), 10 warm-up epochs from 1e-6, cosine to
# 1e-5, label smoothing 0.1, Mixup 0.8 / CutMix 1.0, RandAugment m9 mstd
# 0.5, random erasing 0.25, random resized crop (scale 0.8-1), attention
# dropout 0.1, drop path 0.1. CIFAR-100 in the python pickle layout
# (data/cifar100/cifar-100-python/{train,test,meta}), mmpretrain's CIFAR100.
_base_ = [
    '../_base_/models/lape-vit_cls.py', '../_base_/datasets/cifar100_bs16.py',
    '../_base_/default_runtime.py'
]

model = dict(
    backbone=dict(
        arch='vit-lite-7/4',
        img_size=32,
        attn_drop_rate=0.1,
        drop_path_rate=0.1),
    head=dict(
        num_classes=100,
        in_channels=256,
        loss=dict(
            type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02)),
    train_cfg=dict(augments=[
        dict(type='Mixup', alpha=0.8),
        dict(type='CutMix', alpha=1.0),
    ]))

# Compact-Transformers' CIFAR-100 statistics (RGB; CIFAR images load as
# RGB).
mean = [0.5071 * 255, 0.4867 * 255, 0.4408 * 255]
std = [0.2675 * 255, 0.2565 * 255, 0.2761 * 255]
data_preprocessor = dict(
    mean=mean,
    std=std,
)

train_pipeline = [
    dict(
        type='RandomResizedCrop',
        scale=32,
        crop_ratio_range=(0.8, 1.0),
        backend='pillow',
        interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(
        type='RandAugment',
        policies='timm_increasing',
        num_policies=2,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(
            pad_val=[round(x) for x in mean], interpolation='bicubic')),
    dict(
        type='RandomErasing',
        erase_prob=0.25,
        mode='rand',
        min_area_ratio=0.02,
        max_area_ratio=1 / 3,
        fill_color=mean,
        fill_std=std),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='PackInputs')]

train_dataloader = dict(batch_size=128, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=128, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

optim_wrapper = dict(
    constructor='LaPEOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=6e-4, weight_decay=0.06, fused=True),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0))

param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-6 / 6e-4,
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
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)
