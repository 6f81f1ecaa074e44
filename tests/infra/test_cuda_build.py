"""The CUDA build environment (``scripts/cuda_env.py``) and the CUDA build
check (``scripts/cuda_build_check.py``).

Every way a CUDA build fails before it compiles a line is simulated on CPU
with fakes: an nvcc script that reports any release, a wrapper nvcc outside
its toolkit, a toolkit laid out like NVIDIA's pip wheels, none at all. The
real build check compiles mmcv's CUDA sources where an nvcc of torch's CUDA
major exists (slow; skipped with the reason elsewhere).
"""
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest
import torch
from conftest import ROOT

sys.path.insert(0, osp.join(ROOT, 'scripts'))
sys.path.insert(0, osp.join(ROOT, 'scripts', 'gpu'))

import cuda_arch  # noqa: E402
import cuda_build_check  # noqa: E402
import cuda_env  # noqa: E402
from cuda_env import CudaEnvError  # noqa: E402

NVCC13_ARCHS = (75, 80, 86, 87, 88, 89, 90, 100, 110, 103, 120, 121)
NVCC12_ARCHS = (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90)
LIB_HEADERS = ('cusparse.h', 'cublas_v2.h', 'cublasLt.h', 'cusolverDn.h')
CCCL = ('thrust/version.h', 'cub/version.cuh')


def touch(path, text=''):
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)
    return path


def fake_nvcc(path, release='13.0', archs=NVCC13_ARCHS):
    """An nvcc that answers --version, --list-gpu-arch and --dryrun (the
    toolkit root relative to its own path, as the real one does)."""
    listing = '\\n'.join(f'compute_{a}' for a in archs)
    touch(
        path, '#!/bin/sh\n'
        'case "$1" in\n'
        f'  --version) echo "Cuda compilation tools, release {release}, '
        f'V{release}.1";;\n'
        f'  --list-gpu-arch) printf "{listing}\\n";;\n'
        '  --dryrun) echo "#\\$ _HERE_=${0%/*}" >&2; '
        'echo "#\\$ TOP=${0%/*}/.." >&2;;\n'
        '  *) exit 1;;\n'
        'esac\n')
    os.chmod(path, 0o755)
    return path


def fake_toolkit(root,
                 release='13.0',
                 archs=NVCC13_ARCHS,
                 headers=('cuda_runtime_api.h', ) + LIB_HEADERS + CCCL,
                 cudart=('libcudart.so.13', 'libcudart.so'),
                 lib='lib64'):
    """A toolkit folder: bin/nvcc, include/<headers>, <lib>/<cudart>."""
    root = str(root)
    fake_nvcc(osp.join(root, 'bin', 'nvcc'), release, archs)
    for header in headers:
        touch(osp.join(root, 'include', header))
    os.makedirs(osp.join(root, lib), exist_ok=True)
    for name in cudart:
        if name == 'libcudart.so' and 'libcudart.so.13' in cudart:
            os.symlink('libcudart.so.13', osp.join(root, lib, name))
        else:
            touch(osp.join(root, lib, name))
    return root


def wrapper(path, target):
    """A wrapper script outside the toolkit, like /usr/local/bin/nvcc."""
    touch(path, f'#!/bin/sh\nexec {target} "$@"\n')
    os.chmod(path, 0o755)
    return path


def env_for(tmp_path, **extra):
    env = {'PATH': str(tmp_path / 'bin')}
    env.update(extra)
    return env


def build_env(env, tmp_path, torch_cuda='13.0', site_packages=None, **kw):
    return cuda_env.build_env(
        env,
        link_root=str(tmp_path / 'build'),
        torch_version=f'2.13.0+cu{torch_cuda.replace(".", "")}',
        torch_cuda=torch_cuda,
        site_packages=site_packages or str(tmp_path / 'site-packages'),
        capabilities=kw.pop('capabilities', []),
        **kw)


def one_line(err):
    text = str(err.value)
    assert '\n' not in text and text
    return text


# --------------------------------------------------------------------------
# the toolkit


def test_major_mismatch_is_one_line(tmp_path):
    """module load cuda/12.x against the CUDA 13 torch."""
    home = fake_toolkit(tmp_path / 'cuda-12.4', release='12.4')
    wrapper(str(tmp_path / 'bin' / 'nvcc'), osp.join(home, 'bin', 'nvcc'))
    with pytest.raises(CudaEnvError) as err:
        build_env(env_for(tmp_path), tmp_path)
    text = one_line(err)
    assert 'CUDA 12.4' in text and 'CUDA 13.0' in text
    assert home in text and '2.13.0+cu130' in text
    # the two fixes
    assert 'fix one of the two: a CUDA 13 toolkit (`module load cuda/13.x`' \
        in text
    assert 'pip install "cuda-toolkit[nvcc,cccl]==13.0.*"' in text
    assert text.endswith(', or a torch built for CUDA 12')


