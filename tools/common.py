"""What ``tools/train.py`` and ``tools/test.py`` share, and what the
checkpoint converters under ``tools/convert/`` share (:func:`convert_file`).

Wrong input ends a tool with one line on stderr and exit status 2
(:func:`fail`), an OS error on the work dir too (no space, a quota, no
permission, a read-only file system); under ``tools/dist_train.sh`` each
rank also leaves its line in ``$MMLAPE_ERROR_DIR`` so that the script can
end with the first rank's. A tool run as a command ends without a traceback
with status 130 on Ctrl-C (SIGINT, one line on stderr) and 143 on SIGTERM.
"""
import argparse
import contextlib
import logging
import os
import os.path as osp
import signal
import sys
import tempfile
import time
import warnings
from typing import Optional

# mmengine imports pkg_resources; its deprecation notice is not for users.
warnings.filterwarnings('ignore', message='pkg_resources is deprecated')

from mmengine.config import DictAction

from mmlape.apis import UsageError
from mmlape.utils.device import CudaUnusableError
from mmlape.utils.errors import ConfigError, InputError, one_line

__all__ = [
    'CfgOptionsAction', 'ConfigError', 'InputError', 'ToolParser',
    'UsageError', 'check_output_path', 'convert_file', 'fail', 'finish',
    'int_at_least', 'load_config', 'positive_int', 'save_checkpoint_file',
    'setup_runner'
]

#: Errors that building objects from a config raises for a bad config:
#: mmengine's registry (KeyError: unknown type; TypeError: unknown
#: argument) and the options checks of model ``__init__``s (ValueError).
#: They count as input errors only while the tools build from the config.
SETUP_ERRORS = (ValueError, KeyError, TypeError, FileNotFoundError)

#: The work dir of the run this process set up (:func:`setup_runner`):
#: :func:`fail` reports an OS error on it as one line.
_WORK_DIR: Optional[str] = None
#: What the line on Ctrl-C adds: what the stopped run leaves
#: (:func:`setup_runner` sets it).
_STOPPED = ''
#: The process that installed the signal handlers (a DataLoader worker
#: forked from it inherits them and leaves Ctrl-C to its parent).
_MAIN_PID = os.getpid()


class ToolParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line and exit status 2."""

    def error(self, message: str):
        message = f'{message} (see {self.prog} --help)'
        _report(message, 'input')
        self.exit(2, f'error: {message}\n')


def int_at_least(low: int, wanted: str):
    """An argparse type: an integer >= ``low``; ``wanted`` says so in its
    error (``'expected {wanted}, got ...'``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f'expected {wanted}, got "{text}"') from None
        if value < low:
            raise argparse.ArgumentTypeError(f'expected {wanted}, got {value}')
        return value

    return parse


#: An argparse type: an integer >= 1.
positive_int = int_at_least(1, 'a positive integer')


class CfgOptionsAction(DictAction):
    """mmengine's ``DictAction`` (``KEY=VALUE``, ``KEY=V1,V2``,
    ``KEY=[(V1,V2),V3]``), refusing a malformed entry through the parser
    instead of with a traceback."""

    def __call__(self, parser, namespace, values, option_string=None):
        for item in values or []:
            if '=' not in item or item.startswith('='):
                parser.error(f'{option_string} expects KEY=VALUE, got '
                             f'"{item}"')
            try:
                super().__call__(parser, namespace, [item], option_string)
            except AssertionError as err:  # DictAction's bracket check
                parser.error(f'{option_string} "{item}": {err}')


def _report(message: str, kind: str) -> None:
    """Leave this rank's outcome where ``tools/dist_launch.sh`` looks for
    it: ``rank{RANK}.{kind}`` holding the time (ns) and the message."""
    folder = os.environ.get('MMLAPE_ERROR_DIR')
    if not folder:
        return
    rank = os.environ.get('RANK', '0')
    try:
        with open(osp.join(folder, f'rank{rank}.{kind}'), 'w') as f:
            f.write(f'{time.time_ns()} {message}\n')
    except OSError:
        pass


