"""Check that the environment has everything mmlape needs, quickly.

Exit status 0 when all is in place. ``--part torch`` checks only that torch
and torchvision import and run together (on the GPU too, where the machine
has one); ``--part gpu`` that torch can use the machine's NVIDIA GPU, if it
has one (one line naming the driver, torch's CUDA and the fix, otherwise);
``--part mmcv`` that mmcv has its compiled ops and, on a GPU node, that they
were compiled with CUDA and that the ops mmlape's models use (deformable
attention, RoIAlign, NMS) run on the GPU and agree with their CPU/PyTorch
results. ``--pin NAME`` prints NAME's requirement line (``mmcv==X.Y.Z``);
``--torch-pair`` the torch pair for this machine (``TORCH_PAIR`` or the
driver's); ``--mmcv-key`` the key under which a built mmcv wheel is kept (it
holds torch's version, its CUDA and the arch list, so that a wheel built for
another torch or without CUDA is never installed). Used by
``scripts/install.sh`` to skip what is already done.

The versions come from ``requirements/*.txt``, the one place they are
written (``setup.py`` reads the same files): ``build.txt`` (setuptools),
``openmmlab.txt`` (pinned with ``==``), ``runtime.txt`` and ``tests.txt``
(in the version a line pins with ``==``, else in any version).

Two modes, as ``scripts/install.sh`` has them: the runtime (``make
install``: every part but ``tests``) and, with ``--tests``, the runtime
and the test, lint and docs tools of ``tests.txt`` (``make install-dev``,
what ``make test`` runs). ``--part tests`` checks those tools alone, from
their metadata, in well under a second (``make lint`` and ``make docs``).
"""
import argparse
import functools
import importlib.util
import json
import os
import os.path as osp
import re
import struct
import subprocess
import sys
from importlib import metadata
from typing import Any, Dict, List, Optional, Tuple

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
REQUIREMENTS = osp.join(ROOT, 'requirements')


