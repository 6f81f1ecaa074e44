"""Download, here, what the GPU machine lacks to run mmlape (no network
there): wheels for Python 3.12 / manylinux x86_64 and the mmcv sdist.

References:
    pip's ``download`` command (``--only-binary``, ``--python-version``,
    ``--platform``) and the core metadata ``Requires-Dist`` field (PEP 508
    requirements with environment markers) that the dependency walk reads.

The versions come from ``requirements/*.txt`` (the project's one list of
pins); nothing here repeats them. A requirement is fetched when
``scripts/gpu/device_packages.txt`` (the GPU image's own distributions) does
not list it, or when requirements/*.txt gives it a version specifier (the
image's version is not known here). Dependencies are then followed through
each downloaded file's metadata, with the same rule, until nothing is
missing. ``mmcv`` has no wheel: its sdist travels and
``scripts/gpu/setup.sh`` builds it there, with CUDA ops.

The result (default ``.whl/``, git-ignored) travels to the GPU machine with
the working tree, which may hold 64 MiB in all: the script measures the set
and the rest of the tree, and fails when the sum is over that limit.

Example:
    python scripts/gpu/fetch_wheels.py            # download into .whl/
    python scripts/gpu/fetch_wheels.py --list     # the plan, no network
"""
import argparse
import hashlib
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.parser import Parser
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
#: The requirement files whose entries the GPU machine needs (torch.txt and
#: tests.txt stay behind: the machine has its own torch and pytest).
REQUIREMENT_FILES = ('requirements/build.txt', 'requirements/openmmlab.txt',
                     'requirements/runtime.txt')
DEVICE_PACKAGES = osp.join(ROOT, 'scripts', 'gpu', 'device_packages.txt')
#: Distributions built on the GPU machine from their sdist (no wheel exists).
BUILT_THERE = ('mmcv', )
#: A requirement met there by another distribution of the same module
#: (mmengine and mmcv ask for opencv-python; the image has the headless
#: build, which installs the same ``cv2``).
PROVIDED_BY = {'opencv-python': 'opencv-python-headless'}
#: The GPU machine's interpreter and platform.
PYTHON_VERSION = '3.12'
TARGET_ENV = dict(
    python_version=PYTHON_VERSION,
    python_full_version=PYTHON_VERSION + '.3',
    sys_platform='linux',
    platform_system='Linux',
    platform_machine='x86_64',
    os_name='posix',
    implementation_name='cpython',
    platform_python_implementation='CPython',
    extra='')
PLATFORMS = ['manylinux1_x86_64', 'manylinux2010_x86_64',
             'manylinux2014_x86_64'] + \
    [f'manylinux_2_{n}_x86_64' for n in range(17, 40)]
#: What one device call may carry: the working tree plus carried paths.
CARRY_LIMIT_MIB = 64.0


class Need:
    """One distribution to fetch, and why.

    Args:
        name (str): Canonical name.
        specifiers (list[str]): Every version specifier met for it.
        origin (str): Where it was first asked for (a requirements file or
            the distribution that depends on it).
    """

    def __init__(self, name: str, specifier: str, origin: str) -> None:
        self.name = name
        self.specifiers = [specifier] if specifier else []
        self.origin = origin
        self.file: Optional[str] = None
        self.version: Optional[str] = None

    @property
    def sdist(self) -> bool:
        return self.name in BUILT_THERE

    def requirement(self) -> str:
        return self.name + ','.join(self.specifiers)


def read_device_packages(path: str = DEVICE_PACKAGES) -> set:
    """Canonical names listed in ``device_packages.txt``."""
    names = set()
    with open(path) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if line:
                names.add(canonicalize_name(line))
    return names


def parse_requirement_file(path: str) -> List[Requirement]:
    """PEP 508 lines of a requirements file (comments and blank lines
    skipped; pip options are refused, this script does not follow them).

    Raises:
        ValueError: A line that is not a plain requirement, with its number.
    """
    reqs = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split(' #', 1)[0].strip()
            if not line or line.startswith('#'):
                continue
            if line.startswith('-'):
                raise ValueError(f'{path}:{number}: pip option "{line}" is '
                                 f'not supported here; list requirements '
                                 f'one per line')
            try:
                reqs.append(Requirement(line))
            except Exception as err:  # packaging's InvalidRequirement
                raise ValueError(f'{path}:{number}: {err}') from None
    return reqs


def applies(req: Requirement) -> bool:
    """Whether a requirement's marker holds on the GPU machine (no
    extras)."""
    return req.marker is None or req.marker.evaluate(TARGET_ENV)


