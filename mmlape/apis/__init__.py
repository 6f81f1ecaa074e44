"""What the tools (``tools/``) and :mod:`mmlape.analysis` share: a run's
config (:mod:`.preflight`), the checkpoint to resume (:mod:`.resume`) and
whether a checkpoint is the run's model (:mod:`.model_check`). The checks
of a run's data live in :mod:`mmlape.datasets` (``checks``, ``labels``),
the runner's setup in :mod:`mmlape.engine.runner_setup`, the adjustments
of the host libraries in :mod:`mmlape.hosts`.

This floor sits above :mod:`mmlape.models` and :mod:`mmlape.datasets`,
beside :mod:`mmlape.engine` and :mod:`mmlape.hosts`: nothing below it
imports it.
"""
from .model_check import check_checkpoint_fits, note_finetune_sources
from .preflight import UsageError, merge_cfg_options, register_scope_modules
from .resume import find_resume_checkpoint, is_complete_checkpoint

__all__ = [
    'UsageError', 'check_checkpoint_fits', 'find_resume_checkpoint',
    'is_complete_checkpoint', 'merge_cfg_options', 'note_finetune_sources',
    'register_scope_modules'
]
