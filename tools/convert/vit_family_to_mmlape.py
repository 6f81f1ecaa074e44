"""Convert a T2T-ViT, CeiT, ViT-Lite or CCT checkpoint to mmlape's names.

Reads the official checkpoints (yitu-opensource/T2T-ViT timm files, whose
``state_dict_ema`` is taken unless ``--no-ema``; coeusguo/ceit DeiT-style
files; SHI-Labs/Compact-Transformers state dicts) and mmpretrain
``T2T_ViT`` checkpoints, and writes an mmengine-style checkpoint
(``state_dict`` with ``backbone.`` and ``head.`` keys) for mmlape's
``t2t-vit-7``, ``ceit-tiny``, ``vit-lite-7/4`` and ``cct-7/3x1`` configs.
The files are read with ``weights_only=True``; T2T-ViT's timm files also
hold their ``argparse.Namespace`` of arguments, which is allowed too.

Example:
    python tools/convert/vit_family_to_mmlape.py 71.7_T2T_ViT_7.pth.tar \
        pretrained/t2t-vit-7_in1k.pth
"""
import os.path as osp
import sys

from mmlape.models.checkpoint import (FAMILY_FORMATS,
                                      convert_vit_family_checkpoint)

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
from tools.common import convert_file, converter_parser  # noqa: E402


def parse_args(argv=None):
    parser = converter_parser(
        __doc__, FAMILY_FORMATS, 'source layout (detected when omitted)',
        ('vit', 'linear', 'none'),
        'where the classifier goes: VisionTransformerClsHead (vit, '
        "mmlape's configs), LinearClsHead (linear), or dropped (none)")
    parser.add_argument(
        '--no-ema',
        action='store_true',
        help='take state_dict instead of state_dict_ema')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    # mmlape's allow-list already has the argparse.Namespace of timm's files
    # (a ``safe_globals`` context here would remove it on exit)
    ckpt = convert_file(
        args.src, args.dst, args.force,
        lambda src: convert_vit_family_checkpoint(
            src, fmt=args.format, head=args.head, use_ema=not args.no_ema))
    if ckpt is None:
        return 2
    fmt = ckpt['meta']['converted_from']
    print(f'converted {len(ckpt["state_dict"])} tensors ({fmt} layout) to '
          f'{args.dst}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
