"""What the joins' per-layer add costs under autocast: the bytes it moves,
its ops, and its time, against the default join, in one run (CPU).

A layer's attention input is ``qkv(norm1(x))`` under the default join and
``qkv(norm1(x) + pe)`` under LaPE, PVG and MPVG. Under autocast the norm
returns float32 and the projection casts its input to the autocast dtype.
Three paths are measured on the same tensors:

- ``default``: ``qkv(norm1(x))``;
- ``float32 add``: ``norm1(x) += pe`` in float32, then the projection's cast
  (mmlape before the add learned the autocast dtype);
- ``add_attn_pe``: mmlape's add, which writes the autocast dtype directly
  and so replaces the projection's cast.

The bytes are those every aten op reads and writes (its tensor arguments
and results, views excluded; for a GPU, whose elementwise kernels are bound
by memory, what it moves), counted by a dispatch mode; the matmuls' own
bytes are the same for every path. Eval is the forward without autograd;
train is forward and backward.

Example:
    python benchmarks/bench_pe_add.py
    python benchmarks/bench_pe_add.py --shapes deit-tiny:64 --rounds 20
"""
import argparse
import os.path as osp
import sys
from collections import Counter
from typing import Callable, Dict, Tuple

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from timing import fastest  # noqa: E402

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


def float32_add(h: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """The add as mmlape made it before: in place, in ``h``'s float32."""
    return h.add_(pe)


def paths() -> Dict[str, Callable]:
    from mmlape.models.layers.pe_add import add_attn_pe
    return {
        'default': None,
        'float32 add': float32_add,
        'add_attn_pe': add_attn_pe
    }


def attention_input(norm: nn.Module, qkv: nn.Module, add, x, pe):
    h = norm(x)
    if add is not None:
        h = add(h, pe)
    return qkv(h)


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
        train = mode == 'train'
        cases = {}
        for name, add in paths().items():
            counter = BytesMoved()
            with counter:
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
    a, b = out.values()
    ga, gb = grads.values()
    return ((a - b).abs().max().item(),
            ((ga - gb).abs().max() / ga.abs().max()).item())


def parse_shape(text: str) -> Tuple[str, int]:
    model, _, batch = text.partition(':')
    if model not in MODELS or not batch.isdigit():
        raise argparse.ArgumentTypeError(
            f'expected MODEL:BATCH with MODEL in {list(MODELS)}, got {text}')
    return model, int(batch)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--shapes',
        nargs='+',
        type=parse_shape,
        default=[('deit-tiny', 64), ('deit-base', 32)],
        help='MODEL:BATCH pairs (default: deit-tiny:64 deit-base:32)')
    parser.add_argument(
        '--dtype', choices=('bfloat16', 'float16'), default='bfloat16')
    parser.add_argument('--rounds', type=int, default=10)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--out', help='also write the table (markdown)')
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    rows = [
        '| shape | path | eval MB | eval x | eval ops | eval ms | '
        'train MB | train x | train ops | train ms |', '|' + '---|' * 10
    ]
    for model, batch in args.shapes:
        res = measure(model, batch, dtype, args.rounds)
        for name in paths():
            cells = []
            for mode in ('eval', 'train'):
                r, base = res[(name, mode)], res[('default', mode)]
                cells += [
                    f'{r["bytes"] / 2**20:.1f}',
                    f'{r["bytes"] / base["bytes"]:.3f}', f'{r["ops"]}',
                    f'{r["ms"]:.2f}'
                ]
            rows.append(f'| {model} b{batch} | {name} | ' + ' | '.join(cells) +
                        ' |')
    diff, grad_diff = check_values(dtype)
    note = (f'One layer\'s attention input (norm, PE add, qkv projection) '
            f'under CPU autocast ({args.dtype}), {args.threads} thread(s), '
            f'fastest of {args.rounds} interleaved rounds; MB = bytes read '
            f'and written by every aten op; x = bytes over the default '
            f"join's. add_attn_pe against the float32 add: attention input "
            f'max abs difference {diff:.1e}, PE gradient max relative '
            f'difference {grad_diff:.1e}.')
    table = '\n'.join(rows)
    print(table)
    print(note)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(table + '\n\n' + note + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
