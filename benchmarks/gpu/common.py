"""What every section of ``bench_gpu.py`` shares: the run's settings and
rows (timed by :func:`shared.fastest`), formatting, memory, the train and
eval steps."""
import datetime
import gc
import importlib.metadata as md
import os
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from shared import error_text, fastest, table

COLUMNS = ('section', 'case', 'join', 'train', 'x', 'eval', 'x', 'peak mem',
           'note')
#: The rows' keys, in the columns' order.
KEYS = ('section', 'case', 'join', 'train', 'train_x', 'eval', 'eval_x',
        'memory', 'note')


class Bench:
    """Settings (from the parsed command line ``args``) and rows of a
    run."""

    def __init__(self, args) -> None:
        self.args, self.tiny = args, args.tiny
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

    def add(self, section: str, case: str, join='-', note='', **cells):
        """A row; ``cells``: ``train``, ``train_x``, ``eval``, ``eval_x``,
        ``memory`` (``-`` where not given)."""
        self.rows.append(
            dict(
                dict.fromkeys(KEYS, '-'),
                section=section,
                case=case,
                join=join,
                note=note,
                **cells))

    def failed(self, section: str, case: str, join: str,
               err: BaseException) -> None:
        """A row for a case that raised; the traceback goes to stderr."""
        self.add(section, case, join, f'failed: {error_text(err, 160)}')

    def sync(self) -> None:
        if self.device.type == 'cuda':
            torch.cuda.synchronize()

    def fastest(self, cases: Dict, iters=None, setups=None) -> Dict:
        """:func:`shared.fastest` with this run's rounds, warm-up and
        ``iters`` calls per round, synchronising the device."""
        return fastest(cases, self.rounds, self.warmup, iters or self.iters,
                       setups, self.sync)

    def inputs(self, batch: int, img: int):
        """A seeded batch of ``img`` x ``img`` images and 1000 classes."""
        gen = torch.Generator(device=self.device).manual_seed(0)
        x = torch.randn(batch, 3, img, img, device=self.device, generator=gen)
        return x, torch.randint(
            0, 1000, (batch, ), device=self.device, generator=gen)


def environment(device: torch.device, amp_dtype: str,
                dense_amp_dtype: str) -> Dict[str, str]:
    """Device, versions and date for the table's caption."""

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


def fmt_ratio(t: float, base: Optional[float]) -> str:
    return f'{t / base:.3f}' if base else '-'


def markdown(meta: Dict[str, str], rows: Sequence[Dict[str, str]]) -> str:
    """The caption and the markdown table."""
    caption = (f"{meta['device']}, torch {meta['torch']}, mmcv "
               f"{meta['mmcv']}, timm {meta['timm']}, {meta['date']}; "
               f"autocast: {meta['autocast']} (deit, compile), "
               f"{meta.get('dense_autocast', '-')} (adapter, segmenter); "
               f"x = step time / the default "
               f"join's in the same section and size; peak mem = the most "
               f"CUDA memory a train step allocates above what was "
               f"allocated before it.")
    cells = [[str(row[k]).replace('|', '/') for k in KEYS] for row in rows]
    return '\n'.join([caption, ''] + table(COLUMNS, cells))


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


def free(bench: Bench) -> None:
    gc.collect()
    if bench.device.type == 'cuda':
        torch.cuda.empty_cache()


def train_fn(bench: Bench, model: nn.Module, opt, x, y) -> Callable:
    """A train step (the caller puts the model in train mode)."""

    def step():
        with bench.autocast():
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def eval_fn(bench: Bench, model: nn.Module, x) -> Callable:
    """An eval forward (the caller puts the model in eval mode)."""

    def step():
        with torch.no_grad(), bench.autocast():
            model(x)

    return step


class Classifier(nn.Module):
    """A backbone that returns a tuple of features, and a linear head."""

    def __init__(self, backbone: nn.Module, dims: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(dims, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x)[-1])
