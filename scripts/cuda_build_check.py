"""Compile and link mmcv's CUDA ops that mmlape's models use, without a GPU.

References:
    mmcv 2.1.0's ``setup.py`` (the flags and defines of its CUDA build:
    ``MMCV_WITH_CUDA``, ``-std=c++17`` for the host and nvcc, the include
    folders ``csrc/pytorch``, ``csrc/common``, ``csrc/common/cuda``) and its
    ``ops/csrc`` layout (``pytorch/cuda/*.cu`` kernels, ``pytorch/*.cpp``
    device-independent dispatchers, ``pytorch/cuda/cudabind.cpp`` with each
    op's CUDA registration); ``torch.utils.cpp_extension`` (``CUDAExtension``
    and ``BuildExtension``, which mmcv's build uses).

The ops: multi-scale deformable attention (ViT-Adapter), RoIAlign and NMS
(Mask R-CNN). For each, mmcv's ``.cu`` kernel file and ``.cpp`` dispatcher
are compiled as they are, with the blocks of ``cudabind.cpp`` that register
the op's CUDA implementation, taken from the sdist at build time, and a
small binding of our own; for sm_80 and sm_90, against the installed torch,
in the environment ``scripts/cuda_env.py`` prepares. The extension is then
imported in a fresh Python process (CPython loads it with ``RTLD_NOW``, so
an undefined symbol fails the import), its functions are looked up, each
op's CUDA registration is asked for, and a CPU call proves the dispatcher
runs. Where a GPU is visible, NMS also runs on it.

Prints the time of each file and of the whole. Exit status 0 when all
holds, 1 with ``error: <one line>`` when not.

Example:
    python scripts/cuda_build_check.py               # a temporary build dir
    python scripts/cuda_build_check.py --build-dir build/cuda_check --keep
"""
import argparse
import importlib.util
import json
import os
import os.path as osp
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

HERE = osp.dirname(osp.abspath(__file__))
EXT_NAME = 'mmlape_cuda_check'
#: The GPU architectures compiled for: A100 and H100/H200.
ARCHS = '8.0;9.0'
DEFAULT_CACHE = osp.join(
    os.environ.get('XDG_CACHE_HOME') or osp.join('~', '.cache'), 'mmlape',
    'sdist')

#: mmcv's build of its CUDA ops (read from its setup.py): the define, and
#: the C++ standard of both compilers. ``check_setup_py`` fails when the
#: pinned sdist's setup.py no longer says so.
DEFINES = [('MMCV_WITH_CUDA', None)]
CXX_FLAGS = ['-std=c++17']
NVCC_FLAGS = ['-std=c++17']


class Op(NamedTuple):
    """One mmcv op as its CUDA build is made of.

    Args:
        kernel (str): Its file in ``csrc/pytorch/cuda``.
        dispatcher (str): Its device-independent file in ``csrc/pytorch``.
        impls (tuple[str]): The ``*_impl`` functions ``cudabind.cpp``
            registers a CUDA implementation for.
        functions (tuple[str]): C++ declarations of what mmcv's Python calls
            (as the dispatcher defines them).
    """
    kernel: str
    dispatcher: str
    impls: Tuple[str, ...]
    functions: Tuple[str, ...]


_ROI_ARGS = ('int aligned_height, int aligned_width, float spatial_scale, '
             'int sampling_ratio, int pool_mode, bool aligned')
_MSDA_ARGS = ('const Tensor &value, const Tensor &spatial_shapes, '
              'const Tensor &level_start_index, const Tensor &sampling_loc, '
              'const Tensor &attn_weight')

