"""CeiT-Ti with PVG/MPVG as the MPVG paper built them (issue 21, req. 4).

MPVG's Table 1 counts CeiT-Ti PVG and MPVG at 6.361M parameters, so CeiT's
Layer-wise Class-token Attention (LCA) stays. Two readings keep it:

(a) the class token stays through the encoder and LCA pools the class
    tokens as in CeiT, PVG/MPVG applied to the PE stream with its class
    row;
(b) no class token (PVG/MPVG as docs/methods.md defines them) and LCA
    pools the GAP token of every layer.

Counted as the paper counts (every parameter plus fixed weights, a
1000-way linear head): (a) PVG 6,361,128, MPVG 6,361,512 (6.362M);
(b) PVG 6,360,744, MPVG 6,361,128 - both 6.361M. Only (b) gives the table's
number for both; the configs build (b).
"""
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from mmengine.config import Config
from vit_family_reference import (add_join_norms, ceit_layout, i2t_tokens, lca,
                                  leff, ln, msa)

from mmlape.analysis import count_parameters
from mmlape.models import LaPEViT
from mmlape.models.checkpoint.vit_family import convert_vit_family
from mmlape.models.layers.pe_join import MPVGJoin, PVGJoin

TABLE1 = 6.361  # MPVG paper, Table 1: CeiT-Ti PVG and MPVG (M)
CLASSES = 1000
PAPER_LCA = dict(
    with_cls_token=False, pooling=dict(type='LCA', layer_token='gap'))


class PVGWithClsToken(PVGJoin):
    """Reading (a): PVG's PE stream kept with the class token's row."""
    allows_cls_token = True


class MPVGWithClsToken(MPVGJoin):
    allows_cls_token = True


def paper_count(backbone: torch.nn.Module, classes: int = CLASSES) -> int:
    """The paper's accounting: backbone (fixed weights included) plus a
    linear classifier."""
    c = backbone.embed_dims
    return count_parameters(backbone).paper + c * classes + classes


@pytest.fixture
def fast_init(monkeypatch):
    """Sizes only: plain normal sampling instead of truncated normal."""

    def fast(t, *args, **kwargs):
        with torch.no_grad():
            return t.normal_(0, 0.02)

    monkeypatch.setattr(torch.nn.init, 'trunc_normal_', fast)


def test_only_the_gap_token_reading_gives_table1(fast_init):
    counts = {
        ('a', 'PVG'): LaPEViT('ceit-tiny', pe_join=dict(type=PVGWithClsToken)),
        ('a', 'MPVG'):
        LaPEViT('ceit-tiny', pe_join=dict(type=MPVGWithClsToken)),
        ('b', 'PVG'): LaPEViT('ceit-tiny', pe_join='PVG', **PAPER_LCA),
        ('b', 'MPVG'): LaPEViT('ceit-tiny', pe_join='MPVG', **PAPER_LCA),
    }
    for model in counts.values():
        assert model.pool.pos_layer_embed.shape == (1, 12, 192)  # LCA kept
    counts = {k: paper_count(m) for k, m in counts.items()}
    assert counts == {
        ('a', 'PVG'): 6_361_128,
        ('a', 'MPVG'): 6_361_512,
        ('b', 'PVG'): 6_360_744,
        ('b', 'MPVG'): 6_361_128,
    }
    rounded = {k: round(v / 1e6, 3) for k, v in counts.items()}
    assert rounded[('b', 'PVG')] == rounded[('b', 'MPVG')] == TABLE1
    assert rounded[('a', 'MPVG')] != TABLE1  # 6.362: reading (a) is out
    # GAP instead of LCA (mmlape's former reading) is 447,168 short
    gap = LaPEViT(
        'ceit-tiny',
        pe_join='PVG',
        with_cls_token=False,
        out_type='avg_featmap')
    assert counts[('b', 'PVG')] - paper_count(gap) == 447_168


@pytest.mark.parametrize('suffix,params', [('', 6_356_904),
                                           ('-lape', 6_361_512),
                                           ('-pvg', 6_360_744),
                                           ('-mpvg', 6_361_128)])
def test_configs_build_the_counted_models(suffix, params, fast_init):
    """The configs' backbone plus their head, as Table 1 counts them; the
    default and LaPE configs are unchanged (CeiT's class-token LCA)."""
    cfg = Config.fromfile(
        osp.join(ROOT, 'configs', 'ceit', f'ceit-tiny{suffix}_4xb256_in1k.py'))
    backbone = dict(cfg.model.backbone)
    assert backbone.pop('type') == 'LaPEViT'
    model = LaPEViT(**backbone)
    assert type(model.pool).__name__ == 'LCAPool'
    assert cfg.model.head.num_classes == CLASSES
    assert paper_count(model, cfg.model.head.num_classes) == params
    if suffix in ('-pvg', '-mpvg'):
        assert not model.with_cls_token
        assert model.pool.layer_token_type == 'gap'
        assert model.pos_embed.shape == (1, 196, 192)  # no class row
        assert round(params / 1e6, 3) == TABLE1
    else:
        assert model.with_cls_token and model.pool.layer_token_type == 'cls'


