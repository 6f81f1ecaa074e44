"""``benchmarks/bench_host_loop.py``, section by section in its tiny mode:
``train`` (the loader alone, the model alone and ``tools/train.py`` end to
end), ``test`` (the test loader, the model's evaluation step and
``tools/test.py`` with the config's evaluator and mmpretrain's), ``syncs``
(the training loop's reads from the device per iteration, on the DeiT-Ti
LaPE config's path: its pipeline in loader workers, its preprocessor,
optimizer and hooks) and ``overheads`` (the classification data
preprocessor on a stacked batch against a list of images, the configs'
preprocessor against mmpretrain's, the optimizer with one group per
option set against one per parameter, the configs' accuracy metric
against mmpretrain's and the configs' model average against mmengine's,
in one run)."""
import json
import os
import os.path as osp
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
import bench_host_loop as bench  # noqa: E402


def section(name, *argv):
    """The settings of section ``name`` (overheads for its parts) from the
    command line ``argv``."""
    key = name if name in bench.RUNS else 'overheads'
    return bench.parse_args(['--section', name, *argv])[key]


def test_sections_and_the_combined_report(tmp_path, monkeypatch, capsys):
    """``all`` runs every section, each once (the overheads' parts in one
    run); several sections write one markdown with a heading each and one
    JSON of each section's report."""
    runs = bench.parse_args(['--section', 'all'])
    assert list(runs) == ['train', 'test', 'syncs', 'overheads']
    assert runs['overheads'].sections == list(bench.OVERHEADS)
    runs = bench.parse_args(['--section', 'metric,train,ema'])
    assert list(runs) == ['overheads', 'train']
    assert runs['overheads'].sections == ['metric', 'ema']
    with pytest.raises(SystemExit):
        bench.parse_args([])  # --section is required
    assert bench.table(
        ('a', 'b'),
        [(1, 2), ('x', )]) == ['| a | b |', '|---|---|', '| 1 | 2 |', '| x |']

    def fake(name, families):

        def run(args, save):
            report = dict(section=name, families=families)
            save(report)
            return report

        return run, lambda report: f"{report['section']} table\n"

    monkeypatch.setattr(
        bench, 'RUNS',
        dict(
            train=fake('train', [dict(family='deit')]),
            test=fake('test', []),
            syncs=fake('syncs', [dict(family='deit', error='E')]),
            overheads=fake('overheads', [])))
    js, md = tmp_path / 'r.json', tmp_path / 'r.md'
    code = bench.main(
        ['--section', 'train,ema', '--json',
         str(js), '--out',
         str(md)])
    assert code == 0
    assert set(json.loads(js.read_text())) == {'train', 'overheads'}
    assert md.read_text() == '## train\n\ntrain table\n\n## overheads' \
        '\n\noverheads table\n'
    capsys.readouterr()
    # one section: its own report, its own markdown; a failed family: 1
    assert bench.main(['--section', 'syncs', '--json', str(js)]) == 1
    assert json.loads(js.read_text())['section'] == 'syncs'
    assert capsys.readouterr().out == 'syncs table\n\n'


# ---------------------------------------------------------------------------
# train


def test_train_command_line():
    args = section('train', '--tiny')
    assert args.families == list(bench.DEFAULT_FAMILIES)
    assert set(bench.DEFAULT_FAMILIES) == set(bench.FAMILIES) - {'swin'}
    assert (args.iters, args.warmup, args.max_batch) == (5, 2, 2)
    assert args.log_every == 1 and args.runtime_info is None
    assert not args.compile
    # the user's path logs every 50-100 iterations: the run logs every 5
    assert section('train').log_every == bench.LOG_EVERY == 5
    with pytest.raises(SystemExit):
        section('train', '--log-every', '0')
    # --compile and --amp go to tools/train.py as they are
    cmd = bench.train_command('c.py', 'w', compile_=True, amp=True)
    assert cmd[1:] == [
        osp.join(ROOT, 'tools', 'train.py'), 'c.py', '--work-dir', 'w',
        '--no-validate', '--compile', '--amp'
    ]
    assert '--compile' not in bench.train_command('c.py', 'w')
    assert section('train', '--compile').compile
    with pytest.raises(SystemExit):
        section('train', '--families', 'deit,nope')
    with pytest.raises(SystemExit):
        section('train', '--iters', '3', '--warmup', '3')


