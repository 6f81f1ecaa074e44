# The embedded demo: a small DeiT (default PE join) on the generated
# position-sensitive set of mmlape.datasets.pos_shapes (32x32 images, the
# class is the quadrant a square is in). Trains in about a minute
# on 2 CPU cores. `python tools/demo.py` generates the data and runs it.
_base_ = ['../_base_/models/lape-vit_cls.py', '../_base_/default_runtime.py']

data_root = 'data/pos_shapes'
model = dict(
    backbone=dict(
        arch=dict(
            embed_dims=96, num_layers=4, num_heads=3,
            feedforward_channels=192),
        img_size=32,
        patch_size=4),
    head=dict(
        num_classes=4,
        in_channels=96,
        loss=dict(type='CrossEntropyLoss'),
        # PyTorch's default init: the head's zero init, right for 300-epoch
        # DeiT runs, stalls a run of a few hundred iterations.
        init_cfg=None))

data_preprocessor = dict(
    num_classes=4, mean=[110., 110., 110.], std=[60., 60., 60.], to_rgb=True)
pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=64,
    num_workers=0,
    dataset=dict(
        type='CustomDataset',
        data_root=data_root,
        ann_file='meta/train.txt',
        data_prefix='train',
        pipeline=pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=100,
    num_workers=0,
    dataset=dict(
        type='CustomDataset',
        data_root=data_root,
        ann_file='meta/val.txt',
        data_prefix='val',
        pipeline=pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
# mmpretrain's accuracy, a batch's results copied to the host in one go
# (docs/speed.md "Feeding the GPU"; the same results)
val_evaluator = dict(type='LaPEAccuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

max_iters = 600
# mmlape's optimizer constructor: one group per set of equal options.
optim_wrapper = dict(
    constructor='LaPEOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05, fused=True),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0),
        }))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, end=50),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=50, end=max_iters)
]
train_cfg = dict(by_epoch=False, max_iters=max_iters, val_interval=max_iters)
val_cfg = dict()
test_cfg = dict()
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(
        type='AtomicCheckpointHook',
        by_epoch=False,
        interval=max_iters,
        max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
# The same run every time, on a GPU too: no cuDNN autotuning (it picks
# kernels by timing them).
env_cfg = dict(cudnn_benchmark=False)
randomness = dict(seed=0)
