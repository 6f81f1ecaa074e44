"""``tools/test.py --tta`` and ``--amp``: the TTA models and pipelines the
hosts' tools use, mmdet's with instance masks carried through the merge,
and predictions that reach the metrics in float32."""
import json
import os.path as osp
import sys

import pytest
import torch
from conftest import DEMO, ROOT, demo_options, run
from mmengine.config import Config

sys.path.insert(0, ROOT)
from tools.test import float32_predictions, use_tta  # noqa: E402


def test_float32_predictions():
    from mmdet.structures import DetDataSample
    from mmengine.structures import InstanceData
    sample = DetDataSample(metainfo=dict(scale_factor=(1., 1.)))
    sample.pred_instances = InstanceData(
        bboxes=torch.rand(3, 4).bfloat16(),
        scores=torch.rand(3).half(),
        labels=torch.arange(3),
        masks=torch.zeros(3, 4, 4, dtype=torch.bool))
    out = float32_predictions([sample])[0].pred_instances
    assert out.bboxes.dtype == out.scores.dtype == torch.float32
    assert out.labels.dtype == torch.long and out.masks.dtype == torch.bool


def test_classification_tta_flips_before_packing():
    cfg = Config(
        dict(
            default_scope='mmpretrain',
            model=dict(type='ImageClassifier'),
            test_dataloader=dict(
                dataset=dict(pipeline=[
                    dict(type='LoadImageFromFile'),
                    dict(type='PackInputs')
                ]))))
    use_tta(cfg)
    assert cfg.model.type == 'AverageClsScoreTTA'
    assert cfg.model.module == dict(type='ImageClassifier')
    last = cfg.test_dataloader.dataset.pipeline[-1]
    assert last.type == 'TestTimeAug'
    assert [t['prob'] for t in last.transforms[0]] == [1., 0.]
    assert last.transforms[1] == [dict(type='PackInputs')]


def test_segmentation_tta_needs_the_configs_pipeline():
    from tools.common import UsageError
    cfg = Config(
        dict(
            default_scope='mmseg',
            model=dict(type='EncoderDecoder'),
            tta_model=dict(type='SegTTAModel'),
            test_dataloader=dict(dataset=dict(pipeline=[]))))
    with pytest.raises(UsageError, match='no tta_pipeline'):
        use_tta(cfg)


def test_instance_masks_follow_their_boxes_through_the_merge():
    """Two views (plain and flipped) of a 4x6 image: NMS keeps the
    higher-scoring copy of each object, with its own view's mask, flipped
    back."""
    from mmdet.structures import DetDataSample
    from mmengine.structures import InstanceData

    from mmlape.hosts import InstanceSegTTAModel
    tta = InstanceSegTTAModel.__new__(InstanceSegTTAModel)  # no module
    tta.tta_cfg = Config(
        dict(nms=dict(type='nms', iou_threshold=0.5), max_per_img=10))
    mask = torch.zeros(1, 4, 6, dtype=torch.bool)
    mask[0, 1:3, 0:2] = True  # the object's left part, in the image
    views = []
    for flip, score in ((False, 0.6), (True, 0.9)):
        sample = DetDataSample(
            metainfo=dict(
                ori_shape=(4, 6),
                flip=flip,
                flip_direction='horizontal' if flip else None))
        box = torch.tensor([[0., 1., 2., 3.]])
        m = mask
        if flip:  # what the model predicts on the flipped image
            box = torch.tensor([[4., 1., 6., 3.]])
            m = mask.flip(-1)
        sample.pred_instances = InstanceData(
            bboxes=box,
            scores=torch.tensor([score]),
            labels=torch.tensor([0]),
            masks=m)
        views.append(sample)
    merged = tta._merge_single_sample(views).pred_instances
    assert len(merged) == 1
    assert merged.scores.tolist() == pytest.approx([0.9])
    torch.testing.assert_close(merged.bboxes, torch.tensor([[0., 1., 2., 3.]]))
    assert torch.equal(merged.masks, mask)


@pytest.mark.slow
def test_classifier_with_tta_and_amp(pos_shapes_data, tmp_path):
    work = str(tmp_path / 'work')
    opts = demo_options(pos_shapes_data, 2, 2)
    run([sys.executable, 'tools/train.py', DEMO, '--work-dir', work] + opts)
    ckpt = osp.join(work, 'iter_2.pth')
    run([
        sys.executable, 'tools/test.py', DEMO, ckpt, '--work-dir', work,
        '--tta', '--amp'
    ] + opts)
    with open(osp.join(work, 'test_metrics.json')) as f:
        assert 0 <= json.load(f)['accuracy/top1'] <= 100
    dumped = Config.fromfile(osp.join(work, osp.basename(DEMO)))
    assert dumped.model.type == 'AverageClsScoreTTA'
    assert dumped.test_cfg.fp16 is True
