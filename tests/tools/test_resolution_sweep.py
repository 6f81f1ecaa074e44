"""``tools/analysis/resolution_sweep.py``: classifiers evaluated at several
input sizes without fine-tuning, one table and one figure."""
import csv
import os.path as osp
import sys

import pytest
import torch
from conftest import ROOT, run

sys.path.insert(0, ROOT)
from tools.analysis import resolution_sweep  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')

DEIT_TEST = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=256, edge='short', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]


def test_the_test_pipeline_is_scaled_to_each_size():
    # DeiT's: the crop ratio kept (short side 256/224 of the crop), rounded
    # down as DeiT's build_transform does (int(384 / 0.875) = 438)
    out = resolution_sweep.sized_pipeline(DEIT_TEST, 384, 224)
    assert out[1] == dict(DEIT_TEST[1], scale=438)
    assert out[2] == dict(type='CenterCrop', crop_size=384)
    assert resolution_sweep.sized_pipeline(DEIT_TEST, 448, 224)[1:3] == [
        dict(DEIT_TEST[1], scale=512),
        dict(type='CenterCrop', crop_size=448)
    ]
    assert out[0] == DEIT_TEST[0] and out[3] == DEIT_TEST[3]
    assert DEIT_TEST[2]['crop_size'] == 224  # the config is left alone
    assert resolution_sweep.sized_pipeline(DEIT_TEST, 224, 224) == DEIT_TEST
    # a resize to a fixed shape is scaled as a whole
    fixed = [dict(type='Resize', scale=(64, 48))]
    assert resolution_sweep.sized_pipeline(
        fixed, 16, 32) == [dict(type='Resize', scale=(32, 24))]
    # the demo's: loading and packing only; a resize is added after loading
    demo = [dict(type='CheckedLoadImageFromFile'), dict(type='PackInputs')]
    assert resolution_sweep.sized_pipeline(demo, 48, 32) == [
        demo[0],
        dict(type='Resize', scale=(48, 48), interpolation='bicubic'), demo[1]
    ]


@pytest.mark.parametrize('scope', ['', 'mmpretrain.', 'mmcv.'])
def test_transforms_are_found_by_name_whatever_their_scope(scope):
    scoped = [dict(t, type=scope + t['type']) for t in DEIT_TEST]
    out = resolution_sweep.sized_pipeline(scoped, 384, 224)
    assert [t.get('scale', t.get('crop_size')) for t in out[1:3]] == [438, 384]
    assert out[2]['type'] == scope + 'CenterCrop'


def test_a_crop_ratio_sets_the_resize_of_every_size():
    """``--crop-ratio``: short side ``int(size / ratio)``, the centre crop
    ``size`` (RoPE-ViT evaluates with 1.0; 0.875 is DeiT's own)."""
    sized = resolution_sweep.sized_pipeline
    for size, ratio, short in [(384, 1.0, 384), (224, 0.875, 256),
                               (384, 0.875, 438), (160, 0.9, 177)]:
        out = sized(DEIT_TEST, size, 224, crop_ratio=ratio)
        assert out[1] == dict(DEIT_TEST[1], scale=short)
        assert out[2] == dict(type='CenterCrop', crop_size=size)
    # a pipeline without a short-side resize and a centre crop is refused
    for pipeline in ([DEIT_TEST[0], DEIT_TEST[3]], DEIT_TEST[:2],
                     [dict(type='Resize', scale=(256, 256)), DEIT_TEST[2]]):
        with pytest.raises(
                resolution_sweep.UsageError,
                match='--crop-ratio needs a test pipeline'):
            sized(pipeline, 224, 224, crop_ratio=1.0)


@pytest.mark.parametrize('argv,match', [
    (['a.py', '--sizes', '32', '--data', 'd'], 'expected CONFIG CKPT pairs'),
    (['a.py', 'a.pth', '--sizes', '32', '32', '--data', 'd'
      ], r'--sizes repeats a size'),
    (['a.py', 'a.pth', '--sizes', '0', '--data', 'd'
      ], 'expected a positive integer'),
    (['a.py', 'a.pth', '--sizes', '32', '--data', 'd', '--labels', 'x', 'y'
      ], '--labels has 2 names for 1 checkpoints'),
    (['a.py', 'a.pth', '--sizes', '32', '--data', 'd', '--crop-ratio', '0'
      ], 'expected a crop ratio in (0, 1]'),
    (['a.py', 'a.pth', '--sizes', '32', '--data', 'd', '--crop-ratio', 'x'
      ], 'expected a crop ratio in (0, 1]'),
])
def test_bad_arguments_end_in_one_line(argv, match, capsys):
    with pytest.raises(SystemExit) as exit_:
        resolution_sweep.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('error: ') and '\n' not in err
    assert match in err


