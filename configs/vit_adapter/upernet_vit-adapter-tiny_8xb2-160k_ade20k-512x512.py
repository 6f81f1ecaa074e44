# UperNet with ViT-Adapter-Ti (default PE join) on ADE20K, 512x512 crops,
# 160k iterations, batch 16 (8 GPUs x 2), AdamW lr 12e-5, weight decay 0.01,
# layer-wise lr decay 0.95, poly schedule; initialised from mmlape's ImageNet
# DeiT-Ti of the same join (configs/deit/deit-tiny_4xb256_in1k.py).
_base_ = [
    '../_base_/models/upernet_vit-adapter-tiny.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_160k.py',
]

crop_size = (512, 512)
# The official segmentation setting: the pyramid fed by each interaction.
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(vit_feature_source='per_interaction'),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(341, 341)))

test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2048, 512), keep_ratio=True),
    dict(type='ResizeToMultiple', size_divisor=32),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs')
]
# tools/test.py --tta: mmseg's ADE20K ratios and flips, each view resized to
# a multiple of 32 as the test pipeline (the adapter's pyramid goes to 1/32;
# the official multi-scale test does the same).
tta_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='TestTimeAug',
        transforms=[
            [
                dict(type='Resize', scale_factor=r, keep_ratio=True)
                for r in [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
            ],
            [dict(type='ResizeToMultiple', size_divisor=32)],
            [
                dict(type='RandomFlip', prob=0., direction='horizontal'),
                dict(type='RandomFlip', prob=1., direction='horizontal')
            ],
            [dict(type='LoadAnnotations')],
            [dict(type='PackSegInputs')],
        ])
]
# Loaders (docs/speed.md "Feeding the GPU"): mmlape's tools start
# clamp(CPUs per training process - 1, floor, ceiling) workers on every
# dataloader;
# num_workers is the default that host tools, which ignore the key, use.
# Ceiling: one worker of this pipeline makes ~57 img/s, an H200 steps
# the model at ~38 img/s (fp16, batch 8): 1 worker; 4 leave room
# for the pipeline's varying cost.
auto_num_workers = dict(floor=2, ceiling=4)
train_dataloader = dict(
    batch_size=2, num_workers=4, pin_memory=True, persistent_workers=True)
val_dataloader = dict(
    num_workers=4,
    pin_memory=True,
    persistent_workers=True,
    dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW',
        lr=12e-5,
        betas=(0.9, 0.999),
        weight_decay=0.01,
        fused=True),
    constructor='LaPELayerDecayOptimWrapperConstructor',
    # As the official constructor: no decay for 1-D parameters (norms, PE
    # norms, biases, layer scale); pos_embed and level_embed are decayed.
    paramwise_cfg=dict(layer_decay_rate=0.95, flat_decay_mult=0.0),
    clip_grad=None)
# The official (mmcv) warm-up scales the poly rate of the same iteration:
# lr(t) = lr * (1 - t / 160k) * (r + (1 - r) * t / 1500) for t < 1500.
# mmengine's LinearLR and PolyLR reach their end values at iteration
# end - 1, hence end=1501 and end=160001 for mmcv's 1500 and 160000.
param_scheduler = [
    dict(
        type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1501),
    dict(
        type='PolyLR',
        power=1.0,
        eta_min=0.0,
        by_epoch=False,
        begin=0,
        end=160001)
]
default_hooks = dict(
    checkpoint=dict(
        type='AtomicCheckpointHook',
        by_epoch=False,
        interval=16000,
        max_keep_ckpts=1,
        save_best='mIoU'))
auto_scale_lr = dict(enable=False, base_batch_size=16)
