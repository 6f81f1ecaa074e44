# T2T-ViT-7 with LaPE fine-tuned on CIFAR-100 from the LaPE ImageNet
# checkpoint.
_base_ = './t2t-vit-7_in1k-pre_1xb128-60e_cifar100.py'

model = dict(
    backbone=dict(
        pe_join=dict(type='LaPE'),
        init_cfg=dict(checkpoint='pretrained/t2t-vit-7-lape_in1k.pth')))
