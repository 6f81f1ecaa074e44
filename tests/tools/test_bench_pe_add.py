"""benchmarks/bench_pe_add.py in a tiny run: its byte counts say what the
per-layer add costs under autocast."""
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