@contextlib.contextmanager
def fail(running: bool = False):
    """Turn input errors into one line on stderr and exit status 2.

    Args:
        running (bool): The block runs the runner (``runner.train()``,
            ``runner.test()``): only mmlape's
            :class:`~mmlape.utils.errors.InputError` counts as an input
            error there; anything else is a bug and keeps its traceback.
            Otherwise (reading the config and building from it) the errors
            of :data:`SETUP_ERRORS` count too. Defaults to False.
    """
    caught = (InputError, CudaUnusableError)
    if not running:
        caught += SETUP_ERRORS
    try:
        yield
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as err:
        message = _input_message(err, caught)
        if message is None:
            _report(f'{type(err).__name__}: {one_line(err)}', 'bug')
            raise
        _report(message, 'input')
        print(f'error: {message}', file=sys.stderr)
        _release_work_dir()
        _exit(2)


def _input_message(err: BaseException, caught) -> Optional[str]:
    """The one line of an input error (or of an OS error on the run's work
    dir), None for a bug."""
    if isinstance(err, caught):
        if isinstance(err, KeyError) and err.args:
            return ' '.join(str(err.args[0]).split())
        return one_line(err)
    if isinstance(err, OSError) and _WORK_DIR is not None:
        from mmlape.hosts.work_dir import work_dir_error
        found = work_dir_error(err, _WORK_DIR)
        return one_line(found) if found is not None else None
    return None


def _release_work_dir() -> None:
    """Release this process's lock of the work dir (a tool run in process,
    as the tests do, may be followed by another run there)."""
    from mmlape.hosts.work_dir import release_work_dir_locks
    release_work_dir_locks()


def _exit(code: int) -> None:
    import torch.distributed as dist
    sys.stdout.flush()
    sys.stderr.flush()
    if dist.is_available() and dist.is_initialized():
        # Leave without the interpreter's teardown: gloo threads still
        # running at exit can abort the process and change its status.
        logging.shutdown()
        os._exit(code)
    sys.exit(code)


def load_config(path, cfg_options, launcher, work_dir, compile=None):
    """Read a config, apply ``--cfg-options`` and set launcher and work dir;
    ``compile`` (``--compile [BACKEND]``: ``'default'`` or a backend name)
    turns the config's ``compile`` on.

    Raises:
        UsageError: The file does not exist or has a syntax error (naming
            the file and line), or an option cannot be applied.
    """
    from mmengine.config import Config

    from mmlape.apis import merge_cfg_options
    from mmlape.hosts.speedups import apply_speedups
    if not osp.isfile(path):
        raise UsageError(f'config file "{path}" does not exist')
    try:
        cfg = Config.fromfile(path)
    except SyntaxError as err:
        # mmengine parses the files without their names: find the file.
        found = _syntax_error(path) or err
        where = found.filename if found.filename not in (None, '<unknown>',
                                                         '<string>') else path
        line = f' line {found.lineno}' if found.lineno else ''
        raise UsageError(
            f'config "{where}"{line}: {found.msg or found}') from None
    if cfg_options:
        merge_cfg_options(cfg, cfg_options)
    apply_speedups(cfg)  # the opt-in speed parts (speedups=dict(...))
    if compile is not None:
        value = cfg.get('compile')
        value = dict(value) if isinstance(value, dict) else {}
        if compile != 'default':
            value['backend'] = compile
        cfg.compile = value or True
    cfg.launcher = launcher
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(path))[0])
    return cfg


def _syntax_error(path, seen=None):
    """The first syntax error in a config or its local ``_base_`` files,
    with the file's name (None if there is none)."""
    import ast
    seen = set() if seen is None else seen
    if path in seen or not osp.isfile(path):
        return None
    seen.add(path)
    with open(path, encoding='utf-8') as f:
        source = f.read()
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as err:
        return err
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == '_base_'
                for t in node.targets)):
            continue
        try:
            bases = ast.literal_eval(node.value)
        except ValueError:
            continue
        for base in [bases] if isinstance(bases, str) else bases:
            if isinstance(base, str) and '::' not in base:
                found = _syntax_error(
                    osp.normpath(osp.join(osp.dirname(path), base)), seen)
                if found:
                    return found
    return None


