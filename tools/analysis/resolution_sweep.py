"""Top-1 of classifiers evaluated at several input sizes, without
fine-tuning: how each PE and join extrapolates.

References:
    The evaluation of RoPE-ViT (Heo et al., ECCV 2024) and of LookHere
    (Fuller et al., NeurIPS 2024): a model trained at one size evaluated
    at others, as it is. RoPE-ViT's code evaluates with a crop ratio of
    1.0 (``--crop-ratio 1.0`` here). DeiT's ``build_transform`` for the
    resize (``int(size / crop_ratio)``), timm's ``resample_abs_pos_embed``
    for ``--antialias``.

Each ``CONFIG CKPT`` pair (an mmlape classification config and its
checkpoint) is evaluated on the config's test set (``--data`` replaces its
``data_root``) at every ``--sizes`` side. The test pipeline is scaled to
the size: its centre crop to ``size`` and its resizes by ``size / crop``,
rounded down as DeiT rounds (the config's crop ratio kept: DeiT's short
side ``int(256 * size / 224)``), or with ``--crop-ratio R`` its short-side
resize to ``int(size / R)``; a pipeline without either (the demo's) gets a
bicubic resize to ``size x size``. The backbone handles
the new patch grid as it does for any input: an absolute PE is resized
once per forward (bicubic; ``--antialias`` as timm resamples, which
filters where the grid shrinks), the per-layer norms then run on it, and a
rotary PE takes the new grid's positions (nothing is resized). A model
that cannot take a size (a relative PE, defined for its own grid) is left
out there, with a warning.

It writes ``OUT_DIR/resolution_sweep.csv`` and ``.md`` (one row per
checkpoint, top-1 in % per size; the training size marked) and
``OUT_DIR/resolution_sweep.png`` (top-1 against size, every checkpoint in
one figure).

Example:
    python tools/analysis/resolution_sweep.py \\
        configs/demo/deit-demo_pos-shapes.py D/default/iter_600.pth \\
        configs/demo/deit-demo-lape_pos-shapes.py D/lape/iter_600.pth \\
        --sizes 16 24 32 48 64 --data D/data --out-dir sweep
"""
import argparse
import copy
import csv
import math
import os
import os.path as osp
import sys
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from tools.common import ToolParser, UsageError, fail, positive_int

#: What the written files are called (``OUT_DIR/{STEM}.csv``, ...).
STEM = 'resolution_sweep'
#: The metric a classification config's evaluator reports.
TOP1 = 'accuracy/top1'


def parse_args(argv=None):
    parser = ToolParser(
        description=__doc__.split('\n\n')[0].replace('\n', ' '))
    parser.add_argument(
        'pairs',
        nargs='+',
        metavar='CONFIG CKPT',
        help='classification configs, each followed by its checkpoint')
    parser.add_argument(
        '--sizes',
        nargs='+',
        type=positive_int,
        required=True,
        help='input sides to evaluate at, e.g. 224 288 384')
    parser.add_argument(
        '--data',
        required=True,
        help='the test set\'s root (the configs\' data_root)')
    parser.add_argument(
        '--antialias',
        action='store_true',
        help='resize the absolute PE with antialiasing, as timm does')
    parser.add_argument(
        '--crop-ratio',
        type=_crop_ratio,
        help='evaluate every size with this crop ratio (crop / short side '
        'of the resize; RoPE-ViT evaluates with 1.0) instead of the '
        'config\'s')
    parser.add_argument(
        '--labels',
        nargs='+',
        help='a name for each checkpoint (default: the config\'s)')
    parser.add_argument(
        '--batch-size',
        type=positive_int,
        help='test batch size (default: the config\'s)')
    parser.add_argument(
        '--out-dir',
        default=osp.join('work_dirs', STEM),
        help='where the table and the figure go (default: %(default)s)')
    args = parser.parse_args(argv)
    if len(args.pairs) % 2:
        parser.error(f'expected CONFIG CKPT pairs, got {len(args.pairs)} '
                     f'paths: {" ".join(args.pairs)}')
    args.pairs = list(zip(args.pairs[0::2], args.pairs[1::2]))
    if args.labels is not None and len(args.labels) != len(args.pairs):
        parser.error(f'--labels has {len(args.labels)} names for '
                     f'{len(args.pairs)} checkpoints')
    if len(set(args.sizes)) != len(args.sizes):
        parser.error(f'--sizes repeats a size: {args.sizes}')
    args.sizes = sorted(args.sizes)
    return args


# ----------------------------------------------------------------------
# the test pipeline at another size
def _crop_ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f'expected a crop ratio in (0, 1], got {text!r}')
    return value


def _transform(t: dict) -> str:
    """A transform's class name, without a registry scope
    (``'mmpretrain.CenterCrop'`` -> ``'CenterCrop'``)."""
    return str(t.get('type')).rsplit('.', 1)[-1]