def test_warmup_drains_the_loaders_queue():
    """Without --tiny the warm-up covers 5x the batches the loader queues
    before the first step (its workers x prefetch_factor), so that the timed
    iterations do not run on them."""
    args = section('train')
    assert (args.iters, args.warmup) == (None, None)
    base = bench.base_loader(bench.FAMILIES['deit']['config'])
    assert base['prefetch_factor'] == 2
    # auto_num_workers resolved as the tools resolve it: CPUs - 1, bounded
    assert bench.queue_batches(base, None, cpus=16) == 15 * 2
    assert bench.queue_batches(base, None, cpus=2) == 5 * 2  # the floor
    assert bench.queue_batches(base, 3) == 6  # --workers
    assert bench.iterations(args, 30) == dict(iters=175, warmup=150)
    assert bench.iterations(args, 1) == dict(iters=30, warmup=5)
    given = section('train', '--iters', '40', '--warmup', '10')
    assert bench.iterations(given, 30) == dict(iters=40, warmup=10)
    # --iters alone: the warm-up takes at most half of them
    assert bench.iterations(section('train', '--iters', '50'), 30) == dict(
        iters=50, warmup=25)
    assert bench.iterations(section('train', '--iters', '50'), 2) == dict(
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
def test_tiny_train_run_reports_consistent_figures(tmp_path,
                                                   fresh_default_scope):
    from mmengine.config import Config

    from mmlape.hosts.loader_workers import apply_auto_num_workers
    out = tmp_path / 'report.json'
    families = ['deit', 'deit-base', 'segmenter']
    code = bench.main([
        '--section', 'train', '--tiny', '--threads', '1', '--families',
        ','.join(families), '--profile-steps', '2', '--work-root',
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


# ---------------------------------------------------------------------------
# test


def test_test_command_line(capsys):
    args = section('test')
    assert args.families == ['deit', 'deit-base']
    assert (args.iters, args.warmup) == (40, 10)
    with pytest.raises(SystemExit):
        section('test', '--families', 'deit,nope')
    assert 'unknown nope' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        section('test', '--iters', '4', '--warmup', '4')
    assert 'leaves none' in capsys.readouterr().err


def test_test_log_lines_are_read(tmp_path):
    """mmengine's test lines: the warm-up ones left out, the metrics
    read."""
    run = tmp_path / '20261127_000000'
    run.mkdir()
    (run / '20261127_000000.log').write_text(
        '11/27 00:00:01 - mmengine - INFO - Epoch(test) [1/3]    eta: '
        '0:00:02  time: 0.9000  data_time: 0.5000  memory: 10\n'
        '11/27 00:00:02 - mmengine - INFO - Epoch(test) [2/3]    eta: '
        '0:00:01  time: 0.2000  data_time: 0.1000\n'
        '11/27 00:00:03 - mmengine - INFO - Epoch(test) [3/3]    eta: '
        '0:00:00  time: 0.4000  data_time: 0.1000\n'
        '11/27 00:00:03 - mmengine - INFO - Epoch(test) [3/3]    '
        'accuracy/top1: 12.5000\n')
    (tmp_path / 'test_metrics.json').write_text('{"accuracy/top1": 12.5}')
    got = bench.read_test_log(str(tmp_path), warmup=1)
    assert (got['logged'], got['timed']) == (3, 2)
    assert got['s_per_iter'] == pytest.approx(0.3)
    assert got['data_s_per_iter'] == pytest.approx(0.1)
    assert got['metrics'] == {'accuracy/top1': 12.5}
    with pytest.raises(RuntimeError, match='none after the 3 warm-up'):
        bench.read_test_log(str(tmp_path), warmup=3)


@pytest.mark.slow
def test_tiny_run_compares_the_evaluators(tmp_path, fresh_default_scope):
    out = tmp_path / 'report.json'
    assert bench.main([
        '--section', 'test', '--tiny', '--threads', '1', '--families', 'deit',
        '--iters', '4', '--warmup', '1', '--max-batch', '6', '--max-images',
        '8', '--workers', '1', '--model-steps', '2', '--root',
        str(tmp_path), '--json',
        str(out), '--out',
        str(tmp_path / 'report.md')
    ]) == 0
    report = json.loads(out.read_text())
    (fam, ) = report['families']
    assert fam['evaluator'] == 'LaPEAccuracy'
    assert fam['batch'] == 6 and fam['data']['images'] == 8
    assert fam['model']['batch'] == 6 and fam['model']['img_s'] > 0
    # the test loader alone, one batch after the warm-up one, and the
    # workers the model's rate needs from it
    loader = fam['loader']
    assert loader['images'] == 6 and loader['img_s_cpu'] > 0
    assert fam['workers_needed'] == pytest.approx(fam['model']['img_s'] /
                                                  loader['img_s_cpu'])
    assert set(fam['test']) == set(bench.EVALUATORS)
    for run in fam['test'].values():
        # 4 batches of 6 from 8 images repeated 3 times (24), the first
        # iteration left out; the worker given
        assert (run['logged'], run['timed']) == (4, 3)
        assert run['img_s'] > 0 and 0 <= run['data_share'] <= 1
        assert run['workers'] == 1
        assert set(run['metrics']) == {'accuracy/top1', 'accuracy/top5'}
    # both evaluators tested one checkpoint on one set
    assert fam['same_metrics'] is True
    text = (tmp_path / 'report.md').read_text()
    assert '| deit | 6 | LaPEAccuracy |' in text
    assert '| deit | 6 | Accuracy |' in text


# ---------------------------------------------------------------------------
# syncs


def test_syncs_command_line():
    args = section('syncs', '--tiny')
    assert (args.families, args.iters, args.log_every,
            args.max_batch) == (['deit'], 12, 5, 2)
    assert section('syncs').max_batch == 64
    for bad in (['--families', 'upernet'], ['--iters',
                                            '1'], ['--log-every', '0']):
        with pytest.raises(SystemExit):
            section('syncs', *bad)


@pytest.mark.slow
@pytest.mark.parametrize('family,reads', [('deit', {
    'item': 12
}), ('swin', {
    'item': 12,
    '__float__': 12
})])
def test_between_hand_overs_the_config_reads_nothing(tmp_path,
                                                     fresh_default_scope,
                                                     family, reads):
    """The config's hook reads on the first iteration, the logged ones (5,
    10) and the epoch's last (12); mmengine's on every one: the losses and,
    in Swin's recipe, which clips, the gradient norm."""
    out = tmp_path / 'report.json'
    code = bench.main([
        '--section', 'syncs', '--tiny', '--families', family, '--work-root',
        str(tmp_path), '--json',
        str(out), '--out',
        str(tmp_path / 'report.md')
    ])
    report = json.loads(out.read_text())
    assert code == 0, [f.get('error') for f in report['families']]
    (fam, ) = report['families']
    lazy, eager = fam['hooks']
    assert lazy['hook'] == 'LazyRuntimeInfoHook'
    assert eager['hook'] == 'RuntimeInfoHook'
    assert [i for i, n in enumerate(lazy['reads_per_iteration'])
            if n] == [0, 4, 9, 11]
    assert set(lazy['reads_per_iteration']) == {0, 1}
    assert lazy['what'] == {'tolist': 4}
    assert eager['reads_per_iteration'] == [len(reads)] * 12
    assert eager['what'] == reads
    table = (tmp_path / 'report.md').read_text()
    assert f'| {family} | 2 | LazyRuntimeInfoHook | 12 (log every 5) | ' \
        '1 0 0 0 1 0 0 0 0 1 0 1 | 8 |' in table


# ---------------------------------------------------------------------------
# overheads


def test_overheads_command_line(capsys):
    args = section('overheads')
    assert args.configs == list(bench.CONFIGS)
    assert args.sections == list(bench.OVERHEADS)
    with pytest.raises(SystemExit):
        section('overheads', '--configs', 'deit,nope')
    assert 'unknown nope' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        section('loader')
    assert '--section: unknown loader' in capsys.readouterr().err


def test_every_overhead_in_one_run(tmp_path):
    out, js = tmp_path / 'h.md', tmp_path / 'h.json'
    assert bench.main([
        '--section', 'overheads', '--configs', 'cifar,t2t', '--batch', '6',
        '--rounds', '1', '--calls', '1', '--threads', '1', '--out',
        str(out), '--json',
        str(js)
    ]) == 0
    rows = json.loads(js.read_text())['rows']
    collate = [r for r in rows if r['section'] == 'collate']
    assert [(r['mode'], r['case']) for r in collate
            ] == [(m, c) for m in ('train', 'eval') for c in bench.COLLATES]
    for mode in ('train', 'eval'):
        listed, stacked = (r for r in collate if r['mode'] == mode)
        assert listed['batch'] == stacked['batch'] == 6
        # a few operations per image against one pass over the batch
        assert listed['ops'] >= stacked['ops'] + 2 * 6, (listed, stacked)
        assert stacked['x'] == 1.0 and listed['ms'] > 0
    labels = [r for r in rows if r['section'] == 'labels']
    assert [(r['mode'], r['case']) for r in labels] == [
        (m, c) for m in ('train', 'eval') for c in bench.PREPROCESSORS
    ]
    for mode in ('train', 'eval'):
        host, ours = (r for r in labels if r['mode'] == mode)
        assert host['batch'] == ours['batch'] == 6
        # a reduction and two slices an image against a fixed few
        assert host['ops'] >= ours['ops'] + 3 * 6, (host, ours)
        assert ours['x'] == 1.0 and host['ms'] > 0
    per_param, merged = (r for r in rows if r['section'] == 'optimizer')
    assert (per_param['case'], merged['case']) == bench.GROUPINGS
    # mmengine's constructor: one group per parameter; the config's: a few
    assert per_param['groups'] == per_param['params'] > 50
    assert 1 < merged['groups'] <= 4
    assert merged['x'] == 1.0 and per_param['ms'] > 0
    assert per_param['optimizer'] == 'AdamW (fused)'
    host, ours = (r for r in rows if r['section'] == 'metric')
    assert (host['case'], ours['case']) == bench.ACCURACIES
    assert host['batch'] == ours['batch'] == 6 and host['classes'] == 100
    assert host['batches'] == ours['batches'] == 8
    # two copies a sample against two a batch, the same results and
    # metrics, and results that pickle without the batch
    assert (host['host_copies'], ours['host_copies']) == (12, 2)
    assert host['same'] is ours['same'] is True
    assert ours['pickled_kb'] * 3 < host['pickled_kb']
    # what a process sends to be gathered: about a batch's scores per
    # batch (6 x 100 float32), mmpretrain's the whole batch a sample
    assert 6 * 100 * 4 / 1024 < ours['gathered_kb'] < 2 * 6 * 100 * 4 / 1024
    assert host['gathered_kb'] > 6 * 6 * 100 * 4 / 1024
    assert ours['x'] == 1.0 and host['ms'] > 0
    host, ours = (r for r in rows if r['section'] == 'ema')
    assert (host['case'], ours['case']) == bench.AVERAGES
    assert host['config'] == 't2t' and host['params'] == 122
    # a lerp_ per parameter against one multi-tensor lerp_
    assert (host['lerps'], ours['lerps']) == (122, 1)
    assert host['ops'] > ours['ops'], (host, ours)
    assert host['same'] is ours['same'] is True
    assert ours['x'] == 1.0 and host['ms'] > 0
    # the sections measure their own configs only
    assert {r['config'] for r in rows if r['section'] != 'ema'} == {'cifar'}
    text = out.read_text()
    assert '| cifar (32x32) | 6 | train | pseudo_collate |' in text
    assert '| cifar | AdamW (fused) |' in text
    assert ('| cifar (8x8) | 6 | eval | LaPEClsDataPreprocessor |' in text)
    assert '| cifar | 6 | 100 | LaPEAccuracy | 2 |' in text
    assert '| t2t | 122 | LaPEExponentialMovingAverage | ' in text
    assert len(json.loads(js.read_text())['rows']) == 14
