# mmpretrain's ImageNet-1K data for T2T-ViT (its _base_/datasets/
# imagenet_bs64_t2t_224.py): Swin's and DeiT's, evaluated at 224 of a
# 248-pixel short edge; mmlape's loader, data preprocessor and accuracy.
_base_ = './imagenet_bs64_swin_224.py'

test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='ResizeEdge',
        scale=248,
        edge='short',
        backend='pillow',
        interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