def test_minor_difference_is_accepted(tmp_path):
    home = fake_toolkit(tmp_path / 'cuda', release='13.1')
    out = build_env(dict(CUDA_HOME=home, PATH=''), tmp_path)
    assert out['CUDA_HOME'] == home


def test_wrapper_outside_the_toolkit(tmp_path):
    """torch would take the wrapper's parent; the toolkit nvcc reports its
    own root."""
    home = fake_toolkit(tmp_path / 'opt' / 'cuda-13.0')
    wrapper(str(tmp_path / 'bin' / 'nvcc'), osp.join(home, 'bin', 'nvcc'))
    notes = []
    out = build_env(env_for(tmp_path), tmp_path, notes=notes)
    assert out['CUDA_HOME'] == osp.realpath(home)
    assert 'PATH' not in out  # `nvcc` already runs this toolkit's
    assert 'CPATH' not in out and 'LIBRARY_PATH' not in out
    assert notes == []
    toolkit = cuda_env.find_toolkit(env_for(tmp_path), '13.0')
    assert toolkit.version == '13.0'
    assert toolkit.found_by == f'nvcc on PATH ({tmp_path}/bin/nvcc)'


def test_nvcc_root_of_the_real_nvcc():
    nvcc = shutil.which('nvcc')
    if nvcc is None:
        pytest.skip('no nvcc on PATH')
    home = cuda_env.nvcc_root(nvcc)
    assert osp.isfile(osp.join(home, 'bin', 'nvcc'))
    assert cuda_env.nvcc_release(osp.join(home, 'bin', 'nvcc'))[0].isdigit()


def test_cuda_home_wins_and_reaches_path(tmp_path):
    home = fake_toolkit(tmp_path / 'cuda-13.0')
    other = fake_toolkit(tmp_path / 'cuda-12.4', release='12.4')
    wrapper(str(tmp_path / 'bin' / 'nvcc'), osp.join(other, 'bin', 'nvcc'))
    out = build_env(env_for(tmp_path, CUDA_HOME=home), tmp_path)
    assert out['CUDA_HOME'] == home
    assert out['PATH'] == f'{home}/bin:{tmp_path}/bin'


def test_invalid_cuda_home_is_passed_over_with_a_note(tmp_path):
    home = fake_toolkit(tmp_path / 'cuda')
    wrapper(str(tmp_path / 'bin' / 'nvcc'), osp.join(home, 'bin', 'nvcc'))
    notes = []
    out = build_env(
        env_for(tmp_path, CUDA_HOME=str(tmp_path / 'gone')),
        tmp_path,
        notes=notes)
    assert out['CUDA_HOME'] == osp.realpath(home)
    assert notes == [f'CUDA_HOME={tmp_path}/gone has no bin/nvcc; ignored it']


@pytest.mark.parametrize('torch_cuda,cuda_toolkit,wheel', [
    ('13.0', '13.0.3', 'pip install "cuda-toolkit[nvcc,cccl]==13.0.3"'),
    ('13.0', None, 'pip install "cuda-toolkit[nvcc,cccl]==13.0.*"'),
    ('12.8', None, 'pip install "nvidia-cuda-nvcc-cu12==12.8.*"'),
])
def test_no_nvcc_is_one_line(tmp_path, torch_cuda, cuda_toolkit, wheel):
    major = torch_cuda.split('.')[0]
    with pytest.raises(CudaEnvError) as err:
        build_env(
            env_for(tmp_path),
            tmp_path,
            torch_cuda=torch_cuda,
            cuda_toolkit=cuda_toolkit)
    text = one_line(err)
    assert text.startswith('no CUDA compiler: nvcc is not on PATH')
    assert f'`module load cuda/{major}.x`' in text
    assert wheel in text
    assert f'CUDA_HOME set to a CUDA {major} toolkit' in text


