"""Starting a LaPE, PVG or MPVG model from a default-join file (public
DeiT weights) is explicit (``init_cfg`` ``join_from_default=True``): one
log line lists what loaded and what starts fresh; without the option the
file is refused in one line that names it."""
import pytest
import torch
from conftest import randomize, save_backbone_checkpoint, tiny_vit
from mmengine.logging import MMLogger

from mmlape.models.checkpoint.common import JOIN_KEY, describe_keys


@pytest.fixture(scope='module')
def default_file(tmp_path_factory):
    """A default-join DeiT-like backbone (class token) as a classifier
    checkpoint."""
    torch.manual_seed(3)
    src = randomize(tiny_vit('Default'))
    path = tmp_path_factory.mktemp('ckpt') / 'deit.pth'
    save_backbone_checkpoint(
        src, path, others={'head.fc.weight': torch.ones(1)})
    return src, str(path)


def log_lines(caplog_text):
    return [line for line in caplog_text.splitlines() if line.strip()]


@pytest.mark.parametrize('join, cls', [('LaPE', True), ('PVG', False),
                                       ('MPVG', False)])
def test_a_join_starts_from_a_default_join_file(default_file, join, cls,
                                                capsys):
    src, path = default_file
    model = tiny_vit(
        join,
        with_cls_token=cls,
        init_cfg=dict(
            type='Pretrained',
            checkpoint=path,
            prefix='backbone.',
            join_from_default=True))
    fresh_before = {
        k: v.clone()
        for k, v in model.state_dict().items() if JOIN_KEY.search(k)
    }
    MMLogger.get_instance(f'fromdefault{join}', log_level='INFO')
    model.init_weights()
    out = capsys.readouterr().out
    line = [x for x in out.splitlines() if 'join_from_default=True' in x]
    assert len(line) == 1, out
    line = line[0]
    fresh = list(fresh_before)
    assert f'starting fresh: {len(fresh)} tensors' in line
    assert describe_keys(fresh) in line
    if join == 'MPVG':
        assert 'pe_join.last_norm' in line
    assert 'loaded ' in line and 'blocks.{0-3}.attn.qkv.weight' in line
    # nothing else missing: no other warning about missing keys
    assert 'Keys missing' not in out
    own = model.state_dict()
    for key, value in src.state_dict().items():
        if key in ('cls_token', 'pos_embed'):
            continue
        torch.testing.assert_close(own[key], value, msg=key)
    # the PE's patch rows came from the file
    torch.testing.assert_close(own['pos_embed'][:, -16:],
                               src.state_dict()['pos_embed'][:, -16:])
    for key, value in fresh_before.items():  # initialised, not loaded
        torch.testing.assert_close(own[key], value)


def test_without_the_option_the_file_is_refused_naming_it(default_file):
    _, path = default_file
    model = tiny_vit(
        'LaPE',
        init_cfg=dict(type='Pretrained', checkpoint=path, prefix='backbone.'))
    with pytest.raises(ValueError) as info:
        model.init_weights()
    message = str(info.value)
    assert 'default-join checkpoint' in message
    assert 'join_from_default=True' in message and '\n' not in message


def test_the_option_refuses_a_file_of_a_join(tmp_path):
    lape = randomize(tiny_vit('LaPE'))
    path = save_backbone_checkpoint(lape, tmp_path / 'lape.pth')
    model = tiny_vit(
        'LaPE',
        init_cfg=dict(
            type='Pretrained',
            checkpoint=str(path),
            prefix='backbone.',
            join_from_default=True))
    with pytest.raises(ValueError, match='has the keys of a join'):
        model.init_weights()


def test_describe_keys_groups_blocks():
    keys = [f'blocks.{i}.pe_norm.weight' for i in range(12)]
    assert describe_keys(keys) == 'blocks.{0-11}.pe_norm.weight'
    assert describe_keys(['norm.weight']) == 'norm.weight'
