"""mmseg 1.2.2's ``VisionTransformer`` tests, written for ``LaPESegViT``.

Every assertion of mmseg's tests/test_models/test_backbones/test_vit.py has
its counterpart here (shapes on a tiny width where they do not depend on
it; the defaults on one ViT-B), plus same-weight parity against mmseg's
class and mmseg's own configs with only the backbone type swapped. mmseg
asserts ``AssertionError`` where mmlape raises ``ValueError`` with a
one-line message; the tests check mmlape's type and message.
"""
import os.path as osp
from copy import deepcopy

import pytest
import torch
import torch.nn as nn
from host_models import assert_same_logits, build_in, host_model_cfg, swapped

from mmlape.models import LaPESegViT
from mmlape.models.checkpoint.vit import convert_backbone

mmseg = pytest.importorskip('mmseg')

MIM = osp.join(osp.dirname(mmseg.__file__), '.mim', 'configs')
#: The one change a user makes to the host's config.
SWAP = ('VisionTransformer', 'LaPESegViT')
#: A tiny width for the checks that do not depend on it.
TINY = dict(embed_dims=32, num_layers=2, num_heads=2)
C = TINY['embed_dims']
MISSING = 'PATH_THAT_DO_NOT_EXIST'

#: Tiny models run far faster on one thread of a shared machine.
pytestmark = pytest.mark.usefixtures('one_thread')


def tiny(**kwargs):
    return LaPESegViT(**dict(TINY, **kwargs))


def norms_training(model, mode):
    """Every norm layer is in ``mode`` (mmseg's ``check_norm_state``,
    which looks at BatchNorms, extended to the LayerNorms a ViT has)."""
    norms = [
        m for m in model.modules()
        if isinstance(m, (nn.LayerNorm, nn.modules.batchnorm._BatchNorm))
    ]
    return bool(norms) and all(m.training == mode for m in norms)


# ----------------------------------------------------------------------
# test_vit_backbone: refusals
def test_bad_arguments_are_refused():
    with pytest.raises(TypeError):  # init_weights takes no checkpoint
        tiny().init_weights(pretrained=0)
    with pytest.raises(TypeError, match='img_size must be an int or a '):
        tiny(img_size=512.0)
    with pytest.raises(TypeError, match='out_indices must be an int'):
        tiny(out_indices=1.)
    with pytest.raises(TypeError):  # mmseg's helper takes four arguments
        LaPESegViT.resize_pos_embed(
            torch.randn(1, 196), 512, 512, 224, 224, 'bilinear')
    with pytest.raises(ValueError, match='img_size must have 1 or 2'):
        tiny(img_size=(224, 224, 224))
    with pytest.raises(TypeError, match='pretrained must be a str or None'):
        tiny(pretrained=123)
    with pytest.raises(ValueError, match='output_cls_token=True needs'):
        tiny(with_cls_token=False, output_cls_token=True)


def test_resize_pos_embed_helper_keeps_the_class_row():
    pe = torch.randn(1, 1 + 4 * 4, 8)
    out = LaPESegViT.resize_pos_embed(pe, (6, 2), (4, 4), 'bilinear')
    assert out.shape == (1, 1 + 12, 8)
    torch.testing.assert_close(out[:, 0], pe[:, 0])


# ----------------------------------------------------------------------
# test_vit_backbone: builds and shapes
def test_img_size_tuples_and_norm_eval():
    imgs = torch.randn(1, 3, 224, 224)
    model = tiny(img_size=(224, ))
    model.init_weights()
    assert model.img_size == (224, 224)
    assert model(imgs)[-1].shape == (1, C, 14, 14)
    assert tiny(img_size=(224, 224))(imgs)[-1].shape == (1, C, 14, 14)

    model = tiny(norm_eval=True)
    model.train()
    assert norms_training(model, False)
    assert model.blocks[0].attn.training


