# CeiT-Ti on ImageNet-1K with mmlape's ViT (default PE join): the
# Image-to-Tokens stem, LeFF in every block and LCA over the 12 class
# tokens. The official CeiT code trains with the DeiT recipe, as mmlape's
# DeiT-Ti config does: 300 epochs, batch 1024 (4 GPUs x 256), AdamW lr
# 5e-4 * 1024 / 512, weight decay 0.05 (none on biases, norms, the PE and
# the class token; LCA's layer embedding is decayed, as in the official
# code), cosine with 5 warm-up epochs, label smoothing 0.1, Mixup 0.8 /
# CutMix 1.0, RandAugment m9 mstd 0.5, random erasing 0.25, drop path 0.1,
# no gradient clipping; the classifier starts truncated-normal (std 0.02).
_base_ = '../deit/deit-tiny_4xb256_in1k.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='LaPEViT',
        arch='ceit-tiny',
        img_size=224,
        drop_path_rate=0.1,
        pe_join=dict(type='Default')),
    head=dict(
        in_channels=192,
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02)))

optim_wrapper = dict(clip_grad=None)

param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=5,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=5,
        end=300)
]

train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)
