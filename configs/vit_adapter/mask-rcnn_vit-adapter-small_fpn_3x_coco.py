# Mask R-CNN with ViT-Adapter-S (default PE join) on COCO: the ViT-Adapter-Ti
# recipe (./mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py; the official S and Ti
# files differ only in the backbone and the FPN's input width) on the
# ViT-Adapter-S backbone (../_base_/models/vit-adapter-small.py), initialised
# from mmlape's ImageNet DeiT-S of the same join.
_base_ = [
    './mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py',
    '../_base_/models/vit-adapter-small.py',
]

model = dict(
    backbone={{_base_.vit_adapter_small}}, neck=dict(in_channels=[384] * 4))