def test_the_nvcc_wheel_is_found_without_path(tmp_path):
    """``pip install cuda-toolkit[nvcc]`` puts nvcc into torch's
    site-packages/nvidia/cu13: found, and put on PATH."""
    sp = tmp_path / 'site-packages'
    home = fake_toolkit(
        sp / 'nvidia' / 'cu13',
        headers=('cuda_runtime_api.h', ) + LIB_HEADERS + tuple(f'cccl/{h}'
                                                               for h in CCCL),
        cudart=('libcudart.so.13', ),
        lib='lib')
    out = build_env(env_for(tmp_path), tmp_path)
    assert out['CUDA_HOME'] == home
    assert out['PATH'] == f'{home}/bin:{tmp_path}/bin'
    # torch's wheel headers are the toolkit's; nvcc finds include/cccl
    assert 'CPATH' not in out
    # the wheel has libcudart.so.13 only
    link = osp.join(out['LIBRARY_PATH'], 'libcudart.so')
    assert os.readlink(link) == osp.join(home, 'lib', 'libcudart.so.13')


def test_cpu_torch_is_one_line(tmp_path):
    fake_toolkit(tmp_path / 'cuda')
    with pytest.raises(CudaEnvError) as err:
        cuda_env.build_env(
            env_for(tmp_path),
            torch_version='2.13.0+cpu',
            torch_cuda=None,
            site_packages=str(tmp_path))
    assert 'torch 2.13.0+cpu is a CPU-only build' in one_line(err)


# --------------------------------------------------------------------------
# the pip-wheel layout


def snapshot(folder):
    return sorted((d, tuple(sorted(f))) for d, _, f in os.walk(folder))


def test_pip_toolkit_layout(tmp_path):
    """The toolkit of these machines: no cusparse.h in its include, only
    libcudart.so.13 in its lib; torch's wheels hold the headers."""
    home = fake_toolkit(
        tmp_path / 'cuda-13.0',
        headers=('cuda_runtime_api.h', 'cuda_runtime.h') +
        tuple(f'cccl/{h}' for h in CCCL),
        cudart=('libcudart.so.13', ))
    # the assembled toolkit's targets/ folder, where nvcc finds cccl
    os.makedirs(osp.join(home, 'targets', 'x86_64-linux'))
    os.symlink('../../include',
               osp.join(home, 'targets', 'x86_64-linux', 'include'))
    sp = tmp_path / 'site-packages'
    wheel_include = sp / 'nvidia' / 'cu13' / 'include'
    for header in LIB_HEADERS:
        touch(str(wheel_include / header))
    touch(str(sp / 'nvidia' / 'cudnn' / 'include' / 'cudnn.h'))
    wrapper(str(tmp_path / 'bin' / 'nvcc'), osp.join(home, 'bin', 'nvcc'))
    before = snapshot(home), snapshot(sp)
    out = build_env(
        env_for(tmp_path, CPATH='/mine', LIBRARY_PATH='/lib-mine'), tmp_path)
    assert out['CPATH'] == f'{wheel_include}:/mine'
    link_dir = str(tmp_path / 'build' / 'cuda_lib')
    assert out['LIBRARY_PATH'] == f'{link_dir}:/lib-mine'
    link = osp.join(link_dir, 'libcudart.so')
    assert osp.islink(link)
    assert os.readlink(link) == osp.realpath(
        osp.join(home, 'lib64', 'libcudart.so.13'))
    # nothing written into the toolkit or site-packages
    assert (snapshot(home), snapshot(sp)) == before
    # a second run keeps the link
    assert build_env(env_for(tmp_path), tmp_path)['LIBRARY_PATH'] == link_dir


def test_cuda12_wheel_layout_one_folder_per_library(tmp_path):
    """CUDA 12 wheels: nvidia/<library>/include; another major's cu13 tree
    is not taken."""
    home = fake_toolkit(
        tmp_path / 'cuda-12.8',
        release='12.8',
        archs=NVCC12_ARCHS,
        headers=('cuda_runtime_api.h', ) + CCCL)
    sp = tmp_path / 'site-packages'
    for lib, header in (('cusparse', 'cusparse.h'), ('cublas', 'cublas_v2.h'),
                        ('cublas', 'cublasLt.h'), ('cusolver',
                                                   'cusolverDn.h')):
        touch(str(sp / 'nvidia' / lib / 'include' / header))
    for header in LIB_HEADERS:
        touch(str(sp / 'nvidia' / 'cu13' / 'include' / header))
    out = build_env(
        dict(CUDA_HOME=home, PATH=f'{home}/bin'), tmp_path, torch_cuda='12.8')
    nv = sp / 'nvidia'
    assert out['CPATH'].split(':') == [
        f'{nv}/cusparse/include', f'{nv}/cublas/include',
        f'{nv}/cusolver/include'
    ]


