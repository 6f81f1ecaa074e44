# UperNet with ViT-Adapter-B (default PE join) on ADE20K: the ViT-Adapter-Ti
# recipe (./upernet_vit-adapter-tiny_8xb2-160k_ade20k-512x512.py) on the
# ViT-Adapter-B backbone (../_base_/models/vit-adapter-base.py), initialised
# from mmlape's ImageNet DeiT-B of the same join. The official B file
# changes the backbone, the heads' input widths and the learning rate:
# AdamW lr 6e-5 (Ti: 12e-5).
_base_ = [
    './upernet_vit-adapter-tiny_8xb2-160k_ade20k-512x512.py',
    '../_base_/models/vit-adapter-base.py',
]

model = dict(
    backbone={{_base_.vit_adapter_base}},
    decode_head=dict(in_channels=[768] * 4),
    auxiliary_head=dict(in_channels=768))
optim_wrapper = dict(optimizer=dict(lr=6e-5))