#: The ops mmlape's models call: ViT-Adapter's deformable attention, Mask
#: R-CNN's RoIAlign (``roi_layer``) and NMS (proposals and test boxes).
OPS: Dict[str, Op] = {
    'ms_deform_attn':
    Op('ms_deform_attn_cuda.cu', 'ms_deform_attn.cpp',
       ('ms_deform_attn_impl_forward', 'ms_deform_attn_impl_backward'),
       (f'Tensor ms_deform_attn_forward({_MSDA_ARGS}, '
        'const int im2col_step)',
        f'void ms_deform_attn_backward({_MSDA_ARGS}, '
        'const Tensor &grad_output, Tensor &grad_value, '
        'Tensor &grad_sampling_loc, Tensor &grad_attn_weight, '
        'const int im2col_step)')),
    'roi_align':
    Op('roi_align_cuda.cu', 'roi_align.cpp',
       ('roi_align_forward_impl', 'roi_align_backward_impl'),
       ('void roi_align_forward(Tensor input, Tensor rois, Tensor output, '
        f'Tensor argmax_y, Tensor argmax_x, {_ROI_ARGS})',
        'void roi_align_backward(Tensor grad_output, Tensor rois, '
        'Tensor argmax_y, Tensor argmax_x, Tensor grad_input, '
        f'{_ROI_ARGS})')),
    'nms':
    Op('nms_cuda.cu', 'nms.cpp', ('nms_impl', ),
       ('Tensor nms(Tensor boxes, Tensor scores, float iou_threshold, '
        'int offset)', )),
}

_REGISTER = re.compile(
    r'REGISTER_DEVICE_IMPL\s*\(\s*(\w+)\s*,\s*CUDA\s*,\s*\w+\s*\)\s*;')


class BuildCheckError(RuntimeError):
    """The check failed; the message says where, in one line."""


def _load(name: str):
    """A script of this folder as a module (they run before mmlape is
    installed, so they are not a package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, osp.join(HERE, f'{name}.py'))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def say(msg: str) -> None:
    print(f'[cuda_build_check] {msg}', flush=True)


def function_name(declaration: str) -> str:
    return re.search(r'(\w+)\s*\(', declaration).group(1)


# --------------------------------------------------------------------------
# the sources


def mmcv_version() -> str:
    """mmcv's pinned version, from ``requirements/openmmlab.txt``."""
    clauses = _load('check_env').read_requirements('openmmlab.txt')['mmcv']
    pins = [v for op, v in clauses if op == '==']
    if len(pins) != 1:
        raise BuildCheckError('requirements/openmmlab.txt does not pin mmcv '
                              'with ==')
    return pins[0]


def fetch_sdist(version: str, cache_dir: str) -> str:
    """mmcv's sdist in ``cache_dir``, downloaded with pip when absent.

    ``--no-build-isolation``: pip prepares the sdist's metadata, and mmcv's
    setup.py imports ``pkg_resources``, which an isolated build's newest
    setuptools no longer has.
    """
    cache_dir = osp.expanduser(cache_dir)
    path = osp.join(cache_dir, f'mmcv-{version}.tar.gz')
    if osp.isfile(path):
        return path
    os.makedirs(cache_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        cmd = [
            sys.executable, '-m', 'pip', 'download', '--no-deps',
            '--no-binary', ':all:', '--no-build-isolation',
            '--disable-pip-version-check', '-q', '-d', tmp, f'mmcv=={version}'
        ]
        out = subprocess.run(cmd, capture_output=True, text=True)
        got = osp.join(tmp, osp.basename(path))
        if out.returncode or not osp.isfile(got):
            tail = (out.stderr.strip().splitlines() or ['?'])[-1]
            raise BuildCheckError(f'could not download the mmcv {version} '
                                  f'sdist ({" ".join(cmd[2:])}): {tail}')
        os.replace(got, path)
    return path


def extract_csrc(sdist: str, dest: str) -> str:
    """Unpack ``setup.py`` and ``mmcv/ops/csrc`` of the sdist into
    ``dest``; returns the unpacked root."""
    with tarfile.open(sdist) as tf:
        members = [
            m for m in tf.getmembers()
            if re.match(r'[^/]+/(setup\.py$|mmcv/ops/csrc/)', m.name)
        ]
        if not members:
            raise BuildCheckError(f'{sdist} has no mmcv/ops/csrc')
        kwargs = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}
        tf.extractall(dest, members=members, **kwargs)
    return osp.join(dest, members[0].name.split('/')[0])


