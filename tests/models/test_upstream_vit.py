"""mmpretrain 1.2.0's ``VisionTransformer`` tests, written for ``LaPEViT``.

Every assertion of mmpretrain's
tests/test_models/test_backbones/test_vision_transformer.py has its
counterpart here (on tiny archs where the assertion does not depend on the
size), plus same-weight parity against mmpretrain's class and host configs
with only the backbone type swapped. mmpretrain asserts ``AssertionError``
where mmlape raises ``ValueError``/``TypeError`` with a one-line message;
the tests check mmlape's type and message.
"""
import math
import os.path as osp
from copy import deepcopy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from host_models import assert_same_logits, build_in, host_model_cfg, swapped
from mmengine.runner import load_checkpoint, save_checkpoint

from mmlape.models import LaPEViT
from mmlape.models.checkpoint.vit import convert_backbone

mmpretrain = pytest.importorskip('mmpretrain')

#: mmpretrain's test setup: ViT-B/16 with stochastic depth.
BASE = dict(arch='b', img_size=224, patch_size=16, drop_path_rate=0.1)
#: A tiny custom arch for the checks that do not depend on the size.
TINY = dict(embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=64)
MIM = osp.join(osp.dirname(mmpretrain.__file__), '.mim', 'configs')
#: The one change a user makes to the host's config.
SWAP = ('VisionTransformer', 'LaPEViT')

#: Tiny models run far faster on one thread of a shared machine.
pytestmark = pytest.mark.usefixtures('one_thread')


def tiny_cfg(**kwargs):
    return dict(dict(BASE, arch=dict(TINY)), **kwargs)


# ----------------------------------------------------------------------
# test_structure
def test_unknown_and_incomplete_archs_are_refused():
    with pytest.raises(ValueError, match="Unknown arch='unknown'"):
        LaPEViT(**dict(BASE, arch='unknown'))
    with pytest.raises(ValueError, match='custom arch must be a dict'):
        LaPEViT(**dict(
            BASE,
            arch=dict(num_layers=24, num_heads=16, feedforward_channels=4096)))


def test_custom_arch_sets_every_layer():
    model = LaPEViT(**dict(
        BASE,
        arch=dict(
            embed_dims=128,
            num_layers=24,
            num_heads=16,
            feedforward_channels=1024)))
    assert model.embed_dims == 128
    assert model.num_layers == 24
    assert len(model.blocks) == 24
    for block in model.blocks:
        assert block.attn.num_heads == 16
        assert block.mlp.fc1.out_features == 1024


def test_out_indices_are_validated():
    with pytest.raises(TypeError, match="<class 'dict'>"):
        LaPEViT(**tiny_cfg(out_indices={1: 1}))
    with pytest.raises(ValueError, match='out_indices contains 13'):
        LaPEViT(
            **dict(BASE, arch=dict(TINY, num_layers=12), out_indices=[0, 13]))


@pytest.fixture(scope='module')
def vit_b():
    """mmpretrain's setup as is: ViT-B/16, drop path 0.1 (built once)."""
    return LaPEViT(**BASE)


def test_base_structure_and_drop_path(vit_b):
    assert len(vit_b.blocks) == 12
    dpr_inc, dpr = 0.1 / (12 - 1), 0.
    for block in vit_b.blocks:
        assert block.norm1.normalized_shape == (768, )
        assert block.attn.num_heads * block.attn.head_dims == 768
        assert block.attn.num_heads == 12
        assert block.mlp.fc1.out_features == 3072
        # one stochastic depth for both residuals, linear over the layers
        assert getattr(block.drop_path, 'drop_prob', 0.) == \
            pytest.approx(dpr)
        assert block.attn_drop_path
        dpr += dpr_inc


def test_base_default_arch_and_parameters(vit_b):
    """The default arch is mmpretrain's ``'base'``; ViT-B/16 has
    mmpretrain's 85,798,656 backbone parameters."""
    default = LaPEViT.__init__.__defaults__[0]
    assert default == 'base'
    assert LaPEViT.arch_zoo['base'] == LaPEViT.arch_zoo['b']
    assert sum(p.numel() for p in vit_b.parameters()) == 85798656


def test_pre_norm_is_a_norm():
    assert isinstance(LaPEViT(**tiny_cfg()).pre_norm, nn.Identity)
    model = LaPEViT(**tiny_cfg(pre_norm=True))
    assert not isinstance(model.pre_norm, nn.Identity)
    assert isinstance(model.pre_norm, nn.LayerNorm)
    # mmpretrain: no patch bias with a pre-norm (CLIP)
    assert model.patch_embed.proj.bias is None


