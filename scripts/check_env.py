"""Check that the environment has everything mmlape needs, quickly.

Exit status 0 when all is in place. ``--part torch`` checks only that torch
and torchvision import and run together; ``--part mmcv`` that mmcv has its
compiled ops. ``--pin NAME`` prints NAME's requirement line (``mmcv==X.Y.Z``).
Used by ``scripts/install.sh`` to skip what is already done.

The versions come from ``requirements/*.txt``, the one place they are
written (``setup.py`` reads the same files): ``build.txt`` (setuptools),
``openmmlab.txt`` (pinned with ``==``), ``runtime.txt`` and ``tests.txt``
(present in any version).
"""
import argparse
import os.path as osp
import re
import subprocess
import sys
from importlib import metadata
from typing import Dict, List, Optional, Tuple

REQUIREMENTS = osp.join(
    osp.dirname(osp.dirname(osp.abspath(__file__))), 'requirements')
_LINE = re.compile(r'^([A-Za-z0-9_.\-]+)\s*(.*)$')
_CLAUSE = re.compile(r'^(==|!=|>=|<=|>|<)\s*([0-9][0-9A-Za-z.]*)$')


def read_requirements(name: str) -> Dict[str, List[Tuple[str, str]]]:
    """Requirement name -> its (operator, version) clauses.

    Reads the simple lines these files hold: ``name``, ``name==v`` or
    ``name>=a,<b``; ``#`` starts a comment.
    """
    reqs = {}
    with open(osp.join(REQUIREMENTS, name), encoding='utf-8') as f:
        for raw in f:
            line = raw.split('#', 1)[0].strip()
            if not line:
                continue
            match = _LINE.match(line)
            if match is None:
                raise ValueError(f'requirements/{name}: cannot read "{line}"')
            clauses = []
            spec = match.group(2).replace(' ', '')
            for part in filter(None, spec.split(',')):
                clause = _CLAUSE.match(part)
                if clause is None:
                    raise ValueError(
                        f'requirements/{name}: cannot read "{line}"')
                clauses.append(clause.groups())
            reqs[match.group(1)] = clauses
    return reqs


def _key(version: str) -> Tuple[int, ...]:
    parts = []
    for piece in version.split('+')[0].split('.'):
        digits = re.match(r'\d*', piece).group()
        parts.append(int(digits or 0))
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def satisfies(version: str, clauses: List[Tuple[str, str]]) -> bool:
    """Whether ``version`` meets every clause (numeric release parts)."""
    have = _key(version)
    tests = {
        '==': lambda want: have == want,
        '!=': lambda want: have != want,
        '>=': lambda want: have >= want,
        '<=': lambda want: have <= want,
        '>': lambda want: have > want,
        '<': lambda want: have < want,
    }
    return all(tests[op](_key(want)) for op, want in clauses)


def requirement_line(name: str, clauses: List[Tuple[str, str]]) -> str:
    return name + ','.join(op + v for op, v in clauses)


def _version(name: str) -> Optional[str]:
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


def _check(name: str, clauses: List[Tuple[str, str]]) -> Optional[str]:
    have = _version(name)
    if have is None:
        return f'{name} is missing'
    if not satisfies(have, clauses):
        return f'{requirement_line(name, clauses)} wanted, found {have}'
    return None


def check_setuptools():
    return _check('setuptools', read_requirements('build.txt')['setuptools'])


def check_torch():
    r = _run('import torch, torchvision\n'
             'b = torch.tensor([[0., 0., 1., 1.], [0., 0., 1., 1.]])\n'
             'torchvision.ops.nms(b, torch.tensor([1., .5]), .5)')
    if r.returncode:
        tail = (r.stderr.strip().splitlines() or ['?'])[-1]
        return f'torch + torchvision do not work together: {tail}'
    return None


def check_mmcv():
    problem = _check('mmcv', read_requirements('openmmlab.txt')['mmcv'])
    if problem:
        return problem
    r = _run('import mmcv._ext')
    if r.returncode:
        return 'mmcv is installed without its compiled ops (mmcv._ext)'
    return None


def check_rest():
    problems = []
    for file in ('openmmlab.txt', 'runtime.txt', 'tests.txt'):
        for name, clauses in read_requirements(file).items():
            problem = _check(name, clauses)
            if problem:
                problems.append(problem)
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


def pin(name: str) -> str:
    """The requirement line of ``name`` from the requirements files."""
    for file in ('build.txt', 'openmmlab.txt', 'runtime.txt', 'tests.txt',
                 'torch.txt'):
        reqs = read_requirements(file)
        if name in reqs:
            return requirement_line(name, reqs[name])
    raise KeyError(f'{name} is in no requirements/*.txt file')


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        '--part', choices=sorted(PARTS) + ['all'], default='all')
    parser.add_argument(
        '--pin', metavar='NAME', help="print NAME's requirement line")
    parser.add_argument('--quiet', action='store_true')
    args = parser.parse_args()
    if args.pin:
        try:
            print(pin(args.pin))
        except KeyError as err:
            print(f'[check_env] {err.args[0]}', file=sys.stderr)
            return 2
        return 0
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
