"""``tools/analysis/compare.py``: the statistics against hand computation;
the variants from the joins' and PE types' declarations (refused ones
listed) and a dry build; which runs run again; a failed step recorded
with its line; a 2 joins x 2 PE types x 2 seeds sweep on the demo task end
to end (two runs at a time, the resolution sweep on every checkpoint)
killed part-way and resumed, the report rebuilt from the work dirs alone
and a failed run reported; the Slurm path through submitit's
LocalExecutor."""
import argparse
import contextlib
import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest
from conftest import DEMO, ROOT, demo_options, one_line_error

sys.path.insert(0, ROOT)
from tools.analysis import compare  # noqa: E402
from tools.common import UsageError  # noqa: E402

#: A one-stage ViT with a class token and a learnable PE, as
#: :func:`compare.base_facts` describes the demo's DeiT.
VIT = dict(
    backbone='LaPEViT',
    takes=['pe_join', 'pe_type', 'ape_type', 'with_cls_token', 'out_type'],
    pe_setting='learnable',
    with_cls_token=True,
    staged=False,
    out_type='cls_token',
    classifier=True,
    no_decay_keys=['.cls_token', '.pos_embed'])


def test_statistics_by_hand():
    # equal n (3) and variances (4): Welch's dof is 2 (n - 1) = 4; t(4) at
    # 0.975 is 2.7764 (the tables); se = sqrt(4/3 + 4/3)
    diff, low, high = compare.welch_interval([70., 72., 74.], [68., 70., 72.])
    assert diff == pytest.approx(2.)
    half = 2.776445 * math.sqrt(8 / 3)
    assert (low, high) == pytest.approx((2. - half, 2. + half), rel=1e-6)
    # unequal variances: se^2 = 4/3 + 1/3 = 5/3, dof = (5/3)^2 /
    # ((4/3)^2 / 2 + (1/3)^2 / 2) = 50/17, between t(3) = 3.182 and
    # t(2) = 4.303: t = 3.2188
    diff, low, high = compare.welch_interval([70., 72., 74.], [69., 70., 71.])
    assert high - diff == pytest.approx(3.218759 * math.sqrt(5 / 3), 1e-6)
    assert diff - low == pytest.approx(high - diff)
    # no interval with one value on a side, or no spread at all
    assert math.isnan(compare.welch_interval([1.], [2., 3.])[1])
    d, low, high = compare.welch_interval([1., 1.], [2., 2.])
    assert d == -1. and math.isnan(low) and math.isnan(high)


def test_variants_from_the_declarations():
    valid, refused = compare.variants(['Default', 'lape', 'mpvg'],
                                      ['learnable', 'rope_mixed'], VIT)
    assert [v['variant'] for v in valid] == [
        'default_learnable', 'default_rope_mixed', 'lape_learnable',
        'mpvg_learnable'
    ]
    # a join that acts on an absolute PE, on a rotary PE alone: one line
    assert [r[0] for r in refused] == ['lape_rope_mixed', 'mpvg_rope_mixed']
    assert all("pe_type 'rope_mixed'" in why for _, why in refused)
    options = {v['variant']: v['options'] for v in valid}
    # no class token for MPVG: GAP instead of the class-token output
    assert options['mpvg_learnable'][-2:] == [
        'model.backbone.with_cls_token=False',
        'model.backbone.out_type=avg_featmap'
    ]
    # the rotary PE's own parameters join the recipe's no-decay keys
    assert options['default_rope_mixed'] == [
        'model.backbone.pe_join.type=Default',
        'model.backbone.pe_type=rope_mixed', 'model.backbone.ape_type=None',
        'optim_wrapper.paramwise_cfg.custom_keys.rope_freqs.decay_mult=0.0'
    ]
    assert 'model.backbone.ape_type=learnable' in compare.variants(
        ['lape'], ['rope_mixed+learnable'], VIT)[0][0]['options']
    # without --pe-type: the config's own PE, the variants named by join
    rotary = dict(VIT, pe_setting='rope_mixed')
    valid, refused = compare.variants(['default', 'lape'], None, rotary)
    assert [v['variant'] for v in valid] == ['default']
    assert valid[0]['options'] == ['model.backbone.pe_join.type=Default']
    assert refused[0][0] == 'lape'
    # a staged backbone with a fixed PE (Swin): no pe_type to change, and
    # the joins that cannot follow the tokens across patch merging
    swin = dict(
        VIT,
        backbone='LaPESwin',
        takes=['pe_join'],
        with_cls_token=False,
        staged=True)
    valid, refused = compare.variants(['default', 'unshare'], None, swin)
    assert [v['variant'] for v in valid] == ['default']
    assert refused == [('unshare', 'Unshare does not run on a staged '
                        'backbone (LaPESwin)')]
    assert compare.variants(['lape'], ['learnable'], swin)[1] == [
        ('lape_learnable', 'LaPESwin takes no pe_type (its PE is fixed)')
    ]
    with pytest.raises(UsageError, match='--pe-join nope: unknown'):
        compare.variants(['nope'], ['learnable'], VIT)
    with pytest.raises(UsageError, match='--pe-type wobbly'):
        compare.variants(['default'], ['wobbly'], VIT)
    with pytest.raises(UsageError, match='--pe-join names lape twice'):
        compare.variants(['LaPE', 'lape'], None, VIT)


