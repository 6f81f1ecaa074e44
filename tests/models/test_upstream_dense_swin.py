"""mmdet 3.3.0's and mmseg 1.2.2's ``SwinTransformer``, taken by
``LaPEDenseSwin`` with the type alone changed.

Same-weight parity with both hosts' classes for their options (the hosts'
weights converted by mmlape's checkpoint path), their freezing, their
refusals as one-line errors, and the hosts' own configs (mmseg's UPerNet
Swin-T, mmdet's Mask R-CNN Swin-T) with only the backbone type swapped.
"""
from importlib import import_module

import pytest
import torch
from host_models import build_in, copy_converted, host_model_cfg, swapped

from mmlape.models import LaPEDenseSwin, LaPESwin
from mmlape.models.checkpoint.swin import convert_swin_backbone

HOSTS = ('mmdet', 'mmseg')
SWAP = ('SwinTransformer', 'LaPEDenseSwin')
#: A tiny Swin in the hosts' arguments.
TINY = dict(
    embed_dims=16,
    depths=(2, 2, 2, 2),
    num_heads=(1, 2, 2, 4),
    window_size=4,
    pretrain_img_size=64,
    drop_path_rate=0.)

#: Tiny models run far faster on one thread of a shared machine.
pytestmark = pytest.mark.usefixtures('one_thread')


def host_swin(host, **kwargs):
    cls = import_module(f'{host}.models.backbones').SwinTransformer
    torch.manual_seed(0)
    ref = cls(**dict(TINY, **kwargs))
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ref.eval()  # (the hosts' train() returns None)
    return ref


def pair(host, **kwargs):
    """The host's tiny Swin (randomised) and LaPEDenseSwin of the same
    arguments with its weights, converted."""
    ref = host_swin(host, **kwargs)
    ours = LaPEDenseSwin(**dict(TINY, **kwargs)).eval()
    ours.load_state_dict(convert_swin_backbone(ref.state_dict()), strict=True)
    return ref, ours


@pytest.mark.parametrize('host', HOSTS)
@pytest.mark.parametrize(
    'kwargs', [
        dict(),
        dict(use_abs_pos_embed=True, out_indices=(1, 3)),
        dict(patch_norm=False, mlp_ratio=2, out_indices=(0, 2)),
        dict(window_size=3, norm_cfg=dict(type='LN', eps=1e-6)),
    ],
    ids=['plain', 'abs-pe', 'no-patch-norm', 'window-3'])
def test_same_weights_as_the_hosts_swin(host, kwargs):
    ref, ours = pair(host, **kwargs)
    assert sum(p.numel()
               for p in ours.parameters()) == sum(p.numel()
                                                  for p in ref.parameters())
    # the hosts add their PE unresized: other sizes without one
    sizes = [(64, 64)] if kwargs.get('use_abs_pos_embed') else [(64, 64),
                                                                (72, 100),
                                                                (36, 20)]
    with torch.no_grad():
        for size in sizes:
            img = torch.randn(2, 3, *size)
            got, want = ours(img), ref(img)
            assert len(got) == len(want) == len(
                kwargs.get('out_indices', range(4)))
            for a, b in zip(got, want):
                assert a.is_contiguous()
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('host', HOSTS)
@pytest.mark.parametrize('stages', [0, 1, 4])
def test_freezing_as_the_hosts(host, stages):
    """The same parameters freeze as in the host's Swin (mmlape's names),
    and the same modules stay in eval mode while training."""
    kwargs = dict(use_abs_pos_embed=True, frozen_stages=stages)
    ref, ours = pair(host, **kwargs)
    ref.train(), ours.train()
    marks = convert_swin_backbone({
        k: torch.full_like(p, float(p.requires_grad))
        for k, p in ref.named_parameters()
    })
    assert {
        k: p.requires_grad
        for k, p in ours.named_parameters()
    } == {
        k: bool(v.all())
        for k, v in marks.items()
    }
    assert any(bool(v.all()) for v in marks.values()) == (stages < 4)
    assert ours.patch_embed.training is ref.patch_embed.training is False
    for s in range(4):
        assert ours.layers[s].training == ref.stages[s].training