def test_shapes_of_every_input_size():
    """Normal, large, small, unbalanced and irregular inputs; the irregular
    one is padded at the bottom right (mmseg's ``patch_pad='corner'``)."""
    model = tiny()
    model.init_weights()
    model.train()
    assert norms_training(model, True)
    for hw, grid in [((224, 224), (14, 14)), ((256, 256), (16, 16)),
                     ((32, 32), (2, 2)), ((224, 224), (14, 14)),
                     ((112, 224), (7, 14)), ((234, 345), (15, 22))]:
        feat = model(torch.randn(1, 3, *hw))
        assert feat[-1].shape == (1, C, *grid), hw


@pytest.mark.parametrize('kwargs', [
    dict(with_cp=True),
    dict(with_cls_token=False),
    dict(final_norm=True),
    dict(patch_norm=True)
])
def test_options_keep_the_shape(kwargs):
    feat = tiny(**kwargs)(torch.randn(1, 3, 224, 224))
    assert feat[-1].shape == (1, C, 14, 14)


def test_output_cls_token():
    feat = tiny(
        with_cls_token=True, output_cls_token=True)(
            torch.randn(1, 3, 224, 224))
    assert feat[0][0].shape == (1, C, 14, 14)
    assert feat[0][1].shape == (1, C)


def test_defaults_are_mmseg_vit_b():
    """mmseg's default ViT (built once): ViT-B/16, LN eps 1e-5, no patch
    bias, no final norm, mmseg's 85,796,352 parameters; a small and an
    irregular input give mmseg's grids."""
    model = LaPESegViT()
    assert (model.embed_dims, model.num_layers) == (768, 12)
    assert model.blocks[0].attn.num_heads == 12
    assert model.blocks[0].mlp.fc1.out_features == 3072
    assert model.blocks[0].norm1.eps == 1e-5
    assert model.patch_embed.proj.bias is None
    assert not model.final_norm and model.out_indices == [11]
    assert sum(p.numel() for p in model.parameters()) == 85796352
    with torch.no_grad():
        assert model(torch.randn(1, 3, 32, 32))[-1].shape == (1, 768, 2, 2)
        assert model(torch.randn(1, 3, 40, 50))[-1].shape == (1, 768, 3, 4)


# ----------------------------------------------------------------------
# test_vit_init
def test_pretrained_and_init_cfg():
    model = tiny(pretrained=None, init_cfg=None)
    assert model.init_cfg is None
    model.init_weights()

    model = tiny(
        pretrained=None, init_cfg=dict(type='Pretrained', checkpoint=MISSING))
    assert model.init_cfg == dict(type='Pretrained', checkpoint=MISSING)
    with pytest.raises(OSError):
        model.init_weights()

    model = tiny(pretrained=None, init_cfg=123)
    with pytest.raises(TypeError):
        model.init_weights()

    with pytest.warns(UserWarning, match='pretrained is deprecated'):
        model = tiny(pretrained=MISSING, init_cfg=None)
    assert model.init_cfg == dict(type='Pretrained', checkpoint=MISSING)
    with pytest.raises(OSError):
        model.init_weights()

    both = 'pretrained and init_cfg cannot both be set'
    with pytest.raises(ValueError, match=both):
        tiny(
            pretrained=MISSING,
            init_cfg=dict(type='Pretrained', checkpoint=MISSING))
    with pytest.raises(ValueError, match=both):
        tiny(pretrained=MISSING, init_cfg=123)
    with pytest.raises(TypeError, match='pretrained must be a str'):
        tiny(pretrained=123, init_cfg=None)
    with pytest.raises(ValueError, match=both):
        tiny(
            pretrained=123,
            init_cfg=dict(type='Pretrained', checkpoint=MISSING))
    with pytest.raises(ValueError, match=both):
        tiny(pretrained=123, init_cfg=123)


