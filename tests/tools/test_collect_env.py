"""tools/misc/collect_env.py: what a bug report needs (docs/training.md,
"Bug reports")."""
import json
import os
import os.path as osp
import stat
import sys

import pytest
import torch
from conftest import ROOT

sys.path.insert(0, ROOT)
from tools.misc import collect_env  # noqa: E402

GPU = 'NVIDIA H200'
DRIVER = '550.54.15'


def fake_gpu_node(folder) -> dict:
    """The environment of a machine whose ``nvidia-smi`` reports one GPU
    on an old driver (as tests/infra/test_device.py simulates it)."""
    script = osp.join(str(folder), 'nvidia-smi')
    with open(script, 'w') as f:
        f.write(f'#!/bin/sh\necho "{GPU}, {DRIVER}"\n')
    os.chmod(script, os.stat(script).st_mode | stat.S_IEXEC)
    return dict(os.environ, PATH=f'{folder}{os.pathsep}{os.environ["PATH"]}')


@pytest.mark.slow  # git, gcc, nvidia-smi and Python subprocesses
def test_report_names_versions_ops_and_the_gpu(tmp_path, capsys):
    import mmcv
    import mmdet
    import mmengine
    import mmpretrain
    import mmseg

    import mmlape
    info = collect_env.collect_env(fake_gpu_node(tmp_path))
    assert info['mmlape'].split()[0] == mmlape.__version__
    assert 'mmlape:: config bases ' in info['mmlape install']
    assert info['mmlape install'].startswith(osp.dirname(mmlape.__file__))
    assert info['PyTorch'] == torch.__version__
    assert info['PyTorch CUDA'] == (
        torch.version.cuda or 'none (a CPU-only build)')
    for key, module in (('MMEngine', mmengine), ('MMCV', mmcv), ('MMPretrain',
                                                                 mmpretrain),
                        ('MMDetection', mmdet), ('MMSegmentation', mmseg)):
        assert info[key] == module.__version__, key
    # mmcv's ops are built (tests/infra/test_environment.py); on a machine
    # that has no CUDA they were built without it
    assert info['MMCV ops'].startswith('compiled with')
    if not torch.cuda.is_available():
        assert info['MMCV ops'].startswith('compiled without CUDA')
    assert info['NVIDIA GPUs'] == f'1x {GPU} (driver {DRIVER})'
    if not torch.cuda.is_available():
        assert info['GPUs torch uses'] == 'none'
        assert DRIVER in info['GPU problem']
        assert 'MMLAPE_ALLOW_CPU=1' in info['GPU problem']
    assert 'numpy_random_seed' not in info
    # the command prints every entry, as lines or JSON
    assert collect_env.main(['--json']) == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(printed)[:2] == ['mmlape', 'mmlape install']
    assert printed['PyTorch'] == torch.__version__
    assert collect_env.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f'mmlape: {printed["mmlape"]}'
    assert f'MMCV ops: {printed["MMCV ops"]}' in lines
