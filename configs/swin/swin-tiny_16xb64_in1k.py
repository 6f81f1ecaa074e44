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
_base_ = 'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'

# mmlape registers its modules; mmlape.hosts.applied makes checkpoints load
# safely under any entry point (mmpretrain's, mmdet's, mmseg's tools too).
custom_imports = dict(
    imports=['mmlape', 'mmlape.hosts.applied'], allow_failed_imports=False)

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
    optimizer=dict(fused=True),
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

# Atomic saves (a kill during a save never loses the previous checkpoint).
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
