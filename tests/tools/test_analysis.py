"""The analysis tools, on CPU, checked through the files they write."""
import csv
import os.path as osp
import sys

import numpy as np
import pytest
import torch
from conftest import DEMO as DEMO_CONFIG
from conftest import ROOT

from mmlape.analysis import build_from_config
from mmlape.datasets import generate_pos_shapes

sys.path.insert(0, ROOT)
from tools.analysis import complexity, pe_similarity, token_pe_correlation

DEMO = osp.join(ROOT, DEMO_CONFIG)


def make(tmp_path, name, backbone):
    """A config derived from the demo config and a checkpoint of it."""
    config = tmp_path / f'{name}.py'
    config.write_text(f"_base_ = '{DEMO}'\n"
                      f'model = dict(backbone={backbone})\n')
    model, _ = build_from_config(str(config))
    ckpt = tmp_path / f'{name}.pth'
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, ckpt)
    return str(config), str(ckpt)


def separable_residual(m, r, c):
    """max |S(dy,dx) - S(dy,0) - S(0,dx) + S(0,0)| around (r, c)."""
    worst = 0.0
    for y in range(m.shape[0]):
        for x in range(m.shape[1]):
            worst = max(worst, abs(m[y, x] - m[y, c] - m[r, x] + m[r, c]))
    return worst


def test_pe_similarity_of_fixed_2d_sincos(tmp_path):
    config, ckpt = make(tmp_path, 'sincos2d', "dict(pe_type='sincos2d')")
    out = tmp_path / 'out'
    assert pe_similarity.main([config, ckpt, '--out-dir', str(out)]) == 0
    sim = np.load(out / 'similarity.npy')
    maps = np.load(out / 'maps.npy')
    pe = np.load(out / 'pe.npy')
    assert sim.shape == (4, 64, 64) and maps.shape == (4, 8, 8)
    assert pe.shape == (4, 64, 96)
    assert np.allclose(np.diagonal(sim, axis1=1, axis2=2), 1, atol=1e-5)
    assert sim.min() >= -1 - 1e-5 and sim.max() <= 1 + 1e-5
    m = maps[0]  # layer 0, norm1 affine at its identity initialisation
    assert m[4, 4] == pytest.approx(1, abs=1e-5) and m.argmax() == 4 * 8 + 4
    for d in (1, 2, 3):  # symmetric along both axes
        assert m[4 + d, 4] == pytest.approx(m[4 - d, 4], abs=1e-5)
        assert m[4, 4 + d] == pytest.approx(m[4, 4 - d], abs=1e-5)
    # 2D sin-cos: half the channels encode x, half y, so the similarity is
    # a sum of a function of dy and a function of dx.
    assert separable_residual(m, 4, 4) < 1e-5
    assert osp.getsize(out / 'pe_similarity.png') > 5000


def test_1d_sincos_is_not_a_2d_pattern(tmp_path):
    config, ckpt = make(tmp_path, 'sincos1d', "dict(pe_type='sincos1d')")
    out = tmp_path / 'out'
    pe_similarity.main([config, ckpt, '--out-dir', str(out), '--token', '36'])
    assert separable_residual(np.load(out / 'maps.npy')[0], 4, 4) > 1e-2


def test_lape_layers_without_pe_are_nan(tmp_path):
    config, ckpt = make(tmp_path, 'eta',
                        "dict(pe_join=dict(type='LaPE', num_pe_layers=2))")
    out = tmp_path / 'out'
    pe_similarity.main([config, ckpt, '--out-dir', str(out)])
    maps = np.load(out / 'maps.npy')
    assert np.isfinite(maps[:2]).all() and np.isnan(maps[2:]).all()


def test_checkpoint_that_does_not_fit_is_refused(tmp_path, capsys):
    config, _ = make(tmp_path, 'default', "dict()")
    _, other = make(tmp_path, 'lape', "dict(pe_join=dict(type='LaPE'))")
    with pytest.raises(SystemExit) as info:
        pe_similarity.main([config, other, '--out-dir', str(tmp_path / 'o')])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert 'is a checkpoint of another model' in err
    assert 'pe_norm' in err