def plan(files: Iterable[str] = REQUIREMENT_FILES,
         present: Optional[set] = None,
         root: str = ROOT) -> Tuple[List[Need], List[Tuple[str, str]]]:
    """The top-level plan from the requirement files.

    Returns:
        tuple: ``(needs, skipped)``; ``skipped`` holds ``(name, reason)``.
    """
    present = read_device_packages() if present is None else present
    needs: Dict[str, Need] = {}
    skipped = []
    for rel in files:
        for req in parse_requirement_file(osp.join(root, rel)):
            name = canonicalize_name(req.name)
            if not applies(req):
                skipped.append((name, f'marker "{req.marker}" ({rel})'))
            elif name in needs:
                needs[name].specifiers.append(str(req.specifier))
            elif str(req.specifier) or name not in present:
                needs[name] = Need(name, str(req.specifier), rel)
            else:
                skipped.append((name, f'on the GPU machine ({rel})'))
    return list(needs.values()), skipped


def _requires_from_metadata(text: str) -> List[Requirement]:
    msg = Parser().parsestr(text)
    return [Requirement(r) for r in msg.get_all('Requires-Dist') or []]


def _requires_from_egg_info(text: str) -> List[Requirement]:
    """``requires.txt`` of an sdist: unconditional lines first, then
    ``[extra]`` sections (skipped) and ``[:marker]`` sections."""
    reqs, marker = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith('['):
            section = line[1:-1]
            extra, _, cond = section.partition(':')
            if extra:
                marker = False
            else:
                marker = Marker(cond)
            continue
        if marker is False:
            continue
        req = Requirement(line)
        if marker is not None and not marker.evaluate(TARGET_ENV):
            continue
        reqs.append(req)
    return reqs


def distribution_info(path: str) -> Tuple[str, str, List[Requirement]]:
    """Name, version and requirements of a wheel or an sdist."""
    if path.endswith('.whl'):
        with zipfile.ZipFile(path) as zf:
            meta = next(n for n in zf.namelist()
                        if re.match(r'[^/]+\.dist-info/METADATA$', n))
            text = zf.read(meta).decode()
        msg = Parser().parsestr(text)
        return (canonicalize_name(msg['Name']), msg['Version'],
                _requires_from_metadata(text))
    with tarfile.open(path) as tf:
        members = {m.name.split('/', 1)[-1]: m for m in tf.getmembers()}
        info = Parser().parsestr(
            tf.extractfile(members['PKG-INFO']).read().decode())
        egg = [k for k in members if k.endswith('.egg-info/requires.txt')]
        if egg:
            reqs = _requires_from_egg_info(
                tf.extractfile(members[egg[0]]).read().decode())
        else:
            reqs = _requires_from_metadata(str(info))
    return canonicalize_name(info['Name']), info['Version'], reqs


def pip_download(need: Need, dest: str) -> str:
    """Download one distribution with pip; returns the file's path."""
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [
            sys.executable, '-m', 'pip', 'download', '--no-deps',
            '--disable-pip-version-check', '-d', tmp
        ]
        if need.sdist:
            # pip reads an sdist's metadata by running its setup.py; in an
            # isolated build that gets the newest setuptools, which lacks
            # the pkg_resources mmcv's setup.py imports: use this
            # environment's (requirements/build.txt).
            cmd += ['--no-binary', ':all:', '--no-build-isolation']
        else:
            cmd += [
                '--only-binary', ':all:', '--python-version', PYTHON_VERSION,
                '--implementation', 'cp', '--abi',
                'cp' + PYTHON_VERSION.replace('.', '')
            ]
            for platform in PLATFORMS:
                cmd += ['--platform', platform]
        cmd.append(need.requirement())
        out = subprocess.run(cmd, capture_output=True, text=True)
        files = os.listdir(tmp) if out.returncode == 0 else []
        if len(files) != 1:
            raise RuntimeError(f'pip could not download {need.requirement()}'
                               f' (for {need.origin}):\n{out.stdout[-2000:]}'
                               f'{out.stderr[-2000:]}')
        target = osp.join(dest, files[0])
        shutil.move(osp.join(tmp, files[0]), target)
    return target


