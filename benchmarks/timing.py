"""Interleaved timing shared by the benchmarks.

Every round runs every model once per mode, in an order shuffled per round,
so that drift of the machine (thermal state, other load, cache state left by
the previous model) affects all models alike. The estimate is the minimum
over rounds: on a shared machine noise only ever adds time, and measured
here, minima of repeated runs agree far better than medians do.
"""
import random
import sys
import time
from typing import Callable, Dict, Sequence

Clock = Callable[[], float]


def interleaved_minima(
        models: Dict[str, object],
        step: Callable[[object, str], None],
        modes: Sequence[str] = ('eval', 'train'),
        rounds: int = 10,
        warmup: int = 2,
        clock: Clock = time.perf_counter) -> Dict[str, Dict[str, float]]:
    """Fastest seconds of ``step(model, mode)`` per model and mode.

    ``model.train(mode == 'train')`` is set before each call. ``clock`` is
    wall time by default; ``time.process_time`` (CPU time of this process)
    does not count the time other processes hold the cores, which on a
    crowded machine is most of the noise.
    """
    times = {name: {mode: [] for mode in modes} for name in models}
    order = list(models)
    for r in range(warmup + rounds):
        random.Random(r).shuffle(order)  # no model always runs after another
        for mode in modes:
            for name in order:
                model = models[name]
                model.train(mode == 'train')
                start = clock()
                step(model, mode)
                if r >= warmup:
                    times[name][mode].append(clock() - start)
        print(f'round {r + 1}/{warmup + rounds}', file=sys.stderr)
    return {n: {m: min(t) for m, t in v.items()} for n, v in times.items()}
