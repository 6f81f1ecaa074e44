"""Host work of the training step that the model does not do, in one run:
the classification configs' choices against mmengine's defaults.

- ``collate``: the data preprocessor on the batch the configs' loaders
  make, one stacked tensor (``default_collate``), against the list of
  images mmengine's default collate makes (``pseudo_collate``): the
  operations it dispatches and its time per batch. mmpretrain's
  ``ClsDataPreprocessor`` copies, flips, casts and normalises a list one
  image at a time and a stacked batch in one go, with the same values
  (``tests/configs/test_loader_configs.py``). The batch is made as the
  pipelines leave it (``PackInputs``: uint8 images, one label each;
  pinned on a GPU, as ``pin_memory=True`` pins it), without decoding, and
  training mode runs the config's Mixup/CutMix as well.
- ``labels``: the configs' data preprocessor (``LaPEClsDataPreprocessor``)
  against mmpretrain's ``ClsDataPreprocessor`` on the stacked batch:
  mmpretrain's makes the one-hot targets and the labels sample by sample
  (a reduction and two slices each), the configs' in one go for the whole
  batch, with the same values (``tests/engine/test_cls_preprocessor.py``).
  The images are small (:data:`LABEL_IMAGE_SIZE`): both run mmpretrain's
  code on them, and what differs is the labels' work.
- ``optimizer``: one step of the config's optimizer (fused AdamW for
  DeiT) with the parameters whose options are equal in one group
  (``LaPEOptimWrapperConstructor``, the configs') against one group per
  parameter (mmengine's ``DefaultOptimWrapperConstructor``): the groups
  and the time per step. PyTorch's optimizers loop over the groups in
  Python and launch per group; the updates are the same
  (``tests/configs/test_recipes.py``).

On a GPU each operation is a kernel launch made by the host, which the
GPU waits for where the host is behind (mmengine reads the losses every
iteration, so every step starts with the GPU idle).

Example:
    python benchmarks/bench_host_overheads.py
    python benchmarks/bench_host_overheads.py --device cuda --out host.md
"""
import argparse
import copy
import json
import logging
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
    'cifar':
    ('configs/vit_lite/vit-lite-7-4-lape_1xb128-310e_cifar100.py', 32),
}
SECTIONS = ('collate', 'labels', 'optimizer')
COLLATES = ('pseudo_collate', 'default_collate')
#: the labels section's cases: mmpretrain's preprocessor, the configs'
PREPROCESSORS = ('ClsDataPreprocessor', 'LaPEClsDataPreprocessor')
#: the labels section's image size (the images are not what differs)
LABEL_IMAGE_SIZE = 8
#: the optimizer section's cases: mmengine's constructor, the configs'
GROUPINGS = ('one group per parameter', 'one group per option set')