def test_missing_library_header_is_one_line(tmp_path):
    home = fake_toolkit(tmp_path / 'cuda', headers=('cuda_runtime_api.h', ))
    with pytest.raises(CudaEnvError) as err:
        build_env(dict(CUDA_HOME=home, PATH=''), tmp_path)
    text = one_line(err)
    assert text.startswith('cusparse.h ')
    assert f'{home}/include' in text and 'site-packages/nvidia' in text


def test_missing_cccl_is_one_line(tmp_path):
    """The nvcc wheel without the cccl one: thrust and cub are missing."""
    home = fake_toolkit(
        tmp_path / 'cuda', headers=('cuda_runtime_api.h', ) + LIB_HEADERS)
    with pytest.raises(CudaEnvError) as err:
        build_env(dict(CUDA_HOME=home, PATH=''), tmp_path)
    text = one_line(err)
    assert text.startswith('thrust/version.h ')
    assert text.endswith('`pip install "cuda-toolkit[cccl]"` of your CUDA '
                         'version')


def test_missing_cudart_is_one_line(tmp_path):
    home = fake_toolkit(tmp_path / 'cuda', cudart=())
    with pytest.raises(CudaEnvError) as err:
        build_env(dict(CUDA_HOME=home, PATH=''), tmp_path)
    assert 'libcudart.so.13' in one_line(err)


# --------------------------------------------------------------------------
# the arch list


@pytest.mark.parametrize('archs,expected', [
    (NVCC13_ARCHS, '7.5;8.0;8.6;9.0+PTX'),
    (NVCC12_ARCHS, '7.0;8.0;8.6;9.0+PTX'),
])
def test_force_cuda_without_gpu_gets_the_default(tmp_path, archs, expected):
    release = '13.0' if archs == NVCC13_ARCHS else '12.8'
    home = fake_toolkit(tmp_path / 'cuda', release=release, archs=archs)
    out = build_env(
        dict(CUDA_HOME=home, PATH=f'{home}/bin', FORCE_CUDA='1'),
        tmp_path,
        torch_cuda=release)
    assert out['TORCH_CUDA_ARCH_LIST'] == expected


def test_arch_list_sources(tmp_path):
    home = fake_toolkit(tmp_path / 'cuda')
    env = dict(CUDA_HOME=home, PATH=f'{home}/bin')
    # no GPU, no FORCE_CUDA: no CUDA code is built, no list
    assert 'TORCH_CUDA_ARCH_LIST' not in build_env(env, tmp_path)
    # the visible GPUs'
    assert build_env(
        env, tmp_path,
        capabilities=[(9, 0), (8, 6)])['TORCH_CUDA_ARCH_LIST'] == '8.6;9.0'
    # the user's, as given
    mine = dict(env, TORCH_CUDA_ARCH_LIST='8.0', FORCE_CUDA='1')
    assert build_env(mine, tmp_path)['TORCH_CUDA_ARCH_LIST'] == '8.0'


def test_default_arch_list():
    assert cuda_arch.default_arch_list() == '7.0;8.0;8.6;9.0+PTX'
    caps = [cuda_arch.parse_capability(str(a)) for a in NVCC13_ARCHS]
    assert cuda_arch.default_arch_list(caps) == '7.5;8.0;8.6;9.0+PTX'
    assert cuda_arch.default_arch_list([(9, 0), (10, 0)]) == '9.0+PTX'
    with pytest.raises(ValueError, match='none of the default'):
        cuda_arch.default_arch_list([(10, 0), (12, 0)])


def test_cuda_arch_cli_default_without_gpu():
    if torch.cuda.is_available():
        pytest.skip('this machine has a GPU')
    assert cuda_arch.main(['--default', '--nvcc-archs', '75,80,86,90']) == 0
    assert cuda_arch.main(['--nvcc-archs', '75,80,86,90']) == 1


# --------------------------------------------------------------------------
# the exports


def test_exports_evaluate_in_bash(tmp_path):
    text = cuda_env.exports(
        {
            'CUDA_HOME': str(tmp_path / 'a b'),
            'CPATH': '/new/include:/py/include',
            'TORCH_CUDA_ARCH_LIST': '7.5;8.0;9.0+PTX'
        },
        base={'CPATH': '/py/include'})
    assert text.splitlines()[1] == 'export CPATH=/new/include:"$CPATH"'
    out = subprocess.run([
        'bash', '-c', 'eval "$X"; echo "$CUDA_HOME|$TORCH_CUDA_ARCH_LIST|'
        '$CPATH"'
    ],
                         env=dict(
                             X=text,
                             PATH=os.environ['PATH'],
                             CPATH='/shell/include'),
                         capture_output=True,
                         text=True)
    assert out.stdout.strip() == (f'{tmp_path}/a b|7.5;8.0;9.0+PTX|'
                                  f'/new/include:/shell/include')


