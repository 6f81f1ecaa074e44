"""Whether this machine has an NVIDIA GPU that torch cannot use (e.g. a
CUDA 13 torch on an older driver, which would silently run on the CPU):
:func:`cuda_problem` says so in one line with the fix, and
:func:`require_usable_gpu` stops unless ``MMLAPE_ALLOW_CPU=1``.

Only the standard library is imported at module level: the installer
loads this file by path before mmlape is installed.

References:
    NVIDIA's CUDA compatibility guide (minimum driver per CUDA major).
"""
import glob
import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

__all__ = [
    'ALLOW_CPU_ENV', 'CudaUnusableError', 'NvidiaGPU', 'cuda_problem',
    'find_nvidia_gpu', 'min_driver', 'require_usable_gpu', 'torch_pair_for'
]

#: The opt-in for running on the CPU of a machine that has an NVIDIA GPU.
ALLOW_CPU_ENV = 'MMLAPE_ALLOW_CPU'

#: The oldest driver each CUDA major version runs on (minor-version
#: compatibility; NVIDIA's CUDA compatibility guide).
MIN_DRIVER: Dict[int, Tuple[int, ...]] = {
    11: (450, 80, 2),
    12: (525, 60, 13),
    13: (580, 65, 6),
}

#: Supported torch pairs: requirements file and CUDA version (``cu13`` is
#: the pin; ``cu12`` for drivers before the 580 series).
TORCH_PAIRS: Dict[str, Tuple[str, str]] = {
    'cu13': ('requirements/torch.txt', '13.0'),
    'cu12': ('requirements/torch-cu12.txt', '12.4'),
}

#: GPU device files (``/dev/nvidia0`` ...; not ``nvidiactl`` or
#: ``nvidia-uvm``, which exist on some hosts without a GPU).
DEVICE_GLOB = '/dev/nvidia[0-9]*'
DRIVER_FILE = '/proc/driver/nvidia/version'


class CudaUnusableError(RuntimeError):
    """An NVIDIA GPU is present but torch cannot use it."""


@dataclass
class NvidiaGPU:
    """What is known of the machine's NVIDIA GPUs.

    Args:
        driver (str, optional): The driver version, e.g. ``'550.54.15'``;
            None when it could not be read.
        names (list[str]): The GPUs' names (empty when only the device
            files were found).
        source (str): How the GPU was found: ``'nvidia-smi'`` or the device
            file.
    """
    driver: Optional[str]
    names: List[str] = field(default_factory=list)
    source: str = 'nvidia-smi'

    def describe(self) -> str:
        what = f'{len(self.names)}x {self.names[0]}' if self.names else \
            'an NVIDIA GPU'
        driver = self.driver or 'unknown'
        return f'{what} (driver {driver})'


def _version_tuple(text: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r'\d+', text))


def find_nvidia_gpu(env: Optional[Mapping[str, str]] = None,
                    device_glob: str = DEVICE_GLOB,
                    driver_file: str = DRIVER_FILE) -> Optional[NvidiaGPU]:
    """Find the machine's NVIDIA GPUs, whatever torch thinks: from
    ``nvidia-smi``, else from the device files (driver from ``/proc``).

    Args:
        env (Mapping, optional): The environment (``PATH``) to look for
            ``nvidia-smi`` in. Defaults to ``os.environ``.
        device_glob (str): The GPU device files.
        driver_file (str): Where the kernel module states its version.

    Returns:
        NvidiaGPU | None: None when the machine has no NVIDIA GPU.
    """
    env = dict(os.environ if env is None else env)
    try:
        out = subprocess.run([
            'nvidia-smi', '--query-gpu=name,driver_version',
            '--format=csv,noheader'
        ],
                             capture_output=True,
                             text=True,
                             timeout=30,
                             env=env)
        rows = [
            line.rsplit(',', 1) for line in out.stdout.splitlines()
            if ',' in line
        ] if out.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        rows = []
    if rows:
        return NvidiaGPU(
            driver=rows[0][1].strip(),
            names=[name.strip() for name, _ in rows],
            source='nvidia-smi')
    devices = sorted(glob.glob(device_glob))
    if not devices:
        return None
    driver = None
    try:
        with open(driver_file, encoding='utf-8') as f:
            found = re.search(
                r'Kernel Module\s+(?:for\s+\S+\s+)?(\d+\.\d+'
                r'(?:\.\d+)?)', f.read())
        driver = found.group(1) if found else None
    except OSError:
        pass
    return NvidiaGPU(driver=driver, source=devices[0])


def min_driver(cuda_version: str) -> Optional[str]:
    """The oldest driver a CUDA version runs on, e.g. ``'12.4'`` ->
    ``'525.60.13'`` (None for a major version not in the table).

    Example:
        >>> min_driver('13.0')
        '580.65.06'
    """
    major = _version_tuple(cuda_version)[0]
    if major not in MIN_DRIVER:
        return None
    return '.'.join(f'{p:02d}' if i else str(p)
                    for i, p in enumerate(MIN_DRIVER[major]))


def _driver_fits(driver: str, cuda_version: str) -> Optional[bool]:
    need = MIN_DRIVER.get(_version_tuple(cuda_version)[0])
    if need is None or not driver:
        return None
    return _version_tuple(driver) >= need


