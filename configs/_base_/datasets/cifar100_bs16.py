# mmpretrain's CIFAR-100 data, with mmlape's loader, data preprocessor and
# accuracy (as ./imagenet_bs64_swin_224.py explains them).
_base_ = 'mmpretrain::_base_/datasets/cifar100_bs16.py'

auto_num_workers = dict(floor=2, ceiling=16)
train_dataloader = dict(
    num_workers=2,
    pin_memory=True,
    persistent_workers=True,
    collate_fn=dict(type='default_collate'))
val_dataloader = train_dataloader
test_dataloader = train_dataloader

data_preprocessor = dict(type='LaPEClsDataPreprocessor', non_blocking=True)

val_evaluator = dict(type='LaPEAccuracy', topk=(1, ))
test_evaluator = val_evaluator