def _load_device_module():
    """mmlape's GPU checks (``mmlape/utils/device.py``, standard library
    only), loaded by path: they run before mmlape is installed."""
    spec = importlib.util.spec_from_file_location(
        'mmlape_device', osp.join(ROOT, 'mmlape', 'utils', 'device.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


device = _load_device_module()
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


def _run(args):
    """Run Python code (a str) or this script with arguments (a list)
    outside the checkout, so that only installed packages count."""
    cmd = [sys.executable, '-c', args] if isinstance(args, str) else \
        [sys.executable, osp.abspath(__file__)] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, cwd='/')


def _last_line(r) -> str:
    return (r.stderr.strip().splitlines() or ['?'])[-1]


def _check(name: str, clauses: List[Tuple[str, str]]) -> Optional[str]:
    have = _version(name)
    if have is None:
        return f'{name} is missing'
    if not satisfies(have, clauses):
        return f'{requirement_line(name, clauses)} wanted, found {have}'
    return None


def check_setuptools():
    return _check('setuptools', read_requirements('build.txt')['setuptools'])


def probe_torch() -> dict:
    """torch and torchvision run together: NMS on the CPU, and on the GPU
    when torch can use one. Runs in the environment being checked."""
    import torch
    import torchvision
    boxes = torch.tensor([[0., 0., 1., 1.], [0., 0., 1., 1.]])
    scores = torch.tensor([1., .5])
    keep = torchvision.ops.nms(boxes, scores, .5).tolist()
    if torch.cuda.is_available():
        keep_gpu = torchvision.ops.nms(boxes.cuda(), scores.cuda(),
                                       .5).tolist()
        assert keep_gpu == keep, f'torchvision nms on the GPU: {keep_gpu}'
    return dict(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cuda_available=torch.cuda.is_available())


@functools.lru_cache()
def _torch_info() -> Tuple[Optional[str], Optional[dict]]:
    """(problem, probe_torch's answer) for the installed torch."""
    r = _run(['--probe', 'torch'])
    if r.returncode:
        return (f'torch + torchvision do not work together: {_last_line(r)}',
                None)
    return None, json.loads(r.stdout.strip().splitlines()[-1])


def check_torch():
    return _torch_info()[0]


def check_gpu():
    """One line when an NVIDIA GPU is here and torch cannot use it."""
    problem, info = _torch_info()
    if problem:
        return problem
    return device.cuda_problem(
        torch_version=info['torch'],
        torch_cuda=info['cuda'],
        cuda_available=info['cuda_available'])


def _msda_inputs(generator):
    import torch
    shapes = torch.tensor([[8, 8], [4, 4]])
    starts = torch.tensor([0, 64])
    value = torch.randn(2, 80, 2, 16, generator=generator)
    loc = torch.rand(2, 10, 2, 2, 4, 2, generator=generator)
    weight = torch.rand(2, 10, 2, 2, 4, generator=generator).softmax(-1)
    return value, shapes, starts, loc, weight


def compare_mmcv_ops(device_name: str) -> Dict[str, float]:
    """Run the mmcv ops mmlape's models use on ``device_name`` and return
    each one's largest difference from its reference: the PyTorch path for
    multi-scale deformable attention (forward and the value gradient),
    mmcv's CPU kernel for RoIAlign (forward and gradient) and NMS (the kept
    indices: 0 when equal, 1 otherwise)."""
    import torch
    from mmcv.ops import RoIAlign, nms
    from mmcv.ops.multi_scale_deform_attn import (
        MultiScaleDeformableAttnFunction, multi_scale_deformable_attn_pytorch)
    g = torch.Generator().manual_seed(0)
    diffs = {}
    value, shapes, starts, loc, weight = _msda_inputs(g)
    ref_value = value.clone().requires_grad_()
    ref = multi_scale_deformable_attn_pytorch(ref_value, shapes, loc, weight)
    ref.sum().backward()
    if device_name != 'cpu':  # mmcv has this kernel on CUDA only
        dev_value = value.to(device_name).requires_grad_()
        out = MultiScaleDeformableAttnFunction.apply(
            dev_value,
            *(t.to(device_name) for t in (shapes, starts, loc, weight)), 64)
        out.sum().backward()
        diffs['deformable attention'] = max(
            (out.detach().cpu() - ref.detach()).abs().max().item(),
            (dev_value.grad.cpu() - ref_value.grad).abs().max().item())
    feats = torch.randn(2, 4, 16, 16, generator=g)
    rois = torch.tensor([[0, 1., 1., 9., 12.], [1, 3., 2., 15., 15.],
                         [0, 0., 0., 16., 16.]])
    layer = RoIAlign((7, 7), spatial_scale=1.0, sampling_ratio=2)
    outs = []
    for dev in ('cpu', device_name):
        x = feats.to(dev).requires_grad_()
        y = layer(x, rois.to(dev))
        (y * torch.arange(y.numel(), device=dev).view_as(y)).sum().backward()
        outs.append((y.detach().cpu(), x.grad.cpu()))
    diffs['RoIAlign'] = max((a - b).abs().max().item() for a, b in zip(*outs))
    boxes = torch.rand(64, 2, generator=g) * 50
    boxes = torch.cat([boxes, boxes + torch.rand(64, 2, generator=g) * 20], 1)
    scores = torch.rand(64, generator=g)
    keeps = [
        nms(boxes.to(dev), scores.to(dev), 0.5)[1].cpu().tolist()
        for dev in ('cpu', device_name)
    ]
    diffs['NMS'] = float(keeps[0] != keeps[1])
    return diffs


#: The largest difference accepted between an op on the GPU and its
#: reference (float32 kernels that sum in another order).
OPS_TOLERANCE = 1e-4


def elf_section_names(path: str) -> List[str]:
    """The section names of the ELF file ``path`` (64-bit, little-endian:
    the ``linux_x86_64`` and ``aarch64`` wheels)."""
    with open(path, 'rb') as f:
        data = f.read()
    if data[:6] != b'\x7fELF\x02\x01':
        raise ValueError(f'{path} is not a 64-bit little-endian ELF file')
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3A)

    def header(i):  # (name offset, file offset, size) of section i
        at = shoff + i * shentsize
        return (struct.unpack_from('<I', data, at)[0],
                *struct.unpack_from('<QQ', data, at + 0x18))

    _, str_at, str_size = header(shstrndx)
    names = data[str_at:str_at + str_size]
    return [
        names[n:names.index(b'\0', n)].decode()
        for n, _, _ in map(header, range(shnum))
    ]


