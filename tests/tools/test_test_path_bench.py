"""``benchmarks/bench_test_path.py``: the test loader alone, the model's
evaluation step and ``tools/test.py`` end to end with the config's
evaluator and mmpretrain's, in its tiny mode."""
import json
import os.path as osp
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
import bench_test_path as bench  # noqa: E402


def test_command_line(capsys):
    args = bench.parse_args([])
    assert args.families == ['deit', 'deit-base']
    assert (args.iters, args.warmup) == (40, 10)
    with pytest.raises(SystemExit):
        bench.parse_args(['--families', 'deit,nope'])
    assert 'unknown nope' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(['--iters', '4', '--warmup', '4'])
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
    bench.main([
        '--tiny', '--threads', '1', '--families', 'deit', '--iters', '4',
        '--warmup', '1', '--max-batch', '6', '--max-images', '8', '--workers',
        '1', '--model-steps', '2', '--root',
        str(tmp_path), '--json',
        str(out), '--out',
        str(tmp_path / 'report.md')
    ])
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
