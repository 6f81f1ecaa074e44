# mmpretrain's AdamW schedule for batch 1024 (Swin's and DeiT's), with
# mmlape's optimizer constructor and the fused AdamW step.
_base_ = 'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py'

# The parameters with equal options share one optimizer group (mmengine's
# constructor gives each its own; DeiT-Ti: 3 groups instead of 176): the
# optimizer's host work per step follows the groups (docs/speed.md
# "Feeding the GPU").
optim_wrapper = dict(
    constructor='LaPEOptimWrapperConstructor', optimizer=dict(fused=True))
