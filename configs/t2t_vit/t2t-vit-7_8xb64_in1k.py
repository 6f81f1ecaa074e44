# T2T-ViT-7 on ImageNet-1K with mmlape's ViT (default PE join: the fixed
# sinusoid added once, at the input), the official T2T-ViT recipe for the
# lite models as the MPVG paper trains them: 310 epochs (300 + 10 cool-down
# epochs at the minimum lr), batch 512 (8 GPUs x 64), AdamW lr 1e-3, weight
# decay 0.03 (none on biases, norms, the class token and PE norms), 10
# warm-up epochs from 1e-6, cosine to 1e-5, label smoothing 0.1,
# Mixup 0.8 / CutMix 1.0, RandAugment m9 mstd 0.5, random erasing 0.25,
# drop path 0.1, model EMA 0.99996. Data pipeline and EMA come from
# mmpretrain's T2T-ViT config.
_base_ = [
    'mmpretrain::_base_/models/t2t-vit-t-14.py',
    '../_base_/datasets/imagenet_bs64_t2t_224.py',
    '../_base_/default_runtime.py',
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='LaPEViT',
        arch='t2t-vit-7',
        img_size=224,
        drop_path_rate=0.1,
        pe_join=dict(type='Default')),
    head=dict(in_channels=256))

# The T2T-ViT recipe's optimizer (mmpretrain's config: lr 5e-4, weight
# decay 0.05), with mmlape's optimizer constructor (one group per set of
# equal options) and the fused AdamW step.
optim_wrapper = dict(
    constructor='LaPEOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.03, fused=True),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            'cls_token': dict(decay_mult=0.0),
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
val_cfg = dict()
test_cfg = dict()

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
