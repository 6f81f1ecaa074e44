"""Convert a Swin checkpoint to mmlape's key names.

Reads official microsoft/Swin-Transformer checkpoints (``model`` with
``layers.{s}.blocks.{j}``; the classifier goes to ``head.fc``) and
mmpretrain ``SwinTransformer`` checkpoints (``stages``, ``w_msa``, ``ffn``;
the patch-merging channels are permuted to the official order), and writes
an mmengine-style checkpoint (``state_dict`` with ``backbone.`` keys) that
loads into an mmlape Swin classifier, or into a dense model with
``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.')``.

Example:
    python tools/convert/swin_to_mmlape.py swin_tiny_patch4_window7_224.pth \
        swin-tiny_in1k.pth
"""
import os.path as osp
import sys

from mmlape.models.checkpoint import SWIN_FORMATS, convert_swin_checkpoint

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
from tools.common import convert_file, converter_parser  # noqa: E402


def parse_args(argv=None):
    parser = converter_parser(
        __doc__, SWIN_FORMATS, 'source layout (detected when omitted)',
        ('linear', 'none'),
        'where an official classifier goes: LinearClsHead (linear) or '
        'dropped (none)')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    ckpt = convert_file(
        args.src, args.dst, args.force, lambda src: convert_swin_checkpoint(
            src, fmt=args.format, head=args.head))
    if ckpt is None:
        return 2
    fmt = ckpt['meta']['converted_from']
    print(f'converted {len(ckpt["state_dict"])} tensors ({fmt} layout) to '
          f'{args.dst}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
