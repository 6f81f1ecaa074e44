# ViT-Adapter-B: what the official base settings change in ViT-Adapter-Ti
# (./vit-adapter-tiny.py, the one definition of the backbone): DeiT-B
# (embed 768, 12 heads), drop path 0.3, 12 deformable-attention heads with
# value ratio 0.5 (detection/configs/mask_rcnn/
# mask_rcnn_deit_adapter_base_fpn_3x_coco.py), initialised from mmlape's
# ImageNet DeiT-B of the default join (configs/deit/deit-base_4xb256_in1k.py).
# The ViT-Adapter-B configs merge it into the Ti configs' backbone
# ({{_base_.vit_adapter_base}}).
vit_adapter_base = dict(
    arch='base',
    drop_path_rate=0.3,
    deform_num_heads=12,
    deform_ratio=0.5,
    init_cfg=dict(checkpoint='pretrained/deit-base_in1k.pth'))
