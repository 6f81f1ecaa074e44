"""Parameters and FLOPs of a config's whole model (backbone, neck, heads) at
one input size, part by part, as mmpretrain's, mmdet's and mmseg's
``get_flops`` report them.

The model runs the way it predicts, in eval mode on one generated image
(seeded), through its data preprocessor and ``forward(mode='tensor')``: a
classifier's backbone, neck and head (the logits); a detector's
``_forward`` (mmdet: backbone, neck, RPN head and RoI heads on the RPN's
proposals, so a two-stage detector's RoI-head FLOPs follow how many
proposals the image gives, at most the RPN's ``max_per_img``); a
segmentor's ``_forward`` (mmseg: backbone, neck and decode head; the
auxiliary head, a training-only part, is listed and does not run).

FLOPs are counted by ``torch.utils.flop_counter`` as in
``tools/analysis/complexity.py`` (a multiply-add is 2 FLOPs; attention's
products counted on the CPU too: :func:`mmlape.analysis.flop_counter`); the
GMACs column is half of them, the unit of the hosts' ``get_flops`` (mmengine's
``get_model_complexity_info`` counts a multiply-add once). Operations
outside PyTorch's counted kernels are not counted: mmcv's RoIAlign and
NMS, the sampling of deformable attention, normalisation and activation
layers. Parameters are the model's own (learnable and not: fixed sin-cos
PEs and other stored weights included).

Example:
    python tools/analysis/get_flops.py \
        configs/deit/deit-tiny-lape_4xb256_in1k.py
    python tools/analysis/get_flops.py configs/demo/deit-demo_pos-shapes.py \
        --shape 64 --json
"""
import contextlib
import json
import os.path as osp
import sys
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from tools.common import (CfgOptionsAction, ToolParser, UsageError, fail,
                          positive_int)

#: The input size (height, width) when neither ``--shape`` nor the config
#: gives one: mmdet's test scale (1333, 800), mmseg's ADE20K crop,
#: ImageNet's 224.
DEFAULT_SHAPES = {
    'mmdet': (800, 1333),
    'mmseg': (512, 512),
    'mmpretrain': (224, 224)
}


def parse_args(argv=None):
    parser = ToolParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', help='the config file')
    parser.add_argument(
        '--shape',
        type=positive_int,
        nargs='+',
        metavar='SIZE',
        help='input height and width (one number: a square); default: a '
        "classifier's backbone img_size, a segmentor's crop size, 800x1333 "
        'for a detector')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        help='override settings of the config, KEY=VALUE as in '
        'tools/train.py')
    parser.add_argument(
        '--json', action='store_true', help='print JSON instead of a table')
    args = parser.parse_args(argv)
    if args.shape is not None and len(args.shape) > 2:
        parser.error(f'--shape takes H [W], got {len(args.shape)} numbers')
    return args


def input_shape(cfg, shape: Optional[Sequence[int]] = None) -> Tuple[int, int]:
    """``(height, width)``: ``shape`` (one number: a square), else the
    config's (see ``--shape``)."""
    if shape:
        return (shape[0], shape[-1])
    scope = cfg.get('default_scope', 'mmpretrain')
    if scope == 'mmpretrain':
        size = cfg.model.get('backbone', {}).get('img_size')
    else:
        size = (cfg.model.get('data_preprocessor') or {}).get('size')
    if size:
        return (size, size) if isinstance(size, int) else tuple(size)
    return DEFAULT_SHAPES.get(scope, DEFAULT_SHAPES['mmpretrain'])


def _data_sample(scope: str, shape: Tuple[int, int]):
    """The host's data sample of one image of ``shape``, as its test
    pipeline packs it (None for a classifier)."""
    meta = dict(
        img_shape=shape,
        ori_shape=shape,
        pad_shape=shape,
        scale_factor=(1., 1.))
    if scope == 'mmdet':
        from mmdet.structures import DetDataSample
        return DetDataSample(metainfo=meta)
    if scope == 'mmseg':
        from mmseg.structures import SegDataSample
        return SegDataSample(metainfo=meta)
    return None


