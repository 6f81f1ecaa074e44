"""Convert a ViT checkpoint to mmlape's key names and PE layout.

Reads official DeiT / LaPE checkpoints (timm names, ``blocks.{i}.pe_norm``,
``pos_embed{i}`` for the unshared PE, the relative PE's
``blocks.{i}.attn.pe_norm``), distilled DeiTs, official ViT-Adapter
detection/segmentation checkpoints (their unused PE row), mmpretrain and
mmseg ViT checkpoints (see :mod:`mmlape.utils.checkpoint`), and writes an
mmengine-style checkpoint (``state_dict`` with ``backbone.`` keys) that loads
into an mmlape classifier or detector/segmentor, or into
ViT-Adapter/Segmenter with
``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.')``.

Example:
    python tools/convert/vit_to_mmlape.py deit_tiny_lape.pth out.pth
"""
import argparse
import os
import os.path as osp
import sys

import torch

from mmlape.utils import safe_torch_load
from mmlape.utils.checkpoint import (FORMATS, convert_checkpoint,
                                     unwrap_state_dict)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('src', help='checkpoint to convert')
    parser.add_argument('dst', help='where to write the mmlape checkpoint')
    parser.add_argument(
        '--format',
        choices=FORMATS,
        default=None,
        help='source naming (detected when omitted)')
    parser.add_argument(
        '--head',
        choices=('vit', 'linear', 'none'),
        default='vit',
        help='where a timm classifier goes: '
        'VisionTransformerClsHead (vit), LinearClsHead '
        '(linear), or dropped (none)')
    parser.add_argument(
        '--force', action='store_true', help='overwrite an existing dst')
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
        src = safe_torch_load(args.src, 'cpu')
        ckpt = convert_checkpoint(src, fmt=args.format, head=args.head)
    except ValueError as err:  # CheckpointError is one too
        print(f'error: {err}', file=sys.stderr)
        return 2
    dropped = dropped_classifier(src, ckpt)
    if dropped and args.head != 'none':
        print(
            f'error: the classifier of "{args.src}" ({", ".join(dropped)}) '
            f'would be dropped: as --format {ckpt["meta"]["converted_from"]}'
            f' it has no head the converter knows (timm names it '
            f'"head.weight"). Pass the format it has, or --head none to '
            f'drop it on purpose',
            file=sys.stderr)
        return 2
    if dropped:
        print(f'dropped the classifier ({", ".join(dropped)}): --head none')
    tmp = args.dst + '.tmp'
    torch.save(ckpt, tmp)
    os.replace(tmp, args.dst)  # never leave a half-written dst
    meta = ckpt['meta']
    for note in meta['notes']:
        print(note)
    print(f'converted {len(ckpt["state_dict"])} tensors ({meta["layout"]} '
          f'layout, {meta["converted_from"]} names) to {args.dst}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