def check_setup_py(root: str) -> None:
    """Fail when mmcv's setup.py no longer builds with the flags above."""
    with open(osp.join(root, 'setup.py')) as f:
        text = f.read()
    for needle in [d for d, _ in DEFINES] + CXX_FLAGS + NVCC_FLAGS:
        if needle not in text:
            raise BuildCheckError(f'{root}/setup.py no longer has {needle}: '
                                  f'update DEFINES/CXX_FLAGS/NVCC_FLAGS of '
                                  f'scripts/cuda_build_check.py')


def cudabind_blocks(text: str, impls: Sequence[str]) -> str:
    """The blocks of mmcv's ``cudabind.cpp`` that register ``impls``.

    The file is a sequence of blocks, one per op: declarations of the
    CUDA launchers, thin wrappers, declarations of the ``*_impl``
    dispatchers, and a run of ``REGISTER_DEVICE_IMPL(..., CUDA, ...)``
    lines that ends the block.

    Raises:
        BuildCheckError: An impl is registered nowhere, or a chosen block
            also registers an op not asked for.
    """
    groups: List[Tuple[int, int, List[str]]] = []  # start, end, names
    start = 0
    for match in _REGISTER.finditer(text):
        if groups and not text[groups[-1][1]:match.start()].strip():
            groups[-1][1] = match.end()
            groups[-1][2].append(match.group(1))
        else:
            groups.append([start, match.end(), [match.group(1)]])
        start = match.end()
    chosen = [g for g in groups if set(g[2]) & set(impls)]
    registered = [n for g in chosen for n in g[2]]
    if sorted(registered) != sorted(impls):
        missing = sorted(set(impls) - set(registered))
        extra = sorted(set(registered) - set(impls))
        raise BuildCheckError(f'cudabind.cpp: registrations missing '
                              f'{missing}, unexpected {extra}')
    return '\n'.join(text[s:e].strip('\n') + '\n' for s, e, _ in chosen)


def write_sources(root: str,
                  out_dir: str,
                  ops: Dict[str, Op] = OPS) -> List[str]:
    """The extension's sources: mmcv's kernels and dispatchers where they
    lie, plus two files written to ``out_dir``: the chosen cudabind.cpp
    blocks (with a function that reports which CUDA registrations took
    effect) and our binding."""
    csrc = osp.join(root, 'mmcv', 'ops', 'csrc', 'pytorch')
    with open(osp.join(csrc, 'cuda', 'cudabind.cpp')) as f:
        cudabind = f.read()
    impls = [i for op in ops.values() for i in op.impls]
    queries = ''.join(
        f'  if (DEVICE_REGISTRY({i}).Find(at::kCUDA) != nullptr) '
        f'found.push_back("{i}");\n' for i in impls)
    os.makedirs(out_dir, exist_ok=True)
    bind_cuda = osp.join(out_dir, 'cudabind_subset.cpp')
    with open(bind_cuda, 'w') as f:
        f.write('// Generated by scripts/cuda_build_check.py: the blocks of '
                f'{osp.basename(root)}\'s\n// cudabind.cpp that register '
                f'{", ".join(impls)}.\n'
                '#include <string>\n#include <vector>\n\n'
                '#include "pytorch_cpp_helper.hpp"\n'
                '#include "pytorch_device_registry.hpp"\n\n' +
                cudabind_blocks(cudabind, impls) +
                '\n// Which of them hold a CUDA implementation once loaded.\n'
                'std::vector<std::string> mmlape_cuda_registered() {\n'
                '  std::vector<std::string> found;\n' + queries +
                '  return found;\n}\n')
    functions = [d for op in ops.values() for d in op.functions]
    binding = osp.join(out_dir, 'binding.cpp')
    with open(binding, 'w') as f:
        f.write('// Generated by scripts/cuda_build_check.py: binds the '
                'mmcv functions mmlape calls.\n'
                '#include <torch/extension.h>\n\n#include <string>\n'
                '#include <vector>\n\nusing at::Tensor;\n\n' +
                ''.join(f'{d};\n' for d in functions) +
                'std::vector<std::string> mmlape_cuda_registered();\n\n'
                'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n' +
                ''.join(f'  m.def("{function_name(d)}", '
                        f'&{function_name(d)});\n' for d in functions) +
                '  m.def("cuda_registered", &mmlape_cuda_registered);\n}\n')
    return ([osp.join(csrc, 'cuda', op.kernel) for op in ops.values()] +
            [osp.join(csrc, op.dispatcher)
             for op in ops.values()] + [bind_cuda, binding])


