# T2T-ViT-7 fine-tuned on CIFAR-100 from the ImageNet checkpoint of the
# same join (default), as the MPVG paper does (60 epochs, batch 128) with
# the official transfer script's recipe: images resized to 224, random
# crop (padding 28) and flip, SGD momentum 0.9, lr 0.05 for the head and
# 0.05 x 0.01 for the T2T module and the blocks (the class token and the
# final norm are not in its optimizer: lr 0 here), weight decay 5e-4,
# cosine over 60 epochs to 2e-4, drop path 0.1, cross-entropy.
_base_ = [
    'mmpretrain::_base_/datasets/cifar100_bs16.py',
    'mmpretrain::_base_/default_runtime.py',
]

# mmlape registers its modules; mmlape.hosts.applied makes checkpoints load
# safely under any entry point (mmpretrain's, mmdet's, mmseg's tools too).
custom_imports = dict(
    imports=['mmlape', 'mmlape.hosts.applied'], allow_failed_imports=False)

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='LaPEViT',
        arch='t2t-vit-7',
        img_size=224,
        drop_path_rate=0.1,
        pe_join=dict(type='Default'),
        init_cfg=dict(
            type='Pretrained',
            checkpoint='pretrained/t2t-vit-7_in1k.pth',
            prefix='backbone.')),
    neck=None,
    head=dict(
        type='VisionTransformerClsHead',
        num_classes=100,
        in_channels=256,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02)))

# One label an image: mmpretrain's data preprocessor, with the batch's
# labels handled in one go instead of image by image (the same values), and
# the pinned batch copied to the GPU while the host does it.
data_preprocessor = dict(
    type='LaPEClsDataPreprocessor',
    non_blocking=True,
    num_classes=100,
    # the official transfer script's CIFAR normalisation (RGB)
    mean=[0.4914 * 255, 0.4822 * 255, 0.4465 * 255],
    std=[0.2023 * 255, 0.1994 * 255, 0.2010 * 255],
    to_rgb=False)

train_pipeline = [
    dict(type='Resize', scale=224, backend='pillow', interpolation='bilinear'),
    dict(type='RandomCrop', crop_size=224, padding=28),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='Resize', scale=224, backend='pillow', interpolation='bilinear'),
    dict(type='PackInputs'),
]

# Loaders (README "Feeding the GPU"): mmlape's tools start clamp(CPUs per
# training process - 1, floor, ceiling) workers on every dataloader;
# num_workers is the default that host tools, which ignore the key, use.
# CIFAR's pipeline makes ~1,800-2,700 img/s per worker; the GPU speed of
# this model was not measured: 16 workers feed ~30,000 img/s.
auto_num_workers = dict(floor=2, ceiling=16)
# Every image of a batch has one size: the loader stacks the batch
# (default_collate), so the data preprocessor moves and normalises
# one tensor, not each image in turn.
train_dataloader = dict(
    batch_size=128,
    num_workers=2,
    pin_memory=True,
    persistent_workers=True,
    collate_fn=dict(type='default_collate'),
    dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=100,
    num_workers=2,
    pin_memory=True,
    persistent_workers=True,
    collate_fn=dict(type='default_collate'),
    dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

# mmpretrain's top-k accuracy, with a batch's predictions and labels
# copied to the host in one go instead of two copies an image (on a GPU
# each copy waits for the device; the same results).
val_evaluator = dict(type='LaPEAccuracy', topk=(1, ))
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
    optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=5e-4),
    paramwise_cfg=dict(
        custom_keys={
            'backbone.patch_embed': dict(lr_mult=0.01),
            'backbone.blocks': dict(lr_mult=0.01),
            'backbone.pe_join': dict(lr_mult=0.01),
            'backbone.cls_token': dict(lr_mult=0.0, decay_mult=0.0),
            'backbone.norm.': dict(lr_mult=0.0, decay_mult=0.0),
        }))

param_scheduler = dict(
    type='CosineAnnealingLR',
    T_max=60,
    eta_min=2e-4,
    by_epoch=True,
    begin=0,
    end=60)

train_cfg = dict(by_epoch=True, max_epochs=60, val_interval=1)
val_cfg = dict()
test_cfg = dict()
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
auto_scale_lr = dict(base_batch_size=128)
