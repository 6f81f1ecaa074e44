# mmdet's Mask R-CNN on the ViT-Adapter-Ti backbone (./vit-adapter-tiny.py):
# an FPN on its four 192-channel levels, images padded to 32. The detection
# configs add the official detection settings of the backbone (window
# attention, the pyramid fed by the last ViT output). RoIAlign and NMS run in
# float32 during the model's steps (mmcv's kernels take no bfloat16 under
# --amp; mmlape.hosts.mmcv_ops).
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    './vit-adapter-tiny.py',
]

model = dict(
    data_preprocessor=dict(pad_size_divisor=32),
    backbone={{_base_.vit_adapter_tiny}},
    neck=dict(in_channels=[192, 192, 192, 192], out_channels=256, num_outs=5))

custom_hooks = [dict(type='mmlape.Float32MmcvOpsHook')]
