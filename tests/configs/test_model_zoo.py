"""The model zoo page (docs/model_zoo.md) is what
``tools/analysis/model_zoo.py`` writes, and every file it lists loads into
its config: each is built here with the released file's key names and
shapes (timm's own model of that name for DeiT and RoPE-ViT, whose logits
the converted mmlape model must equal; the official layouts of
ViT-Adapter, Swin, T2T-ViT and CCT/ViT-Lite otherwise), wrapped as the
file wraps it, and loaded as ``load_from`` loads it."""
import os.path as osp
import sys

import pytest
import torch
from conftest import ROOT
from mmengine.config import Config, DictAction
from mmengine.runner.checkpoint import _load_checkpoint_to_model

sys.path.insert(0, ROOT)
from mmlape.analysis import build_from_config  # noqa: E402
from mmlape.apis import fit_load_from, model_check  # noqa: E402
from tools.analysis import model_zoo  # noqa: E402


def options(line):
    """``--cfg-options`` entries as mmengine's ``DictAction`` parses
    them."""
    return {
        key: DictAction._parse_iterable(value)
        for key, value in (o.split('=', 1) for o in line)
    }


def test_the_page_is_current():
    assert model_zoo.main(['--check']) == 0


def test_every_entry_names_a_config_and_loads_in_one_line():
    for entry in model_zoo.ZOO + [model_zoo.JOIN_FROM_DEFAULT]:
        assert osp.isfile(osp.join(ROOT, entry.config)), entry.config
        assert entry.url.startswith('https://')
        line = entry.load_options()
        assert entry.url in line[0] or entry.url in line[1]
        Config.fromfile(osp.join(ROOT,
                                 entry.config)).merge_from_dict(options(line))


# ----------------------------------------------------------------------
# each file's layout, built here


def _timm(name):
    import timm
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    with torch.no_grad():  # every weight drawn: a swapped one shows
        for p in model.parameters():
            p.normal_(0, 0.02) if p.dim() > 1 else p.uniform_(-0.5, 0.5)
    return model


def _swin_official(model):
    """The config's Swin in the official layout (``model``; the norm
    after stage 4 named ``norm``, the PE ``absolute_pos_embed``)."""
    sd = {}
    for k, v in model.state_dict().items():
        if k.startswith('backbone.'):
            k = k[len('backbone.'):]
            k = 'norm.' + k[len('norm3.'):] if k.startswith('norm3.') else k
            sd[k] = torch.randn_like(v) if v.is_floating_point() else v
        elif k.startswith('head.fc.'):
            sd['head.' + k[len('head.fc.'):]] = torch.randn_like(v)
    return dict(model=sd, epoch=299)


def _adapter_official(model):
    """The config's ViT-Adapter detector/segmentor in the official layout:
    the same names, with DeiT's class row the official model keeps in its
    PE unused."""
    sd = {
        k: torch.randn_like(v) if v.is_floating_point() else v
        for k, v in model.state_dict().items()
    }
    pe = sd['backbone.pos_embed']
    sd['backbone.pos_embed'] = torch.cat([torch.randn_like(pe[:, :1]), pe],
                                         dim=1)
    return dict(state_dict=sd, meta=dict(CLASSES=('a', 'b')))


def layout_file(entry, model):
    """A checkpoint with the entry's file layout; the timm model for
    DeiT/RoPE-ViT (None otherwise)."""
    kind, arg = entry.layout.split(':')
    if kind == 'timm':
        ref = _timm(arg)
        sd = ref.state_dict()
        return (sd if 'rope' in arg else dict(model=sd)), ref
    if kind == 'adapter':
        return _adapter_official(model), None
    if kind == 'swin':
        return _swin_official(model), None
    import vit_family_reference as ref
    if kind == 't2t':
        sd = ref.t2t_layout(
            dims=256,
            depth=7,
            hidden=512,
            token_dims=64,
            img=224,
            num_classes=1000)
        return dict(state_dict=sd, state_dict_ema=sd), None
    return ref.compact_layout(
        arg, dims=256, depth=7, hidden=512, num_classes=100), None


@pytest.mark.slow
@pytest.mark.parametrize(
    'entry', model_zoo.ZOO, ids=[e.layout for e in model_zoo.ZOO])
def test_each_file_layout_loads_into_its_config(entry, tmp_path, monkeypatch):
    cfg = Config.fromfile(osp.join(ROOT, entry.config))
    cfg.merge_from_dict(options(entry.load_options()[1:]))
    model, _ = build_from_config(cfg)
    model.eval()
    ckpt, reference = layout_file(entry, model)
    path = str(tmp_path / 'file.pth')
    if entry.url.endswith('.safetensors'):
        from safetensors.torch import save_file
        path = str(tmp_path / 'model.safetensors')
        save_file({k: v.contiguous() for k, v in ckpt.items()}, path)
    else:
        torch.save(ckpt, path)
    said = []
    monkeypatch.setattr(model_check, 'print_log',
                        lambda msg, **kwargs: said.append(msg))
    converted = fit_load_from(model, path)
    assert any('fills all' in line for line in said), said
    from mmlape.utils.safe_load import load_checkpoint
    _load_checkpoint_to_model(model, converted or load_checkpoint(path))
    if reference is not None:
        x = torch.randn(2, 3, 224, 224)
        with torch.no_grad():
            ours = model(x, mode='tensor')
            theirs = reference(x)
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
