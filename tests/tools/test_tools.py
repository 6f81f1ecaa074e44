"""tools/train.py, tools/test.py, dist_train.sh and the demo, end to end on
generated data (CPU)."""
import argparse
import json
import os
import os.path as osp
import sys

import pytest
import torch
from conftest import DEMO, ROOT, demo_options, run

from mmlape.datasets import generate_pos_shapes

#: The tools' checkpoints are read here with a plain torch.load, as in a
#: tool's process (its allow-list).
pytestmark = pytest.mark.usefixtures('hosts_applied')


def test_generated_set_is_deterministic_and_in_imagenet_layout(tmp_path):
    a, b = tmp_path / 'a', tmp_path / 'b'
    generate_pos_shapes(str(a), 8, 4, seed=3)
    generate_pos_shapes(str(b), 8, 4, seed=3)
    for split in ('train', 'val'):
        assert sorted(os.listdir(a / split)) == [
            'bottom_left', 'bottom_right', 'top_left', 'top_right'
        ]
        assert (a / 'meta' / f'{split}.txt').read_text() == \
            (b / 'meta' / f'{split}.txt').read_text()
    assert (a / 'train/top_left/00000.png').read_bytes() == \
        (b / 'train/top_left/00000.png').read_bytes()


@pytest.mark.slow
def test_dist_train_two_cpu_processes_then_resume(pos_shapes_data, tmp_path):
    data = pos_shapes_data
    full, resumed = str(tmp_path / 'full'), str(tmp_path / 'resumed')
    out = run(
        ['bash', 'tools/dist_train.sh', DEMO, '2', '--work-dir', full] +
        demo_options(data, 6, 2),
        env=dict(PORT='29611'))
    log = out.stdout + out.stderr
    assert 'Distributed launcher: pytorch' in log or 'world_size: 2' in log
    # a machine without a GPU: the CPU run is said once, not per rank
    assert log.count('no NVIDIA GPU on this machine: 2 processes run on '
                     'the CPU (gloo)') == 1
    # the demo's LaPEAccuracy gathered both ranks' results
    assert 'Iter(val) [1/1]' in log and 'accuracy/top1:' in log
    ckpt4 = osp.join(full, 'iter_4.pth')
    out = run(
        [
            'bash', 'tools/dist_train.sh', DEMO, '2', '--work-dir', resumed,
            '--resume', ckpt4
        ] + demo_options(data, 6, 2),
        env=dict(PORT='29612'))
    log = out.stdout + out.stderr
    assert 'resumed epoch: 0, iter: 4' in log
    assert 'Iter(train) [5/6]' in log and 'Iter(train) [1/6]' not in log
    a = torch.load(osp.join(full, 'iter_6.pth'))
    b = torch.load(osp.join(resumed, 'iter_6.pth'))
    assert b['meta']['iter'] == 6
    for key, value in a['state_dict'].items():
        torch.testing.assert_close(b['state_dict'][key], value, msg=key)
    state_a = a['optimizer']['state']
    state_b = b['optimizer']['state']
    assert state_a.keys() == state_b.keys()
    for idx in state_a:
        for name in ('exp_avg', 'exp_avg_sq', 'step'):
            torch.testing.assert_close(state_b[idx][name], state_a[idx][name])


@pytest.mark.slow
def test_train_then_test_single_process(pos_shapes_data, tmp_path):
    data = pos_shapes_data
    work = str(tmp_path / 'single')
    run([sys.executable, 'tools/train.py', DEMO, '--work-dir', work] +
        demo_options(data, 3, 3))
    out = run([
        sys.executable, 'tools/test.py', DEMO,
        osp.join(work, 'iter_3.pth'), '--work-dir', work, '--out',
        osp.join(work, 'preds.pkl'), '--show-dir',
        osp.join(work, 'vis')
    ] + demo_options(data, 3, 3))
    with open(osp.join(work, 'test_metrics.json')) as f:
        metrics = json.load(f)
    assert 0 <= metrics['accuracy/top1'] <= 100
    assert osp.isfile(osp.join(work, 'preds.pkl'))
    drawn = [
        f for _, _, files in os.walk(osp.join(work, 'vis')) for f in files
        if f.endswith('.png')
    ]
    assert drawn  # the visualization hook drew predictions there
    assert 'accuracy/top1' in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize('case', ['config', 'data', 'join', 'resume', 'amp'])
def test_bad_input_is_one_clear_error(case, pos_shapes_data, tmp_path):
    data = pos_shapes_data
    args = [
        sys.executable, 'tools/train.py', DEMO, '--work-dir',
        str(tmp_path / case)
    ] + demo_options(data, 2, 2)
    expect = {
        'config': 'config file "nope.py" does not exist',
        'data': 'dataset path "/no/such/dir" does not exist',
        'join': "Unknown pe_join.type='Nope'",
        'resume': 'is a checkpoint of another model',
        'amp': '--amp needs a CUDA GPU',
    }[case]
    if case == 'config':
        args[2] = 'nope.py'
    elif case == 'data':
        args += ['train_dataloader.dataset.data_root=/no/such/dir']
    elif case == 'join':
        args += ['model.backbone.pe_join.type=Nope']
    elif case == 'resume':
        other = tmp_path / 'other.pth'
        torch.save({'state_dict': {'backbone.x': torch.zeros(1)}}, other)
        args = args[:5] + ['--resume', str(other)] + args[5:]
    elif case == 'amp':
        args.insert(5, '--amp')
    out = run(args, check=False)
    assert out.returncode == 2, out.stderr[-2000:]
    assert expect in out.stderr
    assert 'Traceback' not in out.stderr
    if case == 'resume':
        assert osp.isfile(tmp_path / 'other.pth')  # nothing saved is lost


@pytest.mark.parametrize('iters', [2, 3, 6, 100, 600, 1000])
def test_demo_schedule_fits_any_length(iters):
    """Every --iters from 2 gives a valid schedule: warm-up 1-50
    iterations, then the cosine to the end."""
    from mmengine.config import Config, DictAction

    from tools import demo
    cfg = Config.fromfile(osp.join(ROOT, DEMO))
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    opts = parser.parse_args(['--cfg-options'] +
                             demo.iteration_options(iters)).cfg_options
    cfg.merge_from_dict(opts)
    warm, cosine = cfg.param_scheduler
    assert 0 < warm.end == cosine.begin < cosine.end == iters
    assert warm.end == max(1, min(50, iters // 4))
    assert cfg.train_cfg.max_iters == cfg.train_cfg.val_interval == iters


def test_demo_refuses_fewer_than_two_iterations():
    out = run([sys.executable, 'tools/demo.py', '--iters', '1'], check=False)
    assert out.returncode == 2
    assert 'argument --iters: expected 2 or more' in out.stderr
    assert 'Traceback' not in out.stderr


@pytest.mark.slow
def test_demo_quick(tmp_path):
    work = str(tmp_path / 'demo')
    out = run([
        sys.executable, 'tools/demo.py', '--work-dir', work, '--iters', '6',
        '--num-train', '48', '--num-val', '16'
    ])
    table = [line for line in out.stdout.splitlines() if line.startswith('| ')]
    assert table[0].startswith('| join | top-1 (%) | params | s/iter')
    joins = [r.split('|')[1].strip() for r in table[1:]]
    assert joins == ['default', 'lape', 'mpvg']
    for row in table[1:]:
        top1 = float(row.split('|')[2])
        assert 0 <= top1 <= 100
    assert osp.getsize(osp.join(work, 'pe_similarity.png')) > 10000
    assert '[lape] train 6/6' in out.stdout