def probe_mmcv() -> dict:
    """What the installed mmcv holds: its compiled ops load; whether they
    were compiled with CUDA (their library embeds device code, a
    ``.nv_fatbin`` section); on a GPU node, the ops' differences.

    mmcv's own ``get_compiling_cuda_version()`` is not called: a CUDA build
    of the pinned mmcv against torch 2.11 crashed the interpreter in it (and in
    ``get_compiler_version()``) on an H200 machine, while its ops ran."""
    import mmcv._ext
    import torch
    cuda = '.nv_fatbin' in elf_section_names(mmcv._ext.__file__)
    info = dict(mmcv_cuda=cuda or None)
    if torch.cuda.is_available() and cuda:
        info['diffs'] = compare_mmcv_ops('cuda')
    return info


def mmcv_problem(info: dict, cuda_available: bool) -> Optional[str]:
    """What is wrong with an mmcv whose probe gave ``info``, on a machine
    where torch can (``cuda_available``) or cannot use a GPU."""
    if not cuda_available:
        return None
    if not info.get('mmcv_cuda'):
        return ('mmcv was compiled without CUDA (a CPU-only build, e.g. made '
                'on a node without a GPU or served from a cache), so its ops '
                'cannot run on this GPU: "make install" rebuilds it here')
    bad = {
        op: diff
        for op, diff in (info.get('diffs') or {}).items()
        if not diff <= OPS_TOLERANCE
    }
    if bad:
        listed = ', '.join(f'{op} differs by {d:.2e}' for op, d in bad.items())
        return (f'mmcv\'s CUDA ops disagree with their CPU/PyTorch results '
                f'({listed}; accepted: {OPS_TOLERANCE:g})')
    return None


def check_mmcv():
    problem = _check('mmcv', read_requirements('openmmlab.txt')['mmcv'])
    if problem:
        return problem
    r = _run(['--probe', 'mmcv'])
    if r.returncode < 0:
        return (f'mmcv\'s compiled ops crashed the interpreter (signal '
                f'{-r.returncode}): rebuild mmcv for this torch '
                '("make install")')
    if r.returncode:
        return ('mmcv is installed without its compiled ops, or they were '
                f'built for another torch (mmcv._ext: {_last_line(r)})')
    info = json.loads(r.stdout.strip().splitlines()[-1])
    torch_info = _torch_info()[1]
    return mmcv_problem(info, bool(torch_info
                                   and torch_info['cuda_available']))


def torch_pair(env=None) -> str:
    """The requirements file of the torch pair for this machine:
    ``TORCH_PAIR`` (``cu13`` or ``cu12``) when set, else the pair the
    NVIDIA driver runs (the pin where there is no GPU).

    Raises:
        ValueError: An unknown ``TORCH_PAIR``, or a driver too old for
            every supported pair.
    """
    env = os.environ if env is None else env
    key = env.get('TORCH_PAIR', '').strip()
    if key:
        if key not in device.TORCH_PAIRS:
            raise ValueError(f'TORCH_PAIR={key!r} is not one of '
                             f'{", ".join(device.TORCH_PAIRS)}')
        return device.TORCH_PAIRS[key][0]
    gpu = device.find_nvidia_gpu(env)
    key = device.torch_pair_for(gpu.driver if gpu else None)
    if key is None:
        oldest = min(cuda for _, cuda in device.TORCH_PAIRS.values())
        raise ValueError(
            f'this machine has {gpu.describe()}: no supported torch runs on '
            f'that driver (CUDA {oldest} needs >= '
            f'{device.min_driver(oldest)}); update the NVIDIA driver')
    return device.TORCH_PAIRS[key][0]


