"""A process that imports the training stack once and forks one training
run (``tools/train.py``'s ``main``) per request, so that a test can kill and
restart real training processes many times without paying the imports each
time.

Protocol (one JSON line each way): the test writes
``{"argv": [...], "log": PATH}``; the server answers ``{"pid": PID}`` once
the run has started, and ``{"pid": PID, "status": CODE}`` when it has ended
(``CODE`` is ``-9`` for a run killed with SIGKILL).
"""
import json
import os
import os.path as osp
import sys

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, ROOT)


def _run(argv, log):
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    code = 1
    try:
        from tools.train import main
        code = main(argv) or 0
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve():
    import warnings
    warnings.filterwarnings('ignore')
    import torch
    torch.set_num_threads(1)
    import mmpretrain.utils
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    import tools.train  # noqa: F401  (mmengine, mmlape)
    print(json.dumps({'ready': True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run(request['argv'], request['log'])
        print(json.dumps({'pid': pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else \
            os.WEXITSTATUS(status)
        print(json.dumps({'pid': pid, 'status': code}), flush=True)


if __name__ == '__main__':
    serve()
