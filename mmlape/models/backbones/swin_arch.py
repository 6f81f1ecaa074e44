"""The arch zoo of :class:`~mmlape.models.backbones.LaPESwin` and the checks
of its config-level options (mmpretrain's ``stage_cfgs``, ``patch_cfg``),
with one-line errors that name the option.

References:
    Liu et al., "Swin Transformer", ICCV 2021, and its official code;
    mmpretrain's ``SwinTransformer``.
"""
from copy import deepcopy
from typing import Dict, List, Sequence, Tuple, Union

import torch
from mmengine.utils import to_2tuple

__all__ = [
    'SWIN_ARCH_ZOO', 'STAGE_CFG_KEYS', 'BLOCK_CFG_KEYS', 'DOWNSAMPLE_CFG_KEYS',
    'PATCH_CFG_KEYS', 'parse_swin_arch', 'check_patch_cfg', 'image_size',
    'stage_settings', 'common_window'
]

#: The archs by name (``LaPESwin.arch_zoo``): the paper's four, each under
#: its short and long name, and a tiny one for tests.
SWIN_ARCH_ZOO = {
    name: dict(embed_dims=dims, depths=depths, num_heads=heads)
    for names, dims, depths, heads in [
        (('t', 'tiny'), 96, [2, 2, 6, 2], [3, 6, 12, 24]),
        (('s', 'small'), 96, [2, 2, 18, 2], [3, 6, 12, 24]),
        (('b', 'base'), 128, [2, 2, 18, 2], [4, 8, 16, 32]),
        (('l', 'large'), 192, [2, 2, 18, 2], [6, 12, 24, 48]),
        (('test-tiny', ), 16, [2, 2, 2, 2], [1, 2, 2, 4]),
    ]
    for name in names
}

#: What mmpretrain's ``stage_cfgs`` may set, per stage and per block, in
#: mmlape's Swin (the rest of mmcv's brick options has no counterpart here).
STAGE_CFG_KEYS = ('block_cfgs', 'downsample_cfg', 'window_size')
BLOCK_CFG_KEYS = ('window_size', 'ffn_ratio', 'norm_cfg', 'shift', 'drop_path',
                  'pad_small_map', 'with_cp', 'attn_cfgs', 'ffn_cfgs')
DOWNSAMPLE_CFG_KEYS = ('norm_cfg', 'in_channels', 'out_channels')
PATCH_CFG_KEYS = ('norm_cfg', 'kernel_size', 'stride', 'in_channels',
                  'input_size', 'embed_dims', 'conv_type')


def _check_keys(cfg: Dict, allowed: Sequence[str], where: str) -> Dict:
    """``cfg`` as a dict, refusing keys mmlape's Swin does not take."""
    if not isinstance(cfg, dict):
        raise ValueError(f'{where} must be a dict, got {cfg!r}')
    unknown = sorted(set(cfg) - set(allowed))
    if unknown:
        raise ValueError(f'{where} sets {unknown}, which mmlape\'s Swin does '
                         f'not take; it takes {sorted(allowed)}')
    return dict(cfg)


def _per_item(cfgs: Union[Dict, Sequence[Dict]], count: int,
              where: str) -> List[Dict]:
    """One config per stage/block: a dict for all, or a sequence of
    ``count`` (mmpretrain's ``stage_cfgs``/``block_cfgs``)."""
    if isinstance(cfgs, dict):
        return [deepcopy(cfgs) for _ in range(count)]
    cfgs = list(cfgs)
    if len(cfgs) != count:
        raise ValueError(f'{where} has {len(cfgs)} entries for {count}')
    return [deepcopy(c) for c in cfgs]


def parse_swin_arch(arch: Union[str, Dict], zoo: Dict[str, Dict]) -> Dict:
    """A copy of ``zoo[arch]`` (the name in any case), or of a custom arch
    dict once it has exactly ``embed_dims``, ``depths`` and ``num_heads``
    (the last two of equal length)."""
    if isinstance(arch, str):
        name = arch.lower()
        if name not in zoo:
            raise ValueError(f'Unknown arch={arch!r}; choose one of '
                             f'{sorted(zoo)} or pass a dict')
        return deepcopy(zoo[name])
    keys = {'embed_dims', 'depths', 'num_heads'}
    if (not isinstance(arch, dict) or set(arch) != keys
            or len(arch['depths']) != len(arch['num_heads'])):
        raise ValueError(f'A custom arch must be a dict with keys '
                         f'{sorted(keys)} (depths and num_heads of equal '
                         f'length), got {arch!r}')
    return dict(arch)


