"""Every checkpoint path of the tools reads a URL through the safe loader:
``load_from``, ``--resume``, the backbone's ``init_cfg`` (``Pretrained``,
with ``prefix``), ``tools/test.py CHECKPOINT``, the converter and
``get_model(..., pretrained=...)``. A good file served by URL loads; a
malicious pickle served by URL never runs (the marker file it would create
never appears) and ends in one line naming the URL; so does a failed
download. A file of another layout (official DeiT names) converts as it
loads; one that fits no key is refused before the run.

The files are served by a loopback HTTP server the module starts itself
(``tests/http_server.py``: bounded, stops by itself)."""
import json
import os
import os.path as osp
import sys

import pytest
import torch
from conftest import ROOT, one_line_error, tool_options
from http_server import CheckpointServer

sys.path.insert(0, ROOT)
from tools import test, train  # noqa: E402
from tools.convert import to_mmlape  # noqa: E402

DEMO = osp.join(ROOT, 'configs/demo/deit-demo_pos-shapes.py')

pytestmark = pytest.mark.slow


class Payload:
    """Unpickling it would create the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}', ))


@pytest.fixture(scope='module')
def site(tmp_path_factory, pos_shapes_data):
    """A trained demo checkpoint (``good.pth``), the same weights in the
    official DeiT layout (``official.pth``: ``model``, timm names, a bare
    ``head``) and as safetensors, a malicious file, a file of unrelated
    tensors; served on loopback, with the torch hub cache in a folder of
    the module's own."""
    root = tmp_path_factory.mktemp('site')
    folder = root / 'served'
    folder.mkdir()
    marker = root / 'pwned'
    mp = pytest.MonkeyPatch()
    mp.setenv('TORCH_HOME', str(root / 'torch_home'))
    mp.setattr(torch.hub, '_hub_dir', None)
    work = root / 'trained'
    train.main([DEMO, '--work-dir', str(work)] +
               tool_options(pos_shapes_data, 2, interval=1))
    good = torch.load(work / 'iter_2.pth', weights_only=False)
    (folder / 'good.pth').write_bytes((work / 'iter_2.pth').read_bytes())
    state = good['state_dict']
    official = {
        k[len('backbone.'):]: v
        for k, v in state.items() if k.startswith('backbone.')
    }
    official.update({
        'head.weight': state['head.layers.head.weight'],
        'head.bias': state['head.layers.head.bias']
    })
    torch.save({'model': official, 'epoch': 299}, folder / 'official.pth')
    torch.save({
        'state_dict': state,
        'x': Payload(marker)
    }, folder / 'evil.pth')
    torch.save({'state_dict': {
        'layer.weight': torch.ones(3)
    }}, folder / 'unrelated.pth')
    from mmlape.utils.safetensors_file import safetensors_bytes
    (folder / 'good.safetensors').write_bytes(
        safetensors_bytes({
            'state_dict': state,
            'meta': good['meta']
        }))
    with CheckpointServer(folder, lifetime=900) as server:
        server.marker = marker
        server.data = pos_shapes_data
        server.root = root
        yield server
    mp.undo()
    assert not marker.exists()


def metrics_of(site, name):
    out = site.root / f'test_{name.replace(".", "_")}'
    test.main([DEMO, site.url(name), '--work-dir',
               str(out)] + tool_options(site.data))
    return json.loads((out / 'test_metrics.json').read_text())


def test_test_py_reads_a_url_and_converts_an_official_layout(site, capsys):
    mmlape_names = metrics_of(site, 'good.pth')
    assert metrics_of(site, 'official.pth') == mmlape_names
    assert metrics_of(site, 'good.safetensors') == mmlape_names
    assert site.requests['good.pth'] == 1  # read once, then cached


def test_test_py_refuses_a_malicious_url(site, capsys):
    url = site.url('evil.pth')
    line = one_line_error(
        test.main, [DEMO, url, '--work-dir',
                    str(site.root / 'evil_test')] + tool_options(site.data),
        capsys)
    assert f'"{url}"' in line and 'posix.system' in line
    assert not site.marker.exists()


