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
    assert args.families == list(bench.DEFAULT_FAMILIES)
    assert set(bench.DEFAULT_FAMILIES) == set(bench.FAMILIES) - {'swin'}
    assert (args.iters, args.warmup, args.max_batch) == (5, 2, 2)
    assert args.log_every == 1 and args.runtime_info is None
    assert not args.compile
    # the user's path logs every 50-100 iterations: the run logs every 5
    assert bench.parse_args([]).log_every == bench.LOG_EVERY == 5
    with pytest.raises(SystemExit):
        bench.parse_args(['--log-every', '0'])
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


def test_train_log_is_read_by_windows(tmp_path):
    """Logged every 5 iterations, each entry the mean of its 5: the entries
    whose iterations all follow the warm-up are timed, a last entry off the
    interval (an epoch's end) is left out."""
    run = tmp_path / '20261127_000000' / 'vis_data'
    run.mkdir(parents=True)
    steps = [5, 10, 15, 20, 22]
    with open(run / 'scalars.json', 'w') as f:
        for step in steps:
            f.write(
                json.dumps(
                    dict(
                        time=step / 10,
                        data_time=step / 100,
                        loss=1.0,
                        step=step)) + '\n')
        f.write(json.dumps(dict(time=9.0, data_time=9.0, step=0)) + '\n')
    got = bench.read_train_log(str(tmp_path), warmup=7, every=5)
    # warm-up 7: the entry of 6..10 holds iterations 6 and 7, left out
    assert (got['timed'], got['log_every']) == (10, 5)
    assert got['s_per_iter'] == pytest.approx((1.5 + 2.0) / 2)
    assert got['data_s_per_iter'] == pytest.approx((0.15 + 0.2) / 2)
    got = bench.read_train_log(str(tmp_path), warmup=5, every=5)
    assert got['timed'] == 15
    with pytest.raises(RuntimeError, match='none after the 20 warm-up'):
        bench.read_train_log(str(tmp_path), warmup=20, every=5)


def test_train_run_logs_by_windows_with_the_hook_named():
    base = bench.base_loader(bench.FAMILIES['deit']['config'])
    over = bench.overrides('deit', '/data', 8, 30, 30, False, 2, base, 5)
    assert over['default_hooks']['logger'] == dict(interval=5)
    assert over['log_processor'] == dict(window_size=5)
    assert 'runtime_info' not in over['default_hooks']  # the config's
    over = bench.overrides('deit', '/data', 8, 30, 30, False, 2, base, 5,
                           'RuntimeInfoHook')
    assert over['default_hooks']['runtime_info'] == dict(
        type='RuntimeInfoHook')
    note = bench.runtime_info_note(
        dict(log_every=5, runtime_info='RuntimeInfoHook'))
    assert 'every 5 iteration(s) with RuntimeInfoHook' in note


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


def test_profiled_steps(tmp_path):
    """The profiled steps report each step's wall and CPU time, the
    operations by self host time with their calls per step, and the whole
    table; on the CPU there is no device time."""
    import torch
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    synced = []

    def step():
        torch.mm(torch.mm(a, b), b).sum()

    prof = bench.profile_steps_of(step, 3, lambda: synced.append(1),
                                  str(tmp_path / 'p.txt'))
    assert len(synced) == 1 + 3  # before, and after every step
    assert prof['steps'] == 3
    assert prof['wall_ms_per_step'] > 0 and prof['cpu_ms_per_step'] > 0
    assert prof['device_busy_ms_per_step'] is None
    assert prof['device_top'] == []
    rows = {r['name']: r for r in prof['host_top']}
    assert rows['aten::mm']['calls_per_step'] == 2
    assert rows['aten::mm']['host_ms_per_step'] > 0
    assert len(prof['host_top']) <= bench.PROFILE_TOP
    assert 'aten::mm' in (tmp_path / 'p.txt').read_text()


def test_device_busy_is_the_union_of_kernel_intervals():
    from types import SimpleNamespace as NS

    from torch.autograd import DeviceType

    def event(start, end, device=DeviceType.CUDA):
        return NS(time_range=NS(start=start, end=end), device_type=device)

    events = [
        event(0, 10),
        event(5, 12),  # overlaps the first
        event(20, 25),
        event(0, 100, DeviceType.CPU),  # host work is not device time
    ]
    assert bench._device_busy_us(events) == 12 + 5
    assert bench._device_busy_us([event(0, 1, DeviceType.CPU)]) is None


def test_profile_table_in_the_report():
    prof = dict(
        steps=10,
        wall_ms_per_step=75.,
        cpu_ms_per_step=70.,
        device_busy_ms_per_step=30.,
        host_top=[
            dict(
                name='cudaStreamSynchronize',
                calls_per_step=1.,
                host_ms_per_step=20.)
        ],
        device_top=[
            dict(name='sm90_gemm', calls_per_step=48., device_ms_per_step=9.)
        ])
    report = dict(families=[dict(family='deit', model=dict(profile=prof))])
    text = '\n'.join(bench.profile_markdown(report))
    assert '| deit | 10 | 75.00 | 30.00 | 60% | 70.00 |' in text
    assert '| `cudaStreamSynchronize` | 1 | 20.000 |' in text
    assert '| `sm90_gemm` | 48 | 9.000 |' in text
    assert bench.profile_markdown(dict(families=[dict(model={})])) == []
    # a profile that failed says so, and the timed figures stand
    failed = dict(steps=10, error='RuntimeError: no CUPTI')
    report['families'].append(
        dict(family='deit-base', model=dict(profile=failed)))
    text = '\n'.join(bench.profile_markdown(report))
    assert '| deit-base | 10 | failed: RuntimeError: no CUPTI |' in text


def test_a_failed_profile_keeps_the_timed_steps(monkeypatch):
    """measure_model's timed steps stand when the profiler fails."""
    import torch

    def broken(*args, **kwargs):
        raise RuntimeError('profiler unavailable\nmore')

    monkeypatch.setattr(bench, 'profile_steps_of', broken)

    class Model(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def train_step(self, batch, optim):
            return {}

    from mmengine.config import ConfigDict
    monkeypatch.setattr('mmengine.registry.MODELS.build', lambda cfg: Model())
    cfg = ConfigDict(
        model=dict(type='X'),
        train_dataloader=dict(pin_memory=False),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)))
    result = bench.measure_model(
        cfg, {}, steps=2, warmup=0, amp=False, profile_steps=3)
    assert result['s_per_step'] > 0
    assert result['profile'] == dict(
        steps=3, error='RuntimeError: profiler unavailable')


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
        '--profile-steps', '2', '--work-root',
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
    assert any(
        r.startswith('Model-only steps under torch.profiler') for r in rows)
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
        # two more steps profiled: the host's top operations, the table
        prof = model['profile']
        assert prof['steps'] == 2 and prof['host_top']
        assert prof['device_busy_ms_per_step'] is None  # the CPU
        assert osp.isfile(prof['table'])
        assert osp.dirname(prof['table']) == str(tmp_path)
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