@pytest.mark.slow
def test_cli_mismatch_and_exports(tmp_path):
    """The CLI against the installed torch: one ``error:`` line and exit 1
    with an nvcc of another major first on PATH; export lines for eval
    with this machine's nvcc."""
    if torch.version.cuda is None:
        pytest.skip('torch is a CPU-only build')
    major = int(torch.version.cuda.split('.')[0])
    home = fake_toolkit(tmp_path / 'cuda-old', release=f'{major - 1}.4')
    wrapper(str(tmp_path / 'bin' / 'nvcc'), osp.join(home, 'bin', 'nvcc'))
    env = {
        k: v
        for k, v in os.environ.items() if k not in ('CUDA_HOME', 'CUDA_PATH')
    }
    env['PATH'] = f'{tmp_path}/bin:{env["PATH"]}'
    script = osp.join(ROOT, 'scripts', 'cuda_env.py')
    out = subprocess.run([sys.executable, script, '--exports'],
                         env=env,
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert out.returncode == 1 and out.stdout == ''
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: nvcc is CUDA ')
    if _skip_reason() is None:
        out = subprocess.run([
            sys.executable, script, '--exports', '--build-dir',
            str(tmp_path / 'b')
        ],
                             capture_output=True,
                             text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith('export CUDA_HOME=')


# --------------------------------------------------------------------------
# the build check's parts

CUDABIND = '''#include "pytorch_cpp_helper.hpp"

void a_launcher();
void a_cuda() { a_launcher(); }
void a_impl();
REGISTER_DEVICE_IMPL(a_impl, CUDA, a_cuda);

void b_fwd_cuda();
void b_bwd_cuda();
void b_fwd_impl();
void b_bwd_impl();
REGISTER_DEVICE_IMPL(b_fwd_impl, CUDA,
                     b_fwd_cuda);

REGISTER_DEVICE_IMPL(b_bwd_impl, CUDA, b_bwd_cuda);
void c_impl();
REGISTER_DEVICE_IMPL(c_impl, CUDA, c_cuda);
'''


def test_cudabind_blocks():
    text = cuda_build_check.cudabind_blocks(CUDABIND,
                                            ['b_fwd_impl', 'b_bwd_impl'])
    assert text.startswith('void b_fwd_cuda();')
    assert text.rstrip().endswith(
        'REGISTER_DEVICE_IMPL(b_bwd_impl, CUDA, b_bwd_cuda);')
    assert 'a_' not in text and 'c_' not in text
    text = cuda_build_check.cudabind_blocks(CUDABIND, ['c_impl', 'a_impl'])
    assert 'a_launcher' in text and 'c_impl' in text and 'b_' not in text
    with pytest.raises(
            cuda_build_check.BuildCheckError, match=r"missing \['d_impl'\]"):
        cuda_build_check.cudabind_blocks(CUDABIND, ['a_impl', 'd_impl'])
    with pytest.raises(
            cuda_build_check.BuildCheckError,
            match=r"unexpected \['b_bwd_impl'\]"):
        cuda_build_check.cudabind_blocks(CUDABIND, ['b_fwd_impl'])


def test_ops_table_names_what_mmcv_python_calls():
    names = [
        cuda_build_check.function_name(d)
        for op in cuda_build_check.OPS.values() for d in op.functions
    ]
    assert names == [
        'ms_deform_attn_forward', 'ms_deform_attn_backward',
        'roi_align_forward', 'roi_align_backward', 'nms'
    ]


def test_build_log_parsing(tmp_path):
    log = ('[1/3] /usr/local/cuda/bin/nvcc -c a.cu\n'
           'FAILED: a.o\n'
           '/src/a.cu:1:10: fatal error: cusparse.h: No such file or '
           'directory\n'
           '/src/a.cu:1:10: fatal error: cusparse.h: No such file or '
           'directory\n'
           '/usr/bin/ld: cannot find -lcudart: No such file or directory\n'
           'ninja: build stopped: subcommand failed.\n'
           '  raise CalledProcessError(retcode, process.args,\n'
           'RuntimeError: Error compiling objects for extension\n')
    assert cuda_build_check.first_errors(log) == [
        '/src/a.cu:1:10: fatal error: cusparse.h: No such file or directory',
        '/usr/bin/ld: cannot find -lcudart: No such file or directory'
    ]
    touch(
        str(tmp_path / '.ninja_log'), '# ninja log v7\n'
        '10\t61010\t0\t/b/temp/src/nms_cuda.o\tabc\n'
        '20\t9020\t0\t/b/temp/gen/binding.o\tdef\n')
    assert cuda_build_check.ninja_times(str(tmp_path)) == {
        'nms_cuda': 61.0,
        'binding': 9.0
    }


# --------------------------------------------------------------------------
# the real build


def _skip_reason():
    """Why no CUDA build can run here, or None."""
    try:
        version, cuda = cuda_env.torch_versions()
        if cuda is None:
            return f'torch {version} is a CPU-only build'
        toolkit = cuda_env.find_toolkit(
            dict(os.environ), cuda, cuda_env.torch_site_packages())
        cuda_env.check_versions(toolkit, version, cuda)
    except CudaEnvError as err:
        return str(err)
    return None


@pytest.mark.slow
def test_mmcv_cuda_sources_compile_link_and_load(tmp_path):
    """mmcv's deformable attention, RoIAlign and NMS for sm_80 and sm_90
    against the installed torch: every file compiles, the library links
    and loads without an undefined symbol, and every CUDA registration is
    there."""
    reason = _skip_reason()
    if reason:
        pytest.skip(f'no CUDA build possible here: {reason}')
    report = cuda_build_check.run_check(str(tmp_path / 'build'))
    assert set(report.file_seconds) == {
        'ms_deform_attn_cuda.cu', 'roi_align_cuda.cu', 'nms_cuda.cu',
        'ms_deform_attn.cpp', 'roi_align.cpp', 'nms.cpp',
        'cudabind_subset.cpp', 'binding.cpp'
    }
    assert all(s > 0 for s in report.file_seconds.values())
    assert sorted(report.probe['registered']) == sorted(
        i for op in cuda_build_check.OPS.values() for i in op.impls)
    assert report.probe['cpu_call'].startswith(
        'nms_impl: implementation for device cpu not found')


@pytest.mark.slow
def test_probe_names_an_undefined_symbol(tmp_path):
    """A library that links but lacks a symbol fails the import, and the
    error names the symbol."""
    cc = shutil.which('cc') or shutil.which('gcc')
    if cc is None:
        pytest.skip('no C compiler')
    name = cuda_build_check.EXT_NAME
    src = touch(
        str(tmp_path / 'ext.c'), '#include <Python.h>\n'
        'int missing_launcher(void);\n'
        'static PyObject *f(PyObject *s, PyObject *a) '
        '{ return PyLong_FromLong(missing_launcher()); }\n'
        'static PyMethodDef m[] = {{"nms", f, METH_NOARGS, 0}, {0}};\n'
        f'static struct PyModuleDef d = {{PyModuleDef_HEAD_INIT, "{name}", '
        '0, -1, m};\n'
        f'PyMODINIT_FUNC PyInit_{name}(void) '
        '{ return PyModule_Create(&d); }\n')
    lib = str(tmp_path / f'{name}{sysconfig.get_config_var("EXT_SUFFIX")}')
    subprocess.run([
        cc, '-shared', '-fPIC', f'-I{sysconfig.get_paths()["include"]}', src,
        '-o', lib
    ],
                   check=True)
    with pytest.raises(cuda_build_check.BuildCheckError) as err:
        cuda_build_check.probe(lib)
    assert 'an undefined symbol' in one_line(err)
    assert 'missing_launcher' in str(err.value)


@pytest.mark.slow
def test_build_failure_names_the_first_error(tmp_path):
    reason = _skip_reason()
    if reason:
        pytest.skip(f'no CUDA build possible here: {reason}')
    src = touch(str(tmp_path / 'broken.cpp'), 'int f() { return nope; }\n')
    env = dict(os.environ)
    env.update(cuda_env.build_env(link_root=str(tmp_path), capabilities=[]))
    with pytest.raises(cuda_build_check.BuildCheckError) as err:
        cuda_build_check.build([src], str(tmp_path), str(tmp_path), env, 1)
    text = one_line(err)
    assert text.startswith('the build failed after ')
    assert re.search(r"broken\.cpp:1:18: error: .nope. was not declared",
                     text), text
    assert f'(log: {tmp_path}/build.log)' in text
