"""What the joins' per-layer add costs under autocast on the CPU: for one
layer's attention input (``qkv(norm1(x))`` under the default join,
``qkv(norm1(x) + pe)`` under LaPE, PVG and MPVG) the bytes every aten op
reads and writes (views excluded; what bounds a GPU's elementwise kernels),
the ops and the time, eval and train, of ``default``, ``float32 add``
(mmlape's add before it learned the autocast dtype) and ``add_attn_pe``
(which writes the autocast dtype, replacing the projection's cast);
docs/speed.md reads them.

Example:
    python benchmarks/bench_pe_add.py
    python benchmarks/bench_pe_add.py --shapes deit-tiny:64 --rounds 20
"""
import argparse
import sys
from collections import Counter
from typing import Dict, Tuple

import torch
import torch.nn as nn
from shared import fastest, parser, print_and_save, table
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

#: name -> (tokens, channels) of DeiT at 224x224 (196 patches + class).
MODELS = {
    'deit-tiny': (197, 192),
    'deit-small': (197, 384),
    'deit-base': (197, 768)
}
#: Ops that only re-describe memory.
VIEW_OPS = ('view', 'reshape', 'expand', 'permute', 'transpose', 't',
            'unsqueeze', 'squeeze', 'as_strided', 'detach', 'alias', 'slice',
            'select', '_unsafe_view', 'split', 'unbind')


class BytesMoved(TorchDispatchMode):
    """Sums the bytes that aten ops read (their tensor arguments, an
    ``out=`` tensor excepted) and write (their results: an in-place op
    reads and writes its tensor), and counts the ops. Views and
    allocations (``empty*``) move nothing and are left out."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in VIEW_OPS or name.startswith(('empty', 'new_empty')):
            return out
        inputs = (args, {k: v for k, v in kwargs.items() if k != 'out'})
        for tree in (inputs, out):
            seen = set()
            for t in tree_flatten(tree)[0]:
                if isinstance(t, torch.Tensor) and id(t) not in seen:
                    seen.add(id(t))
                    self.bytes += t.numel() * t.element_size()
        self.ops[name] += 1
        return out


def paths() -> Dict:
    """The adds: none, in place in ``h``'s float32, mmlape's."""
    from mmlape.models.layers.pe_add import add_attn_pe
    return {
        'default': None,
        'float32 add': lambda h, pe: h.add_(pe),
        'add_attn_pe': add_attn_pe
    }


def attention_input(norm: nn.Module, qkv: nn.Module, add, x, pe):
    h = norm(x)
    return qkv(h if add is None else add(h, pe))


def step(norm, qkv, add, x, pe, train: bool, dtype) -> None:
    for t in [x, pe, *norm.parameters(), *qkv.parameters()]:
        t.grad = None  # no accumulation into an earlier step's gradients
    with torch.autocast('cpu', dtype=dtype), torch.set_grad_enabled(train):
        out = attention_input(norm, qkv, add, x, pe)
    if train:
        out.float().sum().backward()


def measure(model: str, batch: int, dtype, rounds: int) -> Dict:
    tokens, dims = MODELS[model]
    torch.manual_seed(0)
    norm, qkv = nn.LayerNorm(dims, eps=1e-6), nn.Linear(dims, 3 * dims)
    x = torch.randn(batch, tokens, dims, requires_grad=True)
    pe = torch.randn(1, tokens, dims, requires_grad=True)
    results = {}
    for mode in ('eval', 'train'):
        train, cases = mode == 'train', {}
        for name, add in paths().items():
            with BytesMoved() as counter:
                step(norm, qkv, add, x, pe, train, dtype)
            results[(name, mode)] = dict(
                bytes=counter.bytes, ops=sum(counter.ops.values()))
            cases[name] = (
                lambda a=add: step(norm, qkv, a, x, pe, train, dtype))
        for name, seconds in fastest(cases, rounds=rounds).items():
            results[(name, mode)]['ms'] = seconds * 1e3
    return results


def check_values(dtype) -> Tuple[float, float]:
    """The new add against the old path: the largest difference of the
    attention input (eval) and of the PE's gradient (train)."""
    torch.manual_seed(1)
    norm, qkv = nn.LayerNorm(64), nn.Linear(64, 192)
    x = torch.randn(4, 17, 64)
    pe = torch.randn(1, 17, 64, requires_grad=True)
    out, grads = {}, {}
    for name, add in list(paths().items())[1:]:
        pe.grad = None
        with torch.autocast('cpu', dtype=dtype):
            y = attention_input(norm, qkv, add, x, pe)
        y.float().square().sum().backward()
        out[name], grads[name] = y.detach().float(), pe.grad.clone()
    (a, b), (ga, gb) = out.values(), grads.values()
    return ((a - b).abs().max().item(),
            ((ga - gb).abs().max() / ga.abs().max()).item())


def parse_shape(text: str) -> Tuple[str, int]:
    model, _, batch = text.partition(':')
    if model not in MODELS or not batch.isdigit():
        raise argparse.ArgumentTypeError(
            f'expected MODEL:BATCH with MODEL in {list(MODELS)}, got {text}')
    return model, int(batch)


def main(argv=None) -> int:
    args = parser(__doc__, (
        ('--shapes', [
            ('deit-tiny', 64), ('deit-base', 32)
        ], 'MODEL:BATCH pairs (default: deit-tiny:64 deit-base:32)',
         dict(type=parse_shape, nargs='+')),
        ('--dtype', 'bfloat16', None, dict(choices=('bfloat16', 'float16'))),
        ('--rounds', 10, None),
        ('--threads', 1, None),
        ('--out', None, 'also write the table (markdown)'),
    )).parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    rows = []
    for model, batch in args.shapes:
        res = measure(model, batch, dtype, args.rounds)
        for name in paths():
            cells = [f'{model} b{batch}', name]
            for mode in ('eval', 'train'):
                r, base = res[(name, mode)], res[('default', mode)]
                cells += [
                    f'{r["bytes"] / 2**20:.1f}',
                    f'{r["bytes"] / base["bytes"]:.3f}', r['ops'],
                    f'{r["ms"]:.2f}'
                ]
            rows.append(cells)
    diff, grad_diff = check_values(dtype)
    note = (f'One layer\'s attention input (norm, PE add, qkv projection) '
            f'under CPU autocast ({args.dtype}), {args.threads} thread(s), '
            f'fastest of {args.rounds} interleaved rounds; MB = bytes read '
            f'and written by every aten op; x = bytes over the default '
            f"join's. add_attn_pe against the float32 add: attention input "
            f'max abs difference {diff:.1e}, PE gradient max relative '
            f'difference {grad_diff:.1e}.')
    text = '\n'.join(
        table(('shape', 'path', 'eval MB', 'eval x', 'eval ops', 'eval ms',
               'train MB', 'train x', 'train ops', 'train ms'), rows))
    print_and_save(f'{text}\n{note}', args.out, f'{text}\n\n{note}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
