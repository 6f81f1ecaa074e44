"""What the benchmarks share: the one timer (:func:`fastest`), markdown
tables, the joins, and the configs and tool runs of the scripts that train.

The timer interleaves: every round runs every case (or ``iters`` calls of
it), in an order shuffled per round, so that drift of the machine affects
all cases alike; the estimate is the fastest round, since on a shared
machine noise only ever adds time (minima of repeated runs agree far better
than medians)."""
import argparse
import functools
import os
import os.path as osp
import random
import subprocess
import sys
import time
import traceback
from typing import Dict, Iterable, List, Optional, Sequence

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
if ROOT not in sys.path:  # mmlape and tools/ from this checkout
    sys.path.insert(1, ROOT)
#: The 64-dim ViT of the ``--tiny`` runs.
TINY_ARCH = dict(
    embed_dims=64, num_layers=4, num_heads=2, feedforward_channels=256)
#: Backbone arguments of a join without a class token (classification).
GAP = dict(with_cls_token=False, out_type='avg_featmap')
#: Targets of the issue: step time ratios to the default join.
TARGETS = {'train': 1.03, 'eval': 1.01}


def fastest(cases: Dict,
            rounds: int = 10,
            warmup: int = 2,
            iters: int = 1,
            setups: Optional[Dict] = None,
            sync=lambda: None,
            clock=time.perf_counter,
            progress: bool = False,
            cpu: Optional[Dict] = None) -> Dict:
    """Fastest mean seconds per call of every case (name -> call).

    ``warmup`` untimed rounds of one call per case, then ``rounds`` timed
    ones of ``iters`` calls, each case's block as ``setups[case]()`` (e.g.
    ``model.eval()``, untimed), ``sync()``, the calls, ``sync()``, in an
    order shuffled per round (seeded by the round). ``clock``:
    ``time.process_time`` leaves out the time other processes hold the
    cores; ``progress``: each round on stderr; ``cpu`` is filled with each
    case's CPU seconds per call in its fastest round of CPU time.
    """
    setups = setups or {}
    times: Dict = {name: [] for name in cases}
    cpus: Dict = {name: [] for name in cases}
    order = list(cases)
    for r in range(warmup + rounds):
        random.Random(r).shuffle(order)
        for name in order:
            setups.get(name, lambda: None)()
            sync()
            calls = iters if r >= warmup else 1
            start, cpu_start = clock(), time.process_time()
            for _ in range(calls):
                cases[name]()
            sync()
            if r >= warmup:
                times[name].append((clock() - start) / calls)
                cpus[name].append((time.process_time() - cpu_start) / calls)
        if progress:
            print(f'round {r + 1}/{warmup + rounds}', file=sys.stderr)
    if cpu is not None:
        cpu.update({name: min(t) for name, t in cpus.items()})
    return {name: min(t) for name, t in times.items()}


def interleaved_minima(models: Dict, step, modes=('eval', 'train'), **kw):
    """Fastest seconds of ``step(model, mode)`` per model and mode, with
    ``model.train(mode == 'train')`` before each block (:func:`fastest`
    with ``kw``, reporting every round)."""
    cases, setups = {}, {}
    for name, model in models.items():
        for mode in modes:
            cases[name, mode] = functools.partial(step, model, mode)
            setups[name, mode] = functools.partial(model.train,
                                                   mode == 'train')
    best = fastest(cases, setups=setups, progress=True, **kw)
    return {n: {mode: best[n, mode] for mode in modes} for n in models}


def table(columns: Sequence, rows: Iterable[Sequence]) -> List[str]:
    """A markdown table's lines: the header, then one line per row (each
    cell as ``str`` writes it; a row may stop early, e.g. a failure's)."""

    def line(cells: Sequence) -> str:
        return '| ' + ' | '.join(str(c) for c in cells) + ' |'

    return [line(columns), '|' + '---|' * len(columns)
            ] + [line(r) for r in rows]


def print_and_save(text: str, out: Optional[str], saved=None) -> None:
    """Print ``text``; write ``saved`` (else ``text``) to ``out`` if any."""
    print(text)
    if out:
        with open(out, 'w') as f:
            f.write(text if saved is None else saved)


def parser(doc: str, options: Sequence) -> argparse.ArgumentParser:
    """A parser described by the first paragraph of ``doc``, with
    ``options``: rows ``(flags, default, help[, more keywords])``, where a
    default False makes a flag, a type (``int``) an option of that type
    without default, and a list (without a ``type``) ``nargs='+'``."""
    parser = argparse.ArgumentParser(
        description=doc.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    for flags, default, help_, *more in options:
        kw, more = dict(default=default, help=help_), dict(*more)
        if default is False:
            kw['action'] = 'store_true'
        elif isinstance(default, type):
            kw.update(type=default, default=None)
        elif isinstance(default, list) and 'type' not in more:
            kw.update(nargs='+', type=type(default[0]))
        elif default is not None and 'type' not in more:
            kw['type'] = type(default)
        parser.add_argument(*flags.split(), **kw, **more)
    return parser


def join_names(with_configs: bool = False) -> List[str]:
    """Registered joins in the tables' order (``with_configs``: those the
    papers compare), read from the registry when called."""
    from mmlape.models.layers import pe_join_classes
    return list(pe_join_classes(with_configs))


def join_class(name: str):
    """The registered class of join ``name``, or None (e.g. ``timm``)."""
    from mmlape.registry import PE_JOINS
    return PE_JOINS.module_dict.get(name)


def targeted(name: str) -> bool:
    """Whether the cost targets hold for ``name``: a join that is not a
    baseline (LaPE, PVG, MPVG, ...)."""
    cls = join_class(name)
    return cls is not None and not cls.baseline


def error_text(err: BaseException, limit: int) -> str:
    """A failure's one-line message for its row (the traceback to
    stderr)."""
    traceback.print_exc(file=sys.stderr)
    return f'{type(err).__name__}: {err}'.replace('\n', ' ')[:limit]


def write_config(path: str, base: str, over: Dict) -> str:
    """A config file at ``path`` inheriting ``base`` (from the repository
    root) with ``over``."""
    os.makedirs(osp.dirname(path) or '.', exist_ok=True)
    with open(path, 'w') as f:
        f.write(f'_base_ = {osp.join(ROOT, base)!r}\n')
        f.writelines(f'{key} = {value!r}\n' for key, value in over.items())
    return path


def run_tool(cmd: List[str], log: str, threads=None, mode='w', **env):
    """Run a command line from the repository root (on its import path,
    unbuffered, ``threads`` OMP threads where given, ``env`` added), its
    output to ``log``; its wall seconds. A failure raises with the log's
    tail."""
    path = os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')])
    env = dict(os.environ, PYTHONPATH=path.rstrip(os.pathsep), **env)
    env['PYTHONUNBUFFERED'] = '1'
    if threads:
        env['OMP_NUM_THREADS'] = str(threads)
    start = time.perf_counter()
    with open(log, mode) as f:
        out = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    if out.returncode:
        with open(log) as f:
            tail = f.read()[-1500:]
        tool = cmd[1] if cmd[0] == sys.executable else cmd[0]
        raise RuntimeError(f'{osp.relpath(tool, ROOT)} exited with '
                           f'{out.returncode} (log {log}): ...{tail}')
    return time.perf_counter() - start
