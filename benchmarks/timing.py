"""Interleaved timing shared by the benchmarks.

Every round runs every model once per mode, so that drift of the machine
(thermal state, other load) affects all models alike; medians over rounds
are robust to the odd slow iteration.
"""
import statistics
import sys
import time
from typing import Callable, Dict, Sequence


def interleaved_medians(models: Dict[str, object],
                        step: Callable[[object, str], None],
                        modes: Sequence[str] = ('eval', 'train'),
                        rounds: int = 10,
                        warmup: int = 2) -> Dict[str, Dict[str, float]]:
    """Median seconds of ``step(model, mode)`` per model and mode.

    ``model.train(mode == 'train')`` is set before each call.
    """
    times = {name: {mode: [] for mode in modes} for name in models}
    for r in range(warmup + rounds):
        for mode in modes:
            for name, model in models.items():
                model.train(mode == 'train')
                start = time.perf_counter()
                step(model, mode)
                if r >= warmup:
                    times[name][mode].append(time.perf_counter() - start)
        print(f'round {r + 1}/{warmup + rounds}', file=sys.stderr)
    return {
        n: {
            m: statistics.median(t)
            for m, t in v.items()
        }
        for n, v in times.items()
    }
