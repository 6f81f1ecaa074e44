"""The CUDA toolkit that builds extensions for the installed torch, and the
environment torch's extension builder needs to use it.

References:
    ``torch.utils.cpp_extension`` (how it finds ``CUDA_HOME``, refuses a
    toolkit of another CUDA major, links ``-lcudart`` from
    ``CUDA_HOME/lib64`` or ``lib``, and reads ``TORCH_CUDA_ARCH_LIST``);
    nvcc's ``--dryrun`` output (``#$ TOP=``, the toolkit root nvcc itself
    uses); the layout of NVIDIA's pip wheels (CUDA 13: one
    ``nvidia/cu13/{bin,include,lib}`` tree; CUDA 12: one
    ``nvidia/<library>/{include,lib}`` per library).

The ways a CUDA build fails before it compiles a line, and what this script
does about each:

- no nvcc: one line naming what to install for torch's CUDA major;
- nvcc of another CUDA major than torch's: one line naming both and the
  two fixes;
- an nvcc wrapper script outside the toolkit (torch would guess
  ``CUDA_HOME`` from the wrapper's folder): ``CUDA_HOME`` is the root nvcc
  reports for itself;
- a toolkit assembled from pip wheels: the CUDA library headers torch's
  headers include (``cusparse.h``, ``cublas_v2.h``, ...) are found in
  torch's ``site-packages/nvidia`` tree and put on ``CPATH``; a missing
  ``libcudart.so`` link is made in a folder of the caller's (never in the
  toolkit or in site-packages) and put on ``LIBRARY_PATH``;
- ``FORCE_CUDA=1`` without ``TORCH_CUDA_ARCH_LIST`` and no visible GPU
  (torch's arch code raises ``IndexError``): a default list
  (``scripts/gpu/cuda_arch.py``).

Only the standard library at import (it runs before mmlape is installed);
torch is imported inside the functions that need it.

Example:
    eval "$(python scripts/cuda_env.py --exports --build-dir build/cuda)"
    python scripts/cuda_env.py          # what it found, for a human
"""
import argparse
import glob
import importlib.util
import os
import os.path as osp
import re
import shlex
import shutil
import subprocess
import sys
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

HERE = osp.dirname(osp.abspath(__file__))

#: Headers of the CUDA libraries that torch's CUDA headers include
#: (``ATen/cuda/CUDAContext.h`` and friends); a toolkit without them fails
#: every ``.cu`` file of an extension. ``cuda_runtime_api.h`` is there for
#: toolkits whose runtime lives in another wheel (CUDA 12's pip nvcc).
LIBRARY_HEADERS = ('cuda_runtime_api.h', 'cusparse.h', 'cublas_v2.h',
                   'cublasLt.h', 'cusolverDn.h')
#: Headers of CUDA's C++ core libraries (thrust, cub) that torch's CUDA
#: headers include; CUDA 13 keeps them in ``include/cccl`` (the pip wheel
#: ``nvidia-cuda-cccl``, not a dependency of torch).
CCCL_HEADERS = ('thrust/version.h', 'cub/version.cuh')

#: Where ``--exports`` makes the ``libcudart.so`` link without
#: ``--build-dir``.
DEFAULT_LINK_ROOT = osp.join(
    os.environ.get('XDG_CACHE_HOME') or osp.join('~', '.cache'), 'mmlape',
    'cuda')

Env = Dict[str, str]


class CudaEnvError(RuntimeError):
    """A CUDA build cannot work here; the message says why in one line."""


class Toolkit(NamedTuple):
    """A CUDA toolkit.

    Args:
        home (str): Its root, what ``CUDA_HOME`` must be.
        nvcc (str): ``home/bin/nvcc``.
        version (str): The CUDA release nvcc reports, e.g. ``'13.0'``.
        found_by (str): How it was found, for messages.
        notes (tuple[str]): Things the user should know (e.g. an invalid
            ``CUDA_HOME`` that was passed over).
    """
    home: str
    nvcc: str
    version: str
    found_by: str
    notes: Tuple[str, ...] = ()