def test_the_plan_checks_each_variant_by_a_dry_build():
    """What the declarations allow but the build refuses (here an option of
    LaPE's, on the demo's LaPE config, given to every variant) is listed
    with the build's message; the facts come from the built model."""
    args = compare.parse_args([
        os.path.join(ROOT, 'configs/demo/deit-demo-lape_pos-shapes.py'),
        '--pe-join', 'default', 'lape', '--seeds', '2', '--first-seed', '3',
        '--cfg-options', 'model.backbone.pe_join.num_pe_layers=2'
    ])
    sweep = compare.plan(args)
    assert [v['variant'] for v in sweep['variants']] == ['lape']
    assert sweep['variants'][0]['params'] > 0
    [(name, why)] = sweep['refused']
    assert name == 'default' and "['num_pe_layers']" in why
    assert sweep['seeds'] == [3, 4] and sweep['baseline'] == 'lape'
    facts = compare.base_facts(compare.load_config(os.path.join(ROOT, DEMO)))
    assert set(VIT['takes']) <= set(facts.pop('takes'))
    assert facts == {k: v for k, v in VIT.items() if k != 'takes'}


def test_progress_lines():
    train = ('2026/11/28 23:35:49 - mmengine - INFO - Iter(train) [ 4/600]  '
             'lr: 2.0000e-05  eta: 0:01:10  time: 0.0751  data_time: 0.0082'
             '  loss: 1.2871')
    assert compare.progress_text(train) == ('train 4/600 loss 1.287 0.075 '
                                            's/iter eta 0:01:10')
    epoch = ('Epoch(train)  [3][ 100/1251]  lr: 1e-3  eta: 1 day, 2:03:04  '
             'time: 0.5000  loss: 6.5')
    assert compare.progress_text(epoch) == (
        'train epoch 3 100/1251 loss 6.500 0.500 s/iter eta 1 day, 2:03:04')
    assert compare.progress_text('Iter(test) [1/4]    eta: 0:00:03  time: '
                                 '0.0313') == 'test 1/4'
    # tools/analysis/resolution_sweep.py's line per size
    assert compare.progress_text('deit-demo_pos-shapes.py 24x24: 97.50\n') \
        == 'sweep 24x24 top-1 97.50'
    assert compare.progress_text('Loads checkpoint') is None


def test_one_line_errors(tmp_path, capsys, monkeypatch):
    line = one_line_error(compare.main,
                          ['--report-only', '--work-dir',
                           str(tmp_path)], capsys)
    assert 'no sweep.json' in line
    line = one_line_error(compare.main, ['--pe-join', 'lape'], capsys)
    assert 'the base config is required' in line
    config = os.path.join(ROOT, DEMO)
    line = one_line_error(compare.main, [config, '--cfg-options', 'a'], capsys)
    assert line.startswith('error: --cfg-options expects KEY=VALUE, got "a"')
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    line = one_line_error(compare.main, [config, '--launcher', 'node'], capsys)
    assert line.endswith('no GPU visible; --gpus N runs N runs at a time on '
                         'the CPU')
    # submitit is an optional dependency: its absence named, with the fix
    monkeypatch.setitem(sys.modules, 'submitit', None)
    line = one_line_error(compare.main, [config, '--launcher', 'slurm'],
                          capsys)
    assert line.endswith('needs submitit, an optional dependency: pip '
                         'install submitit')


