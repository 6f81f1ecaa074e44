"""tools/slurm_train.sh and tools/slurm_test.sh with a stand-in ``srun``
(and ``scontrol``) on PATH: the srun command line they build, and a real
three-iteration run through ``--launcher slurm`` on CPU."""
import json
import os
import os.path as osp
import stat
import sys

import pytest
from conftest import DEMO, ROOT, demo_options, run

#: Records its arguments, then runs the command as task 0 of a one-task
#: job (with the variables Slurm sets), or only records (FAKE_SRUN_DRY).
FAKE_SRUN = '''#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ['FAKE_SRUN_LOG'], 'a') as f:
    f.write(json.dumps(dict(args=args, pythonpath=os.environ.get(
        'PYTHONPATH', ''))) + '\\n')
opts, i = {{}}, 0
while i < len(args) and args[i].startswith('-'):
    if args[i] == '-p':
        opts['-p'] = args[i + 1]
        i += 2
        continue
    key, _, value = args[i].partition('=')
    opts[key] = value
    i += 1
if os.environ.get('FAKE_SRUN_DRY'):
    sys.exit(0)
if opts['--ntasks'] != '1':
    sys.exit('the stand-in srun runs one task only')
env = dict(os.environ, SLURM_PROCID='0', SLURM_LOCALID='0', SLURM_NTASKS='1',
           SLURM_NODELIST='node[01]', SLURM_JOB_NAME=opts['--job-name'],
           SLURM_JOB_PARTITION=opts['-p'])
os.execvpe(args[i], args[i:], env)
'''
FAKE_SCONTROL = '''#!/bin/sh
echo "$@" >> "$FAKE_SRUN_LOG.scontrol"
[ "$1 $2 $3" = "show hostnames node[01]" ] && echo 127.0.0.1
'''


