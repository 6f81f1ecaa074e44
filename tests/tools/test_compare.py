"""``tools/analysis/compare.py``: the variants from the joins' and PE
types' declarations (a refused one listed), the statistics against hand
computation, and a sweep end to end on the demo task through the project's
own train/test tools: 2 joins x 2 PE types x 2 seeds, resumed after a
killed run, the report rebuilt from the work dirs alone."""
import json
import math
import os
import os.path as osp
import sys

import pytest
from conftest import DEMO, ROOT, demo_options

sys.path.insert(0, ROOT)
from tools.analysis import compare  # noqa: E402
from tools.common import UsageError  # noqa: E402


def test_statistics_by_hand():
    mean, std = compare.mean_std([70., 72., 74.])
    assert mean == 72. and std == 2.
    assert compare.mean_std([5.])[1] == 0.
    # a = 72 +- 2 (n 3), b = 70 +- 1 (n 3): diff 2, se^2 = 4/3 + 1/3 = 5/3,
    # dof = (5/3)^2 / ((4/3)^2 / 2 + (1/3)^2 / 2) = 25/9 / (17/18) = 2.94
    # -> t(2) = 4.303 (rounded down)
    diff, half = compare.welch_interval([70., 72., 74.], [69., 70., 71.])
    assert diff == pytest.approx(2.)
    assert half == pytest.approx(4.303 * math.sqrt(5 / 3))
    assert math.isnan(compare.welch_interval([1.], [2., 3.])[1])
    assert compare.t975(1) == 12.706 and compare.t975(100) == 1.96


def test_variants_from_the_declarations():
    valid, refused = compare.variants(['Default', 'lape', 'mpvg'],
                                      ['learnable', 'rope_mixed'])
    names = [v[0] for v in valid]
    assert names == [
        'default_learnable', 'default_rope_mixed', 'lape_learnable',
        'mpvg_learnable'
    ]
    # a join that acts on an absolute PE, on a rotary PE alone
    assert [r[0] for r in refused] == ['lape_rope_mixed', 'mpvg_rope_mixed']
    assert all("pe_type 'rope_mixed'" in why for _, why in refused)
    mpvg = dict((v[0], v[3]) for v in valid)['mpvg_learnable']
    assert 'model.backbone.with_cls_token=False' in mpvg
    with pytest.raises(UsageError, match='--pe-join nope: unknown'):
        compare.variants(['nope'], ['learnable'])
    with pytest.raises(UsageError, match='--pe-type wobbly'):
        compare.variants(['default'], ['wobbly'])


@pytest.mark.slow
def test_a_sweep_end_to_end_resumes_and_reports(pos_shapes_data, tmp_path,
                                                capsys):
    work = tmp_path / 'sweep'
    opts = demo_options(pos_shapes_data, 2)[1:]
    argv = [
        osp.join(ROOT, DEMO), '--pe-join', 'default', 'lape', '--pe-type',
        'learnable', 'sincos2d', '--seeds', '2', '--work-dir',
        str(work), '--cfg-options'
    ] + opts
    assert compare.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count(': running') == 8
    results = sorted(work.glob('*/seed*/result.json'))
    assert len(results) == 8
    first = json.loads(results[0].read_text())
    assert first['status'] == 'done' and 'accuracy/top1' in first['metrics']
    assert first['params'] > 0
    table = (work / 'report.md').read_text()
    for name in ('default_learnable', 'default_sincos2d', 'lape_learnable',
                 'lape_sincos2d'):
        assert f'| {name} | 2 |' in table
    assert 'vs default_learnable' in table
    rows = (work / 'report.csv').read_text().splitlines()
    assert len(rows) == 5
    # a killed run (no result.json): only that one runs again
    os.remove(work / 'lape_sincos2d' / 'seed1' / 'result.json')
    assert compare.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count(': running') == 1 and out.count(': read') == 7
    assert '[8/8] lape_sincos2d seed 1: running' in out
    # the report from the work dirs alone, the same table
    again = (work / 'report.md').read_text()
    assert '| lape_sincos2d | 2 |' in again
    assert compare.main(argv + ['--report-only']) == 0
    assert (work / 'report.md').read_text() == again
