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
import argparse
import os
import os.path as osp
import pickle
import sys

import torch

from mmlape.utils import safe_torch_load
from mmlape.utils.convert import FAMILY_FORMATS, convert_vit_family_checkpoint


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('src', help='checkpoint to convert')
    parser.add_argument('dst', help='where to write the mmlape checkpoint')
    parser.add_argument(
        '--format',
        choices=FAMILY_FORMATS,
        default=None,
        help='source layout (detected when omitted)')
    parser.add_argument(
        '--head',
        choices=('vit', 'linear', 'none'),
        default='vit',
        help='where the classifier goes: VisionTransformerClsHead (vit, '
        "mmlape's configs), LinearClsHead (linear), or dropped (none)")
    parser.add_argument(
        '--no-ema',
        action='store_true',
        help='take state_dict instead of state_dict_ema')
    parser.add_argument(
        '--force', action='store_true', help='overwrite an existing dst')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not osp.isfile(args.src):
        print(
            f'error: checkpoint "{args.src}" does not exist', file=sys.stderr)
        return 2
    if osp.exists(args.dst) and not args.force:
        print(
            f'error: "{args.dst}" exists; pass --force to overwrite it',
            file=sys.stderr)
        return 2
    try:
        # mmlape's allow-list already has the argparse.Namespace of timm's
        # files (a ``safe_globals`` context here would remove it on exit)
        loaded = safe_torch_load(args.src, 'cpu')
        ckpt = convert_vit_family_checkpoint(
            loaded, fmt=args.format, head=args.head, use_ema=not args.no_ema)
    except (ValueError, OSError, pickle.UnpicklingError) as err:
        print(f'error: {err}', file=sys.stderr)
        return 2
    os.makedirs(osp.dirname(osp.abspath(args.dst)), exist_ok=True)
    tmp = args.dst + '.tmp'
    torch.save(ckpt, tmp)
    os.replace(tmp, args.dst)  # never leave a half-written dst
    fmt = ckpt['meta']['converted_from']
    print(f'converted {len(ckpt["state_dict"])} tensors ({fmt} layout) to '
          f'{args.dst}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