def build_model(config: str, device: torch.device, whole: bool):
    """The config's classifier (its data preprocessor with the batch
    augmentations the classifier gives it) and the config; a one-layer
    backbone unless ``whole``."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    from mmpretrain.utils import register_all_modules
    register_all_modules(False)
    cfg = Config.fromfile(osp.join(ROOT, config))
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.data_preprocessor = cfg.data_preprocessor
    if not whole:
        model_cfg.backbone.arch = dict(
            embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=32)
        model_cfg.head.in_channels = 32
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(model_cfg)
    return model.to(device), cfg


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


class OpCount(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the ATen operations dispatched inside it (``with OpCount() as
    count: ...``, then ``count.ops``)."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __enter__(self):
        super().__enter__()
        return self

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def _sync(device: torch.device):
    return torch.cuda.synchronize if device.type == 'cuda' else (lambda: None)


def _preprocessor_rows(section: str, name: str, batch: int, size: int,
                       training: bool, ops: Dict[str, int],
                       times: Dict[str, float], base: str) -> List[Dict]:
    """One row per case of a preprocessor section (``collate``,
    ``labels``) in one mode; ``x`` is a case's time over ``base``'s."""
    return [
        dict(
            section=section,
            config=name,
            path=CONFIGS[name][0],
            batch=batch,
            size=size,
            mode='train' if training else 'eval',
            case=case,
            ops=ops[case],
            ms=times[case] * 1e3,
            x=times[case] / times[base]) for case in ops
    ]


def measure_collate(name: str, args) -> List[Dict]:
    from mmengine.dataset import default_collate, pseudo_collate
    from torch.utils.data._utils.pin_memory import pin_memory
    config, size = CONFIGS[name]
    device = torch.device(args.device)
    model, cfg = build_model(config, device, whole=False)
    prep = model.data_preprocessor
    batch = args.batch or cfg.train_dataloader.batch_size
    items = make_items(batch, size, cfg.data_preprocessor.num_classes)
    collates = dict(
        pseudo_collate=pseudo_collate, default_collate=default_collate)

    def make_batch(collate):
        # fresh samples, as a loader makes them: the preprocessor writes
        # the soft targets into the samples it is given
        data = collates[collate](copy.deepcopy(items))
        return pin_memory(data) if device.type == 'cuda' else data

    # (timed rounds reuse one batch each; the label work is the same
    # for both collates)
    batches = {collate: make_batch(collate) for collate in COLLATES}
    rows = []
    for training in (True, False):
        ops = {}
        for collate in COLLATES:
            data = make_batch(collate)
            with OpCount() as count:
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
            sync=_sync(device))
        rows += _preprocessor_rows('collate', name, batch, size, training, ops,
                                   times, 'default_collate')
    return rows


def host_preprocessor(cfg, device: torch.device):
    """mmpretrain's ``ClsDataPreprocessor`` with the config's settings,
    its copy to the device included, and batch augmentations (as
    mmpretrain's classifier gives them)."""
    from mmpretrain.models.utils import ClsDataPreprocessor
    kwargs = {
        k: v
        for k, v in cfg.data_preprocessor.items()
        if k not in ('type', 'non_blocking')
    }
    train_cfg = cfg.model.get('train_cfg')
    if train_cfg is not None and 'augments' in train_cfg:
        kwargs['batch_augments'] = copy.deepcopy(train_cfg)
    prep = ClsDataPreprocessor(**kwargs).to(device)
    # the config's copy (mmengine's option, which mmpretrain's does not
    # take as an argument): only the labels' work differs
    prep._non_blocking = bool(cfg.data_preprocessor.get('non_blocking'))
    return prep


def measure_labels(name: str, args) -> List[Dict]:
    from mmengine.dataset import default_collate
    from torch.utils.data._utils.pin_memory import pin_memory
    config, _ = CONFIGS[name]
    device = torch.device(args.device)
    model, cfg = build_model(config, device, whole=False)
    preps = dict(
        zip(PREPROCESSORS,
            (host_preprocessor(cfg, device), model.data_preprocessor)))
    assert type(preps[PREPROCESSORS[1]]).__name__ == PREPROCESSORS[1], \
        f'{config} does not name {PREPROCESSORS[1]}'
    batch = args.batch or cfg.train_dataloader.batch_size
    items = make_items(batch, LABEL_IMAGE_SIZE,
                       cfg.data_preprocessor.num_classes)

    def make_batch():
        data = default_collate(copy.deepcopy(items))
        return pin_memory(data) if device.type == 'cuda' else data

    # every call gets fresh samples, made before its block: the
    # preprocessors write the targets into the samples, and a sample that
    # holds one takes another path
    fresh: Dict[str, List] = {case: [] for case in preps}

    def refill(case):
        fresh[case][:] = [make_batch() for _ in range(args.iters)]

    rows = []
    for training in (True, False):
        ops = {}
        for case, prep in preps.items():
            data = make_batch()
            with OpCount() as count:
                prep(data, training)
            ops[case] = count.ops
        times = fastest(
            {
                case: (lambda c=case, p=p: p(fresh[c].pop(), training))
                for case, p in preps.items()
            },
            rounds=args.rounds,
            warmup=2,
            iters=args.iters,
            setups={case: (lambda c=case: refill(c))
                    for case in preps},
            sync=_sync(device))
        rows += _preprocessor_rows('labels', name, batch, LABEL_IMAGE_SIZE,
                                   training, ops, times, PREPROCESSORS[1])
    return rows


def measure_optimizer(name: str, args) -> List[Dict]:
    """One step of the config's optimizer on the config's whole model,
    its parameters grouped both ways, from the same gradients."""
    from mmengine.logging import MMLogger
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope

    from mmlape.engine.runner_setup import fit_fused_optimizer
    config, _ = CONFIGS[name]
    device = torch.device(args.device)
    model, cfg = build_model(config, device, whole=True)
    fit_fused_optimizer(cfg, device.type)
    gen = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen).to(device)
    optimizers = {}
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)  # not every parameter's options
    try:
        for grouping in GROUPINGS:
            optim_cfg = copy.deepcopy(cfg.optim_wrapper)
            if grouping == GROUPINGS[0]:
                optim_cfg.pop('constructor', None)
            with DefaultScope.overwrite_default_scope('mmpretrain'):
                optimizers[grouping] = build_optim_wrapper(model,
                                                           optim_cfg).optimizer
    finally:
        logger.setLevel(level)
    times = fastest({
        g: o.step
        for g, o in optimizers.items()
    },
                    rounds=args.rounds,
                    warmup=2,
                    iters=args.iters,
                    sync=_sync(device))
    return [
        dict(
            section='optimizer',
            config=name,
            path=config,
            optimizer=type(o).__name__ +
            (' (fused)' if o.defaults.get('fused') else ''),
            params=sum(1 for _ in model.parameters()),
            case=g,
            groups=len(o.param_groups),
            ms=times[g] * 1e3,
            x=times[g] / times[GROUPINGS[1]]) for g, o in optimizers.items()
    ]


