"""The drop-in examples, read from the docs and built as written.

Each python block of the section "Drop-in: change the type in a config
you have" (docs/configs.md), and the README's quick-start config, is a
whole config: a host config by ``_base_`` with only
the backbone type swapped and a join added. Each is written to a file,
read by mmengine's ``Config`` and built by the host's registry; the built
backbone is the named mmlape class with the named join and the host
config's width, and it runs on one image.
"""
import os.path as osp
import re
from importlib import import_module

import pytest
import torch
from conftest import ROOT
from host_models import build_in
from mmengine.config import Config

import mmlape  # noqa: F401  (registers the backbones, mmlape:: bases)
from mmlape.registry import MODELS

SECTION = '### Drop-in: change the type in a config you have'
PAGE = osp.join(ROOT, 'docs', 'configs.md')
#: What each host config's backbone is, as the host's own config states it.
HOST_WIDTH = {
    'deit/deit-tiny_4xb256_in1k.py':
    192,
    'swin_transformer/swin-tiny_16xb64_in1k.py':
    96,
    't2t_vit/t2t-vit-t-14_8xb64_in1k.py':
    384,
    'segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py':
    192,
    'swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-'
    '512x512.py':
    96,
    'swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py':
    96,
}


def _section() -> str:
    with open(PAGE, encoding='utf-8') as f:
        text = f.read()
    start = text.index(SECTION) + len(SECTION)
    end = re.compile(r'^#{2,3} ', re.M).search(text, start).start()
    return text[start:end]


def _examples():
    blocks = re.findall(r'```python\n(.*?)```', _section(), flags=re.S)
    assert blocks, 'no example in the docs section'
    with open(osp.join(ROOT, 'README.md'), encoding='utf-8') as f:
        readme = re.findall(r'```python\n(# my_.*?)```', f.read(), flags=re.S)
    assert len(readme) == 1, 'the README\'s quick-start config'
    return {
        block.splitlines()[0].lstrip('# '): block
        for block in blocks + readme
    }


EXAMPLES = _examples()


def test_every_row_of_the_table_has_an_example():
    rows = re.findall(
        r'^\| (mmpretrain|mmdet|mmseg) [\d.]+ \| `(\w+)` \| `(\w+)`',
        _section(),
        flags=re.M)
    assert len(rows) == 6
    swapped = {
        re.search(r"type='(\w+)'", block).group(1)
        for block in EXAMPLES.values()
    }
    assert {mmlape_cls for _, _, mmlape_cls in rows} == swapped
    for host, host_cls, mmlape_cls in rows:
        assert MODELS.get(mmlape_cls) is not None, mmlape_cls
        assert import_module(f'{host}.registry').MODELS.get(host_cls), (
            host, host_cls)


@pytest.mark.parametrize('name', sorted(EXAMPLES))
def test_readme_example_builds_as_written(name, tmp_path):
    block = EXAMPLES[name]
    path = tmp_path / 'swapped.py'
    path.write_text(block)
    cfg = Config.fromfile(str(path))
    host_cfg = re.search(r"_base_ = '\w+::(.+)'", block).group(1)
    cls_name = re.search(r"type='(\w+)'", block).group(1)
    join = re.search(r"pe_join=dict\(type='(\w+)'\)", block).group(1)
    scope = cfg.default_scope
    model = build_in(scope, cfg.model)
    backbone = model.backbone
    assert type(backbone).__name__ == cls_name
    assert backbone.pe_join.name == join
    assert backbone.embed_dims == HOST_WIDTH[host_cfg]
    if 'segmenter' in host_cfg:
        assert backbone.final_norm  # the Segmenter config's own setting
    backbone.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        outs = backbone(torch.randn(1, 3, 224, 224))
    assert all(torch.isfinite(out).all() for out in _tensors(outs))


def _tensors(outs):
    for out in outs:
        if isinstance(out, (list, tuple)):
            yield from _tensors(out)
        else:
            yield out
