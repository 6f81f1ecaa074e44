"""Convert an mmlape ViT classifier checkpoint to a timm state dict.

The classifier must be one timm computes exactly
(:mod:`mmlape.models.checkpoint.to_timm`): the default join
(``pe_join.type='Default'``) with a learnable or fixed sin-cos PE becomes
timm's ``VisionTransformer`` (class token or GAP; GAP between the final
norm and ``fc_norm``, as mmpretrain's ``avg_featmap``, becomes ``Eva``);
RoPE-Axial or RoPE-Mixed, with or without an absolute PE beside, becomes
timm's RoPE-ViT ``Eva``. Any other join (Share, Unshare, LaPE, PVG, MPVG),
a relative PE or another family (Swin, T2T-ViT, CeiT, ViT-Lite, CCT) is
refused in one line naming it.

The backbone comes from the config the checkpoint records
(``meta['cfg']``, as mmengine saves it), or from ``--config`` (which must
not contradict a recorded one). The tool prints the timm model's name and
the ``timm.create_model(...)`` arguments under which the file loads with
``strict=True`` and gives the same logits, on inputs normalised as the
config's data preprocessor does. ``dst`` is ``torch.save``'s plain dict of
tensors, or safetensors where it ends with ``.safetensors``; written
atomically, an existing one only with ``--force``.

Example:
    python tools/convert/to_timm.py work_dirs/deit-tiny/epoch_300.pth \
        deit_tiny_timm.safetensors

References:
    timm's ``timm/models/vision_transformer.py`` and ``timm/models/eva.py``
    (the layouts and options written here).
"""
import os.path as osp
import sys
from typing import Any, Dict, Mapping, Optional, Tuple

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
from tools.common import ToolParser, convert_file  # noqa: E402


def parse_args(argv=None):
    parser = ToolParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        'src',
        help='mmlape classifier checkpoint: a path or a URL, .pth or '
        '.safetensors')
    parser.add_argument(
        'dst',
        help='where to write the timm state dict (.safetensors: in that '
        'format)')
    parser.add_argument(
        '--config',
        help='the mmlape config that trained the checkpoint (default: the '
        'config it records in meta["cfg"])')
    parser.add_argument(
        '--force', action='store_true', help='overwrite an existing dst')
    args = parser.parse_args(argv)
    if args.config is not None and not osp.isfile(args.config):
        parser.error(f'config file "{args.config}" does not exist')
    return args


def read_config(path: str) -> Mapping:
    """The ``model`` of a config file.

    Raises:
        ValueError: The file cannot be read or has no ``model``.
    """
    from mmengine.config import Config
    try:
        cfg = Config.fromfile(path)
    except (SyntaxError, ImportError, KeyError, TypeError, ValueError,
            AttributeError) as err:
        reason = ' '.join(str(err).split()) or type(err).__name__
        raise ValueError(f'config "{path}" cannot be read: {reason}') from None
    model = cfg.get('model')
    if not model or not model.get('backbone'):
        raise ValueError(f'config "{path}" has no model.backbone')
    return model


def model_config(ckpt: Mapping, config: Optional[str],
                 src: str) -> Tuple[Mapping, str]:
    """The classifier's ``model`` config and where it comes from.

    Raises:
        ValueError: No ``--config`` and no config recorded in the file.
    """
    from mmlape.models.checkpoint.recorded import (recorded_backbone,
                                                   recorded_model)
    if config is not None:
        return read_config(config), f'config "{config}"'
    meta = ckpt.get('meta') if isinstance(ckpt, Mapping) else None
    model = recorded_model(meta.get('cfg')) if isinstance(meta,
                                                          Mapping) else None
    if model and isinstance(model.get('backbone'), dict):
        return model, 'the recorded config'
    recorded = recorded_backbone(ckpt)
    what = (f'records only the PE type and join{recorded[0]}, not the model'
            if recorded else 'records no config (meta["cfg"])')
    raise ValueError(f'checkpoint "{src}" {what}: pass --config CONFIG, the '
                     f'mmlape config that trained it')


