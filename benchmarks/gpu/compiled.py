"""``compile``: ``torch.compile`` per join: graph breaks of the train and
the eval forward (``torch._dynamo.explain``), the graphs compiled (counted
by wrapping the backend: the first train and eval steps, then any
recompile while the steps are timed), and the speed-up of compiled over
eager train and eval steps."""
import time

import torch

from .common import Bench, eval_fn, fmt_rate, free, train_fn
from .deit import DEIT_NAMES, deit_models


def counting_backend(name: str, graphs: list):
    """The ``torch.compile`` backend ``name``, appending to ``graphs`` each
    time it compiles a graph (a first compile or a recompile)."""
    from torch._dynamo.backends.registry import lookup_backend
    inner = lookup_backend(name)

    def backend(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return inner(gm, example_inputs)

    return backend


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
            graphs = []
            compiled = torch.compile(
                model,
                backend=counting_backend(bench.args.compile_backend, graphs))
            opt = torch.optim.AdamW(
                model.parameters(), lr=1e-4, fused=bench.device.type == 'cuda')
            start = time.perf_counter()
            model.train()
            train_fn(bench, compiled, opt, x, y)()
            model.eval()
            eval_fn(bench, compiled, x)()
            bench.sync()
            compile_s = time.perf_counter() - start
            first = len(graphs)
            times = bench.fastest(
                {
                    'eager train': train_fn(bench, model, opt, x, y),
                    'compiled train': train_fn(bench, compiled, opt, x, y),
                    'eager eval': eval_fn(bench, model, x),
                    'compiled eval': eval_fn(bench, compiled, x),
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
                note='; '.join(breaks) + f'; first compile {compile_s:.0f} s'
                f' ({first} graphs); recompiles while timed: '
                f'{len(graphs) - first}')
            del model, compiled, opt
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed('compile', case, join, err)
        finally:
            dynamo.reset()
            free(bench)