@pytest.mark.parametrize('kwargs,match', [
    (dict(qkv_bias=False), 'qkv_bias=False'),
    (dict(qk_scale=0.5), 'qk_scale=0.5'),
    (dict(drop_rate=0.1), 'drop_rate=0.1'),
    (dict(attn_drop_rate=0.1), 'attn_drop_rate=0.1'),
    (dict(act_cfg=dict(type='ReLU')), 'act_cfg'),
    (dict(strides=(4, 2, 2, 1)), r'strides=\[4, 2, 2, 1\]'),
    (dict(strides=(2, 2, 2, 2)), 'patch_size=4'),
    (dict(frozen_stages=5), r'frozen_stages=5 must be in \[-1, 4\]'),
    (dict(pretrain_img_size=(64, 64, 64)), 'must have 1 or 2 entries'),
    (dict(pretrained='a.pth',
          init_cfg=dict(type='Pretrained')), 'cannot both be set'),
])
def test_what_mmlapes_swin_does_not_compute_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LaPEDenseSwin(**dict(TINY, **kwargs))
    with pytest.raises(TypeError, match='pretrained must be a str'):
        LaPEDenseSwin(**TINY, pretrained=3)


@pytest.mark.filterwarnings('ignore:pretrained is deprecated')
def test_a_host_checkpoint_through_pretrained_and_init_cfg(tmp_path):
    """An mmdet file (``backbone.`` keys of the host's layout) loads by the
    deprecated ``pretrained`` and by ``init_cfg``."""
    ref = host_swin('mmdet', use_abs_pos_embed=True)
    path = str(tmp_path / 'swin.pth')
    torch.save(
        {
            'state_dict': {
                f'backbone.{k}': v
                for k, v in ref.state_dict().items()
            }
        }, path)
    img = torch.randn(1, 3, 64, 64)
    for kwargs in (dict(pretrained=path),
                   dict(init_cfg=dict(type='Pretrained', checkpoint=path))):
        ours = LaPEDenseSwin(**TINY, use_abs_pos_embed=True, **kwargs)
        ours.init_weights()
        ours.eval()
        with torch.no_grad():
            for a, b in zip(ours(img), ref(img)):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_a_thin_translator_of_lapeswin():
    """LaPEDenseSwin adds no forward, plan or checkpoint code of its own."""
    assert issubclass(LaPEDenseSwin, LaPESwin)
    for method in ('forward', '_build_plan', 'carry_pe', 'checkpoint_spec',
                   'pe_plan', 'load_pretrained'):
        assert method not in vars(LaPEDenseSwin), method
    assert LaPEDenseSwin(**TINY, pe_join='MPVG').pe_join.name == 'MPVG'


# ----------------------------------------------------------------------
# the hosts' configs with only the type swapped

UPERNET = ('mmseg', 'swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
           '8xb2-160k_ade20k-512x512.py')
MASK_RCNN = ('mmdet', 'swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py')


def _randomize(model, scale=0.02):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    model.eval()
    return model


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:pretrained is deprecated')
@pytest.mark.parametrize(
    'host,rel', [UPERNET, MASK_RCNN], ids=['upernet', 'mask-rcnn'])
def test_the_hosts_swin_tiny_configs_swap_in(host, rel):
    """The host's Swin-T config as is, only the backbone type swapped:
    the same parameters and the host's checkpoint (its ``init_cfg``); on
    the same weights the same backbone and neck features, and for the
    segmentor the same logits (an irregular input, padded)."""
    cfg = host_model_cfg(host, rel)
    if host == 'mmseg':  # BN for the CPU
        for head in (cfg.decode_head, cfg.auxiliary_head):
            head.norm_cfg = dict(type='BN')
    ref = _randomize(build_in(host, cfg))
    ours = build_in(host, swapped(cfg, *SWAP)).eval()
    assert type(ours.backbone).__name__ == 'LaPEDenseSwin'
    assert ours.backbone.init_cfg == ref.backbone.init_cfg
    assert ours.backbone.pos_embed is None
    assert sum(p.numel()
               for p in ours.parameters()) == sum(p.numel()
                                                  for p in ref.parameters())
    copy_converted(ref, ours, convert_swin_backbone)
    img = torch.randn(1, 3, 96, 72)
    with torch.no_grad():
        for a, b in zip(ours.extract_feat(img), ref.extract_feat(img)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        if host == 'mmseg':
            torch.testing.assert_close(
                ours(img, mode='tensor'),
                ref(img, mode='tensor'),
                rtol=1e-4,
                atol=1e-4)
