"""``tools/convert/publish.py`` (issue 45, req. 4): a run's checkpoint
becomes a ``.pth`` and a ``.safetensors`` named by their sha256, without
the training state, with the trained model's weights (or the EMA weights
with ``--ema``) and the recorded config, which ``tools/test.py`` still
checks; the printed ``Weights:`` line, pasted into a model index entry,
makes ``get_model('mmlape::<name>', pretrained=True)`` load the file by
URL (from a loopback server the test starts). Refusals are one line."""
import hashlib
import os
import os.path as osp
import re
import sys

import mmengine
import pytest
import torch
from conftest import DEMO, ROOT, randomize
from http_server import CheckpointServer

sys.path.insert(0, ROOT)
from tools.convert import publish  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')

STEM = 'deit-demo_pos-shapes'
DROPPED = ('message_hub', 'optimizer', 'param_schedulers', 'ema_state_dict')


class Payload:
    """Unpickling it would create the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}', ))


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """A checkpoint of the demo config as mmengine's runner saves it with
    ``EMAHook``: the EMA weights under ``state_dict``, the trained model's
    under ``ema_state_dict`` (``module.``-prefixed, beside ``steps``), the
    optimizer, message hub and schedulers, and the run's ``meta``."""
    from mmengine.logging import MessageHub

    from mmlape.analysis import build_from_config
    root = tmp_path_factory.mktemp('publish')
    model, cfg = build_from_config(osp.join(ROOT, DEMO))
    randomize(model, 0.3, (0.5, 1.5))
    raw = {k: v.clone() for k, v in model.state_dict().items()}
    averaged = {
        k: v * 0.5 + 0.01 if v.is_floating_point() else v.clone()
        for k, v in raw.items()
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sum(p.sum() for p in model.parameters()).backward()
    optimizer.step()
    hub = MessageHub.get_instance(f'publish-{id(root)}')
    hub.update_scalar('train/loss', 1.25)
    meta = dict(
        epoch=0,
        iter=600,
        cfg=cfg.pretty_text,
        seed=0,
        experiment_name=f'{STEM}_20250102_030405',
        time='20250102_031500',
        mmengine_version=mmengine.__version__,
        dataset_meta=dict(classes=('a', 'b', 'c', 'd')))
    ema_state = {f'module.{k}': v for k, v in raw.items()}
    ema_state['steps'] = torch.tensor(600)
    src = root / 'iter_600.pth'
    torch.save(
        dict(
            meta=meta,
            state_dict=averaged,
            message_hub=hub.state_dict(),
            optimizer=optimizer.state_dict(),
            param_schedulers=[dict(last_epoch=600, base_lrs=[1e-3])],
            ema_state_dict=ema_state), src)
    out = dict(
        root=root, src=str(src), raw=raw, ema=averaged, meta=meta, cfg=cfg)
    return type('Run', (), out)


def publish_to(src, out, *options, capsys):
    """Publish ``src`` to ``out``: the .pth, the .safetensors and what the
    tool printed."""
    capsys.readouterr()
    assert publish.main([str(src), str(out), *options]) == 0
    printed = capsys.readouterr().out
    pth, = [f for f in os.listdir(out) if f.endswith('.pth')]
    tensors, = [f for f in os.listdir(out) if f.endswith('.safetensors')]
    return out / pth, out / tensors, printed


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_same_tensors(got, want):
    assert sorted(got) == sorted(want)  # safetensors sorts its keys
    for key in want:
        assert torch.equal(got[key], want[key]), key


def test_publish_keeps_the_trained_weights_and_the_record(trained, capsys):
    from mmlape.analysis import build_from_config
    from mmlape.apis import check_checkpoint_fits
    from mmlape.utils.safe_load import load_checkpoint
    pth, tensors, out = publish_to(
        trained.src, trained.root / 'out', capsys=capsys)
    # named as OpenMMLab names them: each file's own sha256, 8 digits
    for path, ext in ((pth, 'pth'), (tensors, 'safetensors')):
        found = re.fullmatch(rf'{STEM}-([0-9a-f]{{8}})\.{ext}', path.name)
        assert found, path.name
        assert found.group(1) == sha256(path)[:8]
        assert f'{path}  ' in out and sha256(path) in out
    published = torch.load(pth, weights_only=True)
    assert set(published) == {'meta', 'state_dict'}
    assert_same_tensors(published['state_dict'], trained.raw)  # swapped back
    meta = published['meta']
    assert meta == dict(trained.meta, published_weights='model')
    # the same weights and record in the safetensors file
    loaded = load_checkpoint(str(tensors))
    assert_same_tensors(loaded['state_dict'], trained.raw)
    assert loaded['meta']['cfg'] == trained.meta['cfg']
    assert loaded['meta'] == dict(
        meta, dataset_meta=dict(classes=['a', 'b', 'c', 'd']))
    # tools/test.py's check: the recorded model is the config's
    model, cfg = build_from_config(osp.join(ROOT, DEMO))
    for path in (pth, tensors):
        state = check_checkpoint_fits(model, str(path), 'checkpoint', cfg)
        assert_same_tensors(state, trained.raw)
    # what it says
    assert ('dropped: message_hub, optimizer, param_schedulers, '
            'ema_state_dict (') in out
    assert 'swapped back from ema_state_dict' in out
    assert (f'in configs/demo/metafile.yml, under "- Name: {STEM}"') in out
    assert f'  Weights: <URL-PREFIX>/{pth.name}\n' in out


def test_ema_publishes_the_ema_weights(trained, capsys):
    pth, tensors, out = publish_to(
        trained.src,
        trained.root / 'ema',
        '--ema',
        '--url-prefix',
        'https://example.org/mmlape/',
        capsys=capsys)
    published = torch.load(pth, weights_only=True)
    assert_same_tensors(published['state_dict'], trained.ema)
    assert published['meta']['published_weights'] == 'ema'
    assert f'  Weights: https://example.org/mmlape/{pth.name}\n' in out
    assert 'the EMA weights' in out
    # other weights, other names
    assert not (trained.root / 'out' / pth.name).exists()


def test_a_file_without_ema_and_a_chosen_name(trained, capsys):
    """A checkpoint without EMA (or the published one itself) publishes
    its state dict; ``--name`` names the files; ``--ema`` is refused."""
    plain = trained.root / 'plain.pth'
    torch.save(
        dict(meta=dict(cfg=trained.meta['cfg']), state_dict=trained.raw),
        plain)
    pth, _, out = publish_to(
        plain, trained.root / 'named', '--name', 'mine', capsys=capsys)
    assert pth.name.startswith('mine-')
    assert_same_tensors(
        torch.load(pth, weights_only=True)['state_dict'], trained.raw)
    assert 'dropped: nothing' in out
    assert 'has no entry "mine"' in out
    line = one_line(publish.main,
                    [str(plain), str(trained.root / 'x'), '--ema'], capsys)
    assert 'holds no EMA weights' in line and str(plain) in line


def one_line(main, argv, capsys):
    """Run ``main``; it ends with status 2 (returned, or argparse's exit)
    and one line ``error: ...`` on stderr."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit:
        code = exit.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith('error: ')
    return lines[0]


def test_refusals_are_one_line(trained, capsys):
    root = trained.root / 'refused'
    root.mkdir()
    out = root / 'out'
    marker = root / 'pwned'
    torch.save(
        dict(state_dict=trained.raw, x=Payload(marker)), root / 'evil.pth')
    torch.save(trained.raw, root / 'flat.pth')
    torch.save(dict(state_dict=trained.raw), root / 'no_record.pth')
    theirs = trained.meta['cfg'].replace("type='LaPEViT'",
                                         "type='VisionTransformer'")
    torch.save(
        dict(state_dict=trained.raw, meta=dict(cfg=theirs)),
        root / 'mmpretrain.pth')
    cases = {
        'missing.pth': 'does not exist',
        'evil.pth': 'posix.system',
        'flat.pth': 'no state_dict',
        'no_record.pth': 'records no mmlape model',
        'mmpretrain.pth': 'VisionTransformer backbone, not one of mmlape',
    }
    for name, said in cases.items():
        line = one_line(publish.main, [str(root / name), str(out)], capsys)
        assert said in line and name in line, line
    assert not marker.exists()
    assert not out.exists() or not os.listdir(out)
    # an existing output is kept unless --force; nothing half-written
    publish.main([trained.src, str(out)])
    before = {f: (out / f).read_bytes() for f in os.listdir(out)}
    line = one_line(publish.main, [trained.src, str(out)], capsys)
    assert 'exists (the same file, published before)' in line
    assert '--force' in line
    assert {f: (out / f).read_bytes() for f in os.listdir(out)} == before
    assert publish.main([trained.src, str(out), '--force']) == 0
    # the same .pth again (the .safetensors may be named anew: its header's
    # metadata comes in the order of a Rust HashMap)
    after = {f: (out / f).read_bytes() for f in os.listdir(out)}
    assert set(before) <= set(after)
    assert {f
            for f in after if f.endswith('.pth')
            } == {f
                  for f in before if f.endswith('.pth')}
    assert all(after[f] == before[f] for f in before)
    # arguments
    for args, said in (([trained.src,
                         str(root / 'a'), '--name',
                         'a/b'], 'no file name stem'), ([
                             trained.src,
                             str(root / 'a'), '--url-prefix', 'example'
                         ], 'is no URL'), ([trained.src,
                                            trained.src], 'not a folder')):
        assert said in one_line(publish.main, args, capsys)


@pytest.mark.usefixtures('hosts_applied', 'fresh_default_scope')
def test_get_model_loads_the_published_weights_by_url(trained, tmp_path,
                                                      monkeypatch, capsys):
    """The printed ``Weights:`` line in a model index entry: mmpretrain's
    ``get_model(name, pretrained=True)`` loads the file by URL, through
    mmlape's safe loader, into the config's model; the ``.safetensors``
    file as well."""
    from mmpretrain.apis.model import ModelHub, get_model, list_models

    from mmlape.hosts import hub
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    monkeypatch.setattr(torch.hub, '_hub_dir', None)
    served = tmp_path / 'served'
    with CheckpointServer(served.parent) as server:
        prefix = server.url('served')
        pth, tensors, out = publish_to(
            trained.src, served, '--url-prefix', prefix, capsys=capsys)
        line, = [x for x in out.splitlines() if x.startswith('  Weights: ')]
        assert line == f'  Weights: {server.url(f"served/{pth.name}")}'
        entry = (f'- Name: {STEM}\n'
                 f'  In Collection: LaPE-demo\n'
                 f'  Config: {osp.join(ROOT, DEMO)}\n'
                 f'  Metadata:\n'
                 f'    Default Scope: mmpretrain\n'
                 f'{line}\n')
        other = entry.replace(f'Name: {STEM}', 'Name: published-st').replace(
            pth.name, tensors.name)
        (tmp_path / 'metafile.yml').write_text('Collections:\n'
                                               '- Name: LaPE-demo\n'
                                               'Models:\n' + entry + other)
        (tmp_path / 'model-index.yml').write_text('Import:\n'
                                                  '- metafile.yml\n')
        list_models()  # registers mmpretrain's and mmlape's
        # the hub as it was before mmlape's prefixed names went in
        monkeypatch.setattr(
            ModelHub, '_models_dict', {
                key: entry
                for key, entry in ModelHub._models_dict.items()
                if not key.startswith(hub.PREFIX)
            })
        monkeypatch.delattr(ModelHub, '_mmlape_names')
        monkeypatch.setattr(ModelHub, '_mmlape_configs', {})
        names = hub.register_mmpretrain_models(
            ModelHub, index=str(tmp_path / 'model-index.yml'))
        assert names[STEM] == f'mmlape::{STEM}'  # the plain name is taken
        for name, path in ((f'mmlape::{STEM}', pth), ('published-st',
                                                      tensors)):
            model = get_model(name, pretrained=True)
            assert_same_tensors(model.state_dict(), trained.raw)
            assert server.requests[f'served/{path.name}'] == 1
            assert list(model._dataset_meta['classes']) == list('abcd')
