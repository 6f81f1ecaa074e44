"""What ``tools/train.py`` and ``tools/test.py`` share."""
import contextlib
import os.path as osp
import sys
import warnings

# mmengine imports pkg_resources; its deprecation notice is not for users.
warnings.filterwarnings('ignore', message='pkg_resources is deprecated')

from mmlape.utils.launch import UsageError

__all__ = ['UsageError', 'fail', 'finish', 'load_config', 'setup_runner']


@contextlib.contextmanager
def fail():
    """Turn input errors into one line on stderr and exit status 2."""
    try:
        yield
    except SyntaxError as err:
        print(
            f'error: config "{err.filename}" line {err.lineno}: '
            f'{err.msg}',
            file=sys.stderr)
        sys.exit(2)
    except (UsageError, FileNotFoundError, ValueError, KeyError,
            TypeError) as err:
        message = str(err).strip().strip('"')
        print(f'error: {message}', file=sys.stderr)
        sys.exit(2)


def load_config(path, cfg_options, launcher, work_dir):
    from mmengine.config import Config, DictAction  # noqa: F401
    if not osp.isfile(path):
        raise UsageError(f'config file "{path}" does not exist')
    cfg = Config.fromfile(path)
    if cfg_options:
        options = {}
        for item in cfg_options:
            if '=' not in item:
                raise UsageError(f'--cfg-options expects key=value, got '
                                 f'"{item}"')
            key, value = item.split('=', 1)
            options[key] = _parse_value(value)
        cfg.merge_from_dict(options)
    cfg.launcher = launcher
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(path))[0])
    return cfg


def _parse_value(value):
    import ast
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        if ',' in value:
            return [_parse_value(v) for v in value.split(',')]
        return value


def setup_runner(cfg, phases):
    """Register the scope's modules, check data paths, prepare CPU
    distributed runs and build the runner."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    import mmlape  # noqa: F401  (models, safe checkpoint loading)
    from mmlape.utils.launch import (check_dataset_paths,
                                     register_scope_modules,
                                     setup_cpu_distributed)
    register_scope_modules(cfg)
    check_dataset_paths(cfg, phases)
    setup_cpu_distributed(cfg)
    if 'runner_type' in cfg:
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)


def finish():
    """Tear the process group down before the interpreter exits (gloo
    threads left running at exit can abort the process)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def parse_common(parser, argv=None):
    """Add the flags train and test share, parse, and export LOCAL_RANK."""
    import os
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        default=None,
        help='override config entries: key=value ...')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args