def check_device() -> Optional[str]:
    """Stop (:class:`~mmlape.utils.device.CudaUnusableError`, one line)
    when this machine has an NVIDIA GPU that torch cannot use, unless
    ``MMLAPE_ALLOW_CPU=1`` opts into the CPU: then the problem is returned
    for the run's log."""
    from mmlape.utils.device import require_usable_gpu
    return require_usable_gpu()


def _rank_and_size(launcher):
    """This process's rank and the number of processes, from the
    launcher's variables (before the process group exists)."""
    env = os.environ
    if launcher in (None, 'none'):
        return 0, 1
    for rank, size in (('RANK', 'WORLD_SIZE'), ('SLURM_PROCID',
                                                'SLURM_NTASKS'),
                       ('OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE')):
        if rank in env and size in env:
            return int(env[rank]), int(env[size])
    return 0, 1


def setup_runner(cfg, phases):
    """Apply mmlape's adjustments of the host libraries
    (:func:`mmlape.hosts.apply`; float32 mmcv ops during the steps of an
    mmdet model), check the device, the launcher, the work dir (a training
    run holds it), the data and its labels, set the loader workers, prepare
    CPU distributed runs, ``FlexibleRunner`` strategies, compiling and the
    optimizer, and build the runner, whose log files are watched
    (:class:`~mmlape.hosts.hooks.WorkDirGuardHook`); a run on the CPU and
    the workers it starts are said once in its log."""
    global _WORK_DIR, _STOPPED
    from mmengine.device import get_device
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    import mmlape  # noqa: F401  (registers the models)
    from mmlape import hosts
    from mmlape.apis import check_run_values, register_scope_modules
    from mmlape.datasets.checks import (check_dataset_paths,
                                        use_checked_image_loading)
    from mmlape.datasets.labels import (check_dataset_labels,
                                        use_checked_label_maps)
    from mmlape.hosts.compile import use_compile_hook
    from mmlape.hosts.hooks import WorkDirGuardHook
    from mmlape.hosts.loader_workers import apply_auto_num_workers
    from mmlape.hosts.runner_setup import (check_flexible_runner,
                                           fit_fused_optimizer)
    from mmlape.hosts.work_dir import (check_work_dir, lock_work_dir,
                                       work_dir_error)
    hosts.apply()
    allowed = check_device()
    hosts.quiet_host_notices()
    register_scope_modules(cfg)
    hosts.check_launcher_env(cfg.launcher)
    check_run_values(cfg, phases)
    use_compile_hook(cfg)
    hosts.use_float32_mmcv_ops(cfg)
    unfused = fit_fused_optimizer(cfg, get_device())
    check_work_dir(cfg.work_dir)
    rank, world_size = _rank_and_size(cfg.launcher)
    if 'train' in phases and rank == 0:  # the ranks of a job share it
        lock_work_dir(cfg.work_dir)
    _WORK_DIR = cfg.work_dir
    _STOPPED = (f'the checkpoints saved in "{cfg.work_dir}" are whole; '
                f'--resume continues from the newest'
                if 'train' in phases else 'nothing was evaluated')
    check_dataset_paths(cfg, phases)
    if rank == 0:  # reads every annotation once; its error stops the job
        check_dataset_labels(cfg, phases)
    use_checked_image_loading(cfg, phases)
    use_checked_label_maps(cfg, phases)
    workers = apply_auto_num_workers(cfg)
    on_cpu = hosts.setup_cpu_distributed(cfg)
    notes = check_flexible_runner(cfg, on_cpu, world_size)
    try:  # the runner writes its log and a copy of the config
        runner = RUNNERS.build(cfg) if 'runner_type' in cfg else \
            Runner.from_cfg(cfg)
    except OSError as err:
        found = work_dir_error(err, cfg.work_dir)
        if found is None:
            raise
        raise found from err
    guard = WorkDirGuardHook()
    guard.watch(runner)
    runner.register_hook(guard)
    hosts.quiet_logger(runner.logger)
    for note in notes:
        runner.logger.info(note)
    if 'train' in phases:
        from mmlape.hosts.batch_recipe import describe_batch
        batch, warning = describe_batch(cfg, runner.world_size)
        runner.logger.info(batch)
        if warning:
            runner.logger.warning(warning)
    if unfused:
        runner.logger.warning(unfused)
    if workers:
        runner.logger.info(workers)
    if allowed:
        runner.logger.warning(
            f'MMLAPE_ALLOW_CPU=1: running on the CPU although {allowed}')
    elif on_cpu:
        runner.logger.info(
            f'no NVIDIA GPU on this machine: {runner.world_size} '
            f'processes run on the CPU (gloo)')
    return runner