def test_slurm_errors_are_one_line(tmp_path, capsys):
    pytest.importorskip('submitit')
    argv = [os.path.join(ROOT, DEMO), '--work-dir', str(tmp_path)]
    line = one_line_error(
        compare.main,
        argv + ['--launcher', 'submitit-local', '--slurm', 'partiton=gpu'],
        capsys)
    assert line.startswith("error: --slurm: Unknown argument 'partiton' for "
                           "executor 'slurm'")
    if not shutil.which('srun'):
        line = one_line_error(compare.main, argv + ['--launcher', 'slurm'],
                              capsys)
        assert line == ('error: --launcher slurm: Could not detect "srun", '
                        'are you indeed on a slurm cluster?')


def test_which_runs_run_again(tmp_path):
    """A run is read only when it is done, with the same options and every
    size; the reason it runs again is said."""
    spec = dict(
        work_dir=str(tmp_path / 'lape' / 'seed0'),
        options=['randomness.seed=0'],
        resolutions=[24, 48])
    assert compare.finished(spec) == (None, '')
    os.makedirs(spec['work_dir'])
    assert compare.finished(spec) == (None, 'killed before')
    path = os.path.join(spec['work_dir'], compare.RESULT)
    done = dict(
        status='done', options=spec['options'], resolutions={'24': 50.})
    for result, reason in [
        (dict(done, status='failed'), 'failed before'),
        (dict(done, options=['randomness.seed=1']), 'its options changed'),
        (done, 'sizes [48] to evaluate'),
    ]:
        compare._write_json(path, result)
        assert compare.finished(spec) == (None, reason)
    compare._write_json(path, dict(done, resolutions={'24': 50., '48': 9.}))
    assert compare.finished(spec)[0]['status'] == 'done'


def test_a_job_still_in_slurm_is_waited_for_not_submitted_again(
        tmp_path, monkeypatch, capsys):
    """A job an earlier call (``--no-wait``, or a login session that ended)
    left in Slurm is collected, not submitted twice; one Slurm no longer
    runs is submitted again."""
    submitit = pytest.importorskip('submitit')

    class SlurmJob:  # what submitit answers, from sacct, for job 77

        def __init__(self, folder, job_id):
            assert folder == str(tmp_path / 'submitit' / '%j')
            self.job_id = job_id
            self.state = 'RUNNING' if job_id == '77' else 'TIMEOUT'

        def done(self):
            return True

        def result(self):
            return dict(done)

    done = dict(status='done', metrics={'accuracy/top1': 50.})
    specs = [
        dict(
            variant='lape',
            seed=seed,
            k=seed + 1,
            total=2,
            work_dir=str(tmp_path / 'lape' / f'seed{seed}')) for seed in (0, 1)
    ]
    for spec, job_id in zip(specs, ('77', '78')):
        compare._write_json(
            os.path.join(spec['work_dir'], compare.JOB),
            dict(
                job_id=job_id,
                cluster='slurm',
                folder=str(tmp_path / 'submitit' / '%j')))
    monkeypatch.setattr(submitit, 'SlurmJob', SlurmJob)
    submitted = []

    class Executor:  # submitit's, on a login node
        cluster, folder = 'slurm', tmp_path / 'submitit' / '%j'

        def batch(self):
            return contextlib.nullcontext()

        def submit(self, fn, spec):
            submitted.append(spec['seed'])
            return SlurmJob(str(self.folder), '79')

    args = argparse.Namespace(launcher='slurm', no_wait=False, poll=1.)
    results = {}
    compare.run_submitit(specs, results, args, Executor())
    out = capsys.readouterr().out
    assert '[1/2] lape seed 0: still in Slurm job 77 (RUNNING); not ' \
        'submitted again' in out
    assert submitted == [1]  # job 78 timed out: submitted again, as 79
    assert '[2/2] lape seed 1: submitted as job 79' in out
    assert results == {('lape', 0): done, ('lape', 1): done}
    assert '[1/2] lape seed 0: done' in out