def test_load_from_a_url(site, capsys):
    for name, said in (('good.pth', 'fills all'), ('official.pth',
                                                   'converted to mmlape')):
        capsys.readouterr()
        train.main([DEMO, '--work-dir',
                    str(site.root / f'load_{name}')] +
                   tool_options(site.data, 1, f'load_from={site.url(name)}'))
        assert said in capsys.readouterr().out


def test_load_from_refusals_are_one_line_before_the_run(site, capsys):
    for name, said in (('evil.pth', 'posix.system'),
                       ('unrelated.pth', "fits none of this model's keys"),
                       ('missing.pth', 'HTTP 404')):
        work = site.root / f'refused_{name}'
        line = one_line_error(
            train.main, [DEMO, '--work-dir', str(work)] +
            tool_options(site.data, 1, f'load_from={site.url(name)}'), capsys)
        assert site.url(name) in line and said in line, line
        assert not osp.exists(work / 'iter_1.pth')  # no run started
    assert not site.marker.exists()


def test_resume_from_a_url(site, capsys):
    work = site.root / 'resumed'
    train.main(
        [DEMO, '--work-dir',
         str(work), '--resume',
         site.url('good.pth')] + tool_options(site.data, 3))
    assert osp.isfile(work / 'iter_3.pth')
    assert not osp.exists(work / 'iter_1.pth')  # it went on from 2
    line = one_line_error(train.main, [
        DEMO, '--work-dir',
        str(site.root / 'resumed_evil'), '--resume',
        site.url('evil.pth')
    ] + tool_options(site.data, 3), capsys)
    assert site.url('evil.pth') in line and 'posix.system' in line
    assert not site.marker.exists()


def test_backbone_init_cfg_reads_a_url(site, capsys):

    def init_cfg(name):
        return [
            'model.backbone.init_cfg.type=Pretrained',
            f'model.backbone.init_cfg.checkpoint={site.url(name)}',
            'model.backbone.init_cfg.prefix=backbone.'
        ]

    capsys.readouterr()
    train.main(
        [DEMO, '--work-dir', str(site.root / 'init_good')] +
        tool_options(site.data, 1, *init_cfg('good.pth')))
    assert 'Loaded' in capsys.readouterr().out
    line = one_line_error(
        train.main,
        [DEMO, '--work-dir', str(site.root / 'init_evil')] +
        tool_options(site.data, 1, *init_cfg('evil.pth')), capsys)
    assert site.url('evil.pth') in line and 'posix.system' in line
    assert not site.marker.exists()


def test_the_converter_reads_a_url(site, capsys):
    dst = site.root / 'converted.pth'
    assert to_mmlape.main(
        ['--family', 'vit',
         site.url('official.pth'),
         str(dst)]) == 0
    converted = torch.load(dst, weights_only=True)
    assert 'backbone.pos_embed' in converted['state_dict']
    dst_st = site.root / 'converted.safetensors'
    assert to_mmlape.main(
        ['--family', 'vit',
         site.url('official.pth'),
         str(dst_st)]) == 0
    from mmlape.utils.safe_load import load_checkpoint
    torch.testing.assert_close(
        load_checkpoint(str(dst_st))['state_dict'], converted['state_dict'])
    capsys.readouterr()
    assert to_mmlape.main(
        ['--family', 'vit',
         site.url('evil.pth'),
         str(site.root / 'e.pth')]) == 2
    err = capsys.readouterr().err
    assert site.url('evil.pth') in err and 'posix.system' in err
    assert not osp.exists(site.root / 'e.pth')
    assert not site.marker.exists()


def test_get_model_pretrained_by_url(site, hosts_applied):
    from mmpretrain import get_model

    from mmlape.utils.errors import CheckpointError
    model = get_model(DEMO, pretrained=site.url('good.pth'))
    good = torch.load(site.root / 'trained' / 'iter_2.pth', weights_only=False)
    torch.testing.assert_close(model.state_dict(), good['state_dict'])
    with pytest.raises(CheckpointError, match='posix.system'):
        get_model(DEMO, pretrained=site.url('evil.pth'))
    assert not site.marker.exists()