def torch_pair_for(driver: Optional[str]) -> Optional[str]:
    """The first torch pair (:data:`TORCH_PAIRS`) a driver runs, or None.

    Example:
        >>> torch_pair_for('550.54.15'), torch_pair_for('580.95.05')
        ('cu12', 'cu13')
    """
    if driver is None:
        return 'cu13'
    for key, (_, cuda) in TORCH_PAIRS.items():
        if _driver_fits(driver, cuda):
            return key
    return None


def _fix(driver: Optional[str], torch_cuda: Optional[str]) -> str:
    if torch_cuda and _driver_fits(driver or '', torch_cuda):
        return ('check that this process may use the GPU '
                '(CUDA_VISIBLE_DEVICES, the container\'s device access)')
    pair = torch_pair_for(driver)
    if pair is None:
        oldest = min(TORCH_PAIRS.values(), key=lambda p: _version_tuple(p[1]))
        return (f'update the NVIDIA driver to >= {min_driver(oldest[1])} '
                f'(CUDA {oldest[1]}), the oldest driver any supported torch '
                f'runs on')
    req, cuda = TORCH_PAIRS[pair]
    fix = (f'run "TORCH_PAIR={pair} make install" to install the torch of '
           f'{req} (CUDA {cuda})')
    if pair != 'cu13':
        fix += (f', or update the driver to >= '
                f'{min_driver(TORCH_PAIRS["cu13"][1])}')
    return fix


def cuda_problem(gpu: Optional[NvidiaGPU] = None,
                 torch_version: Optional[str] = None,
                 torch_cuda: Optional[str] = None,
                 cuda_available: Optional[bool] = None) -> Optional[str]:
    """One line on why torch cannot use this machine's NVIDIA GPU.

    Args:
        gpu (NvidiaGPU, optional): Defaults to :func:`find_nvidia_gpu`.
        torch_version, torch_cuda (str, optional): Default to the installed
            torch's ``__version__`` and ``version.cuda``.
        cuda_available (bool, optional): Defaults to
            ``torch.cuda.is_available()``.

    Returns:
        str | None: None when there is no NVIDIA GPU or torch can use it.

    Example:
        >>> gpu = NvidiaGPU('550.54.15', ['NVIDIA A100-SXM4-80GB'])
        >>> print(cuda_problem(gpu, '2.13.0', '13.0', False))
        ... # doctest: +NORMALIZE_WHITESPACE
        this machine has 1x NVIDIA A100-SXM4-80GB (driver 550.54.15) but
        torch 2.13.0 (CUDA 13.0) cannot use it: CUDA 13.0 needs driver >=
        580.65.06; run "TORCH_PAIR=cu12 make install" to install the torch
        of requirements/torch-cu12.txt (CUDA 12.4), or update the driver to
        >= 580.65.06 (MMLAPE_ALLOW_CPU=1 runs on the CPU instead)
    """
    gpu = find_nvidia_gpu() if gpu is None else gpu
    if gpu is None:
        return None
    if torch_version is None or cuda_available is None:
        import torch
        torch_version = torch_version or torch.__version__
        torch_cuda = torch_cuda if torch_cuda is not None else \
            torch.version.cuda
        if cuda_available is None:
            cuda_available = torch.cuda.is_available()
    if cuda_available:
        return None
    head = f'this machine has {gpu.describe()} but torch {torch_version}'
    if not torch_cuda:
        why = (f'{head} is a CPU-only build; '
               f'{_fix(gpu.driver, None)}')
    else:
        fits = _driver_fits(gpu.driver or '', torch_cuda)
        if fits is False:
            reason = (f'CUDA {torch_cuda} needs driver >= '
                      f'{min_driver(torch_cuda)}')
        elif gpu.driver is None:
            reason = 'the driver version could not be read'
        else:
            reason = 'torch.cuda.is_available() is False'
        why = (f'{head} (CUDA {torch_cuda}) cannot use it: {reason}; '
               f'{_fix(gpu.driver, torch_cuda)}')
    return f'{why} ({ALLOW_CPU_ENV}=1 runs on the CPU instead)'


def cpu_allowed(env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``MMLAPE_ALLOW_CPU`` opts into the CPU (``1``, ``true``,
    ``yes``)."""
    value = (os.environ if env is None else env).get(ALLOW_CPU_ENV, '')
    return value.strip().lower() in ('1', 'true', 'yes')


def require_usable_gpu(env: Optional[Mapping[str, str]] = None,
                       **kwargs) -> Optional[str]:
    """Stop when an NVIDIA GPU is present and torch cannot use it.

    Args:
        env (Mapping, optional): Where ``MMLAPE_ALLOW_CPU`` is read.
            Defaults to ``os.environ``.
        **kwargs: Passed to :func:`cuda_problem`.

    Returns:
        str | None: The problem, when ``MMLAPE_ALLOW_CPU=1`` lets the run
        go on on the CPU (the caller logs it); None when all is well.

    Raises:
        CudaUnusableError: The one-line problem, when CPU runs are not
            allowed.
    """
    problem = cuda_problem(**kwargs)
    if problem is None:
        return None
    if cpu_allowed(env):
        return problem
    raise CudaUnusableError(problem)
