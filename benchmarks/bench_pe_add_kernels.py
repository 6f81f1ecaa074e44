"""The per-layer PE add as kernels: each way to write it, timed against the
default join's cast, with the kernels it launches (torch alone, any device).

Under autocast a layer's attention input is ``norm1(x).to(dtype)`` under
the default join and ``(norm1(x) + pe).to(dtype)`` under LaPE, PVG and
MPVG (``pe`` is ``(1, N, C)``, broadcast over the batch). Both move the
same bytes when the add writes ``dtype`` directly (``add_attn_pe``); this
script measures whether the kernels also take the same time, and which
way of writing the add is fastest, for DeiT's eval shapes:

- ``cast``: the default join's ``h.to(dtype)``;
- ``add to dtype``: ``torch.add(h, pe, out=<dtype>)``, what ``add_attn_pe``
  does without autograd;
- ``add to dtype, pe expanded``: the same with ``pe`` made ``(B, N, C)``
  beforehand (not a candidate: it shows what the broadcast costs);
- ``float32 add, then cast`` and ``cast, then add``: two kernels each;
- ``mmlape add_to_dtype``: mmlape's add (its Triton kernel on a GPU, for
  tensors of 8M values or more without autograd, 16M with it), where mmlape
  is installed, and on a GPU its Triton kernel with 1, 2, 4 and 8 samples
  per program at any size;
- each of them after the LayerNorm (``norm+``), as a layer runs them.

With ``--models``, whole eval steps of timm's ViT (if timm is installed)
under autocast, interleaved: as it is (the default join), with each
block's ``norm1`` followed by the add of a per-layer PE written each way
(mmlape's through its ``add_attn_pe``; on a GPU also with the Triton
kernel at any size and never), and with LaPE's per-layer LayerNorm of the
PE in the step as well: how much of a join's eval cost the add explains.
``--train`` times train steps (forward and backward) instead; ``--host``
the host time per call of each add on one sample.

It imports torch only, so it runs on a GPU machine before anything else is
installed. Times are the median of ``--rounds`` rounds of ``--reps`` calls
(CUDA events on a GPU); kernel names come from ``torch.profiler``.

Example:
    python benchmarks/bench_pe_add_kernels.py --out OUT_DIR
"""
import argparse
import json
import os
import os.path as osp
import statistics
import time
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F

#: name -> (batch, tokens, channels) of DeiT's eval at 224x224.
SHAPES = {'deit-tiny': (256, 197, 192), 'deit-base': (128, 197, 768)}