def build_backbone(cfg: Mapping, where: str):
    """The backbone of a ``model`` config, built.

    Raises:
        ValueError: It cannot be built, or it is no ``LaPEViT``.
    """
    from mmengine.registry import DefaultScope

    from mmlape.models import LaPEViT
    from mmlape.registry import MODELS
    from mmlape.utils.errors import one_line
    options = dict(cfg['backbone'])
    options.pop('init_cfg', None)
    with DefaultScope.overwrite_default_scope('mmlape'):
        try:
            built = MODELS.build(options)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f'{where}: cannot build its backbone '
                             f'({one_line(err)})') from None
    if type(built) is not LaPEViT:
        raise ValueError(f'timm has no counterpart of {where}\'s '
                         f'{type(built).__name__} backbone: to_timm converts '
                         f'LaPEViT classifiers (timm\'s VisionTransformer '
                         f'and Eva)')
    return built


def check_recorded(ckpt: Mapping, backbone, where: str) -> None:
    """Refuse a ``--config`` whose backbone is another model than the one
    the file records."""
    from mmlape.models.checkpoint.recorded import (another_model,
                                                   model_differences,
                                                   recorded_backbone)
    recorded = recorded_backbone(ckpt)
    if recorded:
        wrong = model_differences(recorded[1], backbone)
        if wrong:
            raise ValueError('the checkpoint ' +
                             another_model(wrong, recorded[0]))


def family_archs() -> frozenset:
    """The ViT archs of other families (T2T-ViT, CeiT, ViT-Lite, CCT),
    named where they are refused."""
    from mmlape.models.backbones.vit_arch import (MMPRETRAIN_VIT_ARCHS,
                                                  VIT_ARCH_ZOO)
    return frozenset(VIT_ARCH_ZOO) - frozenset(MMPRETRAIN_VIT_ARCHS) - {
        'test-tiny'
    }


def to_timm(ckpt: Mapping, args) -> Tuple[Any, Dict]:
    """A loaded mmlape checkpoint as ``(TimmModel, timm state dict)``.

    Raises:
        ValueError: What cannot be converted, in one line.
    """
    from mmlape.models.checkpoint import unwrap_state_dict
    from mmlape.models.checkpoint.to_timm import convert_to_timm
    model_cfg, where = model_config(ckpt, args.config, args.src)
    backbone = build_backbone(model_cfg, where)
    if args.config is not None:
        check_recorded(ckpt, backbone, where)
    try:
        return convert_to_timm(backbone, unwrap_state_dict(ckpt), model_cfg)
    except ValueError as err:
        arch = model_cfg['backbone'].get('arch')
        if isinstance(arch, str) and arch.lower() in family_archs():
            raise ValueError(f'the {arch} arch: {err}') from None
        raise


def load_line(dst: str) -> str:
    """How the printed model loads ``dst`` (one line of Python)."""
    if dst.endswith('.safetensors'):
        read = f'safetensors.torch.load_file({dst!r})'
    else:
        read = f'torch.load({dst!r}, weights_only=True)'
    return f'model.load_state_dict({read}, strict=True)'


def main(argv=None) -> int:
    args = parse_args(argv)
    found = {}

    def convert(ckpt):
        found['model'], state = to_timm(ckpt, args)
        return state

    state = convert_file(args.src, args.dst, args.force, convert)
    if state is None:
        return 2
    model = found['model']
    for note in model.notes:
        print(note)
    print(f'converted {len(state)} tensors to {args.dst}: timm\'s '
          f'{model.family} {model.name}, built and loaded as')
    print(f'model = {model.call()}')
    print(load_line(args.dst))
    print('(inputs normalised as the mmlape config\'s data preprocessor '
          'does)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
