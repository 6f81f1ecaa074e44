"""The data preprocessor of the classification configs on the batch their
loaders now make, one stacked tensor (``default_collate``), against the
list of images mmengine's default collate makes (``pseudo_collate``): the
operations it dispatches and its time per batch, in one run.

mmpretrain's ``ClsDataPreprocessor`` copies, flips, casts and normalises a
list one image at a time (a few operations each, then a padded stack),
and a stacked batch in one go; the values are the same
(``tests/configs/test_loader_configs.py``). On a GPU each operation is a
kernel launch: at batch 256 the list costs the training step's host
thousands of launches (README "Feeding the GPU").

The batch is made as the configs' pipelines leave it (``PackInputs``:
uint8 images, one label each; pinned on a GPU, as ``pin_memory=True``
pins it), without decoding images, so that only the preprocessor is
timed. Training mode runs the config's Mixup/CutMix as well.

Example:
    python benchmarks/bench_collate.py
    python benchmarks/bench_collate.py --device cuda --out collate.md
"""
import argparse
import copy
import json
import os.path as osp
import platform
import sys
from typing import Dict, List

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from timing import fastest  # noqa: E402

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: name -> (config, image size); the batch is the config's.
CONFIGS = {
    'deit': ('configs/deit/deit-tiny-lape_4xb256_in1k.py', 224),
    'cifar': ('configs/vit_lite/vit-lite-7-4-lape_1xb128-310e_cifar100.py',
              32),
}
COLLATES = ('pseudo_collate', 'default_collate')


def build_preprocessor(config: str, device: torch.device):
    """The config's data preprocessor, with the batch augmentations its
    classifier gives it (a one-layer backbone: only the preprocessor
    runs)."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    from mmpretrain.utils import register_all_modules
    register_all_modules(False)
    cfg = Config.fromfile(osp.join(ROOT, config))
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.data_preprocessor = cfg.data_preprocessor
    model_cfg.backbone.arch = dict(
        embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=32)
    model_cfg.head.in_channels = 32
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(model_cfg)
    return model.data_preprocessor.to(device), cfg


def make_items(batch: int, size: int, classes: int) -> List[Dict]:
    """``batch`` samples as ``PackInputs`` leaves them."""
    from mmpretrain.structures import DataSample
    gen = torch.Generator().manual_seed(0)
    return [
        dict(
            inputs=torch.randint(
                0, 256, (3, size, size), dtype=torch.uint8, generator=gen),
            data_samples=DataSample().set_gt_label(i % classes))
        for i in range(batch)
    ]


class _Count(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the ATen operations dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def measure(name: str, batch: int, args) -> List[Dict]:
    from mmengine.dataset import default_collate, pseudo_collate
    from torch.utils.data._utils.pin_memory import pin_memory
    config, size = CONFIGS[name]
    device = torch.device(args.device)
    prep, cfg = build_preprocessor(config, device)
    batch = batch or cfg.train_dataloader.batch_size
    items = make_items(batch, size, cfg.data_preprocessor.num_classes)
    batches = {}
    for collate in COLLATES:
        fn = default_collate if collate == 'default_collate' else \
            pseudo_collate
        data = fn(items)
        batches[collate] = pin_memory(data) if device.type == 'cuda' else data
    sync = torch.cuda.synchronize if device.type == 'cuda' else (
        lambda: None)
    rows = []
    for training in (True, False):
        ops = {}
        for collate, data in batches.items():
            count = _Count()
            with count:
                prep(data, training)
            ops[collate] = count.ops
        times = fastest(
            {
                c: (lambda d=d: prep(d, training))
                for c, d in batches.items()
            },
            rounds=args.rounds,
            warmup=2,
            iters=args.iters,
            sync=sync)
        for collate in COLLATES:
            rows.append(
                dict(
                    config=name,
                    path=config,
                    batch=batch,
                    size=size,
                    mode='train' if training else 'eval',
                    collate=collate,
                    ops=ops[collate],
                    ms=times[collate] * 1e3,
                    x=times[collate] / times['default_collate']))
    return rows


def markdown(rows: List[Dict], machine: Dict) -> str:
    lines = [
        f"{machine['cpu']}, {machine['device']}, torch {machine['torch']} "
        f"({machine['threads']} threads); fastest of the rounds; x = time "
        'over the stacked batch\'s', '',
        '| config | batch | mode | collate | ATen ops | ms per batch | x |',
        '|---|---|---|---|---|---|---|'
    ]
    for r in rows:
        lines.append(f"| {r['config']} ({r['size']}x{r['size']}) | "
                     f"{r['batch']} | {r['mode']} | {r['collate']} | "
                     f"{r['ops']:,} | {r['ms']:.2f} | {r['x']:.2f} |")
    return '\n'.join(lines) + '\n'


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='The classification data preprocessor on a stacked '
        'batch against a list of images.')
    parser.add_argument(
        '--configs',
        default=','.join(CONFIGS),
        help=f'comma-separated, from {",".join(CONFIGS)} (default: all)')
    parser.add_argument(
        '--batch',
        type=int,
        default=0,
        help="images per batch (default: the config's)")
    parser.add_argument(
        '--device',
        default='cpu',
        help='cpu (default) or cuda: the batch pinned, as the loaders pin '
        'it')
    parser.add_argument('--rounds', type=int, default=10)
    parser.add_argument(
        '--iters', type=int, default=3, help='calls per timed round')
    parser.add_argument(
        '--threads',
        type=int,
        help="torch CPU threads (default: torch's)")
    parser.add_argument('--out', help='also write the markdown here')
    parser.add_argument('--json', help='also write the rows as JSON here')
    args = parser.parse_args(argv)
    names = [n for n in args.configs.split(',') if n]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown or not names:
        parser.error(f'--configs: unknown {", ".join(unknown) or "(none)"}; '
                     f'choose from {", ".join(CONFIGS)}')
    args.configs = names
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        parser.error(f'--device {args.device}: torch sees no CUDA device')
    return args


def main(argv=None) -> List[Dict]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for name in args.configs:
        rows += measure(name, args.batch, args)
    machine = dict(
        cpu=platform.processor() or platform.machine(),
        device=(torch.cuda.get_device_name()
                if args.device.startswith('cuda') else 'CPU'),
        torch=torch.__version__,
        threads=torch.get_num_threads())
    text = markdown(rows, machine)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(machine=machine, rows=rows), f, indent=1)
    return rows


if __name__ == '__main__':
    main()