def paths(dtype: torch.dtype) -> Dict[str, Callable]:
    """The ways to write the add, each ``f(h, pe, pe_full)``."""
    return {
        'cast':
        lambda h, pe, full: h.to(dtype),
        'add to dtype':
        lambda h, pe, full: torch.add(
            h, pe, out=torch.empty_like(h, dtype=dtype)),
        'add to dtype, pe expanded':
        lambda h, pe, full: torch.add(
            h, full, out=torch.empty_like(h, dtype=dtype)),
        'float32 add, then cast':
        lambda h, pe, full: (h + pe).to(dtype),
        'cast, then add':
        lambda h, pe, full: h.to(dtype).add_(pe.to(dtype)),
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
    acts = [ProfilerActivity.CPU]
    if device.type == 'cuda':
        acts.append(ProfilerActivity.CUDA)
    with profile(activities=acts) as prof:
        fn()
        if device.type == 'cuda':
            torch.cuda.synchronize()
    names = []
    for evt in prof.events():
        on_device = str(getattr(evt, 'device_type', '')).endswith('CUDA')
        if device.type == 'cuda' and not on_device:
            continue
        if device.type != 'cuda' and not evt.name.startswith('aten::'):
            continue
        names.append(evt.name[:90])
    return names


#: name -> (timm model, eval batch).
MODELS = {
    'deit-tiny': ('vit_tiny_patch16_224', 256),
    'deit-base': ('vit_base_patch16_224', 128)
}


class NormThenAdd(torch.nn.Module):
    """``norm(x) + pe`` for a block's ``norm1``, the add written as ``how``
    (``'to dtype'``, ``'float32'``); ``pe_norm`` makes the PE LaPE's way,
    a LayerNorm of the shared PE in every step."""

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
            return self._mmlape(h, pe)
        if h.dtype == self.dtype or self.how == 'float32':
            return h + pe
        return torch.add(h, pe, out=torch.empty_like(h, dtype=self.dtype))

    def _mmlape(self, h, pe):
        """mmlape's ``add_attn_pe`` (autograd too); ``'mmlape triton'`` and
        ``'mmlape torch'`` take the Triton kernel at any size or never."""
        from mmlape.models.layers import pe_add
        threshold = pe_add._TRITON_MIN_NUMEL
        if self.how != 'mmlape':
            pe_add._TRITON_MIN_NUMEL = dict.fromkeys(
                threshold, 1 if self.how == 'mmlape triton' else float('inf'))
        try:
            return pe_add.add_attn_pe(h, pe)
        finally:
            pe_add._TRITON_MIN_NUMEL = threshold


def model_rows(args, device, dtype) -> List[Dict]:
    import copy

    import timm
    rows = []
    for name in args.shapes:
        arch, batch = MODELS[name]
        size = 224
        if args.tiny:
            batch, size = 2, 32
        base = timm.create_model(arch, img_size=size).to(device).eval()
        N = base.patch_embed.num_patches + 1
        C = base.embed_dim
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
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    rows = []
    for name in ([] if args.no_kernels else args.shapes):
        B, N, C = SHAPES[name]
        if args.tiny:
            B, N, C = 2, 5, 8
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


def table(report: Dict) -> str:
    lines = [
        f"{report['device']}, torch {report['torch']}, {report['dtype']}", '',
        '| shape | path | us | x cast | norm+ us | norm+ x | exact | '
        'kernels |', '|---|---|---|---|---|---|---|---|'
    ]
    for r in report['rows']:
        exact = {
            None: '',
            True: 'yes',
            False: 'no'
        }[r['equals_float32_sum_rounded']]
        lines.append(
            f"| {r['shape']} b{r['B']} | {r['path']} | {r['us']:.1f} | "
            f"{r['x_cast']:.3f} | {r['norm_plus_us']:.1f} | "
            f"{r['norm_plus_x']:.3f} | {exact} | "
            f"{'; '.join(r['kernels'])} |")
    if report.get('host'):
        lines += ['', '| one sample (host time per call) | us |', '|---|---|']
        lines += [
            f"| {r['path']} | {r['host_us']:.1f} |" for r in report['host']
        ]
    if report['models']:
        lines += [
            '', f"| model | variant | {report.get('step', 'eval')} ms | "
            'img/s | x default |', '|---|---|---|---|---|'
        ]
        for r in report['models']:
            lines.append(f"| {r['model']} b{r['B']} | {r['variant']} | "
                         f"{r['ms']:.2f} | {r['img_s']:,.0f} | "
                         f"{r['x_default']:.3f} |")
    return '\n'.join(lines) + '\n'


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument(
        '--dtype', default='bfloat16', choices=['bfloat16', 'float16'])
    parser.add_argument(
        '--shapes', nargs='+', default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument('--reps', type=int, default=50)
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument(
        '--tiny', action='store_true', help='2x5x8 tensors (a quick check)')
    parser.add_argument(
        '--compiled',
        action='store_true',
        help='also the cast and the add compiled by inductor')
    parser.add_argument(
        '--models',
        action='store_true',
        help="whole eval steps of timm's ViT (needs timm)")
    parser.add_argument(
        '--train',
        action='store_true',
        help='with --models: train steps (forward and backward), not eval')
    parser.add_argument(
        '--host',
        action='store_true',
        help='host time per call of each add (needs mmlape)')
    parser.add_argument(
        '--no-kernels',
        action='store_true',
        help='leave out the per-kernel rows (with --host or --models)')
    parser.add_argument('--out', help='folder for the .json and .md')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run(args)
    text = table(report)
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
