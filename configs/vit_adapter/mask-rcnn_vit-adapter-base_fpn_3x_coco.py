# Mask R-CNN with ViT-Adapter-B (default PE join) on COCO: the ViT-Adapter-Ti
# recipe (./mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py; the official B and Ti
# files differ only in the backbone and the FPN's input width) on the
# ViT-Adapter-B backbone (../_base_/models/vit-adapter-base.py), initialised
# from mmlape's ImageNet DeiT-B of the same join.
_base_ = [
    './mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py',
    '../_base_/models/vit-adapter-base.py',
]

model = dict(
    backbone={{_base_.vit_adapter_base}}, neck=dict(in_channels=[768] * 4))
