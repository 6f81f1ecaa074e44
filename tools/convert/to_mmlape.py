"""Convert a checkpoint of a layout users hold to mmlape's names.

``--family`` picks the checkpoint path (:mod:`mmlape.models.checkpoint`);
``--format`` (detected when omitted) and ``--head`` take that family's
choices:

- ``vit``: official DeiT / LaPE (timm names, ``blocks.{i}.pe_norm``, the
  unshared PE's ``pos_embed{i}``, the relative PE's
  ``blocks.{i}.attn.pe_norm``), distilled DeiTs, official ViT-Adapter
  detection/segmentation files (their unused PE row), mmpretrain and mmseg
  ViTs. An official LaPE file records its run (``args``): the converter
  prints the mmlape ``pe_type`` and ``pe_join`` it is, keeps them in
  ``meta['official_lape']`` (loading it into a backbone with other ones is
  refused), checks a stored fixed sin-cos PE against mmlape's and drops it,
  and with ``--config`` refuses a config whose backbone contradicts the run
  (docs/methods.md, "Official LaPE checkpoints").
- ``vit-family``: official T2T-ViT (timm files, whose ``state_dict_ema`` is
  taken unless ``--no-ema``), CeiT, ViT-Lite and CCT files, and mmpretrain
  ``T2T_ViT`` files, for mmlape's ``t2t-vit-7``, ``ceit-tiny``,
  ``vit-lite-7/4`` and ``cct-7/3x1`` configs.
- ``swin``: official (microsoft/Swin-Transformer) and mmpretrain, mmdet or
  mmseg ``SwinTransformer`` files.

It writes an mmengine-style checkpoint (``state_dict`` with ``backbone.``
keys) that loads into an mmlape classifier, detector or segmentor, or into
a dense backbone with
``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.')``.
An mmlape checkpoint keeps the config its run recorded (``meta['cfg']``):
the weights cannot show the join (``Default`` and ``Share`` have the same
keys), so ``tools/test.py`` and ``--resume`` still check the converted file
against their config. ``--config`` (every family) refuses a config whose
backbone contradicts what the file records (an mmlape run's config, an
official LaPE run).

Example:
    python tools/convert/to_mmlape.py --family vit deit_tiny_lape.pth \
        out.pth --config configs/deit/deit-tiny-lape_4xb256_in1k.py
"""
import os.path as osp
import sys

from mmlape.models.checkpoint import SWIN, VIT, VIT_FAMILY, unwrap_state_dict

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
from tools.common import convert_file, converter_parser  # noqa: E402

#: ``--family`` -> the checkpoint path.
FAMILIES = {'vit': VIT, 'vit-family': VIT_FAMILY, 'swin': SWIN}
#: Where each ``--head`` puts a bare model's classifier.
HEADS = dict(
    vit='VisionTransformerClsHead (mmlape\'s ViT configs)',
    linear='LinearClsHead (mmlape\'s Swin configs)',
    none='dropped')


def parse_args(argv=None):
    formats = sorted({f for fam in FAMILIES.values() for f in fam.formats})
    parser = converter_parser(
        __doc__, formats, 'source layout, one of the family\'s (detected '
        'when omitted)', list(HEADS),
        'where a bare model\'s classifier goes: ' +
        '; '.join(f'{k}: {v}' for k, v in HEADS.items()) +
        ' (default: the family\'s configs)')
    parser.set_defaults(head=None)
    parser.add_argument(
        '--family',
        required=True,
        choices=list(FAMILIES),
        help='the checkpoint path: vit (DeiT, LaPE, ViT-Adapter, mmpretrain '
        'and mmseg ViTs), vit-family (T2T-ViT, CeiT, ViT-Lite, CCT) or swin')
    parser.add_argument(
        '--config',
        help='the mmlape config the checkpoint is for: refused when its '
        'backbone contradicts the model the file records (an mmlape run\'s '
        'config, an official LaPE run: backbone type, PE type, join and its '
        'options)')
    parser.add_argument(
        '--no-ema',
        action='store_true',
        help='vit-family: take state_dict instead of state_dict_ema')
    args = parser.parse_args(argv)
    family = FAMILIES[args.family]
    for option, value, allowed in (('--format', args.format, family.formats),
                                   ('--head', args.head, family.heads)):
        if value is not None and value not in allowed:
            parser.error(f'{option} {value} is not one of the {args.family} '
                         f'family\'s: {list(allowed)}')
    if args.no_ema and args.family != 'vit-family':
        parser.error('--no-ema is an option of --family vit-family')
    return args


def config_backbone(path: str):
    """The backbone a config builds (so that the arch's and the class's
    defaults count), to compare with the run a file records.

    Raises:
        ValueError: The file has no ``model.backbone``, or it cannot be
            built.
    """
    from mmengine.config import Config
    from mmengine.registry import DefaultScope

    from mmlape.registry import MODELS
    cfg = Config.fromfile(path)
    backbone = (cfg.get('model') or {}).get('backbone')
    if not backbone:
        raise ValueError(f'config "{path}" has no model.backbone')
    cfg_backbone = dict(backbone)
    cfg_backbone.pop('init_cfg', None)
    with DefaultScope.overwrite_default_scope('mmlape'):
        try:
            built = MODELS.build(cfg_backbone)
        except (KeyError, TypeError) as err:
            raise ValueError(f'config "{path}": cannot build its backbone '
                             f'({err})') from None
    if getattr(built, 'pe_join', None) is None:
        raise ValueError(f'config "{path}": its backbone '
                         f'{type(built).__name__} has no PE join')
    return built


def dropped_classifier(src, converted) -> list:
    """The source's classifier keys (``head.*``, ``head_dist.*``) of which
    nothing reached the converted checkpoint."""
    keys = [
        k for k in unwrap_state_dict(src)
        if k.startswith(('head.', 'head_dist.'))
    ]
    kept = [k for k in converted['state_dict'] if k.startswith('head.')]
    return [] if kept else keys


def convert_vit(args, src) -> dict:
    """The ``vit`` family: the config's backbone checked against an
    official LaPE run, and a classifier never dropped silently."""
    backbone = config_backbone(args.config) if args.config else None
    ckpt = VIT.convert_checkpoint(
        src, fmt=args.format, head=args.head, backbone=backbone)
    dropped = dropped_classifier(src, ckpt)
    if dropped and args.head != 'none':
        raise ValueError(
            f'the classifier of "{args.src}" ({", ".join(dropped)}) '
            f'would be dropped: as --format '
            f'{ckpt["meta"]["converted_from"]} it has no head the '
            f'converter knows (timm names it "head.weight"). Pass the '
            f'format it has, or --head none to drop it on purpose')
    if dropped:
        print(f'dropped the classifier ({", ".join(dropped)}): --head none')
    return ckpt


def main(argv=None) -> int:
    args = parse_args(argv)
    family = FAMILIES[args.family]

    def convert(src):
        if family is VIT:
            return convert_vit(args, src)
        options = dict(use_ema=not args.no_ema) if family is VIT_FAMILY else {}
        backbone = config_backbone(args.config) if args.config else None
        return family.convert_checkpoint(
            src, fmt=args.format, head=args.head, backbone=backbone, **options)

    ckpt = convert_file(args.src, args.dst, args.force, convert)
    if ckpt is None:
        return 2
    meta = ckpt['meta']
    for note in meta['notes']:
        print(note)
    print(f'converted {len(ckpt["state_dict"])} tensors ({meta["layout"]} '
          f'layout, {meta["converted_from"]} names) to {args.dst}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