# ----------------------------------------------------------------------
# same weights as mmseg's VisionTransformer
def _randomize(model, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ('ln' in name or 'norm' in name):
                p.copy_(1 + 0.2 * torch.randn_like(p) if name.
                        endswith('weight') else 0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 0.05)
    return model


BASE = dict(
    img_size=64, patch_size=8, embed_dims=64, num_layers=3, num_heads=4)


def _pair(**kwargs):
    """mmseg's ViT (random, non-trivial norms) and LaPESegViT loading its
    converted weights strictly."""
    from mmseg.models.backbones import VisionTransformer
    cfg = dict(BASE, **kwargs)
    ref = _randomize(VisionTransformer(**deepcopy(cfg)))
    ours = LaPESegViT(**cfg)
    ours.load_state_dict(convert_backbone(ref.state_dict(), 'mmseg'))
    return ref, ours


def _assert_same_outputs(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if isinstance(b, (list, tuple)):
            assert isinstance(a, list) and len(a) == len(b)
            _assert_same_outputs(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


PARITY = {
    'default':
    dict(),
    'out_indices':
    dict(out_indices=(0, 1, 2)),
    'final_norm':
    dict(final_norm=True, out_indices=[1, 2]),
    'output_cls_token':
    dict(output_cls_token=True, final_norm=True),
    'out_origin':
    dict(out_origin=True, output_cls_token=True),
    'no-cls-token':
    dict(with_cls_token=False, out_origin=True),
    'pre_norm-patch_norm-bias':
    dict(pre_norm=True, patch_norm=True, patch_bias=True),
    'same-pad':
    dict(patch_pad='same'),
    'bilinear':
    dict(interpolate_mode='bilinear'),
    'relu-eps-no-qkv-bias':
    dict(
        act_cfg=dict(type='ReLU'),
        norm_cfg=dict(type='LN', eps=1e-6),
        qkv_bias=False,
        mlp_ratio=2),
}


@pytest.mark.parametrize('name', list(PARITY))
@pytest.mark.parametrize('hw', [(64, 64), (70, 45)])
def test_same_weights_same_outputs(name, hw):
    """Every output form, at the pretraining size and at an irregular
    size (padded, PE resized): mmseg's featmaps, class tokens and origin
    embedding."""
    ref, ours = _pair(**PARITY[name])
    ref.eval(), ours.eval()
    img = torch.randn(2, 3, *hw)
    with torch.no_grad():
        _assert_same_outputs(ours(img), ref(img))


def test_training_drop_path_is_mmseg_s():
    """In training, stochastic depth drops the FFN residual only, as in
    mmseg (whose attention has no drop path): same seed, same outputs."""
    ref, ours = _pair(drop_path_rate=0.5, with_cls_token=False)
    img = torch.randn(4, 3, 64, 48)
    torch.manual_seed(1)
    want = ref(img)
    torch.manual_seed(1)
    got = ours(img)
    _assert_same_outputs(got, want)


def test_frozen_exclude_reads_mmseg_and_mmlape_names():
    model = tiny(frozen_exclude=['pos_embed', 'ln1'])
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    # pos_embed, the blocks' first norms (mmseg: layers.{i}.ln1)
    assert trainable == {
        'pos_embed', 'blocks.0.norm1.weight', 'blocks.0.norm1.bias',
        'blocks.1.norm1.weight', 'blocks.1.norm1.bias'
    }
    assert all(p.requires_grad for p in tiny().parameters())


def test_mmseg_names_are_the_inverse_of_the_converter():
    """``frozen_exclude``'s mmlape -> mmseg names and the checkpoint
    converter's mmseg -> mmlape rules, both read from one table: every
    parameter of a ViT with every optional module maps to the name mmseg's
    ViT gives it, and the converter maps that name back."""
    from mmseg.models.backbones import VisionTransformer

    from mmlape.models.checkpoint.vit import mmseg_vit_name as mmseg_name
    cfg = dict(
        BASE, final_norm=True, pre_norm=True, patch_norm=True, patch_bias=True)
    ours = dict(LaPESegViT(**cfg).named_parameters())
    theirs = dict(VisionTransformer(**deepcopy(cfg)).named_parameters())
    named = {mmseg_name(k): k for k in ours}
    assert len(named) == len(ours)  # no two parameters share a name
    assert set(named) == set(theirs)
    back = convert_backbone(theirs, 'mmseg')
    assert set(back) == set(ours)
    for mmseg_key, key in named.items():
        assert torch.equal(back[key], theirs[mmseg_key]), (mmseg_key, key)


def test_mmseg_checkpoint_through_pretrained(tmp_path):
    """An mmseg backbone file, given as mmseg's deprecated ``pretrained``,
    loads (converted, PE resized for another img_size) and gives mmseg's
    features."""
    ref, _ = _pair(final_norm=True)
    path = tmp_path / 'vit.pth'
    torch.save({'state_dict': ref.state_dict()}, path)
    ours = LaPESegViT(**dict(BASE, final_norm=True, pretrained=str(path)))
    ours.init_weights()
    ref.eval(), ours.eval()
    img = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        _assert_same_outputs(ours(img), ref(img))


# ----------------------------------------------------------------------
# mmseg's configs with only the type swapped

UPERNET = 'vit/vit_vit-b16_mln_upernet_8xb2-80k_ade20k-512x512.py'
SEGMENTER = 'segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py'


@pytest.mark.filterwarnings('ignore:pretrained is deprecated')
def test_segmenter_vit_t_config_swapped_builds_and_matches():
    """mmseg's Segmenter ViT-T config as is, only the type swapped: the
    same parameters, mmseg's checkpoint path, and on the same weights the
    same logits (an irregular input, padded)."""
    cfg = host_model_cfg('mmseg', SEGMENTER)
    ref = build_in('mmseg', cfg)
    ours = build_in('mmseg', swapped(cfg, *SWAP))
    assert type(ours.backbone).__name__ == 'LaPESegViT'
    assert ours.backbone.init_cfg == ref.backbone.init_cfg
    assert sum(p.numel() for p in ours.parameters()) == 6713196 == sum(
        p.numel() for p in ref.parameters())
    _randomize(ref)
    assert_same_logits(ref, ours, 'mmseg', torch.randn(1, 3, 72, 90))


@pytest.mark.filterwarnings('ignore:pretrained is deprecated')
def test_upernet_vit_config_swapped_builds_and_matches():
    """mmseg's UPerNet ViT-B config builds as is with the type swapped
    (mmseg's parameters); at a test width (BN for the CPU), it gives
    mmseg's logits on the same weights."""
    cfg = host_model_cfg('mmseg', UPERNET)
    ours = build_in('mmseg', swapped(cfg, *SWAP))
    assert type(ours.backbone).__name__ == 'LaPESegViT'
    assert ours.backbone.out_indices == [2, 5, 8, 11]
    assert sum(p.numel() for p in ours.parameters()) == 144172844
    del ours

    small = deepcopy(cfg)
    small.backbone.update(
        embed_dims=32,
        num_layers=4,
        num_heads=2,
        out_indices=(0, 1, 2, 3),
        img_size=(64, 64))
    small.neck.update(in_channels=[32] * 4, out_channels=32)
    small.decode_head.update(
        in_channels=[32] * 4, channels=16, norm_cfg=dict(type='BN'))
    small.auxiliary_head.update(
        in_channels=32, channels=16, norm_cfg=dict(type='BN'))
    ref = _randomize(build_in('mmseg', small))
    ours = build_in('mmseg', swapped(small, *SWAP))
    assert_same_logits(ref, ours, 'mmseg', torch.randn(1, 3, 80, 72))


def test_a_thin_translator_of_lapevit():
    """LaPESegViT adds no block loop, plan or checkpoint code of its own:
    LaPEViT's blocks and forward, the base's checkpoint hooks."""
    from mmlape.models import LaPEViT
    from mmlape.models.backbones.base import LaPEBackbone
    assert issubclass(LaPESegViT, LaPEViT)
    for method in ('forward', 'forward_blocks', 'embed', '_build_plan',
                   'checkpoint_spec'):
        assert method not in vars(LaPESegViT), method
    for method in ('pe_plan', '_fit_state_dict', 'load_pretrained'):
        owners = [k for k in LaPESegViT.__mro__ if method in vars(k)]
        assert owners == [LaPEBackbone], method
