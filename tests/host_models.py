"""Host libraries' own configs and models, for the drop-in tests.

A host config (installed under ``<host>/.mim/configs``) is read as it is,
built by the host's registry in the host's scope, its backbone type swapped
for mmlape's, and a host model's weights copied into the swapped one (the
backbone's through mmlape's converter).
"""
import os.path as osp
from copy import deepcopy
from functools import partial
from importlib import import_module
from typing import Callable, Union

import torch
import torch.nn as nn
from mmengine.config import Config, ConfigDict
from mmengine.registry import DefaultScope

from mmlape.models.checkpoint.vit import convert_backbone

PREFIX = 'backbone.'


def host_model_cfg(host: str, rel: str) -> ConfigDict:
    """The ``model`` of the host's config ``rel``."""
    root = osp.dirname(import_module(host).__file__)
    return Config.fromfile(osp.join(root, '.mim', 'configs', rel)).model


def build_in(host: str, model_cfg) -> nn.Module:
    """A copy of ``model_cfg`` built by the host's registry, in its scope."""
    import_module(f'{host}.utils').register_all_modules(
        init_default_scope=False)
    registry = import_module(f'{host}.registry').MODELS
    with DefaultScope.overwrite_default_scope(host):
        return registry.build(deepcopy(model_cfg))


def swapped(model_cfg, host_type: str, mmlape_type: str) -> ConfigDict:
    """A copy of ``model_cfg`` whose backbone ``host_type`` is
    ``mmlape_type``: the only change a user makes."""
    cfg = deepcopy(model_cfg)
    assert cfg.backbone.type == host_type
    cfg.backbone.type = mmlape_type
    return cfg


def copy_converted(ref: nn.Module, ours: nn.Module,
                   fmt: Union[str, Callable]) -> None:
    """Load ``ref``'s weights into ``ours`` strictly: the backbone's
    converted from the ``fmt`` ViT layout (or by the converter ``fmt``),
    the rest as they are."""
    state = ref.state_dict()
    backbone = {
        k[len(PREFIX):]: v
        for k, v in state.items() if k.startswith(PREFIX)
    }
    convert = fmt if callable(fmt) else partial(convert_backbone, fmt=fmt)
    converted = {PREFIX + k: v for k, v in convert(backbone).items()}
    converted.update({
        k: v
        for k, v in state.items() if not k.startswith(PREFIX)
    })
    ours.load_state_dict(converted, strict=True)


def assert_same_logits(ref: nn.Module, ours: nn.Module, fmt: str,
                       img: torch.Tensor) -> None:
    """:func:`copy_converted`, then both models in eval mode give the same
    ``mode='tensor'`` outputs on ``img``."""
    copy_converted(ref, ours, fmt)
    ref.eval(), ours.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            ours(img, mode='tensor'),
            ref(img, mode='tensor'),
            rtol=1e-4,
            atol=1e-5)
