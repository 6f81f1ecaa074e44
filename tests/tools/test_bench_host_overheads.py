"""``benchmarks/bench_host_overheads.py``: the classification data
preprocessor on a stacked batch against a list of images, the configs'
preprocessor against mmpretrain's, the optimizer with one group per
option set against one per parameter, the configs' accuracy metric
against mmpretrain's and the configs' model average against mmengine's,
in one run."""
import json
import os.path as osp
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
import bench_host_overheads as bench  # noqa: E402


def test_command_line(capsys):
    args = bench.parse_args([])
    assert args.configs == list(bench.CONFIGS)
    assert args.sections == list(bench.SECTIONS)
    with pytest.raises(SystemExit):
        bench.parse_args(['--configs', 'deit,nope'])
    assert 'unknown nope' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(['--sections', 'loader'])
    assert '--sections: unknown loader' in capsys.readouterr().err


def test_every_section_in_one_run(tmp_path):
    out, js = tmp_path / 'h.md', tmp_path / 'h.json'
    rows = bench.main([
        '--configs', 'cifar,t2t', '--batch', '6', '--rounds', '1', '--iters',
        '1', '--threads', '1', '--out',
        str(out), '--json',
        str(js)
    ])
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
