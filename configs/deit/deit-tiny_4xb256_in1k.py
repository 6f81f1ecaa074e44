# DeiT-Ti on ImageNet-1K with mmlape's ViT (default PE join), the official
# DeiT recipe that both the LaPE and the MPVG paper train with:
# 300 epochs, batch 1024 (4 GPUs x 256), AdamW lr 5e-4 * 1024 / 512,
# weight decay 0.05 (none on PE, class token and norms, PE norms included),
# cosine with 5 warm-up epochs, label smoothing 0.1, Mixup 0.8 / CutMix 1.0,
# RandAugment m9 mstd 0.5, random erasing 0.25, drop path 0.1.
_base_ = 'mmpretrain::deit/deit-tiny_4xb256_in1k.py'

custom_imports = dict(imports=['mmlape'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='LaPEViT',
        arch='deit-tiny',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1,
        pe_join=dict(type='Default')),
    head=dict(in_channels=192))

optim_wrapper = dict(
    optimizer=dict(lr=5e-4 * 1024 / 512),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
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
        end=5,
        convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5)
]

train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)
auto_scale_lr = dict(base_batch_size=1024)

default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