# --------------------------------------------------------------------------
# the build


def compile_extension(spec_file: str) -> None:
    """Build the extension as mmcv's setup.py does (run in a child
    process, in the environment of ``cuda_env``)."""
    from setuptools import setup

    from torch.utils.cpp_extension import BuildExtension, CUDAExtension
    with open(spec_file) as f:
        spec = json.load(f)
    ext = CUDAExtension(
        name=EXT_NAME,
        sources=spec['sources'],
        include_dirs=spec['include_dirs'],
        define_macros=[tuple(d) for d in DEFINES],
        extra_compile_args={
            'cxx': CXX_FLAGS,
            'nvcc': NVCC_FLAGS
        })
    setup(
        name=EXT_NAME,
        ext_modules=[ext],
        cmdclass={'build_ext': BuildExtension},
        script_args=[
            'build_ext', '--build-lib', spec['lib'], '--build-temp',
            spec['temp']
        ])


def ninja_times(temp: str) -> Dict[str, float]:
    """Seconds per compiled object, from ninja's log in the build folder."""
    times = {}
    path = osp.join(temp, '.ninja_log')
    if not osp.isfile(path):
        return times
    with open(path) as f:
        for line in f:
            parts = line.rstrip('\n').split('\t')
            if len(parts) >= 4 and parts[0].isdigit():
                name = osp.basename(parts[3])
                name = re.sub(r'\.o$', '', name)
                times[name] = (int(parts[1]) - int(parts[0])) / 1000
    return times


_ERROR = re.compile(
    r'\berror\b\s*:|undefined reference to|cannot find -l|'
    r'No such file or directory', re.I)


def first_errors(log: str, limit: int = 12) -> List[str]:
    """The distinct lines of a build log that name an error."""
    seen: Dict[str, None] = {}
    for line in log.splitlines():
        line = line.strip()
        if (_ERROR.search(line) and not line.startswith(('[', 'FAILED'))
                and len(seen) < limit):
            seen.setdefault(line[:300])
    return list(seen)


def build(sources: Sequence[str], root: str, build_dir: str,
          env: Dict[str, str], jobs: int) -> Tuple[str, float, float]:
    """Compile and link; returns the built library, the seconds taken and
    the CPU seconds used.

    Raises:
        BuildCheckError: A compile or link error (the first error line and
            the log's path).
    """
    csrc = osp.join(root, 'mmcv', 'ops', 'csrc')
    spec = {
        'sources':
        list(sources),
        'include_dirs': [
            osp.join(csrc, 'pytorch'),
            osp.join(csrc, 'common'),
            osp.join(csrc, 'common', 'cuda')
        ],
        'lib':
        osp.join(build_dir, 'lib'),
        'temp':
        osp.join(build_dir, 'temp'),
    }
    spec_file = osp.join(build_dir, 'spec.json')
    with open(spec_file, 'w') as f:
        json.dump(spec, f, indent=1)
    log_path = osp.join(build_dir, 'build.log')
    child_env = dict(env, MAX_JOBS=str(jobs), TORCH_CUDA_ARCH_LIST=ARCHS)
    t0 = time.time()
    cpu0 = _children_cpu()
    with open(log_path, 'w') as log:
        out = subprocess.run([
            sys.executable,
            osp.abspath(__file__), '--compile-spec', spec_file
        ],
                             stdout=log,
                             stderr=subprocess.STDOUT,
                             env=child_env,
                             cwd=build_dir)
    seconds = time.time() - t0
    cpu = _children_cpu() - cpu0
    with open(log_path, errors='replace') as f:
        text = f.read()
    if out.returncode:
        errors = first_errors(text)
        for line in errors:
            say(f'  {line}')
        first = errors[0] if errors else 'see the log'
        raise BuildCheckError(f'the build failed after {seconds:.0f} s: '
                              f'{first} (log: {log_path})')
    built = [
        osp.join(spec['lib'], n) for n in os.listdir(spec['lib'])
        if n.startswith(EXT_NAME) and n.endswith('.so')
    ]
    if not built:
        raise BuildCheckError(f'the build made no {EXT_NAME}*.so '
                              f'(log: {log_path})')
    return built[0], seconds, cpu


