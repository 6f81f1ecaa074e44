"""Build a model from any mmlape config and load a checkpoint into it (one
that does not fit is refused, naming the keys)."""
import importlib
from typing import Tuple, Union

import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mmlape.apis import (UsageError, check_checkpoint_fits,
                         register_scope_modules)

__all__ = ['build_from_config', 'load_backbone']


def build_from_config(
        config: Union[str, Config]) -> Tuple[torch.nn.Module, Config]:
    """Build the model of ``config`` (a path, or a read ``Config``, e.g.
    one a tool has edited), in its ``default_scope``."""
    import os.path as osp

    import mmlape  # noqa: F401
    if isinstance(config, Config):
        cfg = config
    elif not osp.isfile(config):
        raise UsageError(f'config file "{config}" does not exist')
    else:
        cfg = Config.fromfile(config)
    scope = register_scope_modules(cfg)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    model_cfg = cfg.model.copy()
    model_cfg.get('backbone', {}).pop('init_cfg', None)
    # As mmengine's Runner does: a top-level data_preprocessor (mmpretrain
    # configs) belongs to the model.
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(model_cfg)
    return model, cfg


def load_backbone(config: str, checkpoint: str):
    """The model of ``config`` with ``checkpoint`` loaded, and its backbone.

    Raises:
        UsageError: The config does not exist, the checkpoint does not exist
            or does not fit the config, or the backbone is not an mmlape ViT.
    """
    from mmlape.models import LaPEViT
    model, cfg = build_from_config(config)
    state = check_checkpoint_fits(model, checkpoint, 'checkpoint')
    model.load_state_dict(state, strict=True)
    backbone = getattr(model, 'backbone', None)
    if not isinstance(backbone, LaPEViT):
        raise UsageError(f'the backbone of "{config}" is '
                         f'{type(backbone).__name__}, not an mmlape ViT')
    return model.eval(), backbone.eval(), cfg
