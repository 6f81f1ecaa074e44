"""Convert a ViT checkpoint to mmlape's key names and PE layout.

Reads official DeiT / LaPE checkpoints (timm names, ``blocks.{i}.pe_norm``,
``pos_embed{i}`` for the unshared PE, the relative PE's
``blocks.{i}.attn.pe_norm``), distilled DeiTs, official ViT-Adapter
detection/segmentation checkpoints (their unused PE row), mmpretrain and
mmseg ViT checkpoints (see :mod:`mmlape.models.checkpoint`), and writes an
mmengine-style checkpoint (``state_dict`` with ``backbone.`` keys) that loads
into an mmlape classifier or detector/segmentor, or into
ViT-Adapter/Segmenter with
``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.')``.

An official LaPE checkpoint records its run (``args``: ``--pe``,
``--join-type``, or the first release's ``--pe_joining``): the converter
prints the mmlape ``pe_type`` and ``pe_join`` (with ``hierarchical``) that
run is, writes them to the converted file's ``meta['official_lape']``
(loading it into a backbone with other ones is refused), checks a stored
fixed sin-cos PE against mmlape's and drops it, and with ``--config``
refuses a config whose backbone contradicts the run (docs/methods.md,
"Official LaPE checkpoints").

Example:
    python tools/convert/vit_to_mmlape.py deit_tiny_lape.pth out.pth \
        --config configs/deit/deit-tiny-lape_4xb256_in1k.py
"""
import os.path as osp
import sys

from mmlape.models.checkpoint import (FORMATS, convert_checkpoint,
                                      unwrap_state_dict)
from mmlape.models.checkpoint.official_lape import backbone_options

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
from tools.common import convert_file, converter_parser  # noqa: E402


def parse_args(argv=None):
    parser = converter_parser(
        __doc__, FORMATS, 'source naming (detected when omitted)',
        ('vit', 'linear', 'none'),
        'where a timm classifier goes: VisionTransformerClsHead (vit), '
        'LinearClsHead (linear), or dropped (none)')
    parser.add_argument(
        '--config',
        help='the mmlape config the checkpoint is for: refused when its '
        'backbone contradicts the official LaPE run the file records (PE '
        'type, join, hierarchical)')
    return parser.parse_args(argv)


def config_backbone(path: str) -> dict:
    """The PE options of the backbone a config builds: ``pe_type`` and
    ``pe_join`` (type, and ``hierarchical`` for LaPE), read from the built
    backbone so that the arch's and the class's defaults count.

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
    options = backbone_options(built)
    if options is None:
        raise ValueError(f'config "{path}": its backbone '
                         f'{type(built).__name__} has no PE join')
    return options


def dropped_classifier(src, converted) -> list:
    """The source's classifier keys (``head.*``, ``head_dist.*``) of which
    nothing reached the converted checkpoint."""
    keys = [
        k for k in unwrap_state_dict(src)
        if k.startswith(('head.', 'head_dist.'))
    ]
    kept = [k for k in converted['state_dict'] if k.startswith('head.')]
    return [] if kept else keys


def main(argv=None) -> int:
    args = parse_args(argv)

    def convert(src):
        backbone = config_backbone(args.config) if args.config else None
        ckpt = convert_checkpoint(
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
            print(f'dropped the classifier ({", ".join(dropped)}): '
                  f'--head none')
        return ckpt

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
