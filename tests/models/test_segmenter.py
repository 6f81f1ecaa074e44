"""Segmenter's encoder is mmlape's ViT."""
import pytest
import torch
from conftest import assert_close_f32, config_joins
from mmengine.registry import DefaultScope

from mmlape.models import LaPEViT
from mmlape.models.checkpoint.vit import convert_checkpoint, detect_format


def mmseg_vit(**kwargs):
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmseg'):
        return MODELS.build(dict(type='VisionTransformer', **kwargs))


@pytest.mark.parametrize('hw', [(64, 64), (96, 64)])
def test_default_join_equals_mmseg_vit(hw):
    theirs = mmseg_vit(
        img_size=(64, 64),
        patch_size=16,
        embed_dims=64,
        num_layers=3,
        num_heads=2,
        mlp_ratio=4,
        out_indices=(1, 2),
        final_norm=True,
        with_cls_token=True,
        interpolate_mode='bicubic',
        norm_cfg=dict(type='LN', eps=1e-6))
    theirs.eval()  # mmseg's ViT.train() returns None: no chaining
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.2) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    sd = convert_checkpoint({
        'state_dict': {
            'backbone.' + k: v
            for k, v in theirs.state_dict().items()
        }
    })['state_dict']
    assert detect_format({
        'backbone.' + k: v
        for k, v in theirs.state_dict().items()
    }) == 'mmseg'
    ours = LaPEViT(
        dict(
            embed_dims=64, num_layers=3, num_heads=2,
            feedforward_channels=256),
        img_size=64,
        patch_size=16,
        out_type='featmap',
        out_indices=(1, 2),
        patch_bias=False)
    ours.load_state_dict({
        k[len('backbone.'):]: v
        for k, v in sd.items()
    },
                         strict=True)
    img = torch.randn(2, 3, *hw)
    with torch.no_grad():
        want = theirs(img)
        got = ours.eval()(img)
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert g.shape == w.shape == (2, 64, hw[0] // 16, hw[1] // 16)
        # index 1 is the un-normed residual stream (values near 50)
        assert_close_f32(g, w)


def test_mpvg_final_term_is_added_per_token():
    model = LaPEViT(
        'test-tiny',
        img_size=64,
        patch_size=16,
        pe_join='MPVG',
        with_cls_token=False,
        out_type='featmap').eval()
    with torch.no_grad():
        model.pe_join.last_norm.bias.fill_(3.0)
        with_term = model(torch.randn(1, 3, 64, 96))[0]
        plan = model.pe_plan((4, 6))
    assert with_term.shape == (1, 64, 4, 6)
    final = plan.final[0].T.reshape(64, 4, 6)
    # Removing the final term gives the normed tokens: mean ~0 per token.
    normed = with_term[0] - final
    torch.testing.assert_close(
        normed.mean(0), torch.zeros(4, 6), atol=1e-4, rtol=0)


SEG_JOINS = config_joins()
SEG_CONFIGS = [
    f'configs/segmenter/segmenter_vit-tiny{s}_mask_8xb1-160k_'
    'ade20k-512x512.py' for s in SEG_JOINS
]


@pytest.mark.slow  # a real train step and slide test per config
@pytest.mark.parametrize(
    'config', SEG_CONFIGS, ids=[j.lower() for j in SEG_JOINS.values()])
def test_segmenter_configs_train_step_and_slide_test(config, tmp_path):
    """Each Segmenter config, shrunk, runs a real train step and a slide
    inference on generated ADE20K-format data (non-square images)."""
    import os.path as osp

    from conftest import ROOT
    from mmengine.config import Config
    from mmengine.dataset import pseudo_collate
    from mmengine.optim import build_optim_wrapper
    from mmseg.registry import DATASETS, MODELS

    from mmlape.datasets import generate_ade20k
    data = str(tmp_path / 'ade')
    generate_ade20k(data, num_train=2, num_val=1, size=(80, 112))
    cfg = Config.fromfile(osp.join(ROOT, config))
    arch = dict(
        embed_dims=64, num_layers=2, num_heads=2, feedforward_channels=128)
    cfg.model.backbone.update(arch=arch, img_size=64, init_cfg=None)
    cfg.model.decode_head.update(
        in_channels=64, channels=64, num_heads=2, embed_dims=64, num_layers=1)
    cfg.model.data_preprocessor.size = (64, 64)
    cfg.model.test_cfg = dict(
        mode='slide', crop_size=(64, 64), stride=(48, 48))
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = MODELS.build(cfg.model)
        train_set = DATASETS.build(
            dict(
                cfg.train_dataloader.dataset,
                data_root=data,
                pipeline=[
                    dict(type='LoadImageFromFile'),
                    dict(type='LoadAnnotations', reduce_zero_label=True),
                    dict(type='RandomCrop', crop_size=(64, 64)),
                    dict(type='PackSegInputs')
                ]))
        val_set = DATASETS.build(
            dict(
                cfg.val_dataloader.dataset,
                data_root=data,
                pipeline=[
                    dict(type='LoadImageFromFile'),
                    dict(type='LoadAnnotations', reduce_zero_label=True),
                    dict(type='PackSegInputs')
                ]))
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    model.train()
    losses = model.train_step(
        pseudo_collate([train_set[0], train_set[1]]), optim)
    assert torch.isfinite(sum(v for k, v in losses.items() if 'loss' in k))
    model.eval()
    with torch.no_grad():
        out = model.val_step(pseudo_collate([val_set[0]]))
    pred = out[0].pred_sem_seg.data
    assert pred.shape == (1, 80, 112)  # the non-square input's own size
    assert model.backbone.pe_join.name == SEG_JOINS[config.split('vit-tiny')
                                                    [1].split('_mask')[0]]
