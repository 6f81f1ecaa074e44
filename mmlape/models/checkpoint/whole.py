"""A checkpoint as it loads into a whole model (a classifier, a detector, a
segmentor): as it is when its keys are the model's, converted by the
backbone's checkpoint family when it is a layout the family reads (an
official DeiT, timm, T2T-ViT or Swin file), refused when it fits none of
the model's keys.

mmengine's ``load_from`` loads any file with ``strict=False``: a file of
another layout loads nothing and the run trains from scratch, with only a
list of missing keys in its log. :func:`fit_whole_checkpoint` decides
before the run.

References:
    mmengine's ``_load_checkpoint_to_model`` (the ``module.`` prefix
    dropped, ``strict=False``).
"""
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from mmlape.utils.errors import CheckpointError
from .common import (BACKBONE_PREFIX, describe_keys, strip_prefix,
                     unwrap_state_dict)

__all__ = ['fit_whole_checkpoint', 'head_option', 'key_groups']


def key_groups(keys: List[str]) -> List[str]:
    """The top-level groups of keys (``backbone``, ``head``, ``neck``...)
    with their counts, for messages."""
    counts: Dict[str, int] = OrderedDict()
    for key in keys:
        group = key.split('.')[0]
        counts[group] = counts.get(group, 0) + 1
    return [f'{group} ({n})' for group, n in counts.items()]


def head_option(family: Any, own: Mapping) -> str:
    """The family's ``head`` option whose keys the model has (a bare
    model's classifier goes there), else ``'none'``."""
    for option, prefix in family.heads.items():
        if prefix and f'{prefix}weight' in own:
            return option
    return 'none'


def _fits(state: Mapping, own: Mapping) -> List[str]:
    return [
        k for k in state if k in own and isinstance(state[k], torch.Tensor)
    ]


def fit_whole_checkpoint(model: torch.nn.Module, checkpoint: Any, source: str,
                         purpose: str) -> Tuple[Optional[Dict], List[str]]:
    """Decide how ``checkpoint`` loads into ``model``.

    Args:
        model (nn.Module): The built model (``module`` of a wrapper taken).
        checkpoint: The loaded file.
        source (str): Its path or URL, for messages.
        purpose (str): Where it is set, to start messages
            (``'load_from'``).

    Returns:
        tuple: The converted checkpoint (None when it loads as it is) and
        notes for the log: how many of the model's keys it fills and, when
        not all, which groups it leaves as initialised.

    Raises:
        CheckpointError: The file fits none of the model's keys and no
            checkpoint family of the model converts it, or its backbone is
            of another architecture (one line naming the file, what differs
            and what to do).
    """
    model = getattr(model, 'module', model)
    own = model.state_dict()
    state = unwrap_state_dict(checkpoint)
    converted = None
    matched = _fits(state, own)
    conversion_error = None
    backbone = getattr(model, 'backbone', None)
    family = getattr(backbone, 'checkpoint_family', None)
    if not matched and family is not None:
        try:
            converted = family.convert_checkpoint(
                checkpoint, head=head_option(family, own))
        except (ValueError, KeyError) as err:
            conversion_error = str(err)
        else:
            state = converted['state_dict']
            matched = _fits(state, own)
            if not matched:
                converted = None
    if not matched:
        theirs = key_groups(list(state))[:4]
        why = (f'; as a {family.name} checkpoint it does not convert: '
               f'{conversion_error}' if conversion_error else '')
        raise CheckpointError(
            f'{purpose}: "{source}" fits none of this model\'s keys (its '
            f'keys: {", ".join(theirs) or "none"}; the model\'s: '
            f'{", ".join(key_groups(list(own))[:4])}){why}. Convert it with '
            f'tools/convert/to_mmlape.py, or load a backbone with '
            f'model.backbone.init_cfg=dict(type=\'Pretrained\', '
            f'checkpoint=...)')
    if family is not None and hasattr(backbone, 'checkpoint_spec'):
        try:
            family.check_architecture(
                strip_prefix(state, BACKBONE_PREFIX),
                backbone.checkpoint_spec())
        except ValueError as err:
            raise CheckpointError(f'{purpose}: "{source}": {err}') from None
    notes = []
    if converted is not None:
        meta = converted['meta']
        notes.append(f'{purpose}: "{source}" is a {meta["layout"]} '
                     f'checkpoint ({meta["converted_from"]} names): '
                     f'converted to mmlape\'s as it loads')
        notes += [f'{purpose}: {note}' for note in meta['notes']]
    left = [k for k in own if k not in matched]
    if left:
        notes.append(f'{purpose}: "{source}" fills {len(matched)} of the '
                     f'model\'s {len(own)} tensors; left as initialised: '
                     f'{describe_keys(left)}')
    else:
        notes.append(f'{purpose}: "{source}" fills all {len(own)} tensors '
                     f'of the model')
    return converted, notes
