# mmseg's UperNet on the ViT-Adapter-Ti backbone (./vit-adapter-tiny.py),
# 150 ADE20K classes. The segmentation configs add the official segmentation
# setting of the backbone (the pyramid fed by each interaction) and the crop.
_base_ = [
    'mmseg::_base_/models/upernet_r50.py',
    './vit-adapter-tiny.py',
]

model = dict(
    pretrained=None,
    backbone={{_base_.vit_adapter_tiny}},
    decode_head=dict(num_classes=150, in_channels=[192, 192, 192, 192]),
    auxiliary_head=dict(num_classes=150, in_channels=192))
