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

Example:
    python tools/convert/vit_to_mmlape.py deit_tiny_lape.pth out.pth
"""
import os.path as osp
import sys

from mmlape.models.checkpoint import (FORMATS, convert_checkpoint,
                                      unwrap_state_dict)

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
from tools.common import convert_file, converter_parser  # noqa: E402


def parse_args(argv=None):
    parser = converter_parser(
        __doc__, FORMATS, 'source naming (detected when omitted)',
        ('vit', 'linear', 'none'),
        'where a timm classifier goes: VisionTransformerClsHead (vit), '
        'LinearClsHead (linear), or dropped (none)')
    return parser.parse_args(argv)


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
        ckpt = convert_checkpoint(src, fmt=args.format, head=args.head)
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
