"""Interleaved timing: the one timer of the benchmarks.

Every round runs every case once (or ``iters`` times in a block), in an
order shuffled per round, so that drift of the machine (thermal state,
other load, cache state left by the previous case) affects all cases
alike. The estimate is the minimum over rounds: on a shared machine noise
only ever adds time, and measured here, minima of repeated runs agree far
better than medians do.
"""
import functools
import random
import sys
import time
from typing import Callable, Dict, Hashable, Optional, Sequence, TypeVar

Clock = Callable[[], float]
Key = TypeVar('Key', bound=Hashable)


def fastest(cases: Dict[Key, Callable[[], object]],
            rounds: int = 10,
            warmup: int = 2,
            iters: int = 1,
            setups: Optional[Dict[Key, Callable[[], object]]] = None,
            sync: Callable[[], None] = lambda: None,
            clock: Clock = time.perf_counter,
            progress: bool = False,
            cpu: Optional[Dict] = None) -> Dict[Key, float]:
    """Fastest mean seconds per call of every case.

    ``warmup`` untimed rounds of one call per case come first, then
    ``rounds`` timed ones. A round runs every case in an order shuffled per
    round (seeded by the round: reproducible, and no case always runs after
    another): for each case ``setups[case]()`` if given (e.g.
    ``model.eval()``: once per block, as a test loop does, so that caches
    that ``eval()`` resets live through the block), ``sync()``, the calls
    (``iters`` in a timed round), ``sync()``.

    Args:
        cases (dict): Name -> a call to time.
        rounds (int): Timed rounds. Defaults to 10.
        warmup (int): Untimed rounds (one call per case) before them.
            Defaults to 2.
        iters (int): Calls per case and round; a round's time is their
            mean. Defaults to 1.
        setups (dict, optional): Name -> a call made before each block of
            the case, untimed.
        sync (callable): Waits for queued device work (e.g.
            ``torch.cuda.synchronize``). Defaults to doing nothing.
        clock (callable): Wall time by default; ``time.process_time`` (CPU
            time of this process) does not count the time other processes
            hold the cores, which on a crowded machine is most of the
            noise.
        progress (bool): Report every round on stderr. Defaults to False.
        cpu (dict, optional): Filled with name -> the fastest round's
            CPU seconds of this process per call, over the same calls.

    Returns:
        dict: Name -> the fastest round's seconds per call.
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


def interleaved_minima(
        models: Dict[str, object],
        step: Callable[[object, str], None],
        modes: Sequence[str] = ('eval', 'train'),
        rounds: int = 10,
        warmup: int = 2,
        clock: Clock = time.perf_counter) -> Dict[str, Dict[str, float]]:
    """Fastest seconds of ``step(model, mode)`` per model and mode
    (:func:`fastest` over every pair, reporting every round).

    ``model.train(mode == 'train')`` is set before each call.
    """
    cases, setups = {}, {}
    for name, model in models.items():
        for mode in modes:
            cases[name, mode] = functools.partial(step, model, mode)
            setups[name, mode] = functools.partial(model.train,
                                                   mode == 'train')
    best = fastest(
        cases,
        rounds=rounds,
        warmup=warmup,
        setups=setups,
        clock=clock,
        progress=True)
    return {
        name: {
            mode: best[name, mode]
            for mode in modes
        }
        for name in models
    }
