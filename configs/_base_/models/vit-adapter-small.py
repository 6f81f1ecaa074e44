# ViT-Adapter-S: what the official small settings change in ViT-Adapter-Ti
# (./vit-adapter-tiny.py, the one definition of the backbone): DeiT-S
# (embed 384, 6 heads), drop path 0.2, initialised from mmlape's ImageNet
# DeiT-S of the default join (configs/deit/deit-small_4xb256_in1k.py).
# The deformable attention keeps 6 heads and ratio 1.0, stated to match the
# official file (detection/configs/mask_rcnn/
# mask_rcnn_deit_adapter_small_fpn_3x_coco.py). The ViT-Adapter-S configs
# merge it into the Ti configs' backbone ({{_base_.vit_adapter_small}}).
vit_adapter_small = dict(
    arch='small',
    drop_path_rate=0.2,
    deform_num_heads=6,
    deform_ratio=1.0,
    init_cfg=dict(checkpoint='pretrained/deit-small_in1k.pth'))
