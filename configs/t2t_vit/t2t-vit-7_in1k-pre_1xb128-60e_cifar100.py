# T2T-ViT-7 fine-tuned on CIFAR-100 from the ImageNet checkpoint of the
# same join (default), as the MPVG paper does (60 epochs, batch 128) with
# the official transfer script's recipe: images resized to 224, random
# crop (padding 28) and flip, SGD momentum 0.9, lr 0.05 for the head and
# 0.05 x 0.01 for the T2T module and the blocks (the class token and the
# final norm are not in its optimizer: lr 0 here), weight decay 5e-4,
# cosine over 60 epochs to 2e-4, drop path 0.1, cross-entropy.
_base_ = [
    '../_base_/models/lape-vit_cls.py', '../_base_/datasets/cifar100_bs16.py',
    '../_base_/default_runtime.py'
]

model = dict(
    backbone=dict(
        arch='t2t-vit-7',
        img_size=224,
        drop_path_rate=0.1,
        init_cfg=dict(
            type='Pretrained',
            checkpoint='pretrained/t2t-vit-7_in1k.pth',
            prefix='backbone.')),
    head=dict(
        num_classes=100,
        in_channels=256,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02)))

# The official transfer script's CIFAR normalisation (RGB).
data_preprocessor = dict(
    mean=[0.4914 * 255, 0.4822 * 255, 0.4465 * 255],
    std=[0.2023 * 255, 0.1994 * 255, 0.2010 * 255],
)

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

train_dataloader = dict(batch_size=128, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=100, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

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
auto_scale_lr = dict(base_batch_size=128)
