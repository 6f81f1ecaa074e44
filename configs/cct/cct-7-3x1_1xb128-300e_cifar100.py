# CCT-7/3x1 on CIFAR-100 (32x32) with mmlape's ViT (default PE join): the
# convolutional tokenizer (one 3x3 conv, ReLU, 3x3/2 max-pool) and sequence
# pooling, trained with the official Compact-Transformers CIFAR-100 recipe
# of ViT-Lite-7/4's config (AdamW lr 6e-4, weight decay 0.06, batch 128,
# 10 warm-up epochs, cosine to 1e-5, ...) for 300 epochs. The official
# "300 epochs" config also runs 10 cool-down epochs at the minimum lr:
# --cfg-options train_cfg.max_epochs=310 adds them.
_base_ = '../vit_lite/vit-lite-7-4_1xb128-310e_cifar100.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='LaPEViT',
        arch='cct-7/3x1',
        img_size=32,
        attn_drop_rate=0.1,
        drop_path_rate=0.1,
        pe_join=dict(type='Default')))

train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)
