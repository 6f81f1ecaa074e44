"""GPU acceptance of mmlape: speed, memory and training runs, one table.

References:
    DeiT (Touvron et al., 2021) sizes and batch sizes; ViT-Adapter (Chen et
    al., ICLR 2023) and Segmenter (Strudel et al., ICCV 2021) task sizes;
    model FLOPs utilisation as in PaLM (Chowdhery et al., 2022): achieved
    model FLOP/s over a peak, here the measured bf16 matmul peak.

Sections (``--sections``, all by default, in this order):

- ``deit``: DeiT-Ti (batch 256) and DeiT-B (batch 128) at 224x224, for every
  join, mmpretrain's ``VisionTransformer`` and timm's
  ``deit_*_patch16_224`` (skipped with a note when timm is absent): train
  throughput (autocast, forward + backward + AdamW step), eval throughput
  (no grad), peak memory of a train step; for DeiT-B the model FLOPs
  utilisation against the bf16 matmul peak measured in the same run; the
  targets (joins <= 1.03x / 1.01x the default join's train / eval step
  time, default >= 0.98x timm's throughput and >= mmpretrain's).
- ``compile``: ``torch.compile`` per join (``--compile-joins``): graph breaks
  (``torch._dynamo.explain``) of the train and the eval forward, and the
  speed-up of compiled over eager train and eval steps.
- ``adapter``: ViT-Adapter-Ti Mask R-CNN at 1024x1024 (batch 2) and UperNet
  at 512x512 (batch 8): one training step per join, built from the configs
  under ``configs/vit_adapter`` (random init, SyncBN as BN in one process).
- ``msda``: mmcv's CUDA multi-scale deformable attention against its PyTorch
  path at ViT-Adapter-Ti's 1024x1024 shapes: max abs differences (output
  and gradients) and speed; whether the CUDA op takes bf16.
- ``segmenter``: Segmenter-Ti at 512x512 (batch 8), one training step per
  join, from ``configs/segmenter``.
- ``dist``: ``tools/dist_train.sh CONFIG 1 --amp`` for one config of each
  family (DeiT, Mask R-CNN, UperNet, Segmenter; the LaPE variants) for
  about 50 iterations on generated data (the dense-chain tests' formats),
  then ``tools/dist_test.sh`` on its checkpoint: does it finish, does the
  loss fall.

Ratios (``x``) are step times over the default join's step time in the same
section and size (above 1 is slower), as in ``bench_joins.py``. Timings
interleave the models round by round and keep each model's fastest round.
A case that fails is a row whose note starts with ``failed:``.

``--device cpu --tiny`` runs every section on CPU with tiny models and
inputs (a test does); ``--json`` saves the rows after every section, and
``--merge`` prints one table from saved rows.

Example:
    python benchmarks/bench_gpu.py --json bench.json
    python benchmarks/bench_gpu.py --sections deit,msda --json a.json
    python benchmarks/bench_gpu.py --merge a.json b.json
    python benchmarks/bench_gpu.py --device cpu --tiny
"""
import argparse
import contextlib
import datetime
import glob
import json
import os
import os.path as osp
import random
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, ROOT)

SECTIONS = ('deit', 'compile', 'adapter', 'msda', 'segmenter', 'dist')
JOINS = ('Default', 'Share', 'Unshare', 'LaPE', 'PVG', 'MPVG')
GAP_JOINS = ('PVG', 'MPVG')
#: Targets of the issue: step time ratios to the default join.
TARGETS = {'train': 1.03, 'eval': 1.01}
#: Default join throughput relative to the reference implementations.
REFERENCE_TARGETS = {'timm': 0.98, 'mmpretrain ViT': 1.0}
DEIT_NAMES = {'tiny': 'DeiT-Ti', 'base': 'DeiT-B'}
COLUMNS = ('section', 'case', 'join', 'train', 'x', 'eval', 'x', 'peak mem',
           'note')
#: Tiny shapes for ``--tiny`` (CPU tests): 64 dims, 4 layers.
TINY_ARCH = dict(
    embed_dims=64, num_layers=4, num_heads=2, feedforward_channels=256)