def finish():
    """End a distributed process cleanly: tear the process group down, flush
    the logs and exit with status 0 at once.

    The interpreter's own teardown is skipped in a distributed run: gloo's
    threads, still alive while it destroys torch's objects, can abort the
    process after the group is gone ("terminate called without an active
    exception", measured in about one run in five here), which would turn a
    finished run into a failed one. Single-process runs return normally.
    """
    import logging

    import torch.distributed as dist
    _release_work_dir()
    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _stop(signum, frame):
    """End at once with ``128 + signum`` (130 for Ctrl-C, 143 for SIGTERM),
    as a stopped job does, without a traceback: checkpoints are written
    atomically, so nothing saved is lost. Ctrl-C says so in one line on
    stderr. A process forked from the tool (a DataLoader worker) takes
    Ctrl-C as Python does (its loop ends quietly; the tool reports)."""
    if signum == signal.SIGINT and os.getpid() != _MAIN_PID:
        signal.default_int_handler(signum, frame)
    if signum == signal.SIGINT:
        try:
            print(interrupted_line(_STOPPED), file=sys.stderr)
        except (OSError, ValueError, RuntimeError):
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, RuntimeError):
            pass
    os._exit(128 + signum)


def interrupted_line(what: str = '') -> str:
    """The line a tool ends with on Ctrl-C (exit status 130)."""
    return f'interrupted (Ctrl-C){": " + what if what else ""}'


def parse_common(parser, argv=None):
    """Add the flags train and test share, parse, and export LOCAL_RANK;
    run as a command (``argv`` None), Ctrl-C ends the tool with one line
    and status 130, SIGTERM with status 143."""
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        default=None,
        help='override config entries: KEY=VALUE ..., as the OpenMMLab '
        'tools (lists as V1,V2 or [V1,V2], tuples as (V1,V2))')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument(
        '--compile',
        nargs='?',
        const='default',
        default=None,
        metavar='BACKEND',
        help='torch.compile the model for training, validation and testing '
        "(the config's `compile` options; BACKEND overrides its backend, "
        'e.g. inductor, aot_eager); falls back to eager with a log line '
        'where compiling cannot work')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    if argv is None:
        global _MAIN_PID
        _MAIN_PID = os.getpid()
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    return args


