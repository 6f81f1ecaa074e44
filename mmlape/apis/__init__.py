"""What the tools and :mod:`mmlape.analysis` share: a run's config
(:mod:`.preflight`), the checkpoint to resume (:mod:`.resume`) and whether
a checkpoint is the run's model (:mod:`.model_check`). Nothing in
:mod:`mmlape.models` or :mod:`mmlape.datasets` imports it.
"""
from .model_check import (check_checkpoint_fits, check_resume_optimizer,
                          checked_checkpoint, fit_load_from,
                          note_finetune_sources)
from .preflight import (UsageError, check_run_values, merge_cfg_options,
                        register_scope_modules)
from .resume import find_resume_checkpoint, is_complete_checkpoint

__all__ = [
    'UsageError', 'check_checkpoint_fits', 'check_resume_optimizer',
    'check_run_values', 'find_resume_checkpoint', 'checked_checkpoint',
    'fit_load_from', 'is_complete_checkpoint', 'merge_cfg_options',
    'note_finetune_sources', 'register_scope_modules'
]