def check_patch_cfg(patch_cfg: Dict, patch_size: int) -> Dict:
    """mmpretrain's ``patch_cfg`` as a dict, once it asks for nothing but
    Conv2d patches of ``patch_size`` (non-overlapping)."""
    patch_cfg = _check_keys(patch_cfg, PATCH_CFG_KEYS, 'patch_cfg')
    for key in ('kernel_size', 'stride'):
        if key in patch_cfg and patch_cfg[key] != patch_size:
            raise ValueError(f'patch_cfg.{key}={patch_cfg[key]!r}: '
                             f'mmlape\'s Swin embeds non-overlapping '
                             f'patches of patch_size={patch_size}')
    if patch_cfg.get('conv_type', 'Conv2d') != 'Conv2d':
        raise ValueError(f'patch_cfg.conv_type={patch_cfg["conv_type"]!r}'
                         f'; mmlape\'s Swin takes Conv2d')
    return patch_cfg


def image_size(img_size: Union[int, Sequence[int]], patch_size: int,
               window_size: int) -> Tuple[int, int]:
    """``img_size`` as a pair, once ``patch_size`` and ``window_size`` are
    positive ints and ``patch_size`` divides both sides."""
    for name, value in (('patch_size', patch_size), ('window_size',
                                                     window_size)):
        if (not isinstance(value, int) or isinstance(value, bool)
                or value < 1):
            raise ValueError(f'{name}={value!r} must be a positive int')
    size = tuple(to_2tuple(img_size))
    if len(size) != 2 or size[0] % patch_size or size[1] % patch_size:
        raise ValueError(f'img_size={img_size} must be an int or a pair '
                         f'divisible by patch_size={patch_size}')
    return size


def stage_settings(stage_cfgs: Union[Dict, Sequence[Dict]],
                   depths: Sequence[int], stage_dims: Sequence[int],
                   window_size: int, mlp_ratio: float, pad_small_map: bool,
                   drop_path_rate: float,
                   with_cp: bool) -> Tuple[List[Dict], List[Dict]]:
    """Per stage (the merging's norm) and per block (window, shift,
    MLP ratio, stochastic depth, padding, norm, checkpointing)
    settings, from the arguments and mmpretrain's ``stage_cfgs``.

    Args:
        stage_cfgs (dict | Sequence[dict]): mmpretrain's ``stage_cfgs``.
        depths (Sequence[int]): Blocks per stage.
        stage_dims (Sequence[int]): Channels per stage.
        window_size (int): The blocks' window unless a config sets it.
        mlp_ratio (float): The blocks' ``ffn_ratio`` unless a config sets
            it.
        pad_small_map (bool): The blocks' default.
        drop_path_rate (float): Stochastic depth, linear over all blocks.
        with_cp (bool): The blocks' default gradient checkpointing.

    Returns:
        tuple[list[dict], list[dict]]: One dict per stage (``norm_cfg`` of
        its patch merging) and one per block, in order.
    """
    num_layers = sum(depths)
    dpr = torch.linspace(0, drop_path_rate, num_layers, device='cpu').tolist()
    stages, blocks = [], []
    for s, stage in enumerate(
            _per_item(stage_cfgs, len(depths), 'stage_cfgs')):
        stage = _check_keys(stage, STAGE_CFG_KEYS, f'stage_cfgs[{s}]')
        down = _check_keys(
            stage.get('downsample_cfg', {}), DOWNSAMPLE_CFG_KEYS,
            f'stage_cfgs[{s}].downsample_cfg')
        dims = stage_dims[s]
        for key, want in (('in_channels', dims), ('out_channels', 2 * dims)):
            if key in down and down[key] != want:
                raise ValueError(
                    f'stage_cfgs[{s}].downsample_cfg.{key}='
                    f'{down[key]!r}; mmlape\'s Swin merges {dims} into '
                    f'{2 * dims} channels')
        stages.append(dict(norm_cfg=down.get('norm_cfg', dict(type='LN'))))
        stage_window = stage.get('window_size', window_size)
        depth = depths[s]
        for j, cfg in enumerate(
                _per_item(
                    stage.get('block_cfgs', {}), depth,
                    f'stage_cfgs[{s}].block_cfgs')):
            where = f'stage_cfgs[{s}].block_cfgs[{j}]'
            cfg = _check_keys(cfg, BLOCK_CFG_KEYS, where)
            for key in ('attn_cfgs', 'ffn_cfgs'):
                if cfg.pop(key, None):
                    raise ValueError(
                        f'{where}.{key} is not taken by mmlape\'s Swin '
                        f'(its window attention and MLP are fixed)')
            index = sum(depths[:s]) + j
            blocks.append(
                dict(
                    dict(
                        window_size=stage_window,
                        ffn_ratio=mlp_ratio,
                        norm_cfg=dict(type='LN'),
                        shift=j % 2 == 1,
                        drop_path=dpr[index],
                        pad_small_map=pad_small_map,
                        with_cp=with_cp), **cfg))
    return stages, blocks


def common_window(blocks: Sequence[Dict]) -> int:
    """The one window size of all blocks (from :func:`stage_settings`)."""
    windows = {b['window_size'] for b in blocks}
    if len(windows) != 1:
        raise ValueError(f'stage_cfgs give blocks window sizes '
                         f'{sorted(windows)}; mmlape\'s Swin takes one '
                         f'window size for all blocks')
    return windows.pop()
