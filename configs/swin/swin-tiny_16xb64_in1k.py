# Swin-Ti on ImageNet-1K with mmlape's Swin (default PE join): Swin-T with an
# absolute PE at stage 1 (56x56x96), the default Swin-Ti of the MPVG paper
# (28.589M parameters with the 1000-way head). Swin's ImageNet recipe as
# mmpretrain's swin-tiny config encodes it: 300 epochs, batch 1024 (16 GPUs
# x 64), AdamW lr 5e-4 * 1024 / 512, betas (0.9, 0.999), eps 1e-8, weight
# decay 0.05 (none on norms, biases, 1-D parameters, the absolute PE and the
# relative position bias tables; the PE norms are 1-D), 20 linear warm-up
# epochs then cosine to 1e-5, gradient clipping at norm 5, label smoothing
# 0.1, Mixup 0.8 / CutMix 1.0, RandAugment (2 ops, m9, mstd 0.5), random
# erasing 0.25, drop path 0.2, GAP neck and a linear head.
_base_ = [
    'mmpretrain::_base_/models/swin_transformer/tiny_224.py',
    '../_base_/datasets/imagenet_bs64_swin_224.py',
    '../_base_/schedules/imagenet_bs1024_adamw_swin.py',
    '../_base_/default_runtime.py'
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='LaPESwin',
        arch='tiny',
        img_size=224,
        window_size=7,
        drop_path_rate=0.2,
        use_abs_pos_embed=True,
        pe_join=dict(type='Default')))

# Swin's clipping at norm 5 (mmpretrain's swin-tiny config); no decay on
# the PE and its norms either.
optim_wrapper = dict(
    clip_grad=dict(max_norm=5.0),
    paramwise_cfg=dict(
        custom_keys={
            '.pos_embed': dict(decay_mult=0.0),
            '.pe_norm': dict(decay_mult=0.0),
            '.pe_join.last_norm': dict(decay_mult=0.0),
        }))

# The official code scales the lr, the warm-up's start and the cosine's end
# with the global batch (x batch x processes / 512): the lr is that rule at
# this recipe's 1024, the runner scales it by the run's global batch / 1024,
# the warm-up starts at 1e-3 of it and the cosine ends at 1e-2 of it
# (mmpretrain's config: eta_min=1e-5, right at 1024 only).
auto_scale_lr = dict(base_batch_size=1024, enable=True)
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=20,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR', eta_min_ratio=1e-2, by_epoch=True, begin=20)
]
