"""What the tools (``tools/``) and :mod:`mmlape.analysis` share: checks of
a run's inputs (:mod:`.preflight`), CPU distributed runs (:mod:`.dist`),
the checkpoint to resume (:mod:`.resume`) and the model a checkpoint
records (:mod:`.model_check`).

This floor sits above :mod:`mmlape.models` and beside
:mod:`mmlape.engine`: it may import both the models and the utilities, and
nothing below it imports it.
"""
from .dist import setup_cpu_distributed, slurm_to_torch_env
from .model_check import (COMPARED_FIELDS, backbone_differences,
                          check_checkpoint_fits, note_finetune_sources,
                          recorded_model)
from .preflight import (UsageError, check_dataset_paths, check_work_dir,
                        fit_fused_optimizer, merge_cfg_options,
                        register_scope_modules, use_checked_image_loading)
from .resume import find_resume_checkpoint, is_complete_checkpoint

__all__ = [
    'COMPARED_FIELDS', 'UsageError', 'backbone_differences',
    'check_checkpoint_fits', 'check_dataset_paths', 'check_work_dir',
    'find_resume_checkpoint', 'fit_fused_optimizer', 'is_complete_checkpoint',
    'merge_cfg_options', 'note_finetune_sources', 'recorded_model',
    'register_scope_modules', 'setup_cpu_distributed', 'slurm_to_torch_env',
    'use_checked_image_loading'
]