def test_token_pe_correlation(tmp_path):
    config, ckpt = make(
        tmp_path, 'mpvg', "dict(pe_join=dict(type='MPVG'), "
        "with_cls_token=False, out_type='avg_featmap')")
    data = tmp_path / 'images'
    generate_pos_shapes(str(data), num_train=6, num_val=2)
    out = tmp_path / 'out'
    assert token_pe_correlation.main([
        config, ckpt, '--data',
        str(data / 'train'), '--num-images', '5', '--batch-size', '2',
        '--out-dir',
        str(out)
    ]) == 0
    with open(out / 'token_pe_correlation.csv') as f:
        rows = list(csv.DictReader(f))
    assert [int(r['layer']) for r in rows] == [0, 1, 2, 3]
    for r in rows:  # PVG/MPVG: every layer sees the PE
        assert -1 <= float(r['mean_r']) <= 1 and int(r['images']) == 5
    heat = np.load(out / 'heatmaps.npz')
    assert heat['before'].shape == heat['after'].shape == (5, 8, 8)
    assert (heat['before'] > 0).all() and (heat['after'] > 0).all()
    for name in ('token_pe_correlation.png', 'last_norm_heatmaps.png'):
        assert osp.getsize(out / name) > 5000
    with pytest.raises(SystemExit):
        token_pe_correlation.main([
            config, ckpt, '--data',
            str(tmp_path / 'nope'), '--out-dir',
            str(out)
        ])


def test_complexity_table(capsys):
    assert complexity.main(['--archs', 'test-tiny']) == 0
    lines = [
        ln for ln in capsys.readouterr().out.splitlines()
        if ln.startswith('| test-tiny')
    ]
    diff = {
        ln.split('|')[2].strip(): int(ln.split('|')[6].replace(',', ''))
        for ln in lines
    }
    C, L = 64, 4
    assert diff == {
        'Default': 0,
        'Share': 0,
        'Unshare': (L - 1) * 17 * C,
        'LaPE': 2 * C * L,
        'PVG': -2 * C + 2 * C * (L - 1),
        'MPVG': 2 * C * (L - 1)
    }
    flops = [float(ln.split('|')[5]) for ln in lines]
    assert all(f > 0 for f in flops)


def test_flops_count_attention_on_the_cpu():
    """DeiT-Ti at 224x224 on the CPU: every matmul counted, attention's
    products included (torch's counter has no formula for the CPU
    attention kernel; mmlape.analysis.flop_counter adds it): 2.507
    GFLOPs, the DeiT paper's 1.3 G multiply-adds, not 2.149."""
    _, flops = complexity.measure_counts('LaPEViT', dict(arch='deit-tiny'),
                                         224)
    n, c, hidden = 197, 192, 768
    layer = 2 * n * c * 3 * c + 2 * 2 * n * n * c + 2 * n * c * c + \
        2 * 2 * n * c * hidden
    patches = 2 * 196 * (3 * 16 * 16) * c
    assert flops == patches + 12 * layer == 2_506_982_400


def test_complexity_counts_as_the_papers_count(capsys):
    """T2T-ViT-7's fixed sinusoid and Performer features are counted, as
    the official code's frozen parameters are (4,310,222 with the 1000-way
    head, MPVG's Table 1: 4.310M); the table shows both parts."""
    count, flops = complexity.measure_counts(
        'LaPEViT', dict(arch='t2t-vit-7'), 224, flops=False)
    assert flops is None
    assert count.learnable == 3_998_694
    assert count.fixed == 197 * 256 + 2 * 32 * 64
    assert count.paper + 256 * 1000 + 1000 == 4_310_222
    assert complexity.measure(
        'LaPEViT', dict(arch='t2t-vit-7'), 224,
        flops=False) == (count.paper, None)
    assert complexity.main(['--archs', 'test-tiny']) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split('|')[7:9] == [' learnable (M) ', ' fixed ']
    row = next(ln for ln in lines if ln.startswith('| test-tiny | LaPE |'))
    cells = row.split('|')
    assert cells[4] == cells[7] and cells[8].strip() == '0'  # learnable PE
