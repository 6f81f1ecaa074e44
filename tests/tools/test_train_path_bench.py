"""``benchmarks/bench_train_path.py``: the loader alone, the model alone and
``tools/train.py`` end to end, in its tiny mode."""
import json
import os
import os.path as osp
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
import bench_train_path as bench  # noqa: E402


def test_command_line():
    args = bench.parse_args(['--tiny'])
    assert args.families == list(bench.FAMILIES)
    assert (args.iters, args.warmup, args.max_batch) == (5, 2, 2)
    assert not args.compile
    # --compile and --amp go to tools/train.py as they are
    cmd = bench.train_command('c.py', 'w', compile_=True, amp=True)
    assert cmd[1:] == [
        osp.join(ROOT, 'tools', 'train.py'), 'c.py', '--work-dir', 'w',
        '--no-validate', '--compile', '--amp'
    ]
    assert '--compile' not in bench.train_command('c.py', 'w')
    assert bench.parse_args(['--compile']).compile
    with pytest.raises(SystemExit):
        bench.parse_args(['--families', 'deit,nope'])
    with pytest.raises(SystemExit):
        bench.parse_args(['--iters', '3', '--warmup', '3'])


def test_warmup_drains_the_loaders_queue():
    """Without --tiny the warm-up covers 5x the batches the loader queues
    before the first step (its workers x prefetch_factor), so that the timed
    iterations do not run on them."""
    args = bench.parse_args([])
    assert (args.iters, args.warmup) == (None, None)
    base = bench.base_loader(bench.FAMILIES['deit']['config'])
    assert base['prefetch_factor'] == 2
    # auto_num_workers resolved as the tools resolve it: CPUs - 1, bounded
    assert bench.queue_batches(base, None, cpus=16) == 15 * 2
    assert bench.queue_batches(base, None, cpus=2) == 5 * 2  # the floor
    assert bench.queue_batches(base, 3) == 6  # --workers
    assert bench.iterations(args, 30) == dict(iters=175, warmup=150)
    assert bench.iterations(args, 1) == dict(iters=30, warmup=5)
    given = bench.parse_args(['--iters', '40', '--warmup', '10'])
    assert bench.iterations(given, 30) == dict(iters=40, warmup=10)
    # --iters alone: the warm-up takes at most half of them
    assert bench.iterations(bench.parse_args(['--iters', '50']), 30) == dict(
        iters=50, warmup=25)
    assert bench.iterations(bench.parse_args(['--iters', '50']), 2) == dict(
        iters=50, warmup=10)


def test_report_flags_a_run_above_its_bound():
    fam = dict(
        family='deit',
        batch=256,
        config_batch=256,
        loader=dict(img_s_cpu=150., img_s_wall=150.),
        model=dict(img_s=3400.),
        train=dict(img_s=2419., data_share=.04, workers=15),
        bound=dict(img_s=2300., limited_by='loader', train_over_bound=1.05))
    report = dict(
        machine=dict(
            cpu='c',
            cpus=16,
            gpu='g',
            torch='t',
            torch_threads=16,
            load_average=[0.],
            date='d'),
        load_average_end=[0.],
        settings=dict(compile=False),
        families=[fam])
    assert 'Above the bound (deit)' in bench.markdown(report)
    fam['bound']['train_over_bound'] = 0.9
    assert 'Above the bound' not in bench.markdown(report)


def test_bound():
    model = dict(device='cpu', cpu_s_per_step=0.5, threads=2, batch=4)
    loader = dict(img_s_cpu=3.0)
    # the model side: 4 images per 0.25 s of two threads' CPU time
    assert bench.bound(
        model, loader, 8, cpus=16) == dict(
            img_s=16.0, limited_by='model')
    # the loader side: 3 workers on 2 CPUs at 3 img/s each
    assert bench.bound(
        model, loader, 3, cpus=2) == dict(
            img_s=6.0, limited_by='loader')
    # no workers: loading and stepping take turns
    assert bench.bound(model, loader, 0, cpus=2)['img_s'] == \
        pytest.approx(1 / (1 / 16 + 1 / 3))


@pytest.mark.slow
def test_tiny_run_reports_consistent_figures(tmp_path, fresh_default_scope):
    from mmengine.config import Config

    from mmlape.engine.loader_workers import apply_auto_num_workers
    out = tmp_path / 'report.json'
    families = ['deit', 'deit-base', 'segmenter']
    code = bench.main([
        '--tiny', '--threads', '1', '--families', ','.join(families),
        '--work-root',
        str(tmp_path), '--json',
        str(out), '--out',
        str(tmp_path / 'report.md')
    ])
    report = json.loads(out.read_text())
    assert code == 0, [f.get('error') for f in report['families']]
    assert report['machine']['cpus'] == len(os.sched_getaffinity(0))
    assert [f['family'] for f in report['families']] == families
    rows = (tmp_path / 'report.md').read_text().splitlines()
    assert rows[2] == '| ' + ' | '.join(bench.COLUMNS) + ' |'
    table = rows[4:]
    table = table[:table.index('')] if '' in table else table  # then notes
    assert [r.split(' | ')[0] for r in table] == [f'| {f}' for f in families]
    for fam in report['families']:
        name = fam['family']
        loader, model, train = fam['loader'], fam['model'], fam['train']
        assert fam['data']['format'] == bench.FAMILIES[name]['data']
        assert fam['data']['images'] >= 2 * fam['batch'] and \
            fam['data']['mean_kb'] > 0
        # the loader ran on one thread: its CPU time is at most its wall
        assert loader['images'] >= 8
        assert loader['img_s_cpu'] >= 0.95 * loader['img_s_wall'] > 0
        assert model['img_s'] > 0 and model['cpu_s_per_step'] > 0
        assert model['threads'] == 1
        # every iteration logged, the warm-up left out
        assert (train['logged'], train['timed']) == (5, 3)
        assert (train['iters'], train['warmup']) == (5, 2)
        assert train['queue_batches'] == 2 * train['workers']
        assert train['img_s'] > 0 and 0 <= train['data_share'] <= 1
        # the workers the tool resolved from the config's bounds, said once
        cfg = Config.fromfile(osp.join(ROOT, bench.FAMILIES[name]['config']))
        cfg.launcher = 'none'
        apply_auto_num_workers(cfg, {})
        assert train['workers'] == cfg.train_dataloader.num_workers >= 1
        assert train['auto_num_workers_logged'] == 1
        # the run measured against the slower of its model and its loader
        # (how close it comes is a timing, for the report, not for a test)
        limit = fam['bound']
        assert limit['limited_by'] in ('model', 'loader')
        assert limit['train_over_bound'] == pytest.approx(train['img_s'] /
                                                          limit['img_s'])
        assert limit['img_s'] > 0
