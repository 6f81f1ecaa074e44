"""Never a silent CPU run: a GPU node whose GPU torch cannot use (an old
driver, a CPU-only torch) stops the installer and the tools with one line
naming the driver, torch's CUDA and the fix; without a GPU everything runs
on the CPU as before.

The GPU node is simulated: a fake ``nvidia-smi`` on ``PATH`` answers with a
driver older than this torch's CUDA needs, while torch (here, a machine
without a GPU) sees none.
"""
import importlib.util
import os
import os.path as osp
import stat
import sys

import pytest
import torch
from conftest import DEMO, ROOT, demo_options, run

from mmlape.utils import device
from mmlape.utils.device import NvidiaGPU

#: The driver of the simulated node: a 550 driver runs CUDA 12, not 13.
OLD_DRIVER = '550.54.15'
GPU_NAME = 'NVIDIA A100-SXM4-80GB'


def fake_nvidia_smi(folder, driver=OLD_DRIVER, gpus=2, status=0) -> str:
    """A ``nvidia-smi`` in ``folder`` that answers the driver query; the
    ``PATH`` to put it first."""
    path = osp.join(folder, 'nvidia-smi')
    rows = '\n'.join(f'{GPU_NAME}, {driver}' for _ in range(gpus))
    with open(path, 'w') as f:
        f.write(f'#!/bin/sh\ncat <<EOF\n{rows}\nEOF\nexit {status}\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return f'{folder}{os.pathsep}{os.environ["PATH"]}'


def load_check_env():
    spec = importlib.util.spec_from_file_location(
        'check_env', osp.join(ROOT, 'scripts', 'check_env.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def gpu_node(tmp_path):
    """The environment of a simulated GPU node with a 550 driver."""
    return dict(PATH=fake_nvidia_smi(str(tmp_path)))


# --------------------------------------------------------------------------
# finding the GPU, whatever torch says


def test_nvidia_smi_names_the_driver_and_gpus(tmp_path):
    path = fake_nvidia_smi(str(tmp_path), gpus=2)
    gpu = device.find_nvidia_gpu(
        env=dict(PATH=path), device_glob=str(tmp_path / 'none*'))
    assert gpu.driver == OLD_DRIVER and gpu.names == [GPU_NAME] * 2
    assert gpu.describe() == f'2x {GPU_NAME} (driver {OLD_DRIVER})'


def test_device_files_count_when_nvidia_smi_fails(tmp_path):
    """nvidia-smi missing or unable to talk to the driver: the device files
    and /proc's driver version still tell."""
    path = fake_nvidia_smi(str(tmp_path), status=9)
    (tmp_path / 'nvidia0').write_text('')
    (tmp_path / 'nvidiactl').write_text('')
    version = tmp_path / 'version'
    version.write_text('NVRM version: NVIDIA UNIX x86_64 Kernel Module  '
                       '535.161.08  Thu Feb 29 2024\n')
    gpu = device.find_nvidia_gpu(
        env=dict(PATH=path),
        device_glob=str(tmp_path / 'nvidia[0-9]*'),
        driver_file=str(version))
    assert gpu.driver == '535.161.08'
    assert gpu.source == str(tmp_path / 'nvidia0')
    # only nvidiactl (a host without a GPU may have it): no GPU
    os.remove(tmp_path / 'nvidia0')
    assert device.find_nvidia_gpu(
        env=dict(PATH=str(tmp_path)),
        device_glob=str(tmp_path / 'nvidia[0-9]*')) is None


def test_no_gpu_on_this_machine():
    assert device.find_nvidia_gpu(
        env=dict(PATH='/nonexistent'),
        device_glob='/nonexistent/nvidia[0-9]*') is None


# --------------------------------------------------------------------------
# the one line


def test_old_driver_line_names_driver_cuda_and_fix():
    gpu = NvidiaGPU(OLD_DRIVER, [GPU_NAME])
    line = device.cuda_problem(gpu, '2.13.0', '13.0', False)
    assert '\n' not in line
    for part in (OLD_DRIVER, 'torch 2.13.0', 'CUDA 13.0',
                 'needs driver >= 580.65.06', 'TORCH_PAIR=cu12 make install',
                 'requirements/torch-cu12.txt', 'MMLAPE_ALLOW_CPU=1'):
        assert part in line, (part, line)


@pytest.mark.parametrize('driver,torch_cuda,expect', [
    ('550.54.15', None, 'CPU-only build; run "TORCH_PAIR=cu12 make install"'),
    ('580.95.05', None, 'CPU-only build; run "TORCH_PAIR=cu13 make install"'),
    ('470.239.06', '12.4', 'update the NVIDIA driver to >= 525.60.13'),
    ('550.54.15', '12.4', 'CUDA_VISIBLE_DEVICES'),
    ('580.95.05', '13.0', 'CUDA_VISIBLE_DEVICES'),
])
def test_each_cause_has_its_fix(driver, torch_cuda, expect):
    line = device.cuda_problem(
        NvidiaGPU(driver, []), '2.6.0', torch_cuda, cuda_available=False)
    assert expect in line and driver in line


def test_a_usable_gpu_is_no_problem():
    assert device.cuda_problem(
        NvidiaGPU(OLD_DRIVER, [GPU_NAME]), '2.6.0', '12.4', True) is None


def test_driver_table():
    assert device.min_driver('12.4') == '525.60.13'
    assert device.min_driver('13.0') == '580.65.06'
    assert device.min_driver('99.0') is None
    assert device.torch_pair_for(None) == 'cu13'
    assert device.torch_pair_for('525.60.13') == 'cu12'
    assert device.torch_pair_for('525.60.12') is None
    assert device.torch_pair_for('570.86.10') == 'cu12'
    assert device.torch_pair_for('580.65.06') == 'cu13'


def test_pair_files_exist_and_pin_a_matching_torchvision():
    check_env = load_check_env()
    for key, (file, cuda) in device.TORCH_PAIRS.items():
        reqs = check_env.read_requirements(osp.basename(file))
        assert set(reqs) == {'torch', 'torchvision'}, file
        assert all(op == '==' for clauses in reqs.values()
                   for op, _ in clauses), file


def test_allow_cpu_is_explicit(monkeypatch):
    gpu = NvidiaGPU(OLD_DRIVER, [GPU_NAME])
    args = dict(
        gpu=gpu,
        torch_version='2.13.0',
        torch_cuda='13.0',
        cuda_available=False)
    with pytest.raises(device.CudaUnusableError, match=OLD_DRIVER):
        device.require_usable_gpu(env={}, **args)
    for value in ('0', '', 'no'):
        with pytest.raises(device.CudaUnusableError):
            device.require_usable_gpu(env={'MMLAPE_ALLOW_CPU': value}, **args)
    problem = device.require_usable_gpu(env={'MMLAPE_ALLOW_CPU': '1'}, **args)
    assert OLD_DRIVER in problem


# --------------------------------------------------------------------------
# the installer's choices (scripts/check_env.py)


def test_torch_pair_follows_the_driver(tmp_path):
    check_env = load_check_env()
    none = dict(PATH='/nonexistent')
    assert check_env.torch_pair(none) == 'requirements/torch.txt'
    assert check_env.torch_pair(dict(
        PATH=fake_nvidia_smi(str(tmp_path)))) == 'requirements/torch-cu12.txt'
    new = tmp_path / 'new'
    new.mkdir()
    assert check_env.torch_pair(
        dict(PATH=fake_nvidia_smi(str(new), driver='580.95.05'))) == \
        'requirements/torch.txt'
    old = tmp_path / 'old'
    old.mkdir()
    with pytest.raises(ValueError, match='470.239.06.*update the NVIDIA'):
        check_env.torch_pair(
            dict(PATH=fake_nvidia_smi(str(old), driver='470.239.06')))
    assert check_env.torch_pair(dict(none, TORCH_PAIR='cu12')) == \
        'requirements/torch-cu12.txt'
    with pytest.raises(ValueError, match="TORCH_PAIR='cu11'"):
        check_env.torch_pair(dict(none, TORCH_PAIR='cu11'))


def test_mmcv_without_cuda_is_refused_on_a_gpu_node():
    check_env = load_check_env()
    assert check_env.mmcv_problem({'mmcv_cuda': None}, False) is None
    line = check_env.mmcv_problem({'mmcv_cuda': None}, True)
    assert 'compiled without CUDA' in line and 'make install' in line
    ok = {'mmcv_cuda': '13.0', 'diffs': {'RoIAlign': 2e-6, 'NMS': 0.0}}
    assert check_env.mmcv_problem(ok, True) is None
    bad = {
        'mmcv_cuda': '13.0',
        'diffs': {
            'deformable attention': 0.3,
            'NMS': 1.0,
            'RoIAlign': 0.0
        }
    }
    line = check_env.mmcv_problem(bad, True)
    assert 'deformable attention differs by 3.00e-01' in line
    assert 'NMS differs' in line and 'RoIAlign' not in line
    nan = {'mmcv_cuda': '13.0', 'diffs': {'RoIAlign': float('nan')}}
    assert 'RoIAlign' in check_env.mmcv_problem(nan, True)


def test_mmcv_cuda_build_is_read_from_its_library(tmp_path):
    """Whether mmcv was compiled with CUDA is read from its library's ELF
    sections (device code lives in ``.nv_fatbin``), never by calling into
    it: torch's CUDA library has the section, the CPU-only mmcv here and
    torch's CPU library do not, and the probe says so."""
    check_env = load_check_env()
    lib = osp.join(osp.dirname(torch.__file__), 'lib')
    assert '.nv_fatbin' in check_env.elf_section_names(
        osp.join(lib, 'libtorch_cuda.so'))
    cpu = check_env.elf_section_names(osp.join(lib, 'libtorch_cpu.so'))
    assert '.text' in cpu and '.nv_fatbin' not in cpu
    assert check_env.probe_mmcv() == {'mmcv_cuda': None}
    text = tmp_path / 'not-elf.so'
    text.write_text('#!/bin/sh\n')
    with pytest.raises(ValueError, match='not a 64-bit little-endian ELF'):
        check_env.elf_section_names(str(text))


def test_a_crashing_mmcv_probe_is_named(monkeypatch):
    check_env = load_check_env()
    monkeypatch.setattr(check_env, '_check', lambda *a: None)
    monkeypatch.setattr(
        check_env, '_run', lambda args: check_env.subprocess.CompletedProcess(
            args, -11, '', 'Segmentation fault'))
    line = check_env.check_mmcv()
    assert 'crashed the interpreter (signal 11)' in line
    assert 'make install' in line


def test_ops_comparison_runs():
    """The comparison the installer runs on a GPU node, here against the
    CPU itself (mmcv's deformable attention has no CPU kernel to run)."""
    diffs = load_check_env().compare_mmcv_ops('cpu')
    assert diffs == {'RoIAlign': 0.0, 'NMS': 0.0}


def test_mmcv_key_separates_torch_cuda_and_arch(monkeypatch):
    check_env = load_check_env()
    monkeypatch.delenv('FORCE_CUDA', raising=False)
    cpu = check_env.mmcv_key()
    assert cpu.startswith(f'torch{torch.__version__.split("+")[0]}')
    assert '-cpu-' in cpu and cpu.endswith(
        f'cp{sys.version_info[0]}{sys.version_info[1]}')
    if torch.version.cuda:
        monkeypatch.setenv('FORCE_CUDA', '1')
        monkeypatch.setenv('TORCH_CUDA_ARCH_LIST', '8.0;9.0+PTX')
        gpu = check_env.mmcv_key()
        cuda = torch.version.cuda.replace('.', '')
        assert f'-cu{cuda}-8.0_9.0+PTX-' in gpu and gpu != cpu
        monkeypatch.setenv('TORCH_CUDA_ARCH_LIST', '9.0')
        assert check_env.mmcv_key() not in (gpu, cpu)


# --------------------------------------------------------------------------
# the simulated GPU node, end to end


@pytest.mark.slow
def test_install_stops_with_the_line(gpu_node):
    out = run(['bash', 'scripts/install.sh'], check=False, env=gpu_node)
    assert out.returncode == 1, out.stdout + out.stderr
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith('error: '), out.stderr
    assert OLD_DRIVER in errors[0] and f'CUDA {torch.version.cuda}' in \
        errors[0] and 'TORCH_PAIR=cu12' in errors[0]


@pytest.mark.slow
@pytest.mark.parametrize('tool', ['train', 'test', 'dist_train', 'amp'])
def test_tools_stop_with_the_line(tool, gpu_node, pos_shapes_data, tmp_path):
    work = str(tmp_path / 'work')
    options = demo_options(pos_shapes_data, 2)
    cmd = {
        'train': [sys.executable, 'tools/train.py', DEMO],
        'test': [sys.executable, 'tools/test.py', DEMO, 'none.pth'],
        'dist_train': ['bash', 'tools/dist_train.sh', DEMO, '2'],
        'amp': [sys.executable, 'tools/train.py', DEMO, '--amp'],
    }[tool] + ['--work-dir', work] + options
    out = run(cmd, check=False, env=dict(gpu_node, PORT='29631'))
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith('error: this machine has 2x ' + GPU_NAME), last
    assert OLD_DRIVER in last and 'TORCH_PAIR=cu12' in last
    assert not osp.exists(osp.join(work, 'last_checkpoint'))


@pytest.mark.slow
def test_allow_cpu_runs_and_says_so_once(gpu_node, pos_shapes_data, tmp_path):
    out = run(
        [sys.executable, 'tools/train.py', DEMO, '--work-dir',
         str(tmp_path)] + demo_options(pos_shapes_data, 2),
        env=dict(gpu_node, MMLAPE_ALLOW_CPU='1'))
    log = out.stdout + out.stderr
    assert log.count('MMLAPE_ALLOW_CPU=1: running on the CPU although') == 1
    assert OLD_DRIVER in log and 'Iter(train) [2/2]' in log
