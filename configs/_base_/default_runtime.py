# mmlape's runtime for its classification configs: mmpretrain's runtime with
# mmlape's modules imported, atomic checkpoint saves and cuDNN's autotuning.
# The datasets/ and schedules/ beside it add mmlape's loader, evaluator and
# optimizer-constructor choices to mmpretrain's (docs/recipes.md).
_base_ = 'mmpretrain::_base_/default_runtime.py'

# mmlape registers its modules; mmlape.hosts.applied makes checkpoints load
# safely under any entry point (mmpretrain's, mmdet's, mmseg's tools too).
custom_imports = dict(
    imports=['mmlape', 'mmlape.hosts.applied'], allow_failed_imports=False)

# cuDNN picks its fastest convolution algorithms for the one input size,
# as the official training scripts set it (mmpretrain's default: False).
env_cfg = dict(cudnn_benchmark=True)

# Atomic saves (a kill during a save never loses the previous checkpoint).
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