def _preprocessor_cells(r: Dict) -> tuple:
    return (f"{r['config']} ({r['size']}x{r['size']})", r['batch'], r['mode'],
            r['case'], f"{r['ops']:,}", f"{r['ms']:.2f}", f"{r['x']:.2f}")


#: section -> its table's columns and each row's cells
TABLES = {
    'collate': (('config', 'batch', 'mode', 'collate', 'ATen ops',
                 'ms per batch', 'x'), _preprocessor_cells),
    'labels': (('config', 'batch', 'mode', 'preprocessor', 'ATen ops',
                'ms per batch', 'x'), _preprocessor_cells),
    'optimizer': (('config', 'optimizer', 'parameters', 'grouping', 'groups',
                   'ms per step', 'x'), lambda r:
                  (r['config'], r['optimizer'], r['params'], r['case'], r[
                      'groups'], f"{r['ms']:.2f}", f"{r['x']:.2f}")),
}


def markdown(rows: List[Dict], machine: Dict) -> str:
    lines = [
        f"{machine['cpu']}, {machine['device']}, torch {machine['torch']} "
        f"({machine['threads']} threads); fastest of the rounds; x = time "
        "over the configs' choice's"
    ]
    for section, (columns, cells) in TABLES.items():
        found = [r for r in rows if r['section'] == section]
        if found:
            lines += [
                '', '| ' + ' | '.join(columns) + ' |',
                '|' + '---|' * len(columns)
            ]
            lines += [
                '| ' + ' | '.join(str(c) for c in cells(r)) + ' |'
                for r in found
            ]
    return '\n'.join(lines) + '\n'


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        '--sections',
        default=','.join(SECTIONS),
        help=f'comma-separated, from {",".join(SECTIONS)} (default: all)')
    parser.add_argument(
        '--configs',
        default=','.join(CONFIGS),
        help=f'comma-separated, from {",".join(CONFIGS)} (default: all)')
    parser.add_argument(
        '--batch',
        type=int,
        default=0,
        help="images per batch of the collate and labels sections "
        "(default: the config's)")
    parser.add_argument(
        '--device',
        default='cpu',
        help='cpu (default) or cuda: the batch pinned, as the loaders pin '
        'it')
    parser.add_argument('--rounds', type=int, default=10)
    parser.add_argument(
        '--iters', type=int, default=3, help='calls per timed round')
    parser.add_argument(
        '--threads', type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument('--out', help='also write the markdown here')
    parser.add_argument('--json', help='also write the rows as JSON here')
    args = parser.parse_args(argv)
    for key, allowed in (('sections', SECTIONS), ('configs', CONFIGS)):
        names = [n for n in getattr(args, key).split(',') if n]
        unknown = sorted(set(names) - set(allowed))
        if unknown or not names:
            parser.error(f'--{key}: unknown '
                         f'{", ".join(unknown) or "(none)"}; choose from '
                         f'{", ".join(allowed)}')
        setattr(args, key, names)
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        parser.error(f'--device {args.device}: torch sees no CUDA device')
    return args


def main(argv=None) -> List[Dict]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    measures = dict(
        collate=measure_collate,
        labels=measure_labels,
        optimizer=measure_optimizer)
    rows = []
    for section in args.sections:
        for name in args.configs:
            rows += measures[section](name, args)
    machine = dict(
        cpu=platform.processor() or platform.machine(),
        device=(torch.cuda.get_device_name(torch.device(args.device))
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