@contextlib.contextmanager
def _counted_parts(model, counter):
    """``{part: FLOPs}`` of each top-level part, filled as the parts run.

    The hosts call some parts' ``forward`` directly
    (``self.decode_head.forward(x)``, ``self.roi_head.forward(...)``),
    which module hooks, and so ``FlopCounterMode``'s own per-module
    totals, do not see; each part's ``forward`` is wrapped for the run
    instead, and the counter's total read around it."""
    found: Dict[str, int] = {}
    parts = [(n, m) for n, m in model.named_children()
             if n != 'data_preprocessor']

    def wrap(name, forward):

        def counted(*args, **kwargs):
            before = counter.get_total_flops()
            try:
                return forward(*args, **kwargs)
            finally:
                found[name] = found.get(name, 0) + \
                    counter.get_total_flops() - before

        return counted

    for name, part in parts:
        part.forward = wrap(name, part.forward)
    try:
        yield found
    finally:
        for _, part in parts:
            del part.forward


def measure(model, scope: str, shape: Tuple[int, int]) -> List[dict]:
    """One row per part of ``model`` (its children but the data
    preprocessor) and a ``total`` row: ``part``, ``type``, ``params``,
    ``flops`` (None: the part does not run when the model predicts)."""
    import torch

    from mmlape.analysis import flop_counter
    generator = torch.Generator().manual_seed(0)
    image = torch.randint(
        0, 256, (3, *shape), dtype=torch.uint8, generator=generator)
    sample = _data_sample(scope, shape)
    batch = dict(inputs=[image])
    if sample is not None:
        batch['data_samples'] = [sample]
    model.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        data = model.data_preprocessor(batch, False)
        counter = flop_counter()
        with counter, _counted_parts(model, counter) as by_part:
            model(data['inputs'], data.get('data_samples'), mode='tensor')
    rows = []
    for name, part in model.named_children():
        if name == 'data_preprocessor':
            continue
        rows.append(
            dict(
                part=name,
                type=type(part).__name__,
                params=sum(t.numel() for t in _weights(part)),
                flops=by_part.get(name)))
    rows.append(
        dict(
            part='total',
            type=type(model).__name__,
            params=sum(t.numel() for t in _weights(model)),
            flops=counter.get_total_flops()))
    return rows


def _weights(module):
    """Parameters and persistent buffers (fixed PEs), each once."""
    seen = {}
    for t in list(module.parameters()) + [
            b for name, b in module.state_dict(keep_vars=True).items()
            if not name.endswith('num_batches_tracked')
    ]:
        seen.setdefault(id(t), t)
    return list(seen.values())


def table(rows: List[dict], config: str, shape: Tuple[int, int]) -> str:
    lines = [
        f'{config} at {shape[0]}x{shape[1]} (one image)', '',
        '| part | type | params (M) | GFLOPs | GMACs |',
        '|---|---|---|---|---|'
    ]
    for row in rows:
        if row['flops'] is None:
            flops = macs = 'not run'
        else:
            flops = f'{row["flops"] / 1e9:.4g}'
            macs = f'{row["flops"] / 2e9:.4g}'
        lines.append(f'| {row["part"]} | {row["type"]} | '
                     f'{row["params"] / 1e6:.4g} | {flops} | {macs} |')
    return '\n'.join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    with fail():
        from mmengine.config import Config

        from mmlape.analysis import build_from_config
        if not osp.isfile(args.config):
            raise UsageError(f'config file "{args.config}" does not exist')
        cfg = Config.fromfile(args.config)
        if args.cfg_options:
            cfg.merge_from_dict(args.cfg_options)
        import torch
        torch.manual_seed(0)  # the weights decide a detector's proposals
        model, cfg = build_from_config(cfg)
        scope = cfg.get('default_scope', 'mmpretrain')
        shape = input_shape(cfg, args.shape)
    rows = measure(model, scope, shape)
    if args.json:
        print(
            json.dumps(
                dict(config=args.config, shape=list(shape), parts=rows),
                indent=1))
    else:
        print(table(rows, args.config, shape))
    return 0


if __name__ == '__main__':
    sys.exit(main())
