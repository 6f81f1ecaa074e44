# Mask R-CNN with ViT-Adapter-Ti (default PE join) on COCO, 3x schedule with
# DETR-style multi-scale training, initialised from mmlape's ImageNet DeiT-Ti
# of the same join (configs/deit/deit-tiny_4xb256_in1k.py). Batch 16
# (8 GPUs x 2); AdamW lr 1e-4, weight decay 0.05; steps at epochs 27, 33.
_base_ = [
    '../_base_/models/mask-rcnn_vit-adapter-tiny_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]

# The official detection settings: window attention (14x14) in all blocks
# but the last of each interaction; the pyramid fed by the last ViT output.
model = dict(
    backbone=dict(
        window_size=[14, 14, 0, 14, 14, 0, 14, 14, 0, 14, 14, 0],
        vit_feature_source='last'))

scales = [(480, 1333), (512, 1333), (544, 1333), (576, 1333), (608, 1333),
          (640, 1333), (672, 1333), (704, 1333), (736, 1333), (768, 1333),
          (800, 1333)]
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(
        type='RandomChoice',
        transforms=[[
            dict(type='RandomChoiceResize', scales=scales, keep_ratio=True)
        ],
                    [
                        dict(
                            type='RandomChoiceResize',
                            scales=[(400, 1333), (500, 1333), (600, 1333)],
                            keep_ratio=True),
                        dict(
                            type='RandomCrop',
                            crop_type='absolute_range',
                            crop_size=(384, 600),
                            allow_negative_crop=True),
                        dict(
                            type='RandomChoiceResize',
                            scales=scales,
                            keep_ratio=True)
                    ]]),
    dict(
        type='RandomCrop',
        crop_type='absolute_range',
        crop_size=(1024, 1024),
        allow_negative_crop=True),
    dict(type='PackDetInputs')
]
# Loaders (docs/speed.md "Feeding the GPU"): mmlape's tools start
# clamp(CPUs per training process - 1, floor, ceiling) workers on every
# dataloader;
# num_workers is the default that host tools, which ignore the key, use.
# Ceiling: one worker of this pipeline makes ~55 img/s, an H200 steps
# the model at ~15 img/s (fp16, batch 2): 1 worker; 4 leave room
# for the pipeline's varying cost.
auto_num_workers = dict(floor=2, ceiling=4)
train_dataloader = dict(
    batch_size=2,
    num_workers=2,
    pin_memory=True,
    persistent_workers=True,
    dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(num_workers=2, pin_memory=True, persistent_workers=True)
test_dataloader = val_dataloader

# The parameters with equal options share one optimizer group (mmengine's
# constructor gives each its own; DeiT-Ti: 3 groups instead of 176): the
# optimizer's host work per step follows the groups (docs/speed.md "Feeding
# the GPU").
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    constructor='LaPEOptimWrapperConstructor',
    optimizer=dict(
        type='AdamW',
        lr=1e-4,
        betas=(0.9, 0.999),
        weight_decay=0.05,
        fused=True),
    # As the official config: no decay for names containing these keys.
    # The spatial prior module's BN weights (spm.*.weight) are decayed;
    # the PE norms (blocks.{i}.pe_norm) contain "norm".
    paramwise_cfg=dict(
        custom_keys={
            'level_embed': dict(decay_mult=0.0),
            'pos_embed': dict(decay_mult=0.0),
            'norm': dict(decay_mult=0.0),
            'bias': dict(decay_mult=0.0),
        }),
    clip_grad=None)
max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
# The official (mmcv) warm-up: lr * (r + (1 - r) * t / 500) for t < 500;
# LinearLR reaches its end factor at iteration end - 1, hence end=501.
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=501),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[27, 33],
        gamma=0.1)
]
default_hooks = dict(
    checkpoint=dict(type='AtomicCheckpointHook', interval=1, max_keep_ckpts=3))
auto_scale_lr = dict(enable=False, base_batch_size=16)
