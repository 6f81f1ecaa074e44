"""Check that the environment has everything mmlape needs, quickly.

Exit status 0 when all is in place. ``--part torch`` checks only that torch
and torchvision import and run together; ``--part mmcv`` that mmcv has its
compiled ops. Used by ``scripts/install.sh`` to skip what is already done.
"""
import argparse
import subprocess
import sys
from importlib import metadata

PINNED = {
    'mmengine': '0.10.7',
    'mmcv': '2.1.0',
    'mmdet': '3.3.0',
    'mmsegmentation': '1.2.2',
    'mmpretrain': '1.2.0',
}
PRESENT = [
    'ftfy', 'regex', 'matplotlib', 'pycocotools', 'pytest', 'flake8', 'isort',
    'yapf'
]


def _version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _run(code):
    # Run outside the checkout, so that only installed packages count.
    return subprocess.run([sys.executable, '-c', code],
                          capture_output=True,
                          text=True,
                          cwd='/')


def check_setuptools():
    v = _version('setuptools')
    if v is None:
        return 'setuptools is missing'
    major, minor = (int(x) for x in v.split('.')[:2])
    if (major, minor) < (77, 0) or major >= 81:
        return f'setuptools {v} is outside >=77.0.3,<81'
    return None


def check_torch():
    r = _run('import torch, torchvision\n'
             'b = torch.tensor([[0., 0., 1., 1.], [0., 0., 1., 1.]])\n'
             'torchvision.ops.nms(b, torch.tensor([1., .5]), .5)')
    if r.returncode:
        tail = (r.stderr.strip().splitlines() or ['?'])[-1]
        return f'torch + torchvision do not work together: {tail}'
    return None


def check_mmcv():
    if _version('mmcv') != PINNED['mmcv']:
        return f'mmcv=={PINNED["mmcv"]} is not installed'
    r = _run('import mmcv._ext')
    if r.returncode:
        return 'mmcv is installed without its compiled ops (mmcv._ext)'
    return None


def check_rest():
    problems = []
    for name, want in PINNED.items():
        have = _version(name)
        if have != want:
            problems.append(f'{name}=={want} wanted, found {have}')
    for name in PRESENT:
        if _version(name) is None:
            problems.append(f'{name} is missing')
    r = _run('import mmlape')
    if _version('mmlape') is None or r.returncode:
        problems.append('mmlape is not installed')
    return '; '.join(problems) or None


PARTS = {
    'setuptools': check_setuptools,
    'torch': check_torch,
    'mmcv': check_mmcv,
    'rest': check_rest,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        '--part', choices=sorted(PARTS) + ['all'], default='all')
    parser.add_argument('--quiet', action='store_true')
    args = parser.parse_args()
    parts = PARTS if args.part == 'all' else {args.part: PARTS[args.part]}
    failed = False
    for name, check in parts.items():
        problem = check()
        if problem:
            failed = True
            if not args.quiet:
                print(f'[check_env] {name}: {problem}')
            if args.part == 'all':
                break
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
