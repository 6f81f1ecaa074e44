# Segmenter (mask transformer) with mmlape's ViT-Ti (default PE join) on
# ADE20K, mmseg's recipe: 512x512 crops, 160k iterations, batch 8 (8 GPUs x
# 1), SGD lr 0.001, poly schedule, slide inference (512 crops, stride 480).
# The encoder is initialised from mmlape's ImageNet DeiT-Ti of the same join;
# its PE (224 grid) is resized once, at loading, to the 512 grid.
_base_ = 'mmseg::segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py'

custom_imports = dict(imports=['mmlape'], allow_failed_imports=False)

pretrained = 'pretrained/deit-tiny_in1k.pth'
model = dict(
    # The encoder is a DeiT: normalise as it was trained (ImageNet mean and
    # std), as Segmenter does for DeiT encoders; mmseg's 127.5/127.5 belongs
    # to the ViT checkpoint of its own config.
    data_preprocessor=dict(
        mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]),
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='LaPEViT',
        arch='deit-tiny',
        img_size=512,
        patch_size=16,
        pe_join=dict(type='Default'),
        with_cls_token=True,
        out_type='featmap',
        final_norm=True,
        drop_path_rate=0.1,
        interpolate_mode='bicubic',
        init_cfg=dict(
            type='Pretrained', checkpoint=pretrained, prefix='backbone.')))

default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
