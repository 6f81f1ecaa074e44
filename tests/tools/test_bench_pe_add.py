"""benchmarks/bench_pe_add.py in a tiny run: its byte counts say what the
per-layer add costs under autocast."""
import json
import os.path as osp
import sys

from conftest import ROOT

sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
import bench_pe_add  # noqa: E402


def test_bytes_moved_counts_reads_and_writes():
    import torch
    a, b = torch.ones(4, 8), torch.ones(1, 8)
    with bench_pe_add.BytesMoved() as counter:
        a.add_(b)  # reads a and b, writes a
        a.view(32)  # moves nothing
    assert counter.bytes == (32 + 8 + 32) * 4
    assert dict(counter.ops) == {'add_': 1}


def test_tiny_run_table(capsys):
    assert bench_pe_add.main(['--shapes', 'deit-tiny:32', '--rounds', '1']) \
        == 0
    out = capsys.readouterr().out
    rows = {
        line.split('|')[2].strip(): line.split('|')[3:]
        for line in out.splitlines() if line.startswith('| deit-tiny b32')
    }
    assert set(rows) == {'default', 'float32 add', 'add_attn_pe'}
    eval_x = {name: float(cells[1]) for name, cells in rows.items()}
    assert eval_x['default'] == 1.0
    assert 1.0 < eval_x['add_attn_pe'] < 1.01 < eval_x['float32 add']
    assert 'max abs difference 0.0e+00' in out


def test_kernel_probe_tiny(tmp_path):
    """``bench_pe_add_kernels.py``: every way of writing the add gives the
    float32 sum rounded once (but the cast-then-add), timed against the
    cast, and whole timm eval steps with the add in each block."""
    import bench_pe_add_kernels as probe
    import torch
    assert probe.main([
        '--tiny', '--device', 'cpu', '--reps', '1', '--rounds', '1',
        '--shapes', 'deit-tiny', '--models', '--out',
        str(tmp_path)
    ]) == 0
    report = json.loads((tmp_path / 'pe_add_kernels.json').read_text())
    rows = {r['path']: r for r in report['rows']}
    assert list(rows) == [*probe.paths(torch.bfloat16), 'mmlape add_to_dtype']
    assert rows['cast']['x_cast'] == 1.0
    assert rows['cast']['equals_float32_sum_rounded'] is None
    for path in ('add to dtype', 'add to dtype, pe expanded',
                 'float32 add, then cast', 'mmlape add_to_dtype'):
        assert rows[path]['equals_float32_sum_rounded'] is True, path
        assert 'aten::add' in rows[path]['kernels'], path
    models = report['models']
    assert [m['variant'] for m in models] == [
        'default (timm as is)', 'add to dtype', 'float32 add',
        'add to dtype + PE norm (LaPE)', 'mmlape add_to_dtype',
        'mmlape add_to_dtype + PE norm (LaPE)'
    ]
    assert models[0]['x_default'] == 1.0
    assert all(m['ms'] > 0 for m in models)
    md = (tmp_path / 'pe_add_kernels.md').read_text()
    assert '| deit-tiny b2 | add to dtype |' in md
    assert '| vit_tiny_patch16_224 b2 | float32 add |' in md


def test_kernel_probe_train_steps_and_host_time(tmp_path):
    """``--train``: timm train steps with the add each way that has a
    gradient; ``--host``: the host time per call of each add."""
    import bench_pe_add_kernels as probe
    assert probe.main([
        '--tiny', '--device', 'cpu', '--reps', '1', '--rounds', '1',
        '--shapes', 'deit-tiny', '--models', '--train', '--host',
        '--no-kernels', '--out',
        str(tmp_path)
    ]) == 0
    report = json.loads((tmp_path / 'pe_add_kernels.json').read_text())
    assert report['rows'] == [] and report['step'] == 'train'
    assert [m['variant'] for m in report['models']] == [
        'default (timm as is)', 'float32 add', 'mmlape add_to_dtype',
        'mmlape add_to_dtype + PE norm (LaPE)'
    ]
    assert all(m['ms'] > 0 for m in report['models'])
    host = {r['path']: r['host_us'] for r in report['host']}
    assert list(host) == ['cast', 'torch.add to dtype', 'mmlape add_to_dtype']
    assert all(us > 0 for us in host.values())
    md = (tmp_path / 'pe_add_kernels.md').read_text()
    assert '| model | variant | train ms | img/s | x default |' in md
    assert '| one sample (host time per call) | us |' in md


def test_forced_add_paths_restore_the_threshold(monkeypatch):
    """The 'Triton at any size' and 'PyTorch add' variants set the size
    threshold for their call only, and give mmlape's sum."""
    import bench_pe_add_kernels as probe
    import torch

    from mmlape.models.layers import pe_add
    before = pe_add._TRITON_MIN_NUMEL
    seen = []
    add = pe_add.add_attn_pe

    def recording(h, pe):
        seen.append(pe_add._TRITON_MIN_NUMEL)
        return add(h, pe)

    monkeypatch.setattr(pe_add, 'add_attn_pe', recording)
    norm = torch.nn.LayerNorm(8)
    x, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
    for how in ('mmlape', 'mmlape triton', 'mmlape torch'):
        layer = probe.NormThenAdd(norm, pe, how, torch.bfloat16)
        with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
            out = layer(x)
        assert torch.equal(out, (norm(x) + pe).bfloat16()), how
        assert pe_add._TRITON_MIN_NUMEL == before
    assert seen == [
        before,
        dict(train=1, eval=1),
        dict(train=float('inf'), eval=float('inf'))
    ]