def _major(version: str) -> int:
    return int(version.split('.')[0])


def _load_cuda_arch():
    """``scripts/gpu/cuda_arch.py``, the one home of the arch-list logic."""
    name = 'cuda_arch'
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, osp.join(HERE, 'gpu', 'cuda_arch.py'))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


# --------------------------------------------------------------------------
# torch


def torch_versions() -> Tuple[str, Optional[str]]:
    """``(torch.__version__, torch.version.cuda)``; the latter is None for
    a CPU-only build.

    Raises:
        CudaEnvError: torch is not installed.
    """
    try:
        import torch
    except ImportError as err:
        raise CudaEnvError(f'torch is not installed ({err}); install torch '
                           f'before building CUDA extensions') from err
    return torch.__version__, torch.version.cuda


def torch_site_packages() -> Optional[str]:
    """The site-packages folder torch is installed in (torch is not
    imported), or None."""
    spec = importlib.util.find_spec('torch')
    if spec is None or not spec.submodule_search_locations:
        return None
    return osp.dirname(osp.abspath(list(spec.submodule_search_locations)[0]))


def installed_version(name: str) -> Optional[str]:
    """The installed version of a distribution, or None."""
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def nvcc_install_hint(torch_cuda: str,
                      cuda_toolkit: Optional[str] = None) -> str:
    """How to get an nvcc for torch's CUDA version, in a few words.

    Args:
        torch_cuda (str): ``torch.version.cuda``.
        cuda_toolkit (str, optional): The installed version of NVIDIA's
            ``cuda-toolkit`` meta-package (CUDA 13 torch wheels require it):
            its ``nvcc`` and ``cccl`` extras of that version match torch's
            CUDA libraries exactly.
    """
    major = _major(torch_cuda)
    if major >= 13:
        pip = (f'cuda-toolkit[nvcc,cccl]=={cuda_toolkit}'
               if cuda_toolkit else f'cuda-toolkit[nvcc,cccl]=={torch_cuda}.*')
    else:
        pip = f'nvidia-cuda-nvcc-cu{major}=={torch_cuda}.*'
    return (f'`module load cuda/{major}.x` or your site\'s equivalent, '
            f'`pip install "{pip}"`, or CUDA_HOME set to a CUDA {major} '
            f'toolkit')


# --------------------------------------------------------------------------
# the toolkit