@pytest.mark.slow
def test_a_failed_step_is_recorded_with_its_line(tmp_path, capsys):
    """A tool that fails makes a ``failed`` result with the step and the
    tool's own error line; the next call runs it again."""
    spec = dict(
        variant='lape',
        join='LaPE',
        pe_type='learnable',
        seed=0,
        params=1,
        k=1,
        total=1,
        config=str(tmp_path / 'gone.py'),
        options=['randomness.seed=0'],
        resolutions=[],
        work_dir=str(tmp_path / 'lape' / 'seed0'))
    result = compare.execute(spec)
    assert result['status'] == 'failed' and result['step'] == 'train'
    assert result['error'] == (f'error: config file "{spec["config"]}" does '
                               f'not exist')
    assert json.loads(
        (tmp_path / 'lape' / 'seed0' / 'result.json').read_text()) == result
    assert '  [lape] | error: config file' in capsys.readouterr().out
    assert compare.finished(spec) == (None, 'failed before')


def _table(text, metric):
    """The rows of one metric's table in ``report.md``, by variant."""
    part = text.split(f'## {metric}\n')[1].split('\n\n')[0].strip()
    rows = [r.split('|')[1:-1] for r in part.splitlines()[2:]]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows}


@pytest.mark.slow
def test_a_sweep_killed_resumed_and_reported(pos_shapes_data, tmp_path, capsys,
                                             monkeypatch):
    """2 joins x 2 PE types x 2 seeds, LaPE on a rotary PE alone refused
    (listed in one line): 6 runs, two at a time, each trained, tested and
    evaluated at 24x24 and 32x32. The command is killed (SIGKILL, with its
    tools) while its 5th run trains; the same command then reads the
    finished runs and runs the killed ones again. Then the report from the
    work dirs alone, and a failed run reported."""
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')  # two runs on the CPU
    work = tmp_path / 'sweep'
    argv = [
        os.path.join(ROOT, DEMO), '--pe-join', 'default', 'lape', '--pe-type',
        'learnable', 'rope_mixed', '--seeds', '2', '--resolutions', '24', '32',
        '--launcher', 'node', '--gpus', '2', '--work-dir',
        str(work)
    ] + demo_options(
        pos_shapes_data, 2, interval=1, warmup=1)
    proc = subprocess.Popen(
        [sys.executable, 'tools/analysis/compare.py'] + argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True)
    first = []
    try:
        for line in proc.stdout:
            first.append(line)
            if '(seed 0, run 5/6)' in line and ' train ' in line:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    first = ''.join(first)
    assert "skipped lape_rope_mixed: LaPE does not take pe_type " \
        "'rope_mixed'" in first, first
    assert ': running on GPU' not in first  # no GPU: two on the CPU
    assert '[default_learnable] sweep 24x24 top-1' in first
    assert '[5/6] lape_learnable seed 0: running' in first
    runs = sorted(work.glob('*/seed*'))
    assert [r.relative_to(work).parts for r in runs] == [
        (v, f'seed{s}')
        for v in ('default_learnable', 'default_rope_mixed', 'lape_learnable')
        for s in (0, 1)
    ][:len(runs)]
    killed = [r for r in runs if not (r / 'result.json').exists()]
    assert work / 'lape_learnable' / 'seed0' in killed

    # the same command: the finished runs read, the killed ones run again
    again = subprocess.run(
        [sys.executable, 'tools/analysis/compare.py'] + argv,
        cwd=ROOT,
        capture_output=True,
        text=True)
    out, err = again.stdout, again.stderr
    assert again.returncode == 0, out[-3000:] + err[-5000:]
    assert 'Traceback' not in err, err
    assert out.count(': read') == len(runs) - len(killed)
    assert out.count(': running (killed before)') == len(killed)
    assert '[5/6] lape_learnable seed 0: running (killed before)' in out
    assert out.count(': running') == 6 - len(runs) + len(killed)
    results = sorted(work.glob('*/seed*/result.json'))
    assert len(results) == 6, out + err
    first = json.loads(results[0].read_text())
    assert first['status'] == 'done' and first['join'] == 'Default'
    assert first['pe_type'] == 'learnable' and first['seed'] == 0
    assert 0 <= first['metrics']['accuracy/top1'] <= 100
    # the training size: the sweep's 32x32 is the test tool's top-1
    assert first['resolutions']['32'] == first['metrics']['accuracy/top1']
    assert set(first['resolutions']) == {'24', '32'}
    assert first['params'] > 0 and first['images_per_s'] > 0
    text = (work / 'report.md').read_text()
    for metric in ('accuracy/top1', 'top-1 at 24x24', 'top-1 at 32x32'):
        table = _table(text, metric)
        assert list(table) == [
            'default_learnable', 'default_rope_mixed', 'lape_learnable'
        ]
        assert table['default_learnable'][0] == '2/2'
        assert table['default_learnable'][2:4] == ['', '']  # the baseline
        ci = table['lape_learnable'][3]
        assert ci == 'n/a' or ci.startswith('[')
    assert '| variant | seeds | mean ± std | Δ vs default_learnable |' in text
    assert '- lape_rope_mixed: LaPE does not take' in text
    # a csv table per metric, a row per variant
    assert sorted(p.name for p in work.glob('*.csv')) == [
        'report_accuracy-top1.csv', 'report_top-1_at_24x24.csv',
        'report_top-1_at_32x32.csv'
    ]
    for name in ('report_top-1_at_24x24.csv', 'report_accuracy-top1.csv'):
        with open(work / name) as f:
            rows = list(csv.DictReader(f))
        assert [r['variant'] for r in rows] == list(table)
    row = rows[2]  # accuracy/top1 of lape_learnable: its own statistics
    values = [float(v) for v in row['values'].split(';')]
    base = [float(v) for v in rows[0]['values'].split(';')]
    assert float(row['mean']) == pytest.approx(sum(values) / 2)
    diff, low, high = compare.welch_interval(values, base)
    assert float(row['diff']) == pytest.approx(diff)
    assert float(row['low'] or 'nan') == pytest.approx(low, nan_ok=True)
    assert (work / 'compare.png').stat().st_size > 10000

    # the report from the work dirs alone: the same report
    assert compare.main(['--report-only', '--work-dir', str(work)]) == 0
    assert (work / 'report.md').read_text() == text

    # a failed run is reported, not dropped
    path = work / 'default_rope_mixed' / 'seed0' / 'result.json'
    failed = dict(
        json.loads(path.read_text()),
        status='failed',
        step='train',
        error='error: out of memory')
    path.write_text(json.dumps(failed))
    assert compare.main(['--report-only', '--work-dir', str(work)]) == 1
    text = (work / 'report.md').read_text()
    assert _table(text, 'accuracy/top1')['default_rope_mixed'][0] == \
        '1/2 (1 failed)'
    assert ('- default_rope_mixed seed 0 (train): error: out of memory'
            in text)


