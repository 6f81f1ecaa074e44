"""``benchmarks/bench_collate.py``: the classification data preprocessor on
a stacked batch against a list of images, in one run."""
import json
import os.path as osp
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
import bench_collate as bench  # noqa: E402


def test_command_line(capsys):
    assert bench.parse_args([]).configs == list(bench.CONFIGS)
    with pytest.raises(SystemExit):
        bench.parse_args(['--configs', 'deit,nope'])
    assert 'unknown nope' in capsys.readouterr().err


def test_stacked_batch_dispatches_fewer_ops(tmp_path):
    out, js = tmp_path / 'c.md', tmp_path / 'c.json'
    rows = bench.main([
        '--configs', 'cifar', '--batch', '6', '--rounds', '1', '--iters',
        '1', '--threads', '1', '--out',
        str(out), '--json',
        str(js)
    ])
    assert [(r['mode'], r['collate']) for r in rows] == [
        (m, c) for m in ('train', 'eval') for c in bench.COLLATES
    ]
    for mode in ('train', 'eval'):
        listed, stacked = (r for r in rows if r['mode'] == mode)
        assert listed['batch'] == stacked['batch'] == 6
        # a few operations per image against one pass over the batch
        assert listed['ops'] >= stacked['ops'] + 2 * 6, (listed, stacked)
        assert stacked['x'] == 1.0 and listed['ms'] > 0
    assert '| cifar (32x32) | 6 | train | pseudo_collate |' in out.read_text()
    assert len(json.loads(js.read_text())['rows']) == 4