def check_output_path(path: str,
                      option: str,
                      folder: bool = False,
                      where: Optional[str] = None) -> None:
    """Refuse, before the run, an output the run would fail to write only
    at its end (after the whole evaluation): ``--out`` (a file) is a
    folder, or the folder it goes to (``where``, default ``path``'s own or
    ``path`` itself with ``folder``) cannot be created or written. Nothing
    is created: the first folder of the path that exists takes a temporary
    file.

    Args:
        path (str): The path as given.
        option (str): The option that gave it, for the message.
        folder (bool): ``path`` is a folder (``--show-dir``). Defaults to
            False.
        where (str, optional): The folder the files go to, where a host
            puts them elsewhere than ``path`` (under the work dir).

    Raises:
        UsageError: One line naming the option, the path and the cause.
    """
    if folder:
        target = where or path
        if osp.exists(target) and not osp.isdir(target):
            raise UsageError(f'{option} "{path}": "{target}" is a file, not '
                             f'a folder; choose a folder')
    else:
        if osp.isdir(path):
            raise UsageError(f'{option} "{path}" is a folder; give a file '
                             f'name, e.g. "{osp.join(path, "results.pkl")}"')
        target = where or osp.dirname(path) or '.'
    parent = osp.abspath(target)
    while not osp.exists(parent) and osp.dirname(parent) != parent:
        parent = osp.dirname(parent)
    action = 'written' if parent == osp.abspath(target) else 'created'
    if not osp.isdir(parent):
        raise UsageError(f'{option} "{path}": folder "{target}" cannot be '
                         f'created: "{parent}" is a file')
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as err:
        raise UsageError(f'{option} "{path}": folder "{target}" cannot be '
                         f'{action}: {err.strerror or err}; choose a '
                         f'folder you can write') from None
    if not folder and osp.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f'{option} "{path}" cannot be written: the file '
                         f'is read-only; choose another name')


def converter_parser(doc: str, formats, format_help: str, heads,
                     head_help: str):
    """The arguments every converter under ``tools/convert/`` takes: ``src``,
    ``dst``, ``--format``, ``--head`` (its first choice the default) and
    ``--force``; a converter adds its own before parsing."""
    import argparse
    parser = argparse.ArgumentParser(description=doc.split('\n')[0])
    parser.add_argument('src', help='checkpoint to convert')
    parser.add_argument('dst', help='where to write the mmlape checkpoint')
    parser.add_argument(
        '--format', choices=formats, default=None, help=format_help)
    parser.add_argument(
        '--head', choices=heads, default=heads[0], help=head_help)
    parser.add_argument(
        '--force', action='store_true', help='overwrite an existing dst')
    return parser


def convert_file(src: str, dst: str, force: bool, convert) -> Optional[dict]:
    """Read the checkpoint ``src`` safely (a local file or a URL), convert
    it, write ``dst`` atomically (a kill leaves the old ``dst`` or the new
    one, never part of one): what every converter under ``tools/convert/``
    does.

    Args:
        src (str): The checkpoint to convert: a path or a URL (downloaded
            once to the torch hub cache), ``.pth`` or ``.safetensors``.
        dst (str): Where the converted checkpoint goes (``.safetensors``:
            in that format); refused when it exists unless ``force``.
        force (bool): Overwrite an existing ``dst``.
        convert (callable): The loaded checkpoint to the converted one;
            raises ``ValueError`` for one it cannot convert.

    Returns:
        dict: The converted checkpoint, or None after one line on stderr
        (a missing ``src``, an existing ``dst``, a file that is no safe
        checkpoint, or what ``convert`` refused).
    """
    import pickle

    from mmlape.utils.safe_load import load_checkpoint
    if osp.exists(dst) and not force:
        print(
            f'error: "{dst}" exists; pass --force to overwrite it',
            file=sys.stderr)
        return None
    try:
        ckpt = convert(load_checkpoint(src, 'cpu'))
    except (ValueError, OSError, pickle.UnpicklingError) as err:
        # CheckpointError and UnsafeCheckpointError are ValueErrors
        print(f'error: {err}', file=sys.stderr)
        return None
    save_checkpoint_file(ckpt, dst)
    return ckpt


def save_checkpoint_file(ckpt: dict, dst: str) -> None:
    """Write a checkpoint atomically: ``torch.save``'s format, or
    safetensors (state dict and ``meta``) where ``dst`` ends with
    ``.safetensors``."""
    import io

    import torch

    from mmlape.hosts.hooks import atomic_write
    from mmlape.utils.safetensors_file import safetensors_bytes
    if dst.endswith('.safetensors'):
        atomic_write(dst, safetensors_bytes(ckpt))
        return
    buffer = io.BytesIO()
    torch.save(ckpt, buffer)
    atomic_write(dst, buffer.getbuffer())
