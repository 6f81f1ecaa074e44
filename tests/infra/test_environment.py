"""Smoke tests that fail loudly when the installed stack is broken."""
import importlib

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope


def test_mmcv_nms_and_roi_align():
    from mmcv.ops import RoIAlign, nms
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.],
                          [20., 20., 30., 30.]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    dets, keep = nms(boxes, scores, iou_threshold=0.5)
    assert keep.tolist() == [0, 2]
    feat = torch.arange(64.).reshape(1, 1, 8, 8)
    rois = torch.tensor([[0., 0., 0., 4., 4.]])
    out = RoIAlign((2, 2), spatial_scale=1.0, sampling_ratio=2)(feat, rois)
    assert out.shape == (1, 1, 2, 2)
    assert torch.isfinite(out).all() and out.std() > 0


def test_mmcv_multiscale_deformable_attention_forward_backward():
    import mmcv._ext  # noqa: F401  (the compiled ops exist)
    from mmcv.ops import MultiScaleDeformableAttention
    attn = MultiScaleDeformableAttention(
        embed_dims=32,
        num_heads=4,
        num_levels=2,
        num_points=2,
        batch_first=True)
    shapes = torch.tensor([[4, 4], [2, 2]])
    start = torch.tensor([0, 16])
    value = torch.randn(2, 20, 32, requires_grad=True)
    query = torch.randn(2, 5, 32, requires_grad=True)
    ref = torch.rand(2, 5, 2, 2)
    out = attn(
        query,
        value=value,
        reference_points=ref,
        spatial_shapes=shapes,
        level_start_index=start)
    assert out.shape == (2, 5, 32)
    out.sum().backward()
    assert value.grad.abs().sum() > 0
    assert attn.sampling_offsets.weight.grad is not None


@pytest.mark.parametrize('module', [
    'torchvision', 'mmpretrain.datasets', 'mmpretrain.models', 'mmdet.models',
    'mmseg.models', 'mmdet.evaluation', 'mmseg.datasets'
])
def test_imports(module):
    importlib.import_module(module)


def _config(tmp_path, text):
    path = tmp_path / 'cfg.py'
    path.write_text(text)
    return Config.fromfile(str(path))


def test_build_mask_rcnn_from_mmdet_base(tmp_path):
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    register_all_modules()
    cfg = _config(tmp_path, "_base_ = 'mmdet::_base_/models/"
                  "mask-rcnn_r50_fpn.py'\n")
    cfg.model.backbone.depth = 18
    cfg.model.backbone.init_cfg = None
    cfg.model.neck.in_channels = [64, 128, 256, 512]
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model).eval()
    from mmdet.structures import DetDataSample
    sample = DetDataSample(
        metainfo=dict(
            img_shape=(64, 64),
            ori_shape=(64, 64),
            scale_factor=(1., 1.),
            batch_input_shape=(64, 64),
            pad_shape=(64, 64)))
    with torch.no_grad():
        results = model.predict(torch.randn(1, 3, 64, 64), [sample])
    assert hasattr(results[0], 'pred_instances')


def test_build_upernet_from_mmseg_base(tmp_path):
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules
    register_all_modules()
    cfg = _config(
        tmp_path, "_base_ = 'mmseg::_base_/models/upernet_r50.py'"
        "\nnorm_cfg = dict(type='BN', requires_grad=True)\n"
        'model = dict(data_preprocessor=None,\n'
        '    backbone=dict(norm_cfg=norm_cfg),\n'
        '    decode_head=dict(norm_cfg=norm_cfg),\n'
        '    auxiliary_head=dict(norm_cfg=norm_cfg))\n')
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = MODELS.build(cfg.model).eval()
    with torch.no_grad():
        logits = model(torch.randn(1, 3, 64, 64), mode='tensor')
    assert logits.shape[:2] == (1, 19)