def _paper_weights(join, dims=64, depth=2, hidden=128):
    """Official CeiT layout without the class token and its PE row, LCA
    kept, plus the join's PE norms."""
    sd = ceit_layout(dims, depth, hidden)
    del sd['cls_token']
    sd['pos_embed'] = sd['pos_embed'][:, 1:]
    return add_join_norms(sd, join, depth, dims)


def _reference(sd, img, join, heads=2, eps=1e-6):
    """Reading (b) from the equations: PVG's stream (PE at the input, then
    ``p_l = LN'_l(p_{l-1})`` from layer 1), the GAP token of every layer
    into LCA, the final norm; MPVG adds ``mean(LN'_last(pos_0))``."""
    x, hw = i2t_tokens(sd, img)
    pos = sd['pos_embed']
    x = x + pos
    stream, tokens = pos, []
    for i in range(len(sd['pos_layer_embed'][0])):
        b = f'blocks.{i}'
        h = ln(sd, f'{b}.norm1', x, eps)
        if i > 0:
            stream = ln(sd, f'{b}.pe_norm', stream, eps)
            h = h + stream
        x = x + msa(sd, b, h, heads)
        x = x + leff(sd, f'{b}.leff', ln(sd, f'{b}.norm2', x, eps), hw)
        tokens.append(x.mean(dim=1))
    y = lca(sd, tokens, heads, eps)  # LCA, then the final norm
    if join == 'mpvg':
        y = y + ln(sd, 'pe_join.last_norm', pos, eps).mean(dim=1)
    return y


def _tiny(join, **kwargs):
    arch = dict(
        LaPEViT.arch_zoo['ceit-tiny'],
        embed_dims=64,
        num_layers=2,
        num_heads=2,
        feedforward_channels=128)
    return LaPEViT(arch, img_size=64, pe_join=join, **PAPER_LCA, **kwargs)


@pytest.mark.parametrize('join', ['pvg', 'mpvg'])
def test_equals_the_reference_forward(join):
    torch.manual_seed(0)
    sd = _paper_weights(join)
    model = _tiny(join.upper()).eval()
    backbone, _ = convert_vit_family(sd)
    model.load_state_dict(backbone, strict=True)
    img = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        out = model(img)[0]
        want = _reference(sd, img, join)
    torch.testing.assert_close(out, want, atol=2e-5, rtol=1e-4)
    if join == 'mpvg':  # the last PE term is there
        with torch.no_grad():
            model.pe_join.last_norm.bias.add_(1)
            torch.testing.assert_close(model(img)[0], out + 1)


@pytest.mark.parametrize('join', ['PVG', 'MPVG'])
def test_learns_and_every_parameter_gets_a_gradient(join):
    torch.manual_seed(0)
    model = _tiny(join)
    head = torch.nn.Linear(64, 4)
    img, label = torch.randn(8, 3, 64, 64), torch.arange(8) % 4
    opt = torch.optim.AdamW(
        list(model.parameters()) + list(head.parameters()), lr=1e-3)
    losses = []
    for step in range(8):
        loss = F.cross_entropy(head(model(img)[0]), label)
        opt.zero_grad()
        loss.backward()
        if step == 0:
            missing = [
                n for n, p in model.named_parameters()
                if p.grad is None or not p.grad.abs().sum() > 0
            ]
            assert not missing, missing
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_an_official_layout_file_loads_through_init_cfg(tmp_path):
    """A CeiT-layout file of the paper's PVG model (LCA kept, no class
    token) loads strictly through ``load_pretrained``: LCA's weights come
    from the file."""
    torch.manual_seed(1)
    sd = _paper_weights('pvg')
    path = str(tmp_path / 'ceit-pvg.pth')
    torch.save(dict(model=sd), path)
    model = _tiny('PVG')
    model.load_pretrained(path, prefix='backbone.')
    torch.testing.assert_close(model.pool.pos_layer_embed,
                               sd['pos_layer_embed'])
    torch.testing.assert_close(model.pool.attn.qkv.weight,
                               sd['lca.attn.qkv.weight'])
    torch.testing.assert_close(model.pos_embed, sd['pos_embed'])


def test_the_refusal_names_the_paper_reading():
    with pytest.raises(ValueError) as err:
        LaPEViT('ceit-tiny', pe_join='PVG')
    msg = str(err.value)
    assert "pooling=dict(type='LCA', layer_token='gap')" in msg
    assert '6.361M' in msg
    with pytest.raises(ValueError, match="Unknown pooling.layer_token='x'"):
        LaPEViT('ceit-tiny', pooling=dict(type='LCA', layer_token='x'))
    with pytest.raises(ValueError, match="'LCA' needs with_cls_token=True"):
        LaPEViT('ceit-tiny', with_cls_token=False)
