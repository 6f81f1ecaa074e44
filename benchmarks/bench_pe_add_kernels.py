"""The per-layer PE add as kernels (torch alone, any device): each way to
write ``(norm1(x) + pe).to(dtype)`` for DeiT's eval shapes (the default
join's ``cast``, ``add to dtype``, the same with ``pe`` expanded, ``float32
add, then cast``, ``cast, then add``, mmlape's ``add_to_dtype`` and, on a
GPU, its Triton kernel with 1-8 samples per program), alone and after the
LayerNorm (``norm+``), timed against the cast (the median of ``--rounds``
rounds of ``--reps`` calls, CUDA events on a GPU), whether it gives the
float32 sum rounded once, and the kernels it launches (``torch.profiler``).
``--models`` times whole eval steps of timm's ViT with the add in every
block, written each way (``--train``: train steps), ``--host`` the host
time per call of each add (docs/gpu.md reads them).

Example:
    python benchmarks/bench_pe_add_kernels.py --out OUT_DIR
"""
import copy
import json
import os
import os.path as osp
import statistics
import time
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F
from shared import parser, table

#: name -> (batch, tokens, channels) of DeiT's eval at 224x224.
SHAPES = {'deit-tiny': (256, 197, 192), 'deit-base': (128, 197, 768)}
#: name -> (timm model, eval batch).
MODELS = {
    'deit-tiny': ('vit_tiny_patch16_224', 256),
    'deit-base': ('vit_base_patch16_224', 128)
}


def paths(dtype: torch.dtype) -> Dict[str, Callable]:
    """The ways to write the add, each ``f(h, pe, pe_full)``."""

    def add(h, pe):
        return torch.add(h, pe, out=torch.empty_like(h, dtype=dtype))

    return {
        'cast': lambda h, pe, full: h.to(dtype),
        'add to dtype': lambda h, pe, full: add(h, pe),
        'add to dtype, pe expanded': lambda h, pe, full: add(h, full),
        'float32 add, then cast': lambda h, pe, full: (h + pe).to(dtype),
        'cast, then add': lambda h, pe, full: h.to(dtype).add_(pe.to(dtype)),
    }


def compiled_paths(dtype: torch.dtype) -> Dict[str, Callable]:
    """The add as inductor writes it (one generated kernel)."""
    add = torch.compile(lambda h, pe: (h + pe).to(dtype))
    cast = torch.compile(lambda h: h.to(dtype))
    return {
        'compiled cast': lambda h, pe, full: cast(h),
        'compiled add to dtype': lambda h, pe, full: add(h, pe),
    }


def mmlape_add():
    """mmlape's ``add_to_dtype`` (its Triton kernel on a GPU), or None where
    mmlape is not installed."""
    try:
        from mmlape.models.layers.pe_add import add_to_dtype
    except ImportError:
        return None
    return add_to_dtype


def triton_paths(device: torch.device,
                 dtype: torch.dtype) -> Dict[str, Callable]:
    """mmlape's Triton kernel with 1, 2, 4 and 8 samples per program (its
    PE block read once for them), whatever the size threshold says."""
    from mmlape.models.layers import pe_add
    if device.type != 'cuda' or pe_add._triton_kernel() is False:
        return {}

    def launch(n):
        return lambda h, pe, full: pe_add._launch(
            h, pe, torch.empty_like(h, dtype=dtype), n)

    return {
        f'mmlape Triton, {n} sample(s) per program': launch(n)
        for n in (1, 2, 4, 8)
    }


def timer(device: torch.device, fn: Callable, reps: int, rounds: int) -> float:
    """Median seconds per call."""
    times = []
    for _ in range(rounds):
        if device.type == 'cuda':
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / reps)
        else:
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def kernels(device: torch.device, fn: Callable) -> List[str]:
    """The device kernels (or CPU ops) one call launches."""
    from torch.profiler import ProfilerActivity, profile
    cuda = device.type == 'cuda'
    acts = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda
    with profile(activities=acts) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    return [
        evt.name[:90] for evt in prof.events()
        if (str(getattr(evt, 'device_type', '')).
            endswith('CUDA') if cuda else evt.name.startswith('aten::'))
    ]


class NormThenAdd(torch.nn.Module):
    """``norm(x) + pe`` for a block's ``norm1``, the add written as ``how``
    (``'to dtype'``, ``'float32'``, ``'mmlape'``: its ``add_attn_pe``, with
    autograd, ``'mmlape triton'`` and ``'mmlape torch'``: its Triton kernel
    at any size or never); ``pe_norm`` makes the PE LaPE's way, a LayerNorm
    of the shared PE in every step."""

    def __init__(self, norm, pe, how, dtype, pe_norm=False):
        super().__init__()
        self.norm, self.pe, self.how, self.dtype = norm, pe, how, dtype
        self.pe_norm = (
            torch.nn.LayerNorm(pe.shape[-1]).to(pe.device)
            if pe_norm else None)

    def forward(self, x):
        h = self.norm(x)
        pe = self.pe_norm(self.pe) if self.pe_norm is not None else self.pe
        if self.how.startswith('mmlape'):
            from mmlape.models.layers import pe_add
            threshold = pe_add._TRITON_MIN_NUMEL
            if self.how != 'mmlape':
                pe_add._TRITON_MIN_NUMEL = dict.fromkeys(
                    threshold,
                    1 if self.how == 'mmlape triton' else float('inf'))
            try:
                return pe_add.add_attn_pe(h, pe)
            finally:
                pe_add._TRITON_MIN_NUMEL = threshold
        if h.dtype == self.dtype or self.how == 'float32':
            return h + pe
        return torch.add(h, pe, out=torch.empty_like(h, dtype=self.dtype))