@pytest.fixture
def fake_slurm(tmp_path):
    """PATH with the stand-ins, and the log file srun writes."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for name, text in (('srun', FAKE_SRUN.format(python=sys.executable)),
                       ('scontrol', FAKE_SCONTROL)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / 'srun.jsonl'
    env = dict(
        PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}',
        FAKE_SRUN_LOG=str(log),
        PYTHON=sys.executable)
    return env, log


def _calls(log):
    with open(log) as f:
        return [json.loads(line) for line in f]


def test_srun_command_lines(fake_slurm):
    env, log = fake_slurm
    env = dict(env, FAKE_SRUN_DRY='1')
    run([
        'bash', 'tools/slurm_train.sh', 'gpu', 'lape-ti', 'configs/x.py',
        'work_dirs/x', '--resume', '--cfg-options', 'a=1'
    ],
        env=dict(
            env,
            GPUS='16',
            GPUS_PER_NODE='8',
            CPUS_PER_TASK='3',
            SRUN_ARGS='--qos=high --time=72:00:00'))
    run(['bash', 'tools/slurm_test.sh', 'gpu', 'eval', 'c.py', 'w.pth'],
        env=dict(env, GPUS='2'))
    run(['bash', 'tools/slurm_train.sh', 'p', 'j', 'c.py', 'w'], env=env)
    train, test, defaults = _calls(log)
    assert train['args'] == [
        '-p', 'gpu', '--job-name=lape-ti', '--gres=gpu:8', '--ntasks=16',
        '--ntasks-per-node=8', '--cpus-per-task=3', '--kill-on-bad-exit=1',
        '--qos=high', '--time=72:00:00', sys.executable, '-u',
        osp.join(ROOT,
                 'tools/train.py'), 'configs/x.py', '--work-dir=work_dirs/x',
        '--launcher=slurm', '--resume', '--cfg-options', 'a=1'
    ]
    assert train['pythonpath'].split(os.pathsep)[0] == ROOT
    # GPUS_PER_NODE defaults to GPUS up to 8; CPUS_PER_TASK to 5.
    assert test['args'] == [
        '-p', 'gpu', '--job-name=eval', '--gres=gpu:2', '--ntasks=2',
        '--ntasks-per-node=2', '--cpus-per-task=5', '--kill-on-bad-exit=1',
        sys.executable, '-u',
        osp.join(ROOT, 'tools/test.py'), 'c.py', 'w.pth', '--launcher=slurm'
    ]
    assert defaults['args'][2:6] == [
        '--job-name=j', '--gres=gpu:8', '--ntasks=8', '--ntasks-per-node=8'
    ]


@pytest.mark.parametrize('script', ['slurm_train.sh', 'slurm_test.sh'])
def test_bad_arguments_are_one_clear_error(script, fake_slurm):
    env, log = fake_slurm
    out = run(['bash', f'tools/{script}', 'p', 'j', 'c.py'],
              check=False,
              env=env)
    assert out.returncode == 2 and 'usage:' in out.stderr
    out = run(['bash', f'tools/{script}', 'p', 'j', 'c.py', 'w'],
              check=False,
              env=dict(env, GPUS='0'))
    assert out.returncode == 2
    assert "GPUS must be a positive integer, got '0'" in out.stderr
    assert not log.exists()  # srun never started


@pytest.mark.slow
def test_train_then_test_through_srun(fake_slurm, pos_shapes_data, tmp_path):
    """Three iterations of the demo config through slurm_train.sh
    (``--launcher slurm`` on CPU: gloo, rank and world size from the Slurm
    variables, the master address from scontrol), then slurm_test.sh."""
    env, log = fake_slurm
    env = dict(env, GPUS='1', MASTER_PORT='29641')
    work = str(tmp_path / 'work')
    out = run([
        'bash', 'tools/slurm_train.sh', 'cpu', 'lape-demo', DEMO, work,
        *demo_options(pos_shapes_data, 3, 3)
    ],
              env=env)
    text = out.stdout + out.stderr
    assert 'Distributed launcher: slurm' in text
    assert 'Distributed training: True' in text
    assert 'GPU number: 1' in text  # the world size
    assert "'backend': 'gloo'" in text
    assert osp.isfile(osp.join(work, 'iter_3.pth'))
    assert open(str(log) + '.scontrol').read().split() == [
        'show', 'hostnames', 'node[01]'
    ]
    test_work = str(tmp_path / 'test')
    run([
        'bash', 'tools/slurm_test.sh', 'cpu', 'lape-eval', DEMO,
        osp.join(work, 'iter_3.pth'), '--work-dir', test_work,
        *demo_options(pos_shapes_data, 3, 3)
    ],
        env=env)
    with open(osp.join(test_work, 'test_metrics.json')) as f:
        assert 0 <= json.load(f)['accuracy/top1'] <= 100
    calls = _calls(log)
    assert [c['args'][1] for c in calls] == ['cpu', 'cpu']
    opts = demo_options(pos_shapes_data, 3, 3)
    assert calls[1]['args'][-len(opts) - 3:] == [
        '--launcher=slurm', '--work-dir', test_work
    ] + opts


def test_slurm_variables_become_torch_rendezvous(monkeypatch, fake_slurm):
    from mmlape.hosts import slurm_to_torch_env
    from mmlape.utils.errors import UsageError
    for name in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST',
                 'SLURM_LOCALID', 'MASTER_ADDR', 'MASTER_PORT', 'RANK',
                 'WORLD_SIZE', 'LOCAL_RANK'):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(
            UsageError,
            match='SLURM_PROCID, SLURM_NTASKS, '
            'SLURM_NODELIST not set; start the job with srun'):
        slurm_to_torch_env()
    env, _ = fake_slurm
    monkeypatch.setenv('PATH', env['PATH'])
    monkeypatch.setenv('FAKE_SRUN_LOG', env['FAKE_SRUN_LOG'])
    for name, value in dict(
            SLURM_PROCID='5',
            SLURM_NTASKS='16',
            SLURM_LOCALID='1',
            SLURM_NODELIST='node[01]').items():
        monkeypatch.setenv(name, value)
    slurm_to_torch_env(port=29777)
    assert [
        os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK',
                                'MASTER_ADDR', 'MASTER_PORT')
    ] == ['5', '16', '1', '127.0.0.1', '29777']
    monkeypatch.setenv('SLURM_NODELIST', 'other[1-2]')
    monkeypatch.delenv('MASTER_ADDR')
    with pytest.raises(UsageError, match='set MASTER_ADDR'):
        slurm_to_torch_env()
