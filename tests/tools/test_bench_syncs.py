"""``benchmarks/bench_syncs.py``: the training loop's reads from the device
per iteration, on the DeiT-Ti LaPE config's path (its pipeline in loader
workers, its preprocessor, optimizer and hooks), in its tiny mode."""
import json
import os.path as osp
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
import bench_syncs as bench  # noqa: E402


def test_command_line():
    args = bench.parse_args(['--tiny'])
    assert (args.families, args.iters, args.log_every,
            args.max_batch) == (['deit'], 12, 5, 2)
    assert bench.parse_args([]).max_batch == 64
    for bad in (['--families', 'upernet'], ['--iters',
                                            '1'], ['--log-every', '0']):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


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
        '--tiny', '--families', family, '--work-root',
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