def test_runs_read_their_configs_one_thread_at_a_time():
    """Reading a config is not thread-safe in mmengine (``ast`` on CPython
    3.11, ``pkg_resources`` for a ``mmpretrain::`` base: four threads at
    once raise here); the runs' threads read through one lock."""
    config, errors = os.path.join(ROOT, DEMO), []

    def read():
        for _ in range(5):
            try:
                assert compare._run_config(config).model.backbone
            except Exception as err:
                errors.append(err)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def _fake_execute(spec: dict, gpu=None) -> dict:
    """A finished run, as :func:`compare.execute` records one."""
    result = dict(
        {
            k: spec[k]
            for k in ('variant', 'join', 'pe_type', 'seed', 'params',
                      'options')
        },
        status='done',
        metrics={'accuracy/top1': 50. + spec['seed']},
        resolutions={},
        images_per_s=1.)
    compare._write_json(os.path.join(spec['work_dir'], 'result.json'), result)
    return result


def test_no_run_is_lost_unsaid(tmp_path, capsys, monkeypatch):
    """Runs two at a time in one process: a run that raises (a bug of the
    script, not a tool's failure) is recorded failed with its traceback
    and the sweep goes on; a tool stopped by Ctrl-C stops the sweep with
    status 130 once the other slot's run ends, and the same command runs
    the stopped run only."""
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    argv = [
        os.path.join(ROOT, DEMO), '--pe-join', 'default', 'lape', '--seeds',
        '2', '--launcher', 'node', '--gpus', '2', '--work-dir'
    ]

    def buggy(spec, gpu=None):
        if spec['k'] == 2:
            raise RuntimeError('a bug')
        return _fake_execute(spec, gpu)

    monkeypatch.setattr(compare, 'execute', buggy)
    work = tmp_path / 'bug'
    assert compare.main(argv + [str(work)]) == 1
    out, err = capsys.readouterr()
    assert 'Traceback' in err and 'RuntimeError: a bug' in err
    assert '[2/4] default seed 1: failed (compare): RuntimeError: a bug' in out
    failed = json.loads(
        (work / 'default' / 'seed1' / 'result.json').read_text())
    assert (failed['status'], failed['step'],
            failed['error']) == ('failed', 'compare', 'RuntimeError: a bug')
    assert len(list(work.glob('*/seed*/result.json'))) == 4
    text = (work / 'report.md').read_text()
    assert '- default seed 1 (compare): RuntimeError: a bug' in text
    assert _table(text, 'accuracy/top1')['default'][0] == '1/2 (1 failed)'

    calls = []

    def stopped(spec, gpu=None):
        calls.append(spec['k'])
        if spec['k'] == 3 and calls.count(3) == 1:
            raise KeyboardInterrupt  # its tool ended with status 130
        return _fake_execute(spec, gpu)

    monkeypatch.setattr(compare, 'execute', stopped)
    work = tmp_path / 'ctrl-c'
    assert compare.main(argv + [str(work)]) == 130
    out, err = capsys.readouterr()
    assert err.strip() == ('interrupted (Ctrl-C): the finished runs are '
                           'kept; the same command resumes')
    assert sorted(calls) == [1, 2, 3, 4]
    assert not (work / 'lape' / 'seed0' / 'result.json').exists()
    assert len(list(work.glob('*/seed*/result.json'))) == 3
    assert compare.main(argv + [str(work)]) == 0
    out = capsys.readouterr().out
    assert out.count(': read') == 3 and sorted(calls) == [1, 2, 3, 3, 4]