def mmcv_key() -> str:
    """Where a built mmcv wheel is kept: torch's version and CUDA, the
    arch list a CUDA build is made for, the Python tag."""
    import torch
    cuda = torch.version.cuda
    force = os.environ.get('FORCE_CUDA', '0') == '1'
    if cuda and (torch.cuda.is_available() or force):
        arch = os.environ.get('TORCH_CUDA_ARCH_LIST', 'auto')
        build = 'cu' + cuda.replace('.', '') + '-' + \
            re.sub(r'[^0-9A-Za-z.+]+', '_', arch)
    else:
        build = 'cpu'
    py = f'cp{sys.version_info[0]}{sys.version_info[1]}'
    return f'torch{torch.__version__.replace("+", "_")}-{build}-{py}'


#: The requirements files each mode needs beyond build.txt and the torch
#: pair: the runtime (``make install``) and the test tools (``--tests``).
RUNTIME_FILES = ('openmmlab.txt', 'runtime.txt')
TESTS_FILES = ('tests.txt', )


def _check_files(files) -> list:
    problems = []
    for file in files:
        for name, clauses in read_requirements(file).items():
            problem = _check(name, clauses)
            if problem:
                problems.append(problem)
    return problems


def check_rest():
    """The runtime requirements and mmlape itself."""
    problems = _check_files(RUNTIME_FILES)
    r = _run('import mmlape')
    if _version('mmlape') is None or r.returncode:
        problems.append('mmlape is not installed')
    return '; '.join(problems) or None


def check_tests():
    """The test, lint and docs tools (``tests.txt``), by their metadata."""
    return '; '.join(_check_files(TESTS_FILES)) or None


PARTS = {
    'setuptools': check_setuptools,
    'torch': check_torch,
    'gpu': check_gpu,
    'mmcv': check_mmcv,
    'rest': check_rest,
    'tests': check_tests,
}


def parts_of(part: str, tests: bool = False) -> Dict[str, Any]:
    """The checks ``--part PART`` runs: one part, or ``all`` of the mode
    (the runtime; with ``tests``, the test tools after it)."""
    if part != 'all':
        return {part: PARTS[part]}
    return {
        name: check
        for name, check in PARTS.items() if tests or name != 'tests'
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
        '--tests',
        action='store_true',
        help='with --part all: the test, lint and docs tools too')
    parser.add_argument(
        '--pin', metavar='NAME', help="print NAME's requirement line")
    parser.add_argument(
        '--torch-pair',
        action='store_true',
        help="print the requirements file of this machine's torch pair")
    parser.add_argument(
        '--mmcv-key',
        action='store_true',
        help='print the key under which the built mmcv wheel is kept')
    parser.add_argument(
        '--probe', choices=['torch', 'mmcv'], help=argparse.SUPPRESS)
    parser.add_argument('--quiet', action='store_true')
    args = parser.parse_args()
    if args.probe:
        probe = probe_torch if args.probe == 'torch' else probe_mmcv
        print(json.dumps(probe()))
        return 0
    if args.torch_pair:
        try:
            print(torch_pair())
        except ValueError as err:
            print(f'[check_env] {err}', file=sys.stderr)
            return 1
        return 0
    if args.mmcv_key:
        print(mmcv_key())
        return 0
    if args.pin:
        try:
            print(pin(args.pin))
        except KeyError as err:
            print(f'[check_env] {err.args[0]}', file=sys.stderr)
            return 2
        return 0
    parts = parts_of(args.part, args.tests)
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
