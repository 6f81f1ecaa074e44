"""Test-time augmentation of instance segmentation (Mask R-CNN).

:class:`InstanceSegTTAModel` merges the views' boxes as mmdet's
``DetTTAModel`` (which refuses masks) and keeps, for each detection NMS
keeps, its own view's mask flipped back. Imported (with mmdet) only when a
config builds it.
"""
from typing import List

import torch
from mmdet.models.test_time_augs import DetTTAModel
from mmdet.structures import DetDataSample
from mmengine.structures import InstanceData

__all__ = ['InstanceSegTTAModel']

#: Flip directions -> the mask dimensions they reverse.
FLIP_DIMS = {'horizontal': (-1, ), 'vertical': (-2, ), 'diagonal': (-2, -1)}


class InstanceSegTTAModel(DetTTAModel):
    """``DetTTAModel`` that carries instance masks through the merge.

    Args:
        tta_cfg (dict): ``nms`` (as mmdet's ``batched_nms`` takes it) and
            ``max_per_img``.

    Example:
        >>> tta_model = dict(
        ...     type='InstanceSegTTAModel',
        ...     tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5),
        ...                  max_per_img=100))
    """

    def _merge_single_sample(
            self, data_samples: List[DetDataSample]) -> DetDataSample:
        if data_samples[0].pred_instances.get('masks', None) is None:
            return super()._merge_single_sample(data_samples)
        from mmcv.ops import batched_nms
        boxes, scores, labels, masks, metas = [], [], [], [], []
        for sample in data_samples:
            pred = sample.pred_instances
            boxes.append(pred.bboxes)
            scores.append(pred.scores)
            labels.append(pred.labels)
            mask = pred.masks
            if sample.metainfo.get('flip', False):
                mask = mask.flip(FLIP_DIMS[sample.metainfo['flip_direction']])
            masks.append(mask)
            metas.append(sample.metainfo)
        merged_boxes, merged_scores = self.merge_aug_bboxes(
            boxes, scores, metas)
        merged_labels = torch.cat(labels)
        if merged_boxes.numel() == 0:
            return data_samples[0]
        dets, keep = batched_nms(merged_boxes, merged_scores, merged_labels,
                                 self.tta_cfg.nms)
        keep = keep[:self.tta_cfg.max_per_img]
        results = InstanceData()
        results.bboxes = dets[:len(keep), :-1].clone()
        results.scores = dets[:len(keep), -1].clone()
        results.labels = merged_labels[keep]
        results.masks = torch.cat(masks)[keep]
        merged = data_samples[0]
        merged.pred_instances = results
        return merged