def _scaled(value, size: int, native: int):
    """``value * size / native``, rounded down (DeiT's ``int()``)."""
    if isinstance(value, (list, tuple)):
        return type(value)(v * size // native for v in value)
    return value * size // native


def sized_pipeline(pipeline: Sequence[dict],
                   size: int,
                   native: int,
                   crop_ratio: Optional[float] = None) -> List[dict]:
    """The test ``pipeline`` for ``size x size`` inputs.

    A centre crop sets the native size (else ``native``, the backbone's
    ``img_size``); every resize (``scale``) is scaled by ``size / native``,
    rounded down, and the crop becomes ``size``. With ``crop_ratio`` the
    resizes (short side, one number) become ``int(size / crop_ratio)``.
    A pipeline with neither gets ``Resize(scale=(size, size),
    interpolation='bicubic')`` after its image loading.

    Raises:
        UsageError: ``crop_ratio`` for a pipeline without a centre crop
            after a short-side resize.

    Example:
        >>> deit = [dict(type='LoadImageFromFile'),
        ...         dict(type='ResizeEdge', scale=256, edge='short'),
        ...         dict(type='CenterCrop', crop_size=224),
        ...         dict(type='PackInputs')]
        >>> [t.get('scale', t.get('crop_size'))
        ...  for t in sized_pipeline(deit, 384, 224)[1:3]]
        [438, 384]
        >>> [t.get('scale', t.get('crop_size'))
        ...  for t in sized_pipeline(deit, 384, 224, crop_ratio=1.0)[1:3]]
        [384, 384]
    """
    out = copy.deepcopy(list(pipeline))
    crops = [t for t in out if _transform(t) == 'CenterCrop']
    resizes = [t for t in out if 'Resize' in _transform(t)]
    if crop_ratio is not None and (not crops or not resizes or any(
            isinstance(t.get('scale'), (list, tuple)) for t in resizes)):
        raise UsageError(
            f'--crop-ratio needs a test pipeline that resizes the short '
            f'side (one scale) and then crops the centre; this one is '
            f'{[_transform(t) for t in out]}')
    if crops:
        crop = crops[0]['crop_size']
        native = crop[0] if isinstance(crop, (list, tuple)) else crop
    for t in resizes:
        t['scale'] = (
            int(size / crop_ratio) if crop_ratio is not None else _scaled(
                t['scale'], size, native))
    for t in crops:
        t['crop_size'] = size
    if not crops and not resizes:
        at = next(
            (i + 1 for i, t in enumerate(out) if 'LoadImage' in _transform(t)),
            0)
        out.insert(
            at,
            dict(type='Resize', scale=(size, size), interpolation='bicubic'))
    return out


# ----------------------------------------------------------------------
# evaluating
def native_size(cfg) -> int:
    """The backbone's training size (its ``img_size``)."""
    native = cfg.model.backbone.get('img_size', 224)
    return native[0] if isinstance(native, (list, tuple)) else native


def checked_config(config: str,
                   data: str,
                   antialias: bool,
                   batch_size: Optional[int],
                   crop_ratio: Optional[float] = None):
    """``config``, checked (a classifier with a test set at ``data``, a
    test pipeline ``crop_ratio`` fits) and pointed at ``data``."""
    from mmengine.config import Config

    from mmlape.datasets.checks import (check_dataset_paths,
                                        use_checked_image_loading)
    if not osp.isfile(config):
        raise UsageError(f'config file "{config}" does not exist')
    cfg = Config.fromfile(config)
    loader = cfg.get('test_dataloader')
    if cfg.get('model', {}).get('type') != 'ImageClassifier' or not loader:
        raise UsageError(f'"{config}" is not a classification config with '
                         f'a test_dataloader (model.type '
                         f'{cfg.get("model", {}).get("type")!r})')
    loader.dataset.data_root = data
    if batch_size:
        loader.batch_size = batch_size
    check_dataset_paths(cfg, ('test', ))
    use_checked_image_loading(cfg, ('test', ))
    if antialias:
        cfg.model.backbone.interpolate_antialias = True
    sized_pipeline(loader.dataset.pipeline, native_size(cfg), native_size(cfg),
                   crop_ratio)  # raises if crop_ratio does not fit
    return cfg


def load_model(cfg, checkpoint: str):
    """The model of ``cfg`` with ``checkpoint`` loaded (checked as
    ``tools/test.py`` checks it), in eval mode."""
    import torch

    from mmlape.analysis import build_from_config
    from mmlape.apis import check_checkpoint_fits
    model, _ = build_from_config(cfg)
    state = check_checkpoint_fits(model, checkpoint, 'checkpoint', cfg)
    model.load_state_dict(state, strict=True)
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    return model.to(device).eval()


def evaluate(model,
             cfg,
             size: int,
             crop_ratio: Optional[float] = None) -> float:
    """Top-1 (%) of ``model`` on the config's test set at ``size``."""
    import importlib

    import torch
    from mmengine.evaluator import Evaluator
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    scope = cfg.default_scope
    importlib.import_module(f'{scope}.utils').register_all_modules(False)
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    loader_cfg.dataset.pipeline = sized_pipeline(loader_cfg.dataset.pipeline,
                                                 size, native_size(cfg),
                                                 crop_ratio)
    with DefaultScope.overwrite_default_scope(scope):
        loader = Runner.build_dataloader(loader_cfg)
        evaluator = Evaluator(cfg.test_evaluator)
        evaluator.dataset_meta = getattr(loader.dataset, 'metainfo', None)
        with torch.no_grad():
            for batch in loader:
                evaluator.process(model.test_step(batch), batch)
        metrics = evaluator.evaluate(len(loader.dataset))
    if TOP1 not in metrics:
        raise UsageError(f'the test evaluator reports {sorted(metrics)}, not '
                         f'{TOP1}')
    return float(metrics[TOP1])


def sweep(pairs: Sequence[Tuple[str, str]],
          sizes: Sequence[int],
          data: str,
          antialias: bool = False,
          batch_size: Optional[int] = None,
          crop_ratio: Optional[float] = None) -> List[Dict]:
    """``{'config', 'checkpoint', 'train size', size: top-1 or None}`` per
    pair. Every config is checked before the first evaluation."""
    cfgs = [
        checked_config(config, data, antialias, batch_size, crop_ratio)
        for config, _ in pairs
    ]
    rows = []
    for (config, checkpoint), cfg in zip(pairs, cfgs):
        model = load_model(cfg, checkpoint)
        row = {
            'config': config,
            'checkpoint': checkpoint,
            'train size': native_size(cfg)
        }
        for size in sizes:
            try:
                row[size] = evaluate(model, cfg, size, crop_ratio)
            except ValueError as err:  # e.g. a relative PE's own grid
                from mmlape.utils.errors import one_line
                print(
                    f'warning: {config} at {size}x{size}: {one_line(err)}; '
                    f'left out',
                    file=sys.stderr)
                row[size] = None
            print(
                f'{osp.basename(config)} {size}x{size}: '
                f'{_cell(row[size])}',
                flush=True)
        rows.append(row)
    return rows


# ----------------------------------------------------------------------
# the table and the figure
def _cell(value: Optional[float]) -> str:
    return 'n/a' if value is None else f'{value:.2f}'


def write_table(rows: List[Dict], labels: Sequence[str], sizes: Sequence[int],
                out_dir: str) -> Tuple[str, str]:
    """``{STEM}.csv`` and ``{STEM}.md``: one row per checkpoint, top-1 (%)
    per size; the markdown marks each model's training size with ``*``."""
    csv_path = osp.join(out_dir, STEM + '.csv')
    with open(csv_path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['model', 'config', 'checkpoint', 'train size'] +
                        [str(s) for s in sizes])
        for label, row in zip(labels, rows):
            writer.writerow(
                [label, row['config'], row['checkpoint'], row['train size']] +
                ['' if row[s] is None else f'{row[s]:.2f}' for s in sizes])
    md_path = osp.join(out_dir, STEM + '.md')
    lines = [
        '| model | ' + ' | '.join(f'{s}x{s}' for s in sizes) + ' |',
        '|---|' + '---|' * len(sizes)
    ]
    for label, row in zip(labels, rows):
        cells = [
            _cell(row[s]) + (' *' if s == row['train size'] else '')
            for s in sizes
        ]
        lines.append(f'| {label} | ' + ' | '.join(cells) + ' |')
    lines.append('')
    lines.append('Top-1 (%) on the test set at each input size, without '
                 'fine-tuning; * the training size.')
    with open(md_path, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return csv_path, md_path


def plot(rows: List[Dict],
         labels: Sequence[str],
         sizes: Sequence[int],
         path: str,
         title: Optional[str] = None,
         spread: Optional[Sequence[Dict]] = None) -> str:
    """Top-1 against input size, one line per checkpoint (or per mean of
    several), the training sizes dashed; ``spread`` (a ``{size: std}`` per
    row) shades each line's ± std."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for i, (label, row) in enumerate(zip(labels, rows)):
        ys = np.array([math.nan if row[s] is None else row[s] for s in sizes])
        line, = ax.plot(sizes, ys, marker='o', label=label)
        if spread is not None:
            std = np.nan_to_num([spread[i][s] for s in sizes])
            ax.fill_between(
                sizes, ys - std, ys + std, color=line.get_color(), alpha=0.2)
    for native in sorted({row['train size'] for row in rows}):
        ax.axvline(native, color='0.6', linestyle='--', linewidth=1)
    ax.set_xticks(list(sizes))
    ax.set_xlabel('input size (side, pixels); dashed: training size')
    ax.set_ylabel('top-1 (%)')
    ax.set_title(title or 'Top-1 against input size, without fine-tuning')
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    with fail():
        os.makedirs(args.out_dir, exist_ok=True)
        labels = args.labels or [
            osp.splitext(osp.basename(c))[0] for c, _ in args.pairs
        ]
        rows = sweep(args.pairs, args.sizes, args.data, args.antialias,
                     args.batch_size, args.crop_ratio)
        csv_path, md_path = write_table(rows, labels, args.sizes, args.out_dir)
        png = plot(rows, labels, args.sizes,
                   osp.join(args.out_dir, STEM + '.png'))
    with open(md_path) as f:
        print(f.read(), end='')
    print(f'wrote {csv_path}, {md_path} and {png}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