class Bench:
    """Settings and results of one run.

    Args:
        args (argparse.Namespace): The parsed command line.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tiny = args.tiny
        self.device = torch.device(args.device)
        self.dtype = getattr(torch, args.amp_dtype)
        self.dense_dtype = getattr(torch, args.dense_amp_dtype)
        self.rows: List[Dict[str, str]] = []
        self.meta = environment(self.device, args.amp_dtype,
                                args.dense_amp_dtype)
        self.iters = args.iters or (1 if self.tiny else 10)
        self.rounds = args.rounds or (1 if self.tiny else 5)
        self.warmup = args.warmup if args.warmup is not None else (
            1 if self.tiny else 3)

    def autocast(self, dtype: Optional[torch.dtype] = None):
        """Autocast in ``dtype`` (default: the DeiT sections' dtype) on the
        benchmark's device; float32 turns autocast off."""
        dtype = dtype or self.dtype
        return torch.autocast(
            self.device.type, dtype=dtype, enabled=dtype != torch.float32)

    def add(self,
            section: str,
            case: str,
            join: str = '-',
            train: str = '-',
            train_x: str = '-',
            eval_: str = '-',
            eval_x: str = '-',
            memory: str = '-',
            note: str = '') -> None:
        self.rows.append(
            dict(
                section=section,
                case=case,
                join=join,
                train=train,
                train_x=train_x,
                eval=eval_,
                eval_x=eval_x,
                memory=memory,
                note=note))

    def failed(self, section: str, case: str, join: str,
               err: BaseException) -> None:
        """A row for a case that raised; the traceback goes to stderr."""
        traceback.print_exc(file=sys.stderr)
        message = f'{type(err).__name__}: {err}'.replace('\n', ' ')
        self.add(section, case, join, note=f'failed: {message[:160]}')

    def sync(self) -> None:
        if self.device.type == 'cuda':
            torch.cuda.synchronize()


# ---------------------------------------------------------------------------
# environment, formatting


def environment(device: torch.device, amp_dtype: str,
                dense_amp_dtype: str) -> Dict[str, str]:
    """Device, versions and date for the table's caption."""
    import importlib.metadata as md

    def version(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return 'absent'

    if device.type == 'cuda':
        name = torch.cuda.get_device_name(device)
        cuda = f' (CUDA {torch.version.cuda})'
    else:
        name = f'CPU ({os.cpu_count()} cores, {torch.get_num_threads()} ' \
               f'threads)'
        cuda = ''
    return dict(
        device=name,
        torch=torch.__version__ + cuda,
        mmcv=version('mmcv'),
        timm=version('timm'),
        date=datetime.datetime.now(
            datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
        autocast=amp_dtype,
        dense_autocast=dense_amp_dtype)


def fmt_flops(flops: float) -> str:
    for unit, scale in (('TFLOP', 1e12), ('GFLOP', 1e9), ('MFLOP', 1e6)):
        if flops >= scale:
            return f'{flops / scale:.1f} {unit}'
    return f'{flops:.0f} FLOP'


def fmt_rate(images_per_s: float) -> str:
    return f'{images_per_s:,.0f} img/s' if images_per_s >= 100 else \
        f'{images_per_s:.1f} img/s'


def fmt_mem(nbytes: Optional[int]) -> str:
    if nbytes is None:
        return '-'
    return f'{nbytes / 2**30:.2f} GiB' if nbytes >= 2**30 else \
        f'{nbytes / 2**20:.0f} MiB'


def table(meta: Dict[str, str], rows: Sequence[Dict[str, str]]) -> str:
    """The caption and the markdown table."""
    caption = (f"{meta['device']}, torch {meta['torch']}, mmcv "
               f"{meta['mmcv']}, timm {meta['timm']}, {meta['date']}; "
               f"autocast: {meta['autocast']} (deit, compile), "
               f"{meta.get('dense_autocast', '-')} (adapter, segmenter); "
               f"x = step time / the default "
               f"join's in the same section and size; peak mem = the most "
               f"CUDA memory a train step allocates above what was "
               f"allocated before it.")
    lines = [
        caption, '', '| ' + ' | '.join(COLUMNS) + ' |',
        '|' + '---|' * len(COLUMNS)
    ]
    keys = ('section', 'case', 'join', 'train', 'train_x', 'eval', 'eval_x',
            'memory', 'note')
    for row in rows:
        cells = [str(row[k]).replace('|', '/') for k in keys]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


# ---------------------------------------------------------------------------
# timing


def interleaved(bench: Bench,
                cases: Dict,
                iters: Optional[int] = None,
                setups: Optional[Dict] = None) -> Dict:
    """Fastest mean seconds per call of each case.

    Every case is warmed up, then each round runs every case for ``iters``
    calls in an order shuffled per round (drift of clocks and temperature
    hits all cases alike); the fastest round counts. ``setups[name]()``, if
    given, runs before each block of calls (e.g. ``model.eval()``: once per
    block, as a test loop does, so that caches that ``eval()`` resets live
    through the block).
    """
    iters = iters or bench.iters
    setups = setups or {}
    for name, fn in cases.items():
        setups.get(name, lambda: None)()
        for _ in range(bench.warmup):
            fn()
    bench.sync()
    times: Dict = {name: [] for name in cases}
    order = list(cases)
    for r in range(bench.rounds):
        random.Random(r).shuffle(order)
        for name in order:
            setups.get(name, lambda: None)()
            bench.sync()
            start = time.perf_counter()
            for _ in range(iters):
                cases[name]()
            bench.sync()
            times[name].append((time.perf_counter() - start) / iters)
    return {name: min(t) for name, t in times.items()}


def peak_memory(bench: Bench, fn: Callable[[], None]) -> Optional[int]:
    """Bytes a call allocates at its peak above what was allocated before
    it (CUDA only)."""
    if bench.device.type != 'cuda':
        return None
    bench.sync()
    torch.cuda.reset_peak_memory_stats(bench.device)
    before = torch.cuda.memory_allocated(bench.device)
    fn()
    bench.sync()
    return torch.cuda.max_memory_allocated(bench.device) - before


def matmul_peak(bench: Bench) -> float:
    """Measured FLOP/s of a square matrix product in the autocast dtype."""
    n = 512 if bench.tiny else 8192
    gen = torch.Generator(device=bench.device).manual_seed(0)
    a, b = (
        torch.randn(
            n, n, device=bench.device, dtype=bench.dtype, generator=gen)
        for _ in range(2))
    times = interleaved(bench, {'mm': lambda: torch.mm(a, b)})
    return 2 * n**3 / times['mm']


# ---------------------------------------------------------------------------
# classifiers


class Classifier(nn.Module):
    """A backbone that returns a tuple of features, and a linear head."""

    def __init__(self, backbone: nn.Module, dims: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(dims, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x)[-1])


def deit_models(bench: Bench, arch: str) -> Dict[str, Callable[[], nn.Module]]:
    """Builders of the models compared at one DeiT size."""
    from mmlape.models import LaPEViT
    img = 32 if bench.tiny else 224
    mm_arch = TINY_ARCH if bench.tiny else f'deit-{arch}'
    dims = (TINY_ARCH
            if bench.tiny else LaPEViT.arch_zoo[mm_arch])['embed_dims']
    builders = {}
    for join in bench.args.joins:
        gap = dict(with_cls_token=False, out_type='avg_featmap') \
            if join in GAP_JOINS else {}

        def build(join=join, gap=gap):
            return Classifier(
                LaPEViT(mm_arch, img_size=img, pe_join=join, **gap), dims)

        builders[join] = build

    def mmpretrain_vit():
        from mmpretrain.models import VisionTransformer
        return Classifier(
            VisionTransformer(mm_arch, img_size=img, patch_size=16), dims)

    builders['mmpretrain ViT'] = mmpretrain_vit

    def timm_deit():
        import timm
        extra = dict(
            img_size=img, embed_dim=64, depth=4, num_heads=2) \
            if bench.tiny else {}
        return timm.create_model(
            f'deit_{arch}_patch16_224',
            pretrained=False,
            num_classes=1000,
            **extra)

    builders['timm'] = timm_deit
    return builders


def model_flops(model: nn.Module, img: int) -> float:
    """FLOPs of one image's forward pass (matmuls, convolutions,
    attention), counted by PyTorch's flop counter."""
    from torch.utils.flop_counter import FlopCounterMode
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, img, img, device=device))
    return float(counter.get_total_flops())


def section_deit(bench: Bench) -> None:
    """Train/eval throughput, memory and MFU of the DeiT classifiers."""
    peak = matmul_peak(bench)
    n = 512 if bench.tiny else 8192
    bench.add(
        'deit',
        f'{bench.args.amp_dtype} matmul {n}x{n}x{n}',
        train=fmt_flops(peak) + '/s',
        note='the peak that MFU is measured against')
    sizes = (('tiny', 4 if bench.tiny else 256), ('base',
                                                  4 if bench.tiny else 128))
    for arch, batch in sizes:
        if arch not in bench.args.archs:
            continue
        img = 32 if bench.tiny else 224
        case = f'{DEIT_NAMES[arch]} b{batch}'
        gen = torch.Generator(device=bench.device).manual_seed(0)
        x = torch.randn(batch, 3, img, img, device=bench.device, generator=gen)
        y = torch.randint(
            0, 1000, (batch, ), device=bench.device, generator=gen)
        models, notes, steps, setups = {}, {}, {}, {}
        for name, build in deit_models(bench, arch).items():
            try:
                models[name] = build().to(bench.device)
            except ImportError as err:
                notes[name] = f'skipped: {err}'
            except Exception as err:  # noqa: BLE001 -- reported in the row
                bench.failed('deit', case, name, err)
        for name, model in models.items():
            opt = torch.optim.AdamW(
                model.parameters(), lr=1e-4, fused=bench.device.type == 'cuda')
            steps[name, 'train'] = _train_fn(bench, model, opt, x, y)
            steps[name, 'eval'] = _eval_fn(bench, model, x)
            setups[name, 'train'] = model.train
            setups[name, 'eval'] = model.eval
        times = interleaved(bench, steps, setups=setups)
        memory = {}
        for name, model in models.items():
            model.train()
            memory[name] = peak_memory(bench, steps[name, 'train'])
        base = {m: times.get(('Default', m)) for m in ('train', 'eval')}
        for name in list(models) + [n for n in notes if n not in models]:
            if name not in models:
                bench.add('deit', case, name, note=notes[name])
                continue
            tr, ev = times[name, 'train'], times[name, 'eval']
            row_notes = []
            if name in ('LaPE', 'PVG', 'MPVG') and base['train']:
                for mode, t in (('train', tr), ('eval', ev)):
                    ratio, limit = t / base[mode], TARGETS[mode]
                    row_notes.append(
                        f'{mode} {ratio:.3f}x <= {limit}: '
                        f'{"met" if ratio <= limit else "MISSED"}')
            if name == 'Default':
                for ref, limit in REFERENCE_TARGETS.items():
                    if (ref, 'train') in times:
                        ratio = times[ref, 'train'] / tr
                        row_notes.append(
                            f'throughput {ratio:.3f}x {ref} (>= {limit}: '
                            f'{"met" if ratio >= limit else "MISSED"})')
            if arch == 'base':
                flops = 3 * model_flops(models[name], img)
                mfu = batch / tr * flops / peak
                row_notes.append(f'MFU {100 * mfu:.1f}% '
                                 f'({fmt_flops(flops)}/img train)')
                models[name].train()
            bench.add(
                'deit',
                case,
                name,
                train=fmt_rate(batch / tr),
                train_x=_ratio(tr, base['train']),
                eval_=fmt_rate(batch / ev),
                eval_x=_ratio(ev, base['eval']),
                memory=fmt_mem(memory[name]),
                note='; '.join(row_notes))
        del models, steps
        _free(bench)


def _ratio(t: float, base: Optional[float]) -> str:
    return f'{t / base:.3f}' if base else '-'


def _free(bench: Bench) -> None:
    import gc
    gc.collect()
    if bench.device.type == 'cuda':
        torch.cuda.empty_cache()


def _train_fn(bench: Bench, model: nn.Module, opt, x, y) -> Callable:
    """A train step (the caller puts the model in train mode)."""

    def step():
        with bench.autocast():
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _eval_fn(bench: Bench, model: nn.Module, x) -> Callable:
    """An eval forward (the caller puts the model in eval mode)."""

    def step():
        with torch.no_grad(), bench.autocast():
            model(x)

    return step


# ---------------------------------------------------------------------------
# torch.compile


def section_compile(bench: Bench) -> None:
    """Graph breaks and speed-up of ``torch.compile`` per join."""
    import torch._dynamo as dynamo
    arch = bench.args.compile_arch
    batch = 4 if bench.tiny else (256 if arch == 'tiny' else 128)
    img = 32 if bench.tiny else 224
    case = f'{DEIT_NAMES[arch]} b{batch}, {bench.args.compile_backend}'
    gen = torch.Generator(device=bench.device).manual_seed(0)
    x = torch.randn(batch, 3, img, img, device=bench.device, generator=gen)
    y = torch.randint(0, 1000, (batch, ), device=bench.device, generator=gen)
    builders = deit_models(bench, arch)
    for join in bench.args.joins:
        if join not in bench.args.compile_joins:
            continue
        try:
            dynamo.reset()
            model = builders[join]().to(bench.device)
            breaks = []
            # the second eval call takes the PE plan that the first cached
            for mode, label in (('train', 'train'), ('eval', 'eval'),
                                ('eval', 'eval, cached plan')):
                if label != 'eval, cached plan':  # eval() empties the cache
                    model.train(mode == 'train')
                grad = torch.enable_grad() if mode == 'train' else \
                    torch.no_grad()
                with grad, bench.autocast():
                    out = dynamo.explain(model)(x)
                reasons = sorted({
                    str(getattr(r, 'reason', r)).split('\n')[0][:80]
                    for r in out.break_reasons
                })
                breaks.append(f'{label}: {out.graph_break_count} break(s)' + (
                    f' ({"; ".join(reasons[:2])})' if reasons else ''))
            dynamo.reset()
            compiled = torch.compile(model, backend=bench.args.compile_backend)
            opt = torch.optim.AdamW(
                model.parameters(), lr=1e-4, fused=bench.device.type == 'cuda')
            start = time.perf_counter()
            model.train()
            _train_fn(bench, compiled, opt, x, y)()
            model.eval()
            _eval_fn(bench, compiled, x)()
            bench.sync()
            compile_s = time.perf_counter() - start
            times = interleaved(
                bench, {
                    'eager train': _train_fn(bench, model, opt, x, y),
                    'compiled train': _train_fn(bench, compiled, opt, x, y),
                    'eager eval': _eval_fn(bench, model, x),
                    'compiled eval': _eval_fn(bench, compiled, x),
                },
                setups={
                    'eager train': model.train,
                    'compiled train': model.train,
                    'eager eval': model.eval,
                    'compiled eval': model.eval,
                })
            tr = times['eager train'] / times['compiled train']
            ev = times['eager eval'] / times['compiled eval']
            bench.add(
                'compile',
                case,
                join,
                train=fmt_rate(batch / times['compiled train']),
                train_x=f'{tr:.2f}x faster',
                eval_=fmt_rate(batch / times['compiled eval']),
                eval_x=f'{ev:.2f}x faster',
                note='; '.join(breaks) + f'; first compile {compile_s:.0f} s')
            del model, compiled, opt
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed('compile', case, join, err)
        finally:
            dynamo.reset()
            _free(bench)


# ---------------------------------------------------------------------------
# dense tasks: one training step


def _dense_configs(family: str) -> Dict[str, str]:
    """Join name -> config file of a dense family (the MPVG configs of
    ViT-Adapter run the PVG join with MPVG weights)."""
    names = {
        'mask-rcnn':
        'vit_adapter/mask-rcnn_vit-adapter-tiny{}_fpn_3x_coco.py',
        'upernet':
        'vit_adapter/upernet_vit-adapter-tiny{}_8xb2-160k_'
        'ade20k-512x512.py',
        'segmenter':
        'segmenter/segmenter_vit-tiny{}_mask_8xb1-160k_'
        'ade20k-512x512.py',
    }[family]
    suffix = {'Default': '', 'LaPE': '-lape', 'PVG': '-pvg', 'MPVG': '-mpvg'}
    return {
        join: osp.join(ROOT, 'configs', names.format(s))
        for join, s in suffix.items()
    }


#: Tiny versions of the dense models (CPU tests), as in the dense-chain
#: tests: 96 dims, 4 layers, small necks and heads.
_TINY_DENSE_ARCH = dict(
    embed_dims=96, num_layers=4, num_heads=3, feedforward_channels=192)


def _tiny_dense_overrides(family: str) -> Dict:
    if family == 'segmenter':
        return dict(
            backbone=dict(arch=dict(_TINY_DENSE_ARCH, _delete_=True)),
            decode_head=dict(
                in_channels=96, channels=96, num_heads=3, embed_dims=96))
    backbone = dict(
        arch=dict(_TINY_DENSE_ARCH, deform_num_heads=3, _delete_=True),
        conv_inplane=16,
        interaction_indexes=[[0, 0], [1, 1], [2, 2], [3, 3]],
        window_size=[2, 0, 2, 0])
    if family == 'upernet':
        return dict(
            backbone=backbone,
            decode_head=dict(in_channels=[96] * 4, channels=32),
            auxiliary_head=dict(in_channels=96, channels=16))
    return dict(
        backbone=backbone,
        neck=dict(in_channels=[96] * 4, out_channels=32),
        rpn_head=dict(in_channels=32, feat_channels=32),
        roi_head=dict(
            bbox_roi_extractor=dict(out_channels=32),
            bbox_head=dict(in_channels=32, fc_out_channels=64),
            mask_roi_extractor=dict(out_channels=32),
            mask_head=dict(in_channels=32, conv_out_channels=32)))


def build_dense_model(config: str, family: str, size: int, tiny: bool,
                      device: torch.device) -> nn.Module:
    """The model of a dense config: random init (no pretrained file), one
    process (SyncBN becomes BN), the data preprocessor sized for
    ``size``."""
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import DefaultScope
    cfg = Config.fromfile(config)
    cfg.model.backbone.init_cfg = None
    if tiny:
        cfg.merge_from_dict(
            dict(model=_tiny_dense_overrides(family)), allow_list_keys=True)
        if family == 'segmenter':
            cfg.model.backbone.img_size = size
    if family != 'mask-rcnn':
        cfg.model.data_preprocessor.size = (size, size)
    scope = cfg.get('default_scope',
                    'mmdet' if family == 'mask-rcnn' else 'mmseg')
    if scope == 'mmdet':
        from mmdet.registry import MODELS
        from mmdet.utils import register_all_modules
    else:
        from mmseg.registry import MODELS
        from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(cfg.model)
    model.init_weights()
    return revert_sync_batchnorm(model).to(device)


def dense_batch(family: str, batch: int, size: int,
                device: torch.device) -> Dict:
    """A generated batch in the form the models' data preprocessors take:
    uint8 images and data samples with boxes and masks (Mask R-CNN) or
    semantic labels (UperNet, Segmenter)."""
    import numpy as np
    from mmengine.structures import InstanceData, PixelData
    gen = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    meta = dict(
        img_shape=(size, size),
        ori_shape=(size, size),
        pad_shape=(size, size),
        scale_factor=(1., 1.))
    for i in range(batch):
        inputs.append(
            torch.randint(0, 256, (3, size, size),
                          generator=gen).to(torch.uint8).to(device))
        if family == 'mask-rcnn':
            from mmdet.structures import DetDataSample
            from mmdet.structures.mask import BitmapMasks
            n = 4
            xy = torch.rand(n, 2, generator=gen) * size * 0.6
            wh = size * (0.1 + 0.25 * torch.rand(n, 2, generator=gen))
            boxes = torch.cat([xy, (xy + wh).clamp(max=size - 1)], dim=1)
            masks = np.zeros((n, size, size), dtype=np.uint8)
            for k, (x0, y0, x1, y1) in enumerate(boxes.long().tolist()):
                masks[k, y0:y1, x0:x1] = 1
            sample = DetDataSample(metainfo=dict(meta, img_id=i))
            sample.gt_instances = InstanceData(
                bboxes=boxes,
                labels=torch.randint(0, 80, (n, ), generator=gen),
                masks=BitmapMasks(masks, size, size))
        else:
            from mmseg.structures import SegDataSample
            sample = SegDataSample(metainfo=meta)
            sample.gt_sem_seg = PixelData(
                data=torch.randint(0, 150, (1, size, size), generator=gen))
        samples.append(sample.to(device))
    return dict(inputs=inputs, data_samples=samples)


def _dense_step(bench: Bench, model: nn.Module, opt, data: Dict,
                losses: List[torch.Tensor]) -> Callable:
    """A training step as mmengine's AmpOptimWrapper runs it: the data
    preprocessor outside autocast, the loss under it, a dynamic loss scale
    for float16."""
    scaler = torch.amp.GradScaler(
        bench.device.type,
        enabled=bench.dense_dtype == torch.float16
        and bench.device.type == 'cuda')

    def step():
        batch = model.data_preprocessor(data, True)
        with bench.autocast(bench.dense_dtype):
            loss, _ = model.parse_losses(model(**batch, mode='loss'))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    return step


def _one_step_section(bench: Bench, section: str, family: str, case: str,
                      size: int, batch: int) -> None:
    """One training step of a dense family per join: time, memory, loss."""
    configs = _dense_configs(family)
    data = dense_batch(family, batch, size, bench.device)
    results = {}
    for join, config in configs.items():
        if join not in bench.args.joins:
            continue
        label = 'MPVG (PVG join)' if join == 'MPVG' and \
            family != 'segmenter' else join
        try:
            model = build_dense_model(config, family, size, bench.tiny,
                                      bench.device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            losses: List[torch.Tensor] = []
            step = _dense_step(bench, model, opt, data, losses)
            model.train()
            t = interleaved(bench, {'step': step}, iters=1)['step']
            mem = peak_memory(bench, step)
            loss = torch.stack(losses).float()
            results[join] = (label, t, mem, loss)
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed(section, case, label, err)
        finally:
            model = opt = None
            _free(bench)
    base = results.get('Default', (None, None))[1]
    for join, (label, t, mem, loss) in results.items():
        finite = bool(torch.isfinite(loss).all())
        bench.add(
            section,
            case,
            label,
            train=f'{1e3 * t:.0f} ms/step ({fmt_rate(batch / t)})',
            train_x=_ratio(t, base),
            memory=fmt_mem(mem),
            note=f'{str(bench.dense_dtype)[6:]} autocast; loss '
            f'{loss[0].item():.3f} -> {loss[-1].item():.3f} over '
            f'{len(loss)} steps on one batch' +
            ('' if finite else ' (NOT FINITE)'))


def section_adapter(bench: Bench) -> None:
    size = 64 if bench.tiny else 1024
    batch = 1 if bench.tiny else 2
    _one_step_section(bench, 'adapter', 'mask-rcnn',
                      f'ViT-Adapter-Ti Mask R-CNN {size}x{size} b{batch}',
                      size, batch)
    size = 64 if bench.tiny else 512
    batch = 2 if bench.tiny else 8
    _one_step_section(bench, 'adapter', 'upernet',
                      f'ViT-Adapter-Ti UperNet {size}x{size} b{batch}', size,
                      batch)


def section_segmenter(bench: Bench) -> None:
    size = 64 if bench.tiny else 512
    batch = 2 if bench.tiny else 8
    _one_step_section(bench, 'segmenter', 'segmenter',
                      f'Segmenter-Ti {size}x{size} b{batch}', size, batch)


# ---------------------------------------------------------------------------
# deformable attention: mmcv's CUDA op against its PyTorch path


def msda_inputs(bench: Bench,
                num_query: int,
                value_grids: Sequence,
                heads: int,
                dims: int,
                points: int,
                batch: int,
                dtype: torch.dtype = torch.float32) -> List:
    """Random inputs of ``multi_scale_deformable_attn``: value, spatial
    shapes, level starts, sampling locations, attention weights."""
    gen = torch.Generator(device=bench.device).manual_seed(0)
    dev = bench.device
    shapes = torch.tensor(value_grids, dtype=torch.long, device=dev)
    starts = torch.cat(
        [shapes.new_zeros(1), (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])
    num_value = sum(h * w for h, w in value_grids)
    levels = len(value_grids)
    value = torch.randn(
        batch, num_value, heads, dims, device=dev, generator=gen)
    loc = torch.rand(
        batch, num_query, heads, levels, points, 2, device=dev, generator=gen)
    weight = torch.rand(
        batch, num_query, heads, levels, points, device=dev,
        generator=gen).flatten(-2).softmax(-1).view(batch, num_query, heads,
                                                    levels, points)
    return [
        value.to(dtype).requires_grad_(), shapes, starts,
        loc.to(dtype).requires_grad_(),
        weight.to(dtype).requires_grad_()
    ]


def section_msda(bench: Bench) -> None:
    """Max abs difference and speed of mmcv's CUDA deformable attention
    against its PyTorch path, at ViT-Adapter-Ti's shapes."""
    from mmcv.ops.multi_scale_deform_attn import (
        MultiScaleDeformableAttnFunction, multi_scale_deformable_attn_pytorch)
    s = 64 if bench.tiny else 1024
    heads, dims = (2, 8) if bench.tiny else (6, 32)
    batch = 1 if bench.tiny else 2
    pyramid = [(s // 8, s // 8), (s // 16, s // 16), (s // 32, s // 32)]
    vit = [(s // 16, s // 16)]
    # injector: the ViT tokens query the pyramid; extractor: the pyramid's
    # tokens (all three levels) query the ViT tokens
    shapes_of = {
        'injector': (vit[0][0] * vit[0][1], pyramid),
        'extractor': (sum(h * w for h, w in pyramid), vit),
    }
    for name, (num_query, value_grids) in shapes_of.items():
        case = f'MSDA {name}, {s}x{s} b{batch}'
        try:
            inputs = msda_inputs(bench, num_query, value_grids, heads, dims, 4,
                                 batch)
            value, shapes, starts, loc, weight = inputs

            def torch_path():
                return multi_scale_deformable_attn_pytorch(
                    value, shapes, loc, weight)

            def cuda_path():
                return MultiScaleDeformableAttnFunction.apply(
                    value, shapes, starts, loc, weight, 64)

            paths = {'PyTorch': torch_path}
            if bench.device.type == 'cuda':
                paths['CUDA'] = cuda_path
            outs, grads = {}, {}
            for key, fn in paths.items():
                out = fn()
                g = torch.autograd.grad(out.square().sum(),
                                        [value, loc, weight])
                outs[key], grads[key] = out.detach(), g
            cases = {}
            for key, fn in paths.items():
                cases[key, 'train'] = (lambda fn=fn: torch.autograd.grad(
                    fn().sum(), [value, loc, weight]))

                def fwd(fn=fn):
                    with torch.no_grad():
                        fn()

                cases[key, 'eval'] = fwd
            times = interleaved(bench, cases)
            if 'CUDA' not in paths:
                bench.add(
                    'msda',
                    case,
                    'PyTorch path',
                    train=f'{1e3 * times["PyTorch", "train"]:.2f} ms',
                    eval_=f'{1e3 * times["PyTorch", "eval"]:.2f} ms',
                    note=f'the CUDA op needs a CUDA device '
                    f'({bench.device.type} here); fwd+bwd / fwd times')
                continue
            diff = (outs['CUDA'] - outs['PyTorch']).abs().max().item()
            gdiff = [(a - b).abs().max().item()
                     for a, b in zip(grads['CUDA'], grads['PyTorch'])]
            speedup = {
                mode: times['PyTorch', mode] / times['CUDA', mode]
                for mode in ('train', 'eval')
            }
            bench.add(
                'msda',
                case,
                'CUDA op',
                train=f'{1e3 * times["CUDA", "train"]:.2f} ms',
                train_x=f'{speedup["train"]:.1f}x faster',
                eval_=f'{1e3 * times["CUDA", "eval"]:.2f} ms',
                eval_x=f'{speedup["eval"]:.1f}x faster',
                note=f'max abs diff vs PyTorch path: out {diff:.1e}, grad '
                f'value {gdiff[0]:.1e}, loc {gdiff[1]:.1e}, weight '
                f'{gdiff[2]:.1e}; {_msda_low_precision(bench, inputs)}')
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed('msda', case, 'CUDA op', err)


def _msda_low_precision(bench: Bench, inputs: List) -> str:
    """Whether the CUDA op runs in half and bfloat16."""
    from mmcv.ops.multi_scale_deform_attn import \
        MultiScaleDeformableAttnFunction
    value, shapes, starts, loc, weight = inputs
    said = []
    for dtype in (torch.float16, torch.bfloat16):
        try:
            MultiScaleDeformableAttnFunction.apply(value.detach().to(dtype),
                                                   shapes, starts,
                                                   loc.detach().to(dtype),
                                                   weight.detach().to(dtype),
                                                   64)
            bench.sync()
            said.append(f'{str(dtype)[6:]} runs')
        except RuntimeError as err:
            said.append(f'{str(dtype)[6:]} fails ({str(err)[:60]})')
    return ', '.join(said)


# ---------------------------------------------------------------------------
# distributed training and testing through the tools

#: One config per family (the LaPE variants), the generated data format and
#: the overrides for a ~50-iteration run on it. The learning-rate warm-up is
#: shortened so that the loss can fall within the run; Segmenter's SGD gets a
#: larger learning rate for the same reason (it trains from scratch here).
DIST_FAMILIES = {
    'deit':
    dict(
        config='configs/deit/deit-tiny-lape_4xb256_in1k.py',
        data='imagenet',
        metric='accuracy/top1'),
    'mask-rcnn':
    dict(
        config='configs/vit_adapter/mask-rcnn_vit-adapter-tiny-lape_fpn_3x_'
        'coco.py',
        data='coco',
        metric='coco/bbox_mAP'),
    'upernet':
    dict(
        config='configs/vit_adapter/upernet_vit-adapter-tiny-lape_8xb2-160k_'
        'ade20k-512x512.py',
        data='ade',
        metric='mIoU'),
    'segmenter':
    dict(
        config='configs/segmenter/segmenter_vit-tiny-lape_mask_8xb1-160k_'
        'ade20k-512x512.py',
        data='ade',
        metric='mIoU'),
}


def dist_overrides(family: str,
                   data_root: str,
                   tiny: bool,
                   iters: int,
                   cpu: bool = False) -> Dict:
    """Config entries for a short run of ``family`` on generated data
    (``cpu``: BN instead of SyncBN, which needs GPUs)."""
    workers = dict(num_workers=0 if tiny else 4, persistent_workers=not tiny)
    log_every = max(1, iters // 10)  # about ten logged losses per run
    warmup = [
        dict(
            type='LinearLR',
            start_factor=0.1,
            by_epoch=False,
            begin=0,
            end=max(1, iters // 5))
    ]
    if family == 'deit':
        batch = 8 if tiny else 64
        loader = dict(
            batch_size=batch, **workers, dataset=dict(data_root=data_root))
        over = dict(
            train_dataloader=loader,
            val_dataloader=loader,
            test_dataloader=loader,
            train_cfg=dict(max_epochs=iters, val_interval=iters),
            param_scheduler=warmup,
            default_hooks=dict(
                logger=dict(interval=log_every),
                checkpoint=dict(interval=iters, max_keep_ckpts=1)))
        if tiny:
            over['model'] = dict(
                backbone=dict(arch=dict(TINY_ARCH, _delete_=True)),
                head=dict(in_channels=64))
        return over
    crop = 64 if tiny else 256
    if family == 'mask-rcnn':
        scale = (crop * 5 // 4, crop)
        pack = dict(
            type='PackDetInputs',
            meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                       'scale_factor'))
        train = [
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
            dict(type='Resize', scale=scale, keep_ratio=True),
            dict(type='RandomFlip', prob=0.5),
            dict(type='PackDetInputs')
        ]
        test = [
            dict(type='LoadImageFromFile'),
            dict(type='Resize', scale=scale, keep_ratio=True),
            dict(type='LoadAnnotations', with_bbox=True, with_mask=True), pack
        ]
        val = dict(
            batch_size=1,
            **workers,
            dataset=dict(data_root=data_root + '/', pipeline=test))
        ann = dict(ann_file=data_root + '/annotations/instances_val2017.json')
        over = dict(
            model=dict(
                backbone=dict(init_cfg=None),
                # keep an untrained model's low-scoring detections, so that
                # COCO AP is computed (CocoMetric reports nothing without)
                test_cfg=dict(rcnn=dict(score_thr=0.0))),
            train_dataloader=dict(
                batch_size=2,
                **workers,
                dataset=dict(data_root=data_root + '/', pipeline=train)),
            val_dataloader=val,
            test_dataloader=val,
            val_evaluator=ann,
            test_evaluator=ann,
            train_cfg=dict(max_epochs=1, val_interval=1),
            param_scheduler=warmup,
            default_hooks=dict(logger=dict(interval=log_every)))
        if tiny:
            over['model'].update(_tiny_dense_overrides('mask-rcnn'))
            over['model']['backbone']['init_cfg'] = None
        if cpu:
            over['model']['backbone']['adapter_norm_cfg'] = dict(type='BN')
        return over
    load = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations', reduce_zero_label=True)
    ]
    val = dict(
        batch_size=1,
        **workers,
        dataset=dict(
            data_root=data_root, pipeline=load + [dict(type='PackSegInputs')]))
    model = dict(
        backbone=dict(init_cfg=None),
        data_preprocessor=dict(size=(crop, crop)),
        test_cfg=dict(
            mode='slide',
            crop_size=(crop, crop),
            stride=(crop * 2 // 3, crop * 2 // 3)))
    if tiny:
        model.update(_tiny_dense_overrides(family))
        model['backbone']['init_cfg'] = None
    if cpu and family == 'upernet':
        bn = dict(type='BN', requires_grad=True)
        model['backbone']['adapter_norm_cfg'] = dict(type='BN')
        for head in ('decode_head', 'auxiliary_head'):
            model.setdefault(head, {})['norm_cfg'] = bn
    over = dict(
        model=model,
        train_dataloader=dict(
            batch_size=2,
            **workers,
            dataset=dict(
                data_root=data_root,
                pipeline=load + [
                    dict(type='RandomCrop', crop_size=(crop, crop)),
                    dict(type='PackSegInputs')
                ])),
        val_dataloader=val,
        test_dataloader=val,
        train_cfg=dict(max_iters=iters, val_interval=iters),
        param_scheduler=warmup,
        default_hooks=dict(
            checkpoint=dict(
                by_epoch=False,
                interval=iters,
                save_best=None,
                max_keep_ckpts=1),
            logger=dict(interval=log_every)))
    if family == 'segmenter':
        over['optim_wrapper'] = dict(optimizer=dict(lr=0.01))
    return over


def generate_dist_data(family: str, root: str, tiny: bool, iters: int) -> None:
    """Generated data of the dense-chain tests, enough for ``iters``."""
    from mmlape.datasets import (generate_ade20k, generate_coco_instances,
                                 generate_pos_shapes)
    kind = DIST_FAMILIES[family]['data']
    if kind == 'imagenet':
        batch = 8 if tiny else 64
        generate_pos_shapes(
            root, num_train=batch, num_val=batch, size=32 if tiny else 224)
    elif kind == 'coco':
        size = (64, 80) if tiny else (256, 320)
        generate_coco_instances(
            root, num_train=2 * iters, num_val=4, size=size)
    else:
        size = (96, 128) if tiny else (320, 384)
        generate_ade20k(root, num_train=8, num_val=4, size=size)


def _scalars(work: str) -> List[float]:
    """The logged training losses of a run (mmengine's scalars.json)."""
    losses = []
    for path in sorted(
            glob.glob(osp.join(work, '*', 'vis_data', 'scalars.json'))):
        with open(path) as f:
            for line in f:
                entry = json.loads(line)
                if 'loss' in entry and 'lr' in entry:
                    losses.append(float(entry['loss']))
    return losses


def section_dist(bench: Bench) -> None:
    """``tools/dist_train.sh CONFIG 1 --amp`` then ``dist_test.sh``."""
    root = bench.args.work_root or tempfile.mkdtemp(prefix='bench_gpu_')
    iters = 2 if bench.tiny else bench.args.dist_iters
    amp = bench.device.type == 'cuda'
    for family in bench.args.dist_families:
        spec = DIST_FAMILIES[family]
        case = f'{family}: {osp.basename(spec["config"])}'
        work = osp.join(root, family)
        os.makedirs(work, exist_ok=True)
        try:
            data = osp.join(work, 'data')
            # DeiT: an epoch is one pass over the set, so `iters` epochs of
            # one batch each; the others count iterations.
            generate_dist_data(family, data, bench.tiny, iters)
            config = osp.join(work, 'config.py')
            over = dist_overrides(family, data, bench.tiny, iters, not amp)
            with open(config, 'w') as f:
                f.write(f'_base_ = {osp.join(ROOT, spec["config"])!r}\n')
                for key, value in over.items():
                    f.write(f'{key} = {value!r}\n')
            env = dict(
                os.environ,
                PYTHON=sys.executable,
                PORT=str(_free_port()),
                PYTHONUNBUFFERED='1')
            if bench.args.threads:
                env['OMP_NUM_THREADS'] = str(bench.args.threads)
            args = ['--work-dir', work] + (['--amp'] if amp else [])
            start = time.perf_counter()
            _run([osp.join(ROOT, 'tools', 'dist_train.sh'), config, '1'] +
                 args, env, osp.join(work, 'train.log'))
            train_s = time.perf_counter() - start
            with open(osp.join(work, 'last_checkpoint')) as f:
                ckpt = f.read().strip()
            start = time.perf_counter()
            _run([
                osp.join(ROOT, 'tools', 'dist_test.sh'), config, ckpt, '1',
                '--work-dir', work
            ], env, osp.join(work, 'test.log'))
            test_s = time.perf_counter() - start
            with open(osp.join(work, 'test_metrics.json')) as f:
                metrics = json.load(f)
            losses = _scalars(work)
            k = max(1, min(3, len(losses) // 3))
            if len(losses) >= 2:
                first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
                trend = (f'loss {first:.3f} -> {last:.3f}: '
                         f'{"falls" if last < first else "DOES NOT FALL"}')
            else:
                trend = f'{len(losses)} loss(es) logged: no trend'
            metric = metrics.get(spec['metric'], 'absent')
            if isinstance(metric, float):
                metric = f'{metric:.3g}'
            bench.add(
                'dist',
                case,
                'LaPE',
                train=f'{len(losses)} logged, {train_s:.0f} s',
                eval_=f'{spec["metric"]} {metric}, {test_s:.0f} s',
                note=f'{"--amp" if amp else "no --amp (CPU)"}; {trend}; '
                f'logs in {work}')
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed('dist', case, 'LaPE', err)


def _free_port() -> int:
    """A TCP port that is free now (for torchrun's rendezvous)."""
    import socket
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _run(cmd: List[str], env: Dict, log: str) -> None:
    with open(log, 'w') as f:
        out = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    if out.returncode:
        with open(log) as f:
            tail = f.read()[-600:]
        raise RuntimeError(f'{osp.basename(cmd[0])} exited with '
                           f'{out.returncode} (log {log}): ...{tail}')


# ---------------------------------------------------------------------------
# command line

RUNNERS = {
    'deit': section_deit,
    'compile': section_compile,
    'adapter': section_adapter,
    'msda': section_msda,
    'segmenter': section_segmenter,
    'dist': section_dist,
}


def _csv(choices: Sequence[str]) -> Callable[[str], List[str]]:
    lookup = {c.lower(): c for c in choices}

    def parse(text: str) -> List[str]:
        out = []
        for item in text.split(','):
            key = item.strip().lower()
            if key not in lookup:
                raise argparse.ArgumentTypeError(
                    f'{item!r} is not one of {list(choices)}')
            out.append(lookup[key])
        return out

    return parse


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        '--sections',
        type=_csv(SECTIONS),
        default=list(SECTIONS),
        help=f'comma-separated, from {",".join(SECTIONS)} (default: all)')
    parser.add_argument(
        '--device',
        default='cuda',
        help='cuda (default) or cpu (with --tiny, for tests)')
    parser.add_argument(
        '--tiny',
        action='store_true',
        help='tiny models, inputs and runs (CPU tests)')
    parser.add_argument(
        '--joins',
        type=_csv(JOINS),
        default=list(JOINS),
        help='joins to measure (default: all)')
    parser.add_argument(
        '--archs',
        type=_csv(('tiny', 'base')),
        default=['tiny', 'base'],
        help='DeiT sizes of the deit section (default: tiny,base)')
    parser.add_argument(
        '--amp-dtype',
        choices=('bfloat16', 'float16'),
        default='bfloat16',
        help='autocast dtype (default: bfloat16)')
    parser.add_argument(
        '--dense-amp-dtype',
        choices=('float16', 'bfloat16', 'float32'),
        default=None,
        help='autocast dtype of the adapter and segmenter sections '
        '(default: float16, what --amp of the tools uses: mmcv 2.1.0\'s CUDA '
        'deformable attention and RoIAlign have no bfloat16 kernels; '
        'float32 with --tiny on CPU, where mmcv\'s CPU NMS takes float32 '
        'boxes only)')
    parser.add_argument(
        '--compile-arch',
        choices=('tiny', 'base'),
        default='tiny',
        help='DeiT size of the compile section (default: tiny, batch 256)')
    parser.add_argument(
        '--compile-joins',
        type=_csv(JOINS),
        default=['Default', 'LaPE', 'PVG', 'MPVG'],
        help='joins of the compile section, among --joins (default: '
        'Default,LaPE,PVG,MPVG: each compiles for about a minute)')
    parser.add_argument(
        '--compile-backend',
        default=None,
        help='torch.compile backend (default: inductor; eager with --tiny)')
    parser.add_argument(
        '--dist-families',
        type=_csv(tuple(DIST_FAMILIES)),
        default=None,
        help='families of the dist section (default: all; deit with --tiny)')
    parser.add_argument(
        '--dist-iters',
        type=int,
        default=50,
        help='iterations of each dist training run (default: 50)')
    parser.add_argument(
        '--work-root',
        help='folder of the dist runs (default: a new temporary folder)')
    parser.add_argument(
        '--iters', type=int, help='steps per timed round (default: 10)')
    parser.add_argument('--rounds', type=int, help='timed rounds (default: 5)')
    parser.add_argument(
        '--warmup', type=int, help='untimed steps per case (default: 3)')
    parser.add_argument(
        '--threads',
        type=int,
        help='torch CPU threads (default: unchanged; 1 with --device cpu: '
        'tiny ops on a shared machine run far faster on one thread)')
    parser.add_argument(
        '--json', help='save the rows here after every section')
    parser.add_argument(
        '--merge',
        nargs='+',
        metavar='JSON',
        help='print one table from rows saved with --json, run nothing')
    args = parser.parse_args(argv)
    if args.threads is None and args.device == 'cpu':
        args.threads = 1
    if args.dense_amp_dtype is None:
        args.dense_amp_dtype = 'float32' if args.tiny else 'float16'
    if args.compile_backend is None:
        args.compile_backend = 'eager' if args.tiny else 'inductor'
    if args.dist_families is None:
        args.dist_families = ['deit'] if args.tiny else list(DIST_FAMILIES)
    return args


def merge(paths: Sequence[str]) -> str:
    """One table from saved rows (sections in the benchmark's order)."""
    meta, rows = None, []
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        meta = meta or saved['meta']
        rows.extend(saved['rows'])
    rows.sort(key=lambda r: SECTIONS.index(r['section']))
    return table(meta, rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.merge:
        print(merge(args.merge))
        return 0
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        print(
            'error: --device cuda but no CUDA device is visible; use '
            '--device cpu --tiny for a CPU run',
            file=sys.stderr)
        return 2
    if args.device == 'cuda':
        torch.backends.cudnn.benchmark = True
    if args.threads:
        torch.set_num_threads(args.threads)
    from mmengine.logging import MMLogger

    import mmlape  # noqa: F401  (registers the models)

    # the current logger: mmengine's messages (weight init summaries) only
    # from warnings up
    MMLogger.get_instance('bench_gpu', log_level='WARNING')
    bench = Bench(args)
    for section in SECTIONS:
        if section not in args.sections:
            continue
        start = time.perf_counter()
        print(f'[bench_gpu] {section} ...', file=sys.stderr, flush=True)
        with contextlib.redirect_stdout(sys.stderr):
            RUNNERS[section](bench)
        print(
            f'[bench_gpu] {section} done in '
            f'{time.perf_counter() - start:.0f} s',
            file=sys.stderr,
            flush=True)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(dict(meta=bench.meta, rows=bench.rows), f, indent=1)
    print(table(bench.meta, bench.rows))
    return 0


if __name__ == '__main__':
    sys.exit(main())
