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
- ``metric``: the configs' evaluator (``LaPEAccuracy``) against
  mmpretrain's ``Accuracy`` on an evaluation of ``--eval-batches``
  batches as the model leaves them (scores and labels on the device, views
  of the batch's): each batch processed, then ``evaluate``, as mmengine's
  loops call them; the time per batch. mmpretrain's copies each sample's
  score and label to the host (on a GPU each copy waits for the device),
  the configs' the batch's in two copies, kept as the batch's stacks, with
  the same results and metrics (``tests/engine/test_cls_metric.py``).
  Also the bytes of a batch's per-sample results pickled (on the host,
  mmpretrain's are views that each take the whole batch with them) and
  of what a process sends to be gathered in ``evaluate`` (pickled, as
  mmengine pickles it where there are several processes), per batch.
- ``ema``: one update of the model's moving average of the configs that
  keep one (T2T-ViT: ``EMAHook`` every step), mmengine's
  ``ExponentialMovingAverage`` (one ``lerp_`` per parameter) against the
  configs' ``LaPEExponentialMovingAverage`` (one multi-tensor ``lerp_``),
  the same values (``tests/engine/test_ema.py``).

On a GPU each operation is a kernel launch made by the host, which the
GPU waits for where the host is behind (mmengine reads the losses every
iteration, so every step starts with the GPU idle).

Example:
    python benchmarks/bench_host_overheads.py
    python benchmarks/bench_host_overheads.py --device cuda --out host.md
"""
import argparse
import copy
import logging
import os.path as osp
import pickle
import platform
import sys
from typing import Dict, List

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from report import print_and_save  # noqa: E402
from timing import fastest  # noqa: E402

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: name -> (config, image size); the batch is the config's.
CONFIGS = {
    'deit': ('configs/deit/deit-tiny-lape_4xb256_in1k.py', 224),
    'cifar':
    ('configs/vit_lite/vit-lite-7-4-lape_1xb128-310e_cifar100.py', 32),
    't2t': ('configs/t2t_vit/t2t-vit-7-lape_8xb64_in1k.py', 224),
}
SECTIONS = ('collate', 'labels', 'optimizer', 'metric', 'ema')
#: section -> the configs it measures (``--configs`` picks among them)
SECTION_CONFIGS = {
    'collate': ('deit', 'cifar'),
    'labels': ('deit', 'cifar'),
    'optimizer': ('deit', 'cifar'),
    'metric': ('deit', 'cifar'),
    'ema': ('t2t', ),
}
COLLATES = ('pseudo_collate', 'default_collate')
#: the labels section's cases: mmpretrain's preprocessor, the configs'
PREPROCESSORS = ('ClsDataPreprocessor', 'LaPEClsDataPreprocessor')
#: the labels section's image size (the images are not what differs)
LABEL_IMAGE_SIZE = 8
#: the optimizer section's cases: mmengine's constructor, the configs'
GROUPINGS = ('one group per parameter', 'one group per option set')
#: the metric section's cases: mmpretrain's, the configs'
ACCURACIES = ('Accuracy', 'LaPEAccuracy')
#: the ema section's cases: mmengine's, the configs'
AVERAGES = ('ExponentialMovingAverage', 'LaPEExponentialMovingAverage')


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
    count: ...``, then ``count.ops``; ``count.names``: each one's name)."""

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.names: List[str] = []

    def __enter__(self):
        super().__enter__()
        return self

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


class HostCopies(torch.overrides.TorchFunctionMode):
    """Counts the copies to the host asked for inside it (``Tensor.cpu``,
    ``Tensor.to('cpu', ...)``; ``with HostCopies() as copies: ...``, then
    ``copies.calls``). From a GPU each waits for the device unless it is
    non-blocking."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cpu or (func is torch.Tensor.to and any(
                str(a) == 'cpu' for a in (*args[1:], kwargs.get('device')))):
            self.calls += 1
        return func(*args, **kwargs)


def _sync(device: torch.device):
    return torch.cuda.synchronize if device.type == 'cuda' else (lambda: None)


def _fastest(args, device: torch.device, cases: Dict,
             **kwargs) -> Dict[str, float]:
    """:func:`timing.fastest` with the command line's rounds and calls per
    round, two warm-up rounds, and ``device``'s synchronisation."""
    return fastest(
        cases,
        rounds=args.rounds,
        warmup=2,
        iters=args.iters,
        sync=_sync(device),
        **kwargs)


def _row(section: str, name: str, case: str, times: Dict[str, float],
         base: str, **cells) -> Dict:
    """A table row of ``case``: its section, config, ``cells``, its time
    (ms) and ``x``, its time over ``base``'s."""
    return dict(
        section=section,
        config=name,
        path=CONFIGS[name][0],
        case=case,
        **cells,
        ms=times[case] * 1e3,
        x=times[case] / times[base])


def _preprocessor_rows(section: str, name: str, batch: int, size: int,
                       training: bool, ops: Dict[str, int],
                       times: Dict[str, float], base: str) -> List[Dict]:
    """One row per case of a preprocessor section (``collate``,
    ``labels``) in one mode."""
    return [
        _row(
            section,
            name,
            case,
            times,
            base,
            batch=batch,
            size=size,
            mode='train' if training else 'eval',
            ops=ops[case]) for case in ops
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
        times = _fastest(args, device, {
            c: (lambda d=d: prep(d, training))
            for c, d in batches.items()
        })
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
        times = _fastest(
            args,
            device, {
                case: (lambda c=case, p=p: p(fresh[c].pop(), training))
                for case, p in preps.items()
            },
            setups={case: (lambda c=case: refill(c))
                    for case in preps})
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
    times = _fastest(args, device, {g: o.step for g, o in optimizers.items()})
    return [
        _row(
            'optimizer',
            name,
            g,
            times,
            GROUPINGS[1],
            optimizer=type(o).__name__ +
            (' (fused)' if o.defaults.get('fused') else ''),
            params=sum(1 for _ in model.parameters()),
            groups=len(o.param_groups)) for g, o in optimizers.items()
    ]


def eval_samples(batch: int,
                 classes: int,
                 device: torch.device,
                 seed: int = 0) -> List[Dict]:
    """An evaluation batch as mmengine's evaluator gives it to the metrics:
    the model's data samples as dicts, their scores and labels views of
    the batch's on the device (as mmpretrain's head and the configs' data
    preprocessor leave them)."""
    from mmpretrain.structures import DataSample
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, classes, generator=gen).to(device).softmax(1)
    labels = torch.randint(0, classes, (batch, ), generator=gen).to(device)
    preds = scores.argmax(1, keepdim=True)
    return [
        DataSample().set_gt_label(label).set_pred_score(score).set_pred_label(
            pred).to_dict()
        for label, score, pred in zip(labels.split(1), scores, preds)
    ]


def _same_results(a: List[Dict], b: List[Dict]) -> bool:
    """Whether two metrics' results hold the same keys in the same order
    and tensors of the same values, dtypes and shapes."""
    return len(a) == len(b) and all(
        list(x) == list(y) and all(x[k].dtype == y[k].dtype and x[k].shape ==
                                   y[k].shape and torch.equal(x[k], y[k])
                                   for k in x) for x, y in zip(a, b))


class _ByteCount:
    """A file that counts what is written to it and keeps nothing."""

    def __init__(self):
        self.bytes = 0

    def write(self, data) -> int:
        self.bytes += len(data)
        return len(data)


class GatheredBytes:
    """Inside it, mmengine's ``collect_results`` (as the metrics call it)
    counts the bytes of what this process sends to be gathered, pickled
    as mmengine pickles it."""

    MODULES = ('mmengine.evaluator.metric', 'mmlape.engine.cls_metric')

    def __init__(self):
        self.bytes = 0

    def __enter__(self):
        import importlib
        self._saved = []
        for name in self.MODULES:
            module = importlib.import_module(name)
            collect = module.collect_results

            def counting(results, *args, _collect=collect, **kwargs):
                count = _ByteCount()
                pickle.dump(results, count, protocol=2)
                self.bytes += count.bytes
                return _collect(results, *args, **kwargs)

            self._saved.append((module, collect))
            module.collect_results = counting
        return self

    def __exit__(self, *exc):
        for module, collect in self._saved:
            module.collect_results = collect


def measure_metric(name: str, args) -> List[Dict]:
    """The config's evaluator and mmpretrain's ``Accuracy`` on an
    evaluation of ``--eval-batches`` batches of the config's size: each
    batch's ``process``, then ``evaluate`` (as mmengine's loops call
    them)."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmpretrain.evaluation import Accuracy
    from mmpretrain.registry import METRICS
    from mmpretrain.utils import register_all_modules
    register_all_modules(False)
    config, _ = CONFIGS[name]
    device = torch.device(args.device)
    cfg = Config.fromfile(osp.join(ROOT, config))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        ours = METRICS.build(copy.deepcopy(cfg.val_evaluator))
    assert type(ours).__name__ == ACCURACIES[1], \
        f'{config} does not name {ACCURACIES[1]}'
    metrics = dict(
        zip(ACCURACIES, (Accuracy(topk=cfg.val_evaluator.topk), ours)))
    batch = args.batch or cfg.val_dataloader.batch_size
    batches = args.eval_batches
    classes = cfg.data_preprocessor.num_classes
    # batches of their own (a batch's results that are views of it take
    # it along where they are pickled)
    evaluated = [
        eval_samples(batch, classes, device, seed=i) for i in range(batches)
    ]
    samples = evaluated[0]

    def evaluation(metric):
        for each in evaluated:
            metric.process(None, each)
        return metric.evaluate(batch * batches)

    copies, ops, pickled, results, gathered, values = {}, {}, {}, {}, {}, {}
    for case, metric in metrics.items():
        metric.results = []
        with HostCopies() as count, OpCount() as aten:
            metric.process(None, samples)
        copies[case], ops[case] = count.calls, aten.ops
        results[case] = metric.results  # the configs' makes them here
        pickled[case] = len(pickle.dumps(results[case], protocol=2))
        metric.results = []
        with GatheredBytes() as sent:
            values[case] = evaluation(metric)
        gathered[case] = sent.bytes
    same = _same_results(*results.values()) and \
        values[ACCURACIES[0]] == values[ACCURACIES[1]]
    times = _fastest(args, device, {
        c: (lambda m=m: evaluation(m))
        for c, m in metrics.items()
    })
    return [
        _row(
            'metric',
            name,
            case, {
                c: t / batches
                for c, t in times.items()
            },
            ACCURACIES[1],
            batch=batch,
            batches=batches,
            classes=classes,
            host_copies=copies[case],
            ops=ops[case],
            same=same,
            pickled_kb=pickled[case] / 1024,
            gathered_kb=gathered[case] / 1024 / batches) for case in metrics
    ]


def measure_ema(name: str, args) -> List[Dict]:
    """One update of the config's model average (after the first, which
    copies the model), mmengine's and the config's, on the whole model."""
    from mmengine.model import ExponentialMovingAverage

    from mmlape.engine.ema import LaPEExponentialMovingAverage
    config, _ = CONFIGS[name]
    device = torch.device(args.device)
    model, cfg = build_model(config, device, whole=True)
    (hook, ) = [h for h in cfg.custom_hooks if h.type == 'EMAHook']
    assert hook.get('ema_type') == AVERAGES[1], \
        f'{config} does not name {AVERAGES[1]}'
    averages = dict(
        zip(AVERAGES,
            (ExponentialMovingAverage(model, momentum=hook.momentum),
             LaPEExponentialMovingAverage(model, momentum=hook.momentum))))
    ops, lerps = {}, {}
    for case, average in averages.items():
        average.update_parameters(model)  # the first copies the model
        with torch.no_grad():  # as a training step leaves the model
            for p in model.parameters():
                p.mul_(0.5)
        with OpCount() as count:
            average.update_parameters(model)
        # all the operations (``.data`` included, which launch nothing),
        # and the updates (on a GPU, kernel launches)
        ops[case] = count.ops
        lerps[case] = sum('lerp' in n for n in count.names)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(2)
    # the same averages, bit for bit, on this device
    states = [a.state_dict() for a in averages.values()]
    same = all(torch.equal(v, states[1][k]) for k, v in states[0].items())
    times = _fastest(args, device, {
        c: (lambda a=a: a.update_parameters(model))
        for c, a in averages.items()
    })
    params = sum(1 for _ in model.parameters())
    return [
        _row(
            'ema',
            name,
            case,
            times,
            AVERAGES[1],
            params=params,
            ops=ops[case],
            lerps=lerps[case],
            same=same) for case in averages
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
    'metric':
    (('config', 'batch', 'classes', 'metric', 'host copies', 'ATen ops',
      'results pickled, KB', 'gathered, KB per batch', 'same results',
      'ms per batch', 'x'), lambda r:
     (r['config'], r['batch'], r['classes'], r['case'], r['host_copies'],
      f"{r['ops']:,}", f"{r['pickled_kb']:,.0f}", f"{r['gathered_kb']:,.0f}",
      r['same'], f"{r['ms']:.2f}", f"{r['x']:.2f}")),
    'ema': (('config', 'parameters', 'average', 'ATen ops', 'lerp ops',
             'same values', 'ms per update', 'x'), lambda r:
            (r['config'], r['params'], r['case'], r['ops'], r['lerps'], r[
                'same'], f"{r['ms']:.2f}", f"{r['x']:.2f}")),
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
        help="images per batch of the collate, labels and metric sections "
        "(default: the config's; the metric section: its evaluation "
        "batch)")
    parser.add_argument(
        '--device',
        default='cpu',
        help='cpu (default) or cuda: the batch pinned, as the loaders pin '
        'it')
    parser.add_argument(
        '--eval-batches',
        type=int,
        default=8,
        help='batches of the metric section\'s evaluation, each processed, '
        'then evaluated (default: 8); its time is per batch')
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
        optimizer=measure_optimizer,
        metric=measure_metric,
        ema=measure_ema)
    rows = []
    for section in args.sections:
        for name in args.configs:
            if name in SECTION_CONFIGS[section]:
                rows += measures[section](name, args)
    machine = dict(
        cpu=platform.processor() or platform.machine(),
        device=(torch.cuda.get_device_name(torch.device(args.device))
                if args.device.startswith('cuda') else 'CPU'),
        torch=torch.__version__,
        threads=torch.get_num_threads())
    print_and_save(
        markdown(rows, machine), args.out, args.json,
        dict(machine=machine, rows=rows))
    return rows


if __name__ == '__main__':
    main()
