# mmpretrain's ImageNet-1K data (Swin's and DeiT's augmentation), with
# mmlape's loader, data preprocessor and accuracy.
_base_ = 'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py'

# Loaders (docs/speed.md "Feeding the GPU"): mmlape's tools start
# clamp(CPUs per training process - 1, floor, ceiling) workers on every
# dataloader; num_workers is the default that host tools, which ignore the
# key, use. Ceiling: an H200 steps DeiT-Ti at ~8,700 img/s (eager), one
# worker of this pipeline makes ~190-210 img/s: 42-46 workers are needed.
auto_num_workers = dict(floor=5, ceiling=48)
# Every image of a batch has one size: the loader stacks the batch
# (default_collate), so the data preprocessor moves and normalises one
# tensor, not each image in turn.
train_dataloader = dict(
    num_workers=5,
    pin_memory=True,
    persistent_workers=True,
    collate_fn=dict(type='default_collate'))
val_dataloader = train_dataloader
test_dataloader = train_dataloader

# One label an image: mmpretrain's data preprocessor, with a batch's
# targets made in one go instead of image by image (the same values), and
# the pinned batch copied to the GPU while the host makes them.
data_preprocessor = dict(type='LaPEClsDataPreprocessor', non_blocking=True)

# mmpretrain's top-k accuracy, with a batch's predictions and labels
# copied to the host in one go instead of two copies an image (on a GPU
# each copy waits for the device; the same results).
val_evaluator = dict(type='LaPEAccuracy', topk=(1, 5))
test_evaluator = val_evaluator
