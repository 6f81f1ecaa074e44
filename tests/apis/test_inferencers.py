"""The host libraries' inferencers on mmlape's configs (issue 21, req. 5):
mmpretrain's ``ImageClassificationInferencer``, mmdet's ``DetInferencer``
and mmseg's ``MMSegInferencer`` build the config's model (random weights,
nothing downloaded) and predict on a small image."""
import os.path as osp

import numpy as np
import pytest
import torch
from conftest import ROOT
from mmengine.config import Config

import mmlape  # noqa: F401

IMG = np.random.RandomState(0).randint(0, 255, (48, 64, 3), np.uint8)

pytestmark = pytest.mark.usefixtures('fresh_default_scope')


def small_test_pipeline(config: str, scale) -> Config:
    """The config with its test-time resize at ``scale`` (a fast CPU
    forward); everything else as the config says."""
    cfg = Config.fromfile(osp.join(ROOT, 'configs', config))
    resized = 0
    for step in cfg.test_dataloader.dataset.pipeline:
        if step['type'] == 'Resize':
            step['scale'] = scale
            resized += 1
    assert resized == 1, cfg.test_dataloader.dataset.pipeline
    return cfg


def test_image_classification_inferencer():
    from mmpretrain.apis import ImageClassificationInferencer
    torch.manual_seed(0)
    config = osp.join(ROOT, 'configs', 'demo', 'deit-demo-mpvg_pos-shapes.py')
    inferencer = ImageClassificationInferencer(config, device='cpu')
    model = inferencer.model
    assert type(model.backbone).__name__ == 'LaPEViT'
    assert model.backbone.pe_join.name == 'MPVG'
    result, = inferencer(IMG)
    classes = model.head.num_classes
    assert result['pred_scores'].shape == (classes, )
    assert np.isclose(result['pred_scores'].sum(), 1, atol=1e-5)
    assert 0 <= result['pred_label'] < classes


def test_det_inferencer():
    """ViT-Adapter-Ti Mask R-CNN (LaPE), as mmdet's inferencer builds it."""
    from mmdet.apis import DetInferencer
    torch.manual_seed(0)
    cfg = small_test_pipeline(
        osp.join('vit_adapter',
                 'mask-rcnn_vit-adapter-tiny-lape_fpn_3x_coco.py'), (64, 64))
    inferencer = DetInferencer(model=cfg, weights=None, device='cpu')
    assert type(inferencer.model.backbone).__name__ == 'LaPEViTAdapter'
    assert inferencer.model.backbone.pe_join.name == 'LaPE'
    out = inferencer(IMG, no_save_pred=True, return_vis=False)
    pred, = out['predictions']
    n = len(pred['labels'])
    assert len(pred['scores']) == len(pred['bboxes']) == len(pred['masks'])
    assert n == len(pred['scores'])
    for box in pred['bboxes']:  # in the input image's coordinates
        assert 0 <= box[0] <= box[2] <= IMG.shape[1] + 1e-3
        assert 0 <= box[1] <= box[3] <= IMG.shape[0] + 1e-3


def test_mmseg_inferencer():
    """Segmenter ViT-Ti (MPVG), as mmseg's inferencer builds it."""
    from mmseg.apis import MMSegInferencer
    torch.manual_seed(0)
    cfg = small_test_pipeline(
        osp.join('segmenter',
                 'segmenter_vit-tiny-mpvg_mask_8xb1-160k_ade20k-512x512.py'),
        (64, 64))
    cfg.model.test_cfg = dict(mode='whole')
    inferencer = MMSegInferencer(model=cfg, weights=None, device='cpu')
    assert type(inferencer.model.backbone).__name__ == 'LaPEViT'
    assert inferencer.model.backbone.pe_join.name == 'MPVG'
    out = inferencer(IMG)
    seg = np.asarray(out['predictions'])
    assert seg.shape == IMG.shape[:2]
    classes = inferencer.model.decode_head.num_classes
    assert seg.min() >= 0 and seg.max() < classes
