"""What the tools (``tools/``) and :mod:`mmlape.analysis` share: checks of
a run's inputs (:mod:`.preflight`), CPU distributed runs (:mod:`.dist`),
the checkpoint to resume (:mod:`.resume`), the model a checkpoint
records (:mod:`.model_check`) and the loader workers a run starts
(:mod:`.loader_workers`).

This floor sits above :mod:`mmlape.models` and beside
:mod:`mmlape.engine`: it may import both the models and the utilities, and
nothing below it imports it.
"""
from .dist import setup_cpu_distributed, slurm_to_torch_env
from .loader_workers import (apply_auto_num_workers, auto_num_workers,
                             cpus_per_process, local_world_size)
from .model_check import (COMPARED_FIELDS, backbone_differences,
                          check_checkpoint_fits, note_finetune_sources,
                          recorded_model)
from .preflight import (UsageError, check_dataset_paths, check_work_dir,
                        merge_cfg_options, register_scope_modules,
                        use_checked_image_loading)
from .resume import find_resume_checkpoint, is_complete_checkpoint

__all__ = [
    'COMPARED_FIELDS', 'UsageError', 'apply_auto_num_workers',
    'auto_num_workers', 'backbone_differences', 'check_checkpoint_fits',
    'check_dataset_paths', 'check_work_dir', 'cpus_per_process',
    'find_resume_checkpoint', 'is_complete_checkpoint', 'local_world_size',
    'merge_cfg_options', 'note_finetune_sources', 'recorded_model',
    'register_scope_modules', 'setup_cpu_distributed', 'slurm_to_torch_env',
    'use_checked_image_loading'
]