def _children_cpu() -> float:
    """CPU seconds of the finished child processes (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------
# the import

_PROBE = r'''
import importlib, json, sys
import torch
sys.path.insert(0, sys.argv[1])
ext = importlib.import_module(sys.argv[2])
result = {'functions': [n for n in sys.argv[3].split(',') if hasattr(ext, n)],
          'registered': list(ext.cuda_registered())}
boxes = torch.tensor([[0., 0., 2., 2.], [0., 0., 2., 2.1], [5., 5., 6., 6.]])
scores = torch.tensor([0.9, 0.8, 0.7])
try:
    ext.nms(boxes, scores, 0.5, 0)
    result['cpu_call'] = 'ran'
except RuntimeError as err:
    result['cpu_call'] = str(err).strip().splitlines()[0]
if torch.cuda.is_available():
    keep = ext.nms(boxes.cuda(), scores.cuda(), 0.5, 0)
    result['cuda_nms'] = keep.cpu().tolist()
print(json.dumps(result))
'''


def demangle(text: str) -> str:
    """C++ names in ``text`` demangled with c++filt where it exists."""
    if not shutil.which('c++filt'):
        return text
    return re.sub(
        r'_Z\w+',
        lambda m: subprocess.run(['c++filt', m.group(0)],
                                 capture_output=True,
                                 text=True).stdout.strip() or m.group(0), text)


def probe(library: str, ops: Dict[str, Op] = OPS) -> Dict:
    """Import the built extension in a fresh process and check it.

    Raises:
        BuildCheckError: The import fails (an undefined symbol, named), a
            function or a CUDA registration is missing, or the dispatcher
            does not answer as it should.
    """
    names = [function_name(d) for op in ops.values() for d in op.functions]
    out = subprocess.run([
        sys.executable, '-c', _PROBE,
        osp.dirname(library), EXT_NAME, ','.join(names)
    ],
                         capture_output=True,
                         text=True,
                         cwd=osp.dirname(library))
    if out.returncode:
        lines = out.stderr.strip().splitlines() or ['?']
        last = demangle(lines[-1])
        if 'undefined symbol' in last:
            raise BuildCheckError(f'{osp.basename(library)} does not load, '
                                  f'an undefined symbol: {last}')
        raise BuildCheckError(f'importing {osp.basename(library)} failed: '
                              f'{last}')
    result = json.loads(out.stdout.strip().splitlines()[-1])
    missing = sorted(set(names) - set(result['functions']))
    if missing:
        raise BuildCheckError(f'{EXT_NAME} lacks {missing}')
    impls = [i for op in ops.values() for i in op.impls]
    unregistered = sorted(set(impls) - set(result['registered']))
    if unregistered:
        raise BuildCheckError(f'no CUDA implementation registered for '
                              f'{unregistered}')
    expected = 'nms_impl: implementation for device cpu not found'
    if not result['cpu_call'].startswith(expected):
        raise BuildCheckError(f'nms on CPU tensors should fail with '
                              f'"{expected}" (only CUDA is linked), got '
                              f'"{result["cpu_call"]}"')
    if 'cuda_nms' in result and result['cuda_nms'] != [0, 2]:
        raise BuildCheckError(f'nms on the GPU kept {result["cuda_nms"]}, '
                              f'expected [0, 2]')
    return result


# --------------------------------------------------------------------------
# all together


class Report(NamedTuple):
    """What a check found: seconds per source file, for the build (wall
    and CPU), and in all; the probe's answers."""
    file_seconds: Dict[str, float]
    build_seconds: float
    build_cpu_seconds: float
    total_seconds: float
    library: str
    probe: Dict


