"""torchrun for ``tools/dist_launch.sh``: a stop request ends it quietly.

Run as ``python tools/torchrun.py [torchrun arguments]``. On SIGTERM (or
SIGINT, SIGHUP) torchrun stops its ranks, waits for them, and then raises
its ``SignalException``, which would print a traceback and exit with
status 1; here it exits with ``128 + the signal's number`` (143 for
SIGTERM), the status of a stopped job, instead.
"""
import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.run import main


def run(argv=None) -> int:
    """Run torchrun with ``argv``; return its exit status."""
    try:
        main(argv)
    except SignalException as err:
        return 128 + int(err.sigval)
    return 0


if __name__ == '__main__':
    sys.exit(run())
