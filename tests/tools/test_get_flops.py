"""tools/analysis/get_flops.py: parameters and FLOPs of a config's whole
model, part by part (docs/analysis.md, "FLOPs of a whole model")."""
import json
import os.path as osp
import sys

import pytest
import torch
from conftest import DEMO, ROOT, one_line_error

sys.path.insert(0, ROOT)
from tools.analysis import get_flops  # noqa: E402
from tools.analysis.complexity import measure_counts  # noqa: E402


def flops_of(argv, capsys) -> dict:
    capsys.readouterr()
    assert get_flops.main(argv + ['--json']) == 0
    out = json.loads(capsys.readouterr().out)
    out['parts'] = {row['part']: row for row in out['parts']}
    return out


def backbone_alone(config: str, size: int):
    """The config's backbone built by itself and counted by
    tools/analysis/complexity.py."""
    from mmengine.config import Config
    kwargs = dict(Config.fromfile(osp.join(ROOT, config)).model.backbone)
    kwargs.pop('init_cfg', None)
    return measure_counts(kwargs.pop('type'), kwargs, size)


def test_demo_classifier(capsys):
    """The demo DeiT at its own 32x32: the backbone as complexity.py
    counts it alone, the head's one linear layer (96 -> 4: 2 x 96 x 4
    FLOPs), and their sum."""
    out = flops_of([DEMO], capsys)
    assert out['shape'] == [32, 32]  # the backbone's img_size
    parts = out['parts']
    assert list(parts) == ['backbone', 'head', 'total']
    _, backbone_flops = backbone_alone(DEMO, 32)
    assert parts['backbone']['flops'] == backbone_flops > 0
    assert parts['head']['flops'] == 2 * 96 * 4
    assert parts['head']['params'] == 96 * 4 + 4
    assert parts['total']['flops'] == backbone_flops + 2 * 96 * 4
    assert parts['total']['params'] == \
        parts['backbone']['params'] + parts['head']['params']
    assert parts['total']['type'] == 'ImageClassifier'
    # the table, at another size
    capsys.readouterr()
    assert get_flops.main([DEMO, '--shape', '48']) == 0
    table = capsys.readouterr().out
    assert f'{DEMO} at 48x48 (one image)' in table
    assert '| head | VisionTransformerClsHead | 0.000388 | 7.68e-07 |' in \
        table


@pytest.mark.slow  # builds a DeiT-Ti-sized Segmenter
def test_dense_segmentor(capsys):
    """Segmenter's ViT-Ti (LaPE) at 64x64 through mmseg's ``_forward``:
    the backbone as counted alone, the mask-transformer decode head, and
    the whole."""
    config = ('configs/segmenter/segmenter_vit-tiny-lape_mask_'
              '8xb1-160k_ade20k-512x512.py')
    out = flops_of([config, '--shape', '64', '64'], capsys)
    assert out['shape'] == [64, 64]
    parts = out['parts']
    assert list(parts) == ['backbone', 'decode_head', 'total']
    _, backbone_flops = backbone_alone(config, 64)
    assert parts['backbone']['flops'] == backbone_flops > 0
    assert parts['decode_head']['flops'] > 0
    assert parts['total']['flops'] == \
        backbone_flops + parts['decode_head']['flops']
    assert parts['total']['type'] == 'EncoderDecoder'


def test_default_shapes_and_bad_input(capsys, tmp_path):
    from mmengine.config import Config
    cfg = Config(
        dict(
            default_scope='mmseg',
            model=dict(data_preprocessor=dict(size=(512, 1024)))))
    assert get_flops.input_shape(cfg) == (512, 1024)
    assert get_flops.input_shape(cfg, [64]) == (64, 64)
    assert get_flops.input_shape(
        Config(dict(default_scope='mmdet', model=dict()))) == (800, 1333)
    line = one_line_error(get_flops.main, [str(tmp_path / 'nope.py')], capsys)
    assert line == f'error: config file "{tmp_path / "nope.py"}" does not ' \
        'exist'
    line = one_line_error(get_flops.main, [DEMO, '--shape', '1', '2', '3'],
                          capsys)
    assert '--shape takes H [W], got 3 numbers' in line
    assert torch.is_grad_enabled()
