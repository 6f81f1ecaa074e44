"""Whether a checkpoint is the model of a run (``--resume``, ``tools/test.py``,
the analysis tools) or a source it fine-tunes from."""
from typing import Any, Optional

import torch
from mmengine.config import Config
from mmengine.logging import print_log

from mmlape.models.checkpoint import unwrap_state_dict
from mmlape.models.checkpoint.recorded import (another_model,
                                               model_differences,
                                               recorded_backbone)
from mmlape.models.checkpoint.whole import fit_whole_checkpoint
from mmlape.utils.errors import CheckpointError
from mmlape.utils.safe_load import load_checkpoint

__all__ = [
    'check_checkpoint_fits', 'checked_checkpoint', 'fit_load_from',
    'note_finetune_sources'
]

_ADVICE = ('Use a checkpoint saved with this config (to initialise from '
           'another model, use --cfg-options load_from=... or the backbone '
           'init_cfg instead).')


def _read(filename: str, purpose: str, mmap: bool = False) -> Any:
    try:
        return load_checkpoint(filename, 'cpu', mmap=mmap)
    except CheckpointError as err:
        raise type(err)(f'{purpose}: {err}') from None


def _cfg_backbone(cfg: Optional[Config]) -> Optional[dict]:
    backbone = (cfg.get('model') or {}).get('backbone') if cfg else None
    return backbone if isinstance(backbone, dict) else None


def check_checkpoint_fits(model: torch.nn.Module,
                          filename: str,
                          purpose: str,
                          cfg: Optional[Config] = None,
                          convert: bool = False) -> dict:
    """The state dict of :func:`checked_checkpoint`."""
    return checked_checkpoint(model, filename, purpose, cfg,
                              convert)['state_dict']


def checked_checkpoint(model: torch.nn.Module,
                       filename: str,
                       purpose: str,
                       cfg: Optional[Config] = None,
                       convert: bool = False) -> dict:
    """Refuse a checkpoint of another model than ``model``.

    The recorded backbone must match in type, ``pe_type`` and join, and
    the weights ``model``'s keys and shapes exactly.

    Args:
        model (nn.Module): The built model, or backbone.
        filename (str): The checkpoint, a path or a URL.
        purpose (str): What it is for, to start the message (``'--resume'``).
        cfg (Config, optional): The run's config. Defaults to None.
        convert (bool): A file of another layout that the backbone's
            checkpoint family reads (an official DeiT, timm, Swin file) is
            converted first (:func:`fit_whole_checkpoint`), then checked.
            Defaults to False.

    Returns:
        dict: The checkpoint (read safely) with its state dict, converted
        where asked, under ``state_dict``.

    Raises:
        CheckpointError: The file cannot be read, or is another model's: one
            line naming each difference with both values, or the missing,
            unexpected and mismatched keys.
    """
    ckpt = _read(filename, purpose)
    model = getattr(model, 'module', model)
    recorded = recorded_backbone(ckpt)
    current = _cfg_backbone(cfg) or getattr(model, 'backbone', model)
    if recorded:
        wrong = model_differences(recorded[1], current)
        if wrong:
            raise CheckpointError(f'{purpose}: "{filename}" ' +
                                  another_model(wrong, recorded[0]) +
                                  f'. {_ADVICE}')
    state, own = unwrap_state_dict(ckpt), model.state_dict()
    if convert and not any(k in own for k in state):
        converted, notes = fit_whole_checkpoint(model, ckpt, filename, purpose)
        if converted is not None:
            state = converted['state_dict']
            for note in notes[:-1]:  # not the count: checked exactly below
                print_log(note, logger='current')
    problems = {
        'missing': [k for k in own if k not in state],
        'unexpected': [k for k in state if k not in own],
        'shape mismatch': [
            f'{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}'
            for k in own
            if k in state and tuple(state[k].shape) != tuple(own[k].shape)
        ]
    }
    parts = '; '.join(f'{len(keys)} {label} (e.g. {keys[:3]})'
                      for label, keys in problems.items() if keys)
    if parts:
        raise CheckpointError(f'{purpose}: "{filename}" is a checkpoint of '
                              f'another model: {parts}. {_ADVICE}')
    return dict(ckpt, state_dict=state)


def fit_load_from(model: torch.nn.Module,
                  filename: str,
                  purpose: str = 'load_from') -> Optional[dict]:
    """How ``load_from`` (fine-tuning from weights) loads into ``model``,
    decided before the run: a file of the model's keys as it is, one of
    another layout converted by the backbone's checkpoint family, one that
    fits no key refused. One log line says how many of the model's tensors
    it fills and which it leaves as initialised.

    Args:
        model (nn.Module): The built model.
        filename (str): The checkpoint, a path or a URL.
        purpose (str): Where it is set, to start the messages. Defaults to
            ``'load_from'``.

    Returns:
        dict, optional: The converted checkpoint for the run to load in
        place of the file's content; None when the file loads as it is.

    Raises:
        CheckpointError: The file cannot be read or fits none of the
            model's keys (one line naming it and what to do).
    """
    converted, notes = fit_whole_checkpoint(model, _read(filename, purpose),
                                            filename, purpose)
    for note in notes:
        print_log(note, logger='current')
    return converted


def note_finetune_sources(cfg: Config) -> None:
    """Log a note for each weight source (``load_from``, a backbone's
    ``Pretrained`` ``init_cfg``) saved from another backbone; not refused,
    as fine-tuning may start from another model. Reads only ``meta``.

    Raises:
        CheckpointError: A source cannot be read; names where it is set.
    """
    backbone = _cfg_backbone(cfg) or {}
    init = backbone.get('init_cfg')
    sources = [
        ('load_from', cfg.load_from)
    ] if (cfg.get('load_from') and not cfg.get('resume') and backbone) else []
    if (isinstance(init, dict) and init.get('type') == 'Pretrained'
            and init.get('checkpoint')
            and init.get('prefix') in ('backbone.', 'backbone')):
        sources.append(('model.backbone.init_cfg', init['checkpoint']))
    for where, filename in sources:
        recorded = recorded_backbone(_read(filename, where, mmap=True))
        text = '; '.join(
            f'{field} {theirs} there, {ours} here' for field, theirs, ours in (
                model_differences(recorded[1], backbone) if recorded else []))
        if text:
            print_log(
                f'{where}: "{filename}" was saved from another backbone '
                f'({text}); its weights initialise this one for fine-tuning '
                f'(keys that do not fit are logged as it loads)',
                logger='current')
