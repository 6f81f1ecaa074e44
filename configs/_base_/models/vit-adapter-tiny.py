# ViT-Adapter-Ti (the official tiny settings: DeiT-Ti, 4 interactions of 3
# blocks, 6 deformable heads, 4 points, CFFN ratio 0.25), initialised from
# mmlape's ImageNet DeiT-Ti of the default join
# (configs/deit/deit-tiny_4xb256_in1k.py). The one definition of this
# backbone: the Mask R-CNN and UperNet model bases take it whole
# ({{_base_.vit_adapter_tiny}}) and add what their task needs.
# mmlape registers its modules; mmlape.hosts.applied makes checkpoints load
# safely under any entry point (mmpretrain's, mmdet's, mmseg's tools too).
custom_imports = dict(
    imports=['mmlape', 'mmlape.hosts.applied'], allow_failed_imports=False)

vit_adapter_tiny = dict(
    _delete_=True,  # replaces the host model's ResNet backbone
    type='LaPEViTAdapter',
    arch='tiny',
    img_size=224,
    pe_join=dict(type='Default'),
    drop_path_rate=0.1,
    conv_inplane=64,
    n_points=4,
    deform_num_heads=6,
    cffn_ratio=0.25,
    deform_ratio=1.0,
    interaction_indexes=[[0, 2], [3, 5], [6, 8], [9, 11]],
    adapter_norm_cfg=dict(type='SyncBN', requires_grad=True),
    init_cfg=dict(
        type='Pretrained',
        checkpoint='pretrained/deit-tiny_in1k.pth',
        prefix='backbone.'))
