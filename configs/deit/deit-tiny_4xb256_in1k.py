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
_base_ = [
    '../_base_/models/lape-vit_cls.py',
    '../_base_/datasets/imagenet_bs64_swin_224.py',
    '../_base_/schedules/imagenet_bs1024_adamw_swin.py',
    '../_base_/default_runtime.py'
]

# mmpretrain's DeiT-Ti model (deit/deit-tiny_4xb256_in1k.py) with mmlape's
# ViT and the official classifier init.
model = dict(
    backbone=dict(
        arch='deit-tiny', img_size=224, patch_size=16, drop_path_rate=0.1),
    head=dict(
        num_classes=1000,
        in_channels=192,
        loss=dict(
            type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.)),
    init_cfg=[
        dict(type='TruncNormal', layer='Linear', std=.02),
        dict(type='Constant', layer='LayerNorm', val=1., bias=0.),
    ],
    train_cfg=dict(augments=[
        dict(type='Mixup', alpha=0.8),
        dict(type='CutMix', alpha=1.0)
    ]))

# The loaders of ../_base_/datasets/imagenet_bs64_swin_224.py, with the
# official batches and repeated augmentation. Evaluation batches of
# 1.5 x 256, as the official DeiT, LaPE and CeiT main.py make them
# (mmpretrain's: 64). No image's result depends on the others of its batch
# (a GPU may pick kernels that round differently).
train_dataloader = dict(
    batch_size=256,
    drop_last=True,
    sampler=dict(type='RepeatAugSampler', num_repeats=3, shuffle=True))
val_dataloader = dict(batch_size=384)
test_dataloader = val_dataloader

optim_wrapper = dict(
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