@pytest.mark.slow
def test_the_slurm_path_with_submitits_local_executor(pos_shapes_data,
                                                      tmp_path, capsys,
                                                      monkeypatch):
    """``--launcher slurm``'s path (one submitit job per run, its job
    recorded, the progress polled) on submitit's LocalExecutor: the jobs
    run in processes of their own, as on a node."""
    pytest.importorskip('submitit')
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    work = tmp_path / 'slurm'
    argv = [
        os.path.join(ROOT, DEMO), '--pe-join', 'default', 'mpvg', '--launcher',
        'submitit-local', '--poll', '1', '--work-dir',
        str(work)
    ] + demo_options(
        pos_shapes_data, 2, warmup=1)
    assert compare.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count('submitted as job') == 2
    assert '[submitit-local] 0/2 jobs done' in out
    for variant in ('default', 'mpvg'):
        run = work / variant / 'seed0'
        job = json.loads((run / 'job.json').read_text())
        assert job['cluster'] == 'local'
        assert (work / 'submitit' / job['job_id']).is_dir()
        result = json.loads((run / 'result.json').read_text())
        assert result['status'] == 'done', result
        # the job ran in a process of submitit's: its log has the progress
        log, = (work / 'submitit' / job['job_id']).glob('*_log.out')
        assert f'[{variant}] train 2/2' in log.read_text()
    table = _table((work / 'report.md').read_text(), 'accuracy/top1')
    assert list(table) == ['default', 'mpvg']
    assert table['mpvg'][0] == '1/1'
    # the finished jobs are read, nothing is submitted again
    assert compare.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count(': read') == 2 and 'submitted' not in out
