"""What the tools (``tools/``) and :mod:`mmlape.analysis` share: checks of
a run's inputs (:mod:`.preflight`) and its labels (:mod:`.labels`), mmengine's
``FlexibleRunner`` (:mod:`.flexible`), the checkpoint to resume
(:mod:`.resume`) and the model a checkpoint records (:mod:`.model_check`).

This floor sits above :mod:`mmlape.models` and beside
:mod:`mmlape.engine`: it may import both the models and the utilities, and
nothing below it imports it.
"""
from .flexible import (check_flexible_runner, is_flexible_runner,
                       when_model_built)
from .labels import (check_dataset_labels, model_num_classes,
                     use_checked_label_maps)
from .model_check import (COMPARED_FIELDS, backbone_differences,
                          check_checkpoint_fits, note_finetune_sources,
                          recorded_model)
from .preflight import (UsageError, check_dataset_paths, check_work_dir,
                        fit_fused_optimizer, merge_cfg_options,
                        register_scope_modules, use_checked_image_loading)
from .resume import find_resume_checkpoint, is_complete_checkpoint

__all__ = [
    'COMPARED_FIELDS', 'UsageError', 'backbone_differences',
    'check_checkpoint_fits', 'check_dataset_labels', 'check_dataset_paths',
    'check_flexible_runner', 'check_work_dir', 'find_resume_checkpoint',
    'fit_fused_optimizer', 'is_complete_checkpoint', 'is_flexible_runner',
    'merge_cfg_options', 'model_num_classes', 'note_finetune_sources',
    'recorded_model', 'register_scope_modules', 'use_checked_image_loading',
    'use_checked_label_maps', 'when_model_built'
]