# ----------------------------------------------------------------------
# test_init_weights
def timm_resize(posemb, new_rows, num_tokens=1):
    """The reference resize of mmpretrain's test (timm's): bicubic, no
    corner alignment, extra tokens kept."""
    tok, grid = posemb[:, :num_tokens], posemb[0, num_tokens:]
    old = int(math.sqrt(len(grid)))
    new = int(math.sqrt(new_rows - num_tokens))
    grid = grid.reshape(1, old, old, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(
        grid, size=(new, new), mode='bicubic', align_corners=False)
    grid = grid.permute(0, 2, 3, 1).reshape(1, new * new, -1)
    return torch.cat([tok, grid], dim=1)


def test_init_cfg_and_checkpoint_round_trip(tmp_path):
    cfg = tiny_cfg(init_cfg=[
        dict(
            type='Kaiming',
            layer='Conv2d',
            mode='fan_in',
            nonlinearity='linear')
    ])
    model = LaPEViT(**cfg)
    before = model.patch_embed.proj.weight.clone().detach()
    # Skipped assertion: mmpretrain's PE is zero until init_weights();
    # mmlape initialises in the constructor (truncated normal, std 0.02).
    assert not torch.allclose(model.pos_embed, torch.tensor(0.))
    model.init_weights()
    assert not torch.allclose(before, model.patch_embed.proj.weight)
    assert not torch.allclose(model.pos_embed, torch.tensor(0.))

    pretrained_pe = model.pos_embed.clone().detach()
    path = str(tmp_path / 'test.pth')
    save_checkpoint(model.state_dict(), path)
    model = LaPEViT(**tiny_cfg())
    load_checkpoint(model, path, strict=True)
    torch.testing.assert_close(model.pos_embed, pretrained_pe)

    # another img_size: the PE is resized as timm resizes it
    model = LaPEViT(**tiny_cfg(img_size=384))
    load_checkpoint(model, path, strict=True)
    torch.testing.assert_close(
        model.pos_embed, timm_resize(pretrained_pe, model.pos_embed.shape[1]))


# ----------------------------------------------------------------------
# test_forward
def test_forward_outputs():
    imgs = torch.randn(1, 3, 224, 224)
    with pytest.raises(ValueError, match='needs with_cls_token=True'):
        LaPEViT(**tiny_cfg(with_cls_token=False, out_type='cls_token'))

    outs = LaPEViT(**tiny_cfg(with_cls_token=False, out_type='featmap'))(imgs)
    assert isinstance(outs, tuple) and len(outs) == 1
    assert outs[-1].shape == (1, 32, 14, 14)

    outs = LaPEViT(**tiny_cfg())(imgs)
    assert isinstance(outs, tuple) and len(outs) == 1
    assert outs[-1].shape == (1, 32)

    outs = LaPEViT(**tiny_cfg(out_indices=[-3, -2, -1]))(imgs)
    assert isinstance(outs, tuple) and len(outs) == 3
    assert all(o.shape == (1, 32) for o in outs)


def test_forward_dynamic_sizes_pad_as_mmpretrain():
    model = LaPEViT(**tiny_cfg(out_type='featmap'))
    for hw in [(224, 224), (256, 256), (256, 309)]:
        outs = model(torch.randn(1, 3, *hw))
        assert isinstance(outs, tuple) and len(outs) == 1
        want = (math.ceil(hw[0] / 16), math.ceil(hw[1] / 16))
        assert outs[-1].shape == (1, 32, *want)


def test_base_featmap(vit_b):
    """The ViT-B's output (the class token) and, from the same weights, its
    feature map at 224 (mmpretrain's shapes)."""
    with torch.no_grad():
        assert vit_b.eval()(torch.randn(1, 3, 224, 224))[0].shape == (1, 768)
        pool = vit_b.pool
        vit_b.out_type, vit_b.pool = 'featmap', None  # another output
        try:
            out = vit_b(torch.randn(1, 3, 224, 224))[0]
        finally:
            vit_b.out_type, vit_b.pool = 'cls_token', pool
    assert out.shape == (1, 768, 14, 14)


# ----------------------------------------------------------------------
# mmlape's refusals of what mmpretrain accepts silently
def test_unsupported_layer_and_patch_options_are_refused():
    with pytest.raises(ValueError, match='num_fcs must be 2'):
        LaPEViT(**tiny_cfg(layer_cfgs=dict(num_fcs=3)))
    with pytest.raises(ValueError, match="ffn_type must be 'origin'"):
        LaPEViT(**tiny_cfg(layer_cfgs=dict(ffn_type='swiglu_fused')))
    with pytest.raises(ValueError, match='layer_cfgs has 2 entries'):
        LaPEViT(**tiny_cfg(layer_cfgs=[{}, {}]))
    with pytest.raises(ValueError, match='patch_cfg.conv_type'):
        LaPEViT(**tiny_cfg(patch_cfg=dict(conv_type='Conv3d')))


def test_frozen_stages_zero_freezes_nothing():
    model = LaPEViT(**tiny_cfg(frozen_stages=0)).train()
    assert all(p.requires_grad for p in model.parameters())
    model = LaPEViT(**tiny_cfg(
        frozen_stages=3, out_type='avg_featmap', pre_norm=True)).train()
    assert not any(p.requires_grad for p in model.parameters())
    model = LaPEViT(**tiny_cfg(frozen_stages=1, pre_norm=True)).train()
    frozen = {k for k, p in model.named_parameters() if not p.requires_grad}
    assert {
        'cls_token', 'pos_embed', 'patch_embed.proj.weight', 'pre_norm.weight',
        'blocks.0.norm1.weight'
    } <= frozen
    assert 'blocks.1.norm1.weight' not in frozen


@pytest.mark.parametrize('stages', [0, 1, 3])
def test_frozen_stages_freeze_what_mmpretrain_freezes(stages):
    """The frozen parameters, in mmlape's names, are mmpretrain's."""
    from mmpretrain.models import VisionTransformer
    cfg = tiny_cfg(
        frozen_stages=stages,
        out_type='avg_featmap',
        pre_norm=True,
        drop_path_rate=0.)
    ref = VisionTransformer(**deepcopy(cfg))
    ref.train()
    ours = LaPEViT(**cfg).train()
    frozen_ref = {
        k: p
        for k, p in ref.named_parameters() if not p.requires_grad
    }
    frozen_ref = set(convert_backbone(frozen_ref, 'mmpretrain')) if \
        frozen_ref else set()
    assert frozen_ref == {
        k
        for k, p in ours.named_parameters() if not p.requires_grad
    }
    assert ours.drop_after_pos.training == (stages == 0)


# ----------------------------------------------------------------------
# same weights as mmpretrain's VisionTransformer
def _randomize(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ('ln' in name or 'norm' in name):
                p.copy_(1 + 0.2 * torch.randn_like(p) if name.
                        endswith('weight') else 0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 0.05)
    return model


def _pair(**kwargs):
    """mmpretrain's ViT (random, non-trivial norms) and LaPEViT from its
    converted weights (strict)."""
    from mmpretrain.models import VisionTransformer
    cfg = dict(
        arch=dict(
            embed_dims=64, num_layers=3, num_heads=4, feedforward_channels=96),
        img_size=64,
        patch_size=8)
    cfg.update(kwargs)
    ref = _randomize(VisionTransformer(**deepcopy(cfg)))
    ref.eval()  # (mmpretrain's train() returns None: no chaining)
    ours = LaPEViT(**cfg).eval()
    ours.load_state_dict(convert_backbone(ref.state_dict(), 'mmpretrain'))
    return ref, ours


PARITY = {
    'cls_token':
    dict(),
    'cls_token-out_indices':
    dict(out_indices=[0, -1]),
    'featmap':
    dict(out_type='featmap', out_indices=[1, 2]),
    'featmap-no-cls':
    dict(out_type='featmap', with_cls_token=False),
    'avg_featmap':
    dict(out_type='avg_featmap', out_indices=[0, 2]),
    'avg_featmap-no-cls':
    dict(out_type='avg_featmap', with_cls_token=False),
    'raw':
    dict(out_type='raw', final_norm=False),
    'pre_norm':
    dict(pre_norm=True, out_type='featmap'),
    'layer_scale':
    dict(layer_scale_init_value=0.1),
    'bilinear':
    dict(interpolate_mode='bilinear', out_type='featmap'),
    'patch_cfg-same':
    dict(patch_cfg=dict(padding='same', bias=False), out_type='featmap'),
    'layer_cfgs':
    dict(
        layer_cfgs=[
            dict(num_heads=2, act_cfg=dict(type='ReLU')),
            dict(feedforward_channels=32),
            dict(qkv_bias=False)
        ],
        out_type='avg_featmap'),
}


@pytest.mark.parametrize('name', list(PARITY))
@pytest.mark.parametrize('hw', [(64, 64), (70, 50)])
def test_same_weights_same_outputs(name, hw):
    """Every output type, at the pretraining size and at a size that is
    padded (corner) and resized (PE interpolation)."""
    ref, ours = _pair(**PARITY[name])
    img = torch.randn(2, 3, *hw)
    with torch.no_grad():
        want, got = ref(img), ours(img)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_avg_featmap_checkpoint_with_ln2_loads_through_init_cfg(tmp_path):
    """An mmpretrain classifier file (``backbone.ln2.*`` included) loads
    through ``init_cfg`` and gives mmpretrain's outputs."""
    ref, _ = _pair(out_type='avg_featmap', with_cls_token=False)
    path = tmp_path / 'mmpretrain.pth'
    state = {'backbone.' + k: v for k, v in ref.state_dict().items()}
    state['head.fc.weight'] = torch.randn(10, 64)
    torch.save({'state_dict': state, 'meta': {}}, path)
    ours = LaPEViT(
        arch=dict(
            embed_dims=64, num_layers=3, num_heads=4, feedforward_channels=96),
        img_size=64,
        patch_size=8,
        out_type='avg_featmap',
        with_cls_token=False,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(path), prefix='backbone.'))
    ours.init_weights()
    img = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(
            ours.eval()(img)[0], ref(img)[0], rtol=1e-4, atol=1e-5)


def test_pvg_and_t2t_pool_without_the_norm():
    """mmlape's GAP joins (PVG/MPVG) and T2T-ViT keep their papers'
    pooling: no norm after GAP."""
    arch = dict(TINY)
    assert LaPEViT(arch, out_type='avg_featmap').fc_norm is not None
    assert LaPEViT(
        arch, out_type='avg_featmap', with_cls_token=False,
        pe_join='PVG').fc_norm is None
    assert LaPEViT(
        dict(LaPEViT.arch_zoo['t2t-vit-7'], **TINY),
        img_size=64,
        out_type='avg_featmap').fc_norm is None


# ----------------------------------------------------------------------
# host configs with only the type swapped


def test_deit_tiny_config_swapped_builds_and_matches():
    """mmpretrain's deit-tiny config as is, only the type swapped: the same
    parameters, and the same logits on the same weights."""
    cfg = host_model_cfg('mmpretrain', 'deit/deit-tiny_4xb256_in1k.py')
    ref = _randomize(build_in('mmpretrain', cfg))
    ref.eval()
    ours = build_in('mmpretrain', swapped(cfg, *SWAP)).eval()
    assert type(ours.backbone).__name__ == 'LaPEViT'
    assert sum(p.numel() for p in ours.parameters()) == \
        sum(p.numel() for p in ref.parameters())
    assert_same_logits(ref, ours, 'mmpretrain', torch.randn(1, 3, 224, 224))


def test_vit_base_config_swapped_builds_and_matches():
    """mmpretrain's vit-base-p16 config (``arch='b'``, Kaiming patch init,
    dropout 0.1, the pre-logits head) builds as is with the type swapped;
    at a test width, it gives mmpretrain's logits on the same weights."""
    cfg = host_model_cfg('mmpretrain',
                         'vision_transformer/vit-base-p16_64xb64_in1k.py')
    ours = swapped(cfg, *SWAP).backbone
    ours.pop('type')
    backbone = LaPEViT(**ours)  # ViT-B, built once, no forward
    assert backbone.embed_dims == 768 and backbone.num_layers == 12
    assert sum(p.numel() for p in backbone.parameters()) == 85798656
    del backbone

    small = deepcopy(cfg)
    small.backbone.arch = dict(
        embed_dims=64, num_layers=2, num_heads=2, feedforward_channels=128)
    small.backbone.img_size = 64
    small.head.in_channels = 64
    small.head.hidden_dim = 96
    ref = _randomize(build_in('mmpretrain', small))
    ref.eval()
    ours = build_in('mmpretrain', swapped(small, *SWAP))
    ours.init_weights()  # the config's Kaiming init_cfg applies
    ours.eval()
    assert_same_logits(ref, ours, 'mmpretrain', torch.randn(2, 3, 80, 72))