def run_check(build_dir: str,
              cache_dir: str = DEFAULT_CACHE,
              jobs: Optional[int] = None,
              env: Optional[Dict[str, str]] = None) -> Report:
    """The whole check; see the module docstring.

    Args:
        build_dir (str): Where sources, objects, the library and the log
            go (made when missing).
        cache_dir (str): Where mmcv's sdist is kept.
        jobs (int, optional): Parallel compile jobs; defaults to
            ``MAX_JOBS`` or the number of cores.
        env (dict, optional): The environment; defaults to ``os.environ``.

    Raises:
        CudaEnvError: No CUDA build is possible here (from ``cuda_env``).
        BuildCheckError: Something did not compile, link or load.
    """
    t0 = time.time()
    env = dict(os.environ if env is None else env)
    build_dir = osp.abspath(build_dir)
    os.makedirs(build_dir, exist_ok=True)
    cuda_env = _load('cuda_env')
    notes: List[str] = []
    variables = cuda_env.build_env(
        dict(env, TORCH_CUDA_ARCH_LIST=ARCHS), build_dir, notes=notes)
    for note in notes:
        say(f'note: {note}')
    env.update(variables)
    jobs = jobs or int(env.get('MAX_JOBS') or os.cpu_count() or 1)
    version = mmcv_version()
    sdist = fetch_sdist(version, cache_dir)
    root = extract_csrc(sdist, osp.join(build_dir, 'src'))
    check_setup_py(root)
    sources = write_sources(root, osp.join(build_dir, 'generated'))
    torch_version, torch_cuda = cuda_env.torch_versions()
    say(f'mmcv {version} ({sdist}); CUDA_HOME={variables["CUDA_HOME"]}; '
        f'torch {torch_version} (CUDA {torch_cuda}); archs {ARCHS}; '
        f'{len(sources)} files, {jobs} jobs')
    library, seconds, cpu = build(sources, root, build_dir, env, jobs)
    times = ninja_times(osp.join(build_dir, 'temp'))
    file_seconds = {}
    for source in sources:
        name = osp.basename(source)
        file_seconds[name] = times.get(
            name, times.get(osp.splitext(name)[0], float('nan')))
        say(f'{file_seconds[name]:7.1f} s  {name}')
    result = probe(library)
    total = time.time() - t0
    say(f'{seconds:7.1f} s  compile and link ({jobs} jobs, {cpu:.0f} s of '
        f'CPU: about {cpu / jobs:.0f} s on {jobs} idle cores)')
    say(f'ok in {total:.1f} s: {osp.basename(library)} loads; '
        f'{", ".join(result["functions"])} bound; CUDA implementations '
        f'registered for {", ".join(result["registered"])}' +
        ('; nms ran on the GPU' if 'cuda_nms' in result else ''))
    return Report(file_seconds, seconds, cpu, total, library, result)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0].replace('\n', ' '))
    parser.add_argument(
        '--build-dir',
        help='where to build (default: a temporary folder, removed after '
        'a success)')
    parser.add_argument(
        '--keep',
        action='store_true',
        help='keep a temporary build folder after a success')
    parser.add_argument(
        '--cache-dir',
        default=DEFAULT_CACHE,
        help='where the mmcv sdist is kept (default: %(default)s)')
    parser.add_argument(
        '--jobs', type=int, help='compile jobs (default: MAX_JOBS or cores)')
    parser.add_argument('--compile-spec', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compile_spec:
        compile_extension(args.compile_spec)
        return 0
    build_dir = args.build_dir or tempfile.mkdtemp(prefix='cuda_check_')
    try:
        run_check(build_dir, args.cache_dir, args.jobs)
    except (BuildCheckError, _load('cuda_env').CudaEnvError) as err:
        print(f'error: {err}', file=sys.stderr)
        say(f'build folder kept: {build_dir}')
        return 1
    if not args.build_dir and not args.keep:
        shutil.rmtree(build_dir, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