def demo_checkpoint(tmp_path, name, seed):
    """Random weights of a demo config, spread out so that the predictions
    differ from image to image."""
    from mmlape.analysis import build_from_config
    torch.manual_seed(seed)
    model, _ = build_from_config(
        osp.join(ROOT, 'configs', 'demo', f'{name}.py'))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    path = str(tmp_path / f'{name}.pth')
    torch.save(dict(state_dict=model.state_dict()), path)
    return path


def top1_by_hand(config, checkpoint, data, size):
    """The top-1 (%) of a demo checkpoint on the val images resized to
    ``size`` (mmcv's bicubic resize), its PE resized with antialiasing,
    without the tool or a dataloader."""
    import mmcv

    from mmlape.analysis import build_from_config
    model, _ = build_from_config(config)
    model.load_state_dict(
        torch.load(checkpoint, weights_only=True)['state_dict'])
    model.backbone.interpolate_antialias = True
    model.eval()
    with open(osp.join(data, 'meta', 'val.txt')) as f:
        items = [line.split() for line in f if line.strip()]
    correct = 0
    for rel, label in items:
        img = mmcv.imread(osp.join(data, 'val', rel))
        if img.shape[:2] != (size, size):
            img = mmcv.imresize(img, (size, size), interpolation='bicubic')
        batch = model.data_preprocessor(
            dict(inputs=[torch.from_numpy(img).permute(2, 0, 1)]))
        with torch.no_grad():
            logits = model(batch['inputs'], mode='tensor')
        correct += int(logits.argmax(1).item() == int(label))
    return 100. * correct / len(items)


@pytest.mark.slow
def test_sweep_end_to_end(pos_shapes_data, tmp_path):
    """Two demo checkpoints (the default join, RoPE-Mixed) at three sizes:
    the table (csv, markdown) and the figure; each value is the top-1 of
    the val images resized to that size."""
    names = ['deit-demo_pos-shapes', 'deit-demo-rope-mixed_pos-shapes']
    configs = [osp.join('configs', 'demo', f'{n}.py') for n in names]
    ckpts = [demo_checkpoint(tmp_path, n, i) for i, n in enumerate(names)]
    out_dir = tmp_path / 'sweep'
    sizes = [16, 32, 48]
    cmd = [sys.executable, 'tools/analysis/resolution_sweep.py']
    for config, ckpt in zip(configs, ckpts):
        cmd += [config, ckpt]
    cmd += ['--sizes', '48', '16', '32', '--data', pos_shapes_data]
    cmd += ['--out-dir', str(out_dir), '--antialias', '--labels']
    cmd += ['default', 'RoPE-Mixed']
    out = run(cmd)
    assert 'wrote' in out.stdout
    with open(out_dir / 'resolution_sweep.csv') as f:
        rows = list(csv.DictReader(f))
    assert [r['model'] for r in rows] == ['default', 'RoPE-Mixed']
    assert list(rows[0])[-3:] == ['16', '32', '48']  # sorted
    for row, config, ckpt in zip(rows, configs, ckpts):
        assert row['train size'] == '32'
        got = [float(row[str(s)]) for s in sizes]
        want = [
            top1_by_hand(osp.join(ROOT, config), ckpt, pos_shapes_data, s)
            for s in sizes
        ]
        assert got == pytest.approx(want, abs=1e-6), config
    assert len(set(got)) > 1  # the sizes reach the model
    table = (out_dir / 'resolution_sweep.md').read_text().splitlines()
    assert table[0] == '| model | 16x16 | 32x32 | 48x48 |'
    assert table[2].startswith('| default | ')
    assert table[2].split('|')[3].strip().endswith('*')  # trained at 32
    png = out_dir / 'resolution_sweep.png'
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert png.stat().st_size > 10_000


def test_a_crop_ratio_the_pipeline_cannot_take_stops_before_any_run(
        pos_shapes_data, tmp_path, capsys):
    """The demo's test pipeline has no resize: ``--crop-ratio`` ends in one
    line before a checkpoint is read (every config is checked first)."""
    config = osp.join(ROOT, 'configs', 'demo', 'deit-demo_pos-shapes.py')
    argv = [
        config, 'missing.pth', '--sizes', '32', '--data', pos_shapes_data,
        '--crop-ratio', '1.0', '--out-dir',
        str(tmp_path / 'out')
    ]
    with pytest.raises(SystemExit) as exit_:
        resolution_sweep.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith('error: --crop-ratio needs a test pipeline')
    assert 'missing.pth' not in err