def model_rows(args, device, dtype) -> List[Dict]:
    """Whole steps of timm's ViT, as it is and with the add in every block
    written each way, interleaved: the median step per variant."""
    import timm
    rows = []
    for name in args.shapes:
        arch, batch = MODELS[name]
        batch, size = (2, 32) if args.tiny else (batch, 224)
        base = timm.create_model(arch, img_size=size).to(device).eval()
        N, C = base.patch_embed.num_patches + 1, base.embed_dim
        g = torch.Generator().manual_seed(0)
        variants = {'default (timm as is)': base}
        hows = [('add to dtype', 'to dtype', False),
                ('float32 add', 'float32', False),
                ('add to dtype + PE norm (LaPE)', 'to dtype', True)]
        if mmlape_add() is not None:
            hows += [('mmlape add_to_dtype', 'mmlape', False),
                     ('mmlape add_to_dtype + PE norm (LaPE)', 'mmlape', True)]
            if device.type == 'cuda':
                hows += [('mmlape, Triton at any size',
                          'mmlape triton', False),
                         ('mmlape, PyTorch add', 'mmlape torch', False)]
        if args.train:  # an add with out= has no gradient
            hows = [h for h in hows if h[1] != 'to dtype']
        for label, how, pe_norm in hows:
            m = copy.deepcopy(base)
            for blk in m.blocks:
                pe = torch.randn(1, N, C, generator=g).to(device)
                blk.norm1 = NormThenAdd(blk.norm1, pe, how, dtype, pe_norm)
            variants[label] = m
        img = torch.randn(batch, 3, size, size, generator=g).to(device)

        def step(m):
            if args.train:
                with torch.autocast(device.type, dtype=dtype):
                    loss = m(img).float().sum()
                loss.backward()
                return loss
            with torch.no_grad(), torch.autocast(device.type, dtype=dtype):
                return m(img)

        for m in variants.values():
            m.train(args.train)
        times = {k: [] for k in variants}
        for _ in range(3):
            for m in variants.values():
                step(m)
        for _ in range(args.rounds):
            for k, m in variants.items():
                times[k].append(
                    timer(device, lambda: step(m), max(1, args.reps // 10), 1))
        base_t = statistics.median(times['default (timm as is)'])
        for k, ts in times.items():
            t = statistics.median(ts)
            rows.append(
                dict(
                    shape=name,
                    model=arch,
                    B=batch,
                    variant=k,
                    ms=t * 1e3,
                    img_s=batch / t,
                    x_default=t / base_t))
    return rows


def host_rows(args, device, dtype) -> List[Dict]:
    """Host time per call of each add on a one-sample tensor, timed on the
    CPU's clock (the device keeps up, so the time is what a launch costs
    the host): what a step bound by its launches pays per layer."""
    from mmlape.models.layers import pe_add
    B, N, C = (1, 5, 8) if args.tiny else (1, 197, 192)
    g = torch.Generator().manual_seed(0)
    h = torch.randn(B, N, C, generator=g).to(device)
    pe = torch.randn(1, N, C, generator=g).to(device)
    out = torch.empty_like(h, dtype=dtype)
    ways = {
        'cast': lambda: h.to(dtype),
        'torch.add to dtype': lambda: torch.add(h, pe, out=out),
        'mmlape add_to_dtype': lambda: pe_add.add_to_dtype(h, pe, dtype),
    }
    if device.type == 'cuda' and pe_add._triton_kernel() is not False:
        cdiv, kernel = pe_add._triton_kernel()
        grid = (cdiv(pe.numel(), pe_add._BLOCK), B)
        ways['Triton kernel, launched by mmlape'] = lambda: pe_add._launch(
            h, pe, out)
        ways['Triton kernel[grid] alone'] = lambda: kernel[grid](
            h, pe, out, pe.numel(), B, BLOCK=pe_add._BLOCK, SAMPLES=1)
    rows = []
    reps = 5 if args.tiny else 200
    for label, f in ways.items():
        f()
        if device.type == 'cuda':
            torch.cuda.synchronize()
        best = float('inf')
        for _ in range(max(3, args.rounds)):
            t0 = time.perf_counter()
            for _ in range(reps):
                f()
            best = min(best, (time.perf_counter() - t0) / reps)
            if device.type == 'cuda':
                torch.cuda.synchronize()
        rows.append(dict(path=label, host_us=best * 1e6))
    return rows


def run(args) -> Dict:
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    rows = []
    for name in ([] if args.no_kernels else args.shapes):
        B, N, C = (2, 5, 8) if args.tiny else SHAPES[name]
        g = torch.Generator().manual_seed(0)
        x = torch.randn(B, N, C, generator=g).to(device)
        pe = torch.randn(1, N, C, generator=g).to(device)
        full = pe.expand(B, N, C).contiguous()
        w = torch.randn(C, generator=g).to(device)
        b = torch.randn(C, generator=g).to(device)
        h = F.layer_norm(x, (C, ), w, b)
        want = (h + pe).to(dtype)
        ways = dict(paths(dtype))
        mine = mmlape_add()
        if mine is not None:
            ways['mmlape add_to_dtype'] = lambda h, pe, full: mine(
                h, pe, dtype)
            ways.update(triton_paths(device, dtype))
        if args.compiled:
            ways.update(compiled_paths(dtype))
        for label, f in ways.items():
            out = f(h, pe, full)
            exact = (None if label in ('cast', 'compiled cast') else bool(
                torch.equal(out, want)))
            t = timer(device, lambda: f(h, pe, full), args.reps, args.rounds)
            t_norm = timer(device,
                           lambda: f(F.layer_norm(x, (C, ), w, b), pe, full),
                           args.reps, args.rounds)
            rows.append(
                dict(
                    shape=name,
                    B=B,
                    N=N,
                    C=C,
                    path=label,
                    us=t * 1e6,
                    norm_plus_us=t_norm * 1e6,
                    equals_float32_sum_rounded=exact,
                    kernels=kernels(device, lambda: f(h, pe, full))))
    for r in rows:
        base = next(q for q in rows
                    if q['shape'] == r['shape'] and q['path'] == 'cast')
        r['x_cast'] = r['us'] / base['us']
        r['norm_plus_x'] = r['norm_plus_us'] / base['norm_plus_us']
    return dict(
        device=(torch.cuda.get_device_name(device)
                if device.type == 'cuda' else 'cpu'),
        torch=torch.__version__,
        dtype=args.dtype,
        rows=rows,
        host=host_rows(args, device, dtype) if args.host else [],
        step='train' if args.train else 'eval',
        models=model_rows(args, device, dtype) if args.models else [])


def markdown(report: Dict) -> str:
    exact = {None: '', True: 'yes', False: 'no'}
    lines = [
        f"{report['device']}, torch {report['torch']}, {report['dtype']}", ''
    ] + table(
        ('shape', 'path', 'us', 'x cast', 'norm+ us', 'norm+ x', 'exact',
         'kernels'),
        [(f"{r['shape']} b{r['B']}", r['path'], f"{r['us']:.1f}",
          f"{r['x_cast']:.3f}", f"{r['norm_plus_us']:.1f}",
          f"{r['norm_plus_x']:.3f}", exact[r['equals_float32_sum_rounded']],
          '; '.join(r['kernels'])) for r in report['rows']])
    if report.get('host'):
        lines += [''] + table(
            ('one sample (host time per call)', 'us'),
            [(r['path'], f"{r['host_us']:.1f}") for r in report['host']])
    if report['models']:
        lines += [''] + table(
            ('model', 'variant', f"{report.get('step', 'eval')} ms", 'img/s',
             'x default'),
            [(f"{r['model']} b{r['B']}", r['variant'], f"{r['ms']:.2f}",
              f"{r['img_s']:,.0f}", f"{r['x_default']:.3f}")
             for r in report['models']])
    return '\n'.join(lines) + '\n'


def parse_args(argv=None):
    return parser(__doc__, (
        ('--device', 'cuda' if torch.cuda.is_available() else 'cpu', None),
        ('--dtype', 'bfloat16', None, dict(choices=['bfloat16', 'float16'])),
        ('--shapes', list(SHAPES), None, dict(choices=list(SHAPES))),
        ('--reps', 50, None),
        ('--rounds', 7, None),
        ('--tiny', False, '2x5x8 tensors (a quick check)'),
        ('--compiled', False, 'also the cast and the add compiled by '
         'inductor'),
        ('--models', False, "whole eval steps of timm's ViT (needs timm)"),
        ('--train', False, 'with --models: train steps (forward and '
         'backward), not eval'),
        ('--host', False, 'host time per call of each add (needs mmlape)'),
        ('--no-kernels', False, 'leave out the per-kernel rows (with --host '
         'or --models)'),
        ('--out', None, 'folder for the .json and .md'),
    )).parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run(args)
    text = markdown(report)
    print(text, end='')
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(osp.join(args.out, 'pe_add_kernels.json'), 'w') as f:
            json.dump(report, f, indent=1)
        with open(osp.join(args.out, 'pe_add_kernels.md'), 'w') as f:
            f.write(text)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
