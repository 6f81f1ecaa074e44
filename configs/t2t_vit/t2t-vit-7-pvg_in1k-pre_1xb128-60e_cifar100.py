# T2T-ViT-7 with PVG fine-tuned on CIFAR-100 from the PVG ImageNet
# checkpoint.
_base_ = './t2t-vit-7_in1k-pre_1xb128-60e_cifar100.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='PVG'),
        init_cfg=dict(checkpoint='pretrained/t2t-vit-7-pvg_in1k.pth')))
