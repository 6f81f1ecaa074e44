# Segmenter's ViT-Ti encoder as mmlape's LaPEViT (default PE join): DeiT-Ti,
# patch 16, a 512 grid, the class token kept (the default join's; PVG and
# MPVG drop it), the final norm applied, a feature map out; initialised from
# mmlape's ImageNet DeiT-Ti of the same join
# (configs/deit/deit-tiny_4xb256_in1k.py), whose 224-grid PE is resized
# once, at loading. The Segmenter configs take it whole
# ({{_base_.segmenter_vit_tiny}}).
# mmlape registers its modules; mmlape.hosts.applied makes checkpoints load
# safely under any entry point (mmpretrain's, mmdet's, mmseg's tools too).
custom_imports = dict(
    imports=['mmlape', 'mmlape.hosts.applied'], allow_failed_imports=False)

segmenter_vit_tiny = dict(
    _delete_=True,  # replaces the host model's ViT backbone
    type='LaPEViT',
    arch='deit-tiny',
    img_size=512,
    patch_size=16,
    pe_join=dict(type='Default'),
    out_type='featmap',
    final_norm=True,
    drop_path_rate=0.1,
    interpolate_mode='bicubic',
    init_cfg=dict(
        type='Pretrained',
        checkpoint='pretrained/deit-tiny_in1k.pth',
        prefix='backbone.'))