def nvcc_release(nvcc: str) -> str:
    """The CUDA release of an nvcc (``'13.0'``).

    Raises:
        CudaEnvError: It does not run or does not say.
    """
    try:
        out = subprocess.run([nvcc, '--version'],
                             capture_output=True,
                             text=True,
                             timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise CudaEnvError(f'{nvcc} --version failed: {err}') from err
    found = re.search(r'release (\d+\.\d+)', out.stdout)
    if out.returncode or not found:
        text = (out.stdout + out.stderr).strip().replace('\n', ' ')[:200]
        raise CudaEnvError(f'{nvcc} --version does not report a CUDA '
                           f'release (exit {out.returncode}): {text}')
    return found.group(1)


def nvcc_root(nvcc: str) -> str:
    """The toolkit root behind an nvcc, also when ``nvcc`` is a wrapper
    script or a link outside the toolkit.

    nvcc reads ``bin/nvcc.profile`` relative to its own binary and prints
    the resulting ``TOP`` (the toolkit root) with ``--dryrun``; this asks it
    (nothing is compiled or written). Where that does not answer, the
    folder above the resolved binary.
    """
    try:
        out = subprocess.run([nvcc, '--dryrun', '-E', '-x', 'cu', os.devnull],
                             capture_output=True,
                             text=True,
                             timeout=120)
        found = re.search(r'^#\$ TOP=(.+)$', out.stdout + out.stderr, re.M)
    except (OSError, subprocess.TimeoutExpired):
        found = None
    if found:
        root = found.group(1).strip().strip('"')
        if osp.isfile(osp.join(root, 'bin', 'nvcc')):
            return osp.realpath(root)
    return osp.dirname(osp.dirname(osp.realpath(nvcc)))


def _is_toolkit(home: str) -> bool:
    nvcc = osp.join(home, 'bin', 'nvcc')
    return osp.isfile(nvcc) and os.access(nvcc, os.X_OK)


def wheel_nvccs(site_packages: Optional[str], major: int) -> List[str]:
    """Where NVIDIA's pip nvcc wheel for CUDA ``major`` puts nvcc."""
    if not site_packages:
        return []
    return [
        osp.join(site_packages, 'nvidia', f'cu{major}', 'bin', 'nvcc'),
        osp.join(site_packages, 'nvidia', 'cuda_nvcc', 'bin', 'nvcc')
    ]


def find_toolkit(env: Env,
                 torch_cuda: str,
                 site_packages: Optional[str] = None,
                 cuda_toolkit: Optional[str] = None) -> Toolkit:
    """Find the CUDA toolkit a build would use.

    In order: ``CUDA_HOME`` (or ``CUDA_PATH``) when it holds ``bin/nvcc``;
    the root behind ``nvcc`` on ``env['PATH']`` (see :func:`nvcc_root`);
    an nvcc of torch's CUDA major from NVIDIA's pip wheel in
    ``site_packages``. A ``CUDA_HOME`` without ``bin/nvcc`` is passed over
    with a note.

    Args:
        env (dict): The environment (``PATH``, ``CUDA_HOME``, ...).
        torch_cuda (str): ``torch.version.cuda``, for the hint when none is
            found.
        site_packages (str, optional): Where torch is installed.
        cuda_toolkit (str, optional): See :func:`nvcc_install_hint`.

    Raises:
        CudaEnvError: No toolkit anywhere.
    """
    notes = []
    for name in ('CUDA_HOME', 'CUDA_PATH'):
        home = env.get(name)
        if not home:
            continue
        if _is_toolkit(home):
            nvcc = osp.join(home, 'bin', 'nvcc')
            return Toolkit(home, nvcc, nvcc_release(nvcc), name)
        notes.append(f'{name}={home} has no bin/nvcc; ignored it')
        break
    nvcc = shutil.which('nvcc', path=env.get('PATH', ''))
    if nvcc:
        home = nvcc_root(nvcc)
        if _is_toolkit(home):
            real = osp.join(home, 'bin', 'nvcc')
            return Toolkit(home, real, nvcc_release(real),
                           f'nvcc on PATH ({nvcc})', tuple(notes))
        notes.append(f'cannot find the toolkit behind {nvcc}')
    for candidate in wheel_nvccs(site_packages, _major(torch_cuda)):
        home = osp.dirname(osp.dirname(candidate))
        if _is_toolkit(home):
            return Toolkit(home, candidate, nvcc_release(candidate),
                           'the nvcc pip wheel', tuple(notes))
    extra = f' ({"; ".join(notes)})' if notes else ''
    raise CudaEnvError(f'no CUDA compiler: nvcc is not on PATH and CUDA_HOME '
                       f'is not set{extra}; torch (CUDA {torch_cuda}) needs '
                       f'a CUDA {_major(torch_cuda)} toolkit: '
                       f'{nvcc_install_hint(torch_cuda, cuda_toolkit)}')


def _cpu_torch(torch_version: str) -> CudaEnvError:
    return CudaEnvError(f'torch {torch_version} is a CPU-only build '
                        f'(torch.version.cuda is None): it builds no CUDA '
                        f'extensions; install a CUDA build of torch')


def check_versions(toolkit: Toolkit,
                   torch_version: str,
                   torch_cuda: Optional[str],
                   cuda_toolkit: Optional[str] = None) -> None:
    """Refuse what torch's extension builder would refuse, in one line.

    Raises:
        CudaEnvError: torch is a CPU-only build, or nvcc's CUDA major is not
            torch's.
    """
    if torch_cuda is None:
        raise _cpu_torch(torch_version)
    if _major(toolkit.version) != _major(torch_cuda):
        raise CudaEnvError(
            f'nvcc is CUDA {toolkit.version} ({toolkit.home}) but torch '
            f'{torch_version} is built for CUDA {torch_cuda}, and torch '
            f'refuses another CUDA major; fix one of the two: a CUDA '
            f'{_major(torch_cuda)} toolkit '
            f'({nvcc_install_hint(torch_cuda, cuda_toolkit)}), or a torch '
            f'built for CUDA {_major(toolkit.version)}')


# --------------------------------------------------------------------------
# the pip-wheel layout


def toolkit_include_dirs(home: str) -> List[str]:
    """The include folders a build for this toolkit searches: ``include``
    (torch's ``-I``), and nvcc's own ``targets/<platform>/include`` and
    ``.../include/cccl``, which it takes from ``include`` where there is no
    ``targets`` folder (the pip wheels' layout; its ``--dryrun`` shows
    ``_TARGET_DIR_=`` empty then)."""
    targets = sorted(glob.glob(osp.join(home, 'targets', '*', 'include')))
    roots = [osp.join(home, 'include')] + (
        targets or [osp.join(home, 'include')])
    return list(dict.fromkeys(roots + [osp.join(r, 'cccl') for r in roots]))


def wheel_include_dirs(site_packages: Optional[str], major: int) -> List[str]:
    """Include folders of NVIDIA's CUDA wheels in ``site_packages``:
    ``nvidia/cu<major>/include`` (CUDA 13 and later), then every
    ``nvidia/<library>/include`` (CUDA 12), in a fixed order; the trees of
    other CUDA majors (``nvidia/cu<other>``) are left out."""
    if not site_packages:
        return []
    root = osp.join(site_packages, 'nvidia')
    own = osp.join(root, f'cu{major}', 'include')
    dirs = [own] if osp.isdir(own) else []
    for d in sorted(glob.glob(osp.join(root, '*', 'include'))):
        if not re.fullmatch(r'cu\d+', osp.basename(osp.dirname(d))):
            dirs.append(d)
    return dirs


def library_include_dirs(
        home: str,
        site_packages: Optional[str],
        major: int,
        headers: Sequence[str] = LIBRARY_HEADERS + CCCL_HEADERS) -> List[str]:
    """The folders to put on ``CPATH`` so that every header in ``headers``
    is found: none when the build sees them all already, else for each
    missing one the first of the wheels' include folders
    (:func:`wheel_include_dirs`) or their ``cccl`` subfolders holding it.

    Raises:
        CudaEnvError: A header is neither in the toolkit nor in a wheel.
    """
    have = toolkit_include_dirs(home)
    wheels = wheel_include_dirs(site_packages, major)
    candidates = wheels + [osp.join(d, 'cccl') for d in wheels]
    dirs: List[str] = []
    for header in headers:
        if any(osp.isfile(osp.join(d, header)) for d in have + dirs):
            continue
        found = [d for d in candidates if osp.isfile(osp.join(d, header))]
        if not found:
            where = f'{home}/include' + (f' nor under {site_packages}/nvidia'
                                         if site_packages else '')
            fix = ('`pip install "cuda-toolkit[cccl]"` of your CUDA version'
                   if header in CCCL_HEADERS else 'the CUDA wheels of torch')
            raise CudaEnvError(
                f'{header} (a CUDA header torch\'s CUDA headers include) is '
                f'neither in {where}: install the full CUDA {major} toolkit '
                f'or {fix}')
        dirs.append(found[0])
    return dirs


def torch_lib_dir(home: str) -> str:
    """The folder torch's extension builder links ``-lcudart`` from:
    ``lib64``, or ``lib`` where there is no ``lib64``."""
    lib64 = osp.join(home, 'lib64')
    return lib64 if osp.isdir(lib64) else osp.join(home, 'lib')


def cudart_link_dir(home: str,
                    major: int,
                    link_root: str,
                    site_packages: Optional[str] = None) -> Optional[str]:
    """Make ``-lcudart`` work: None when the folder torch links from has
    ``libcudart.so``, else a folder under ``link_root`` holding a
    ``libcudart.so`` link to the toolkit's (or torch's wheel's)
    ``libcudart.so.<major>``, to put on ``LIBRARY_PATH``. Neither the
    toolkit nor site-packages is written.

    Raises:
        CudaEnvError: No ``libcudart.so.<major>`` anywhere.
    """
    if osp.exists(osp.join(torch_lib_dir(home), 'libcudart.so')):
        return None
    dirs = [osp.join(home, 'lib64'),
            osp.join(home, 'lib')] + sorted(
                glob.glob(osp.join(home, 'targets', '*', 'lib')))
    if site_packages:
        dirs += [
            osp.join(site_packages, 'nvidia', f'cu{major}', 'lib'),
            osp.join(site_packages, 'nvidia', 'cuda_runtime', 'lib')
        ]
    for d in dirs:
        found = sorted(glob.glob(osp.join(d, f'libcudart.so.{major}*')))
        if found:
            target = osp.realpath(found[0])
            break
    else:
        raise CudaEnvError(f'neither libcudart.so nor libcudart.so.{major} '
                           f'is in {torch_lib_dir(home)}: the toolkit lacks '
                           f'its CUDA runtime')
    folder = osp.join(osp.abspath(osp.expanduser(link_root)), 'cuda_lib')
    os.makedirs(folder, exist_ok=True)
    link = osp.join(folder, 'libcudart.so')
    if not (osp.islink(link) and os.readlink(link) == target):
        if osp.lexists(link):
            os.remove(link)
        os.symlink(target, link)
    return folder


# --------------------------------------------------------------------------
# the arch list


def build_arch_list(
        env: Env, capabilities: Sequence[Tuple[int, int]],
        supported: Optional[Sequence[Tuple[int, int]]]) -> Optional[str]:
    """The ``TORCH_CUDA_ARCH_LIST`` a build should get.

    The user's when set; else the visible GPUs' (``capabilities``); else,
    with ``FORCE_CUDA=1``, the default list of
    ``cuda_arch.default_arch_list`` (torch would fail on no GPU); else
    None (a build without a GPU and without ``FORCE_CUDA`` compiles no CUDA
    code).

    Raises:
        CudaEnvError: A GPU older than everything nvcc targets.
    """
    if env.get('TORCH_CUDA_ARCH_LIST'):
        return env['TORCH_CUDA_ARCH_LIST']
    cuda_arch = _load_cuda_arch()
    try:
        if capabilities:
            return cuda_arch.arch_list(capabilities, supported)
        if env.get('FORCE_CUDA') == '1':
            return cuda_arch.default_arch_list(supported)
    except ValueError as err:
        raise CudaEnvError(str(err)) from err
    return None


# --------------------------------------------------------------------------
# all together


def _prepend(dirs: Sequence[str], current: Optional[str]) -> str:
    parts = list(dirs) + [p for p in (current or '').split(':') if p]
    return ':'.join(dict.fromkeys(parts))


def build_env(env: Optional[Env] = None,
              link_root: Optional[str] = None,
              torch_version: Optional[str] = None,
              torch_cuda: Optional[str] = None,
              site_packages: Optional[str] = None,
              capabilities: Optional[Sequence[Tuple[int, int]]] = None,
              supported: Optional[Sequence[Tuple[int, int]]] = None,
              cuda_toolkit: Optional[str] = None,
              notes: Optional[List[str]] = None) -> Env:
    """The variables to set for a CUDA build against the installed torch.

    Args:
        env (dict, optional): The environment; defaults to ``os.environ``.
        link_root (str, optional): A folder of the caller's where a
            ``libcudart.so`` link may be made. Defaults to
            ``DEFAULT_LINK_ROOT``.
        torch_version (str, optional): ``torch.__version__``; asked from
            torch when None (then ``torch_cuda`` and ``cuda_toolkit`` are
            asked too).
        torch_cuda (str, optional): ``torch.version.cuda``.
        site_packages (str, optional): torch's site-packages; found when
            None.
        capabilities (Sequence[tuple], optional): The visible GPUs'
            capabilities; asked from torch when None and needed.
        supported (Sequence[tuple], optional): What nvcc targets; asked
            from nvcc when None.
        cuda_toolkit (str, optional): The installed ``cuda-toolkit``
            meta-package's version, for the hint of a missing nvcc.
        notes (list, optional): Receives things worth telling the user.

    Returns:
        dict: Name -> value for ``CUDA_HOME``, and as needed ``PATH``,
        ``CPATH``, ``LIBRARY_PATH``, ``TORCH_CUDA_ARCH_LIST``.

    Raises:
        CudaEnvError: No build is possible; the message says why.
    """
    env = dict(os.environ if env is None else env)
    if torch_version is None:
        torch_version, torch_cuda = torch_versions()
        cuda_toolkit = installed_version('cuda-toolkit')
    if torch_cuda is None:
        raise _cpu_torch(torch_version)
    if site_packages is None:
        site_packages = torch_site_packages()
    toolkit = find_toolkit(env, torch_cuda, site_packages, cuda_toolkit)
    check_versions(toolkit, torch_version, torch_cuda, cuda_toolkit)
    if notes is not None:
        notes.extend(toolkit.notes)
    major = _major(toolkit.version)
    out = {'CUDA_HOME': toolkit.home}
    on_path = shutil.which('nvcc', path=env.get('PATH', ''))
    if not toolkit.found_by.startswith('nvcc on PATH') and (
            not on_path
            or osp.realpath(on_path) != osp.realpath(toolkit.nvcc)):
        # `nvcc` in a shell is the toolkit's, as for torch
        out['PATH'] = _prepend([osp.join(toolkit.home, 'bin')],
                               env.get('PATH'))
    includes = library_include_dirs(toolkit.home, site_packages, major)
    if includes:
        out['CPATH'] = _prepend(includes, env.get('CPATH'))
    link = cudart_link_dir(toolkit.home, major, link_root or DEFAULT_LINK_ROOT,
                           site_packages)
    if link:
        out['LIBRARY_PATH'] = _prepend([link], env.get('LIBRARY_PATH'))
    if not env.get('TORCH_CUDA_ARCH_LIST') and capabilities is None:
        capabilities = _load_cuda_arch().device_capabilities()
    if supported is None:
        supported = _load_cuda_arch().nvcc_archs(toolkit.nvcc)
    arch = build_arch_list(env, capabilities or [], supported)
    if arch:
        out['TORCH_CUDA_ARCH_LIST'] = arch
    return out


def exports(variables: Env, base: Optional[Env] = None) -> str:
    """bash ``export NAME=value`` lines, quoted, for ``eval``.

    A value that extends ``base[NAME]`` (``PATH``, ``CPATH``, ...) is
    written as ``new:"$NAME"``, so that the shell's own value is kept
    rather than this process's (which e.g. pyenv's shims change).
    """
    lines = []
    for name, value in variables.items():
        old = (base or {}).get(name)
        if old and value.endswith(':' + old):
            head = value[:-len(old) - 1]
            lines.append(f'export {name}={shlex.quote(head)}:"${name}"\n')
        else:
            lines.append(f'export {name}={shlex.quote(value)}\n')
    return ''.join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0].replace('\n', ' '))
    parser.add_argument(
        '--exports',
        action='store_true',
        help='print bash export lines for eval (default: a summary)')
    parser.add_argument(
        '--build-dir',
        help='a folder of yours where a libcudart.so link may be made '
        f'(default: {DEFAULT_LINK_ROOT})')
    args = parser.parse_args(argv)
    notes: List[str] = []
    try:
        variables = build_env(link_root=args.build_dir, notes=notes)
    except CudaEnvError as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    for note in notes:
        print(f'note: {note}', file=sys.stderr)
    if args.exports:
        sys.stdout.write(exports(variables, dict(os.environ)))
    else:
        for name, value in variables.items():
            print(f'{name}={value}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
