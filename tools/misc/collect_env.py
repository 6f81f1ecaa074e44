"""What a bug report needs to say about the machine and the environment.

mmengine's ``collect_env`` (Python, the platform, GCC, PyTorch and how it
was built, CUDA_HOME and nvcc, torchvision, OpenCV, mmengine), and beside
it: mmlape's version (and, in a checkout, its commit), how mmlape is
installed and whether ``mmlape::`` config bases resolve, the host
libraries' versions, torch's CUDA and cuDNN, whether mmcv's compiled ops
are there and were built with CUDA, the NVIDIA GPUs and driver as the
machine reports them (even when torch cannot use them, with the one-line
reason ``tools/train.py`` would stop with).

It imports nothing of mmcv's beyond its compiled ops library: mmcv's own
``get_compiling_cuda_version()`` crashed the interpreter on a machine
where the ops ran (``scripts/check_env.py``), so the CUDA build is read
from the library's ELF sections.

Example:
    python tools/misc/collect_env.py
    python tools/misc/collect_env.py --json
"""
import argparse
import importlib.util
import json
import os
import os.path as osp
import subprocess
import sys
import warnings
from collections import OrderedDict
from importlib import metadata
from typing import Mapping, Optional

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

#: The installed distributions a report names (distribution, label).
PACKAGES = (('mmcv', 'MMCV'), ('mmpretrain', 'MMPretrain'),
            ('mmdet', 'MMDetection'), ('mmsegmentation', 'MMSegmentation'),
            ('timm', 'timm'), ('safetensors', 'safetensors'), ('triton',
                                                               'Triton'))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument(
        '--json', action='store_true', help='print JSON instead of lines')
    return parser.parse_args(argv)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return 'not installed'


def _git(*args: str) -> Optional[str]:
    try:
        out = subprocess.run(['git', '-C', ROOT, *args],
                             capture_output=True,
                             text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def mmlape_version() -> str:
    """``mmlape.__version__``, with the checkout's commit (and ``+local
    changes`` when tracked files differ from it) where there is one."""
    import mmlape
    version = mmlape.__version__
    if osp.isdir(osp.join(ROOT, '.git')):
        commit = _git('rev-parse', '--short', 'HEAD')
        if commit:
            dirty = _git('status', '--porcelain', '--untracked-files=no')
            version += f' ({commit}{" + local changes" if dirty else ""})'
    return version


#: Run outside the checkout: where mmengine looks ``mmlape::`` bases up.
_MIM_CONFIGS = """
import os.path as osp, warnings
warnings.simplefilter('ignore')
from mmengine.utils import get_installed_path
print(osp.join(get_installed_path('mmlape'), '.mim', 'configs'))
"""


def mmlape_install() -> str:
    """Where mmlape is imported from, how it is installed, and whether
    mmengine resolves ``mmlape::`` config bases in a process started
    outside the checkout (the host libraries' tools, a project of your
    own)."""
    import mmlape
    where = osp.dirname(osp.abspath(mmlape.__file__))
    dists = list(metadata.distributions(name='mmlape'))
    editable = any(
        json.loads(d.read_text('direct_url.json') or '{}').get(
            'dir_info', {}).get('editable') for d in dists)
    kind = 'editable install' if editable else \
        'installed package' if dists else 'not installed, found on the path'
    out = subprocess.run([sys.executable, '-c', _MIM_CONFIGS],
                         capture_output=True,
                         text=True,
                         cwd=osp.sep)
    lines = out.stdout.strip().splitlines()
    if out.returncode or not lines:
        error = (out.stderr.strip().splitlines() or ['?'])[-1]
        bases = f'do not resolve ({error})'
    elif osp.isdir(lines[-1]):
        bases = 'resolve'
    else:
        bases = f'do not resolve outside the checkout (no {lines[-1]})'
    return f'{where} ({kind}); mmlape:: config bases {bases}'


def _elf_section_names():
    """``scripts/check_env.py``'s ELF reader, where the checkout has it."""
    path = osp.join(ROOT, 'scripts', 'check_env.py')
    if not osp.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location('mmlape_check_env', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.elf_section_names


def mmcv_ops() -> str:
    """Whether mmcv's compiled ops load and were built with CUDA."""
    try:
        import mmcv._ext as ext
    except Exception as err:  # ImportError, or an undefined symbol
        return f'not available ({type(err).__name__}: {err})'
    sections = _elf_section_names()
    if sections is None:
        return f'compiled ({ext.__file__}; CUDA build not checked)'
    cuda = '.nv_fatbin' in sections(ext.__file__)
    return f'compiled {"with" if cuda else "without"} CUDA ({ext.__file__})'


def gpus(env: Optional[Mapping[str, str]] = None) -> 'OrderedDict[str, str]':
    """The NVIDIA GPUs and driver as the machine reports them
    (``nvidia-smi``, else the device files), what torch sees, and why
    torch cannot use them, when it cannot."""
    import torch

    from mmlape.utils.device import cuda_problem, find_nvidia_gpu
    info = OrderedDict()
    gpu = find_nvidia_gpu(env)
    info['NVIDIA GPUs'] = gpu.describe() if gpu else 'none found'
    if torch.cuda.is_available():
        names = [
            torch.cuda.get_device_name(i)
            for i in range(torch.cuda.device_count())
        ]
        capability = torch.cuda.get_device_capability(0)
        info['GPUs torch uses'] = (f'{len(names)}: {", ".join(names)} '
                                   f'(compute capability {capability[0]}.'
                                   f'{capability[1]})')
    else:
        info['GPUs torch uses'] = 'none'
    info['GPU problem'] = cuda_problem(gpu) or 'none'
    return info


def collect_env(
        env: Optional[Mapping[str, str]] = None) -> 'OrderedDict[str, str]':
    """Everything the report prints, by name.

    Args:
        env (Mapping, optional): Where ``nvidia-smi`` is looked for
            (``PATH``). Defaults to ``os.environ``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        import torch
        from mmengine.utils.dl_utils import collect_env as mmengine_env
        base = mmengine_env()
    info = OrderedDict()
    info['mmlape'] = mmlape_version()
    info['mmlape install'] = mmlape_install()
    for key, value in base.items():
        if key != 'numpy_random_seed':  # a fresh draw, of no use here
            info[key] = str(value)
    info['PyTorch CUDA'] = torch.version.cuda or 'none (a CPU-only build)'
    cudnn = torch.backends.cudnn.version() if torch.version.cuda else None
    info['cuDNN'] = str(cudnn) if cudnn else 'none'
    for name, label in PACKAGES:
        info[label] = _version(name)
    info['MMCV ops'] = mmcv_ops()
    info.update(gpus(env))
    return info


def main(argv=None) -> int:
    args = parse_args(argv)
    info = collect_env(os.environ)
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        for name, value in info.items():
            print(f'{name}: {value}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