def resolve(needs: List[Need],
            present: set,
            dest: str,
            download: Callable[[Need, str], str] = pip_download,
            log: Callable[[str], None] = print) -> List[Need]:
    """Download ``needs`` and every missing dependency they declare.

    Args:
        needs (list[Need]): The top-level plan.
        present (set): Names the GPU machine has.
        dest (str): Download folder.
        download (callable): ``download(need, dest) -> path``.
        log (callable): Progress messages.

    Returns:
        list[Need]: Everything fetched, with ``file`` and ``version`` set.

    Raises:
        RuntimeError: A fetched version outside a specifier met later.
    """
    queue = list(needs)
    known = {n.name: n for n in needs}
    done = []
    while queue:
        need = queue.pop(0)
        need.file = download(need, dest)
        name, need.version, reqs = distribution_info(need.file)
        if name != need.name:
            raise RuntimeError(f'asked for {need.name}, got {name} '
                               f'({need.file})')
        log(f'{"sdist" if need.sdist else "wheel"} {need.name}=='
            f'{need.version}  ({need.origin})')
        done.append(need)
        for req in reqs:
            if not applies(req):
                continue
            dep = canonicalize_name(req.name)
            if dep in present or PROVIDED_BY.get(dep) in present:
                continue
            spec = str(req.specifier)
            if dep in known:
                if spec:
                    known[dep].specifiers.append(spec)
                continue
            known[dep] = Need(dep, spec, f'{need.name} needs {req}')
            queue.append(known[dep])
    for need in done:
        for spec in need.specifiers:
            if not Requirement(need.name + spec).specifier.contains(
                    Version(need.version), prereleases=True):
                raise RuntimeError(f'{need.name}=={need.version} was fetched'
                                   f' but {need.name}{spec} is also needed')
    return done


def tree_bytes(root: str = ROOT) -> int:
    """Bytes of the files that travel with the working tree (tracked and
    untracked, not ignored)."""
    out = subprocess.run(
        ['git', 'ls-files', '-co', '--exclude-standard', '-z'],
        cwd=root,
        capture_output=True)
    if out.returncode:
        return 0
    total = 0
    for rel in out.stdout.decode().split('\0'):
        path = osp.join(root, rel)
        if rel and osp.isfile(path):
            total += osp.getsize(path)
    return total


def write_manifest(done: List[Need], dest: str) -> str:
    lines = ['# name version file bytes sha256 origin']
    for need in sorted(done, key=lambda n: n.name):
        with open(need.file, 'rb') as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        lines.append(f'{need.name} {need.version} {osp.basename(need.file)} '
                     f'{osp.getsize(need.file)} {digest} [{need.origin}]')
    path = osp.join(dest, 'MANIFEST.txt')
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument(
        '--dest',
        default=osp.join(ROOT, '.whl'),
        help='download folder (default: .whl in the repository; emptied '
        'first)')
    parser.add_argument(
        '--list',
        action='store_true',
        help='print the top-level plan read from requirements/*.txt and '
        'device_packages.txt, download nothing')
    parser.add_argument(
        '--limit-mib',
        type=float,
        default=CARRY_LIMIT_MIB,
        help='fail when the set plus the working tree exceeds this')
    args = parser.parse_args(argv)
    present = read_device_packages()
    needs, skipped = plan(present=present)
    if args.list:
        for need in needs:
            kind = 'sdist' if need.sdist else 'wheel'
            print(f'fetch {kind} {need.requirement()}  ({need.origin})')
        for name, why in skipped:
            print(f'skip  {name}  ({why})')
        print('(the dependencies of these are followed when downloading)')
        return 0
    if osp.isdir(args.dest):
        for entry in os.listdir(args.dest):
            path = osp.join(args.dest, entry)
            fetched = entry.endswith(('.whl', '.tar.gz', '.zip'))
            if osp.isfile(path) and (fetched or entry == 'MANIFEST.txt'):
                os.remove(path)
    os.makedirs(args.dest, exist_ok=True)
    try:
        done = resolve(needs, present, args.dest, download=pip_download)
    except RuntimeError as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    write_manifest(done, args.dest)
    size = sum(osp.getsize(n.file) for n in done)
    tree = tree_bytes()
    mib = 2**20
    print(f'{len(done)} files, {size / mib:.2f} MiB in {args.dest}; the rest '
          f'of the working tree {tree / mib:.2f} MiB; together '
          f'{(size + tree) / mib:.2f} MiB of the {args.limit_mib:g} MiB a '
          f'device call carries')
    if size + tree > args.limit_mib * mib:
        print(
            'error: too large for one device call: carry the wheels in two '
            'calls (install the first half into the machine, then the '
            'second), or drop what the machine turns out to have',
            file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
