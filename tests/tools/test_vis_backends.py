"""The logging backends of docs/training.md ("Logging: TensorBoard and
Weights & Biases"): the config example as written there builds its
visualizer with both backends and a tiny run writes TensorBoard event
files; the ``--cfg-options`` form swaps the backend of the provided
configs."""
import glob
import os.path as osp
import re
import sys

import pytest
from conftest import DEMO, ROOT, tool_options
from mmengine.config import Config

sys.path.insert(0, ROOT)

PAGE = osp.join(ROOT, 'docs', 'training.md')


def doc_example(tmp_path) -> str:
    """The page's config example in a file, its ``_base_`` the demo config
    (the example names DeiT-Ti's LaPE config, too big to train here)."""
    with open(PAGE, encoding='utf-8') as f:
        blocks = re.findall(r'```python\n(.*?)```', f.read(), re.S)
    block, = [b for b in blocks if 'TensorboardVisBackend' in b]
    assert re.search(r"^_base_ = 'mmlape::", block, re.M), block
    text = re.sub(
        r'^_base_ = .*$',
        f'_base_ = {osp.join(ROOT, DEMO)!r}',
        block,
        flags=re.M)
    path = tmp_path / 'my_deit_tb.py'
    path.write_text(text)
    return str(path)


def test_doc_example_builds_its_backends(tmp_path):
    from mmengine.registry import VISBACKENDS, VISUALIZERS
    from mmengine.visualization import (LocalVisBackend, TensorboardVisBackend,
                                        WandbVisBackend)
    from mmpretrain.utils import register_all_modules
    register_all_modules(False)
    cfg = Config.fromfile(doc_example(tmp_path))
    assert cfg.visualizer.type == 'UniversalVisualizer'  # the base's
    visualizer = VISUALIZERS.build(
        dict(
            cfg.visualizer,
            name=f'vis_{tmp_path.name}',
            save_dir=str(tmp_path / 'vis')))
    kinds = [type(b) for b in visualizer._vis_backends.values()]
    assert kinds == [LocalVisBackend, TensorboardVisBackend]
    # the page's W&B line names mmengine's backend
    with open(PAGE, encoding='utf-8') as f:
        assert "dict(type='WandbVisBackend'" in f.read()
    assert VISBACKENDS.get('WandbVisBackend') is WandbVisBackend


@pytest.mark.parametrize('config', [
    'configs/deit/deit-tiny-lape_4xb256_in1k.py',
    'configs/vit_adapter/upernet_vit-adapter-tiny-lape_8xb2-160k_'
    'ade20k-512x512.py'
])
def test_cfg_option_swaps_the_backend(config):
    cfg = Config.fromfile(osp.join(ROOT, config))
    assert [b['type'] for b in cfg.visualizer.vis_backends] == \
        ['LocalVisBackend']
    cfg.merge_from_dict(
        {'visualizer.vis_backends.0.type': 'TensorboardVisBackend'})
    assert [b['type'] for b in cfg.visualizer.vis_backends] == \
        ['TensorboardVisBackend']


@pytest.mark.slow
def test_doc_example_writes_tensorboard_events(pos_shapes_data, tmp_path):
    """Two training iterations of the example through tools/train.py: the
    event files hold the loss and learning rate of every iteration and
    the validation accuracy; the local backend's scalars too."""
    pytest.importorskip('tensorboard')
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator

    from tools import train
    work = tmp_path / 'work'
    assert train.main([doc_example(tmp_path), '--work-dir',
                       str(work)] + tool_options(pos_shapes_data, 2)) == 0
    events, = glob.glob(str(work / '*' / 'vis_data' / 'events.out.*'))
    assert glob.glob(str(work / '*' / 'vis_data' / 'scalars.json'))
    acc = EventAccumulator(events)
    acc.Reload()
    tags = set(acc.Tags()['scalars'])
    assert {'loss', 'lr', 'accuracy/top1'} <= tags, tags
    assert [e.step for e in acc.Scalars('loss')] == [1, 2]
    assert 0 <= acc.Scalars('accuracy/top1')[0].value <= 100
