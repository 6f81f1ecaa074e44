"""The small dense runs of the tests and the benchmarks, as overrides:
:func:`model_overrides`, one small ViT (96 dims, 4 layers, 3 heads) inside
the real configs' ViT-Adapter (one interaction per block, windows of 2 in
blocks 0 and 2) and Segmenter, the necks and heads shrunk to fit it;
:func:`coco_data` and :func:`ade_data`, the loaders (and COCO's evaluator)
of the generated sets of :mod:`mmlape.datasets.dense`.

Example:
    >>> model = model_overrides('upernet', img_size=64)
    >>> model['backbone']['arch']['embed_dims'], model['backbone']['img_size']
    (96, 64)
"""
from typing import Dict, Optional, Tuple

#: The small ViT.
ARCH = dict(embed_dims=96, num_layers=4, num_heads=3, feedforward_channels=192)
#: The dense families' configs (``{}``: a join's suffix, ``-lape``).
DENSE_CONFIGS = {
    'mask-rcnn':
    'configs/vit_adapter/mask-rcnn_vit-adapter-tiny{}_fpn_3x_coco.py',
    'upernet':
    'configs/vit_adapter/upernet_vit-adapter-tiny{}_8xb2-160k_'
    'ade20k-512x512.py',
    'segmenter':
    'configs/segmenter/segmenter_vit-tiny{}_mask_8xb1-160k_'
    'ade20k-512x512.py',
}
#: Loader workers of a test: none.
LOADER = dict(num_workers=0, persistent_workers=False)


def adapter_backbone(**kwargs) -> Dict:
    """Backbone overrides of the small ViT-Adapter, plus ``kwargs``."""
    return dict(
        arch=dict(ARCH, deform_num_heads=3, _delete_=True),
        conv_inplane=16,
        interaction_indexes=[[0, 0], [1, 1], [2, 2], [3, 3]],
        window_size=[2, 0, 2, 0],
        **kwargs)


def model_overrides(family: str, **backbone) -> Dict:
    """``model`` overrides of a dense config (a family of
    :data:`DENSE_CONFIGS`) for the small model, with ``backbone`` more
    backbone overrides (``img_size``, ``init_cfg``, ...)."""
    if family == 'segmenter':
        return dict(
            backbone=dict(arch=dict(ARCH, _delete_=True), **backbone),
            decode_head=dict(
                in_channels=96, channels=96, num_heads=3, embed_dims=96))
    if family == 'upernet':
        return dict(
            backbone=adapter_backbone(**backbone),
            decode_head=dict(in_channels=[96] * 4, channels=32),
            auxiliary_head=dict(in_channels=96, channels=16))
    if family == 'mask-rcnn':
        return dict(
            backbone=adapter_backbone(**backbone),
            neck=dict(in_channels=[96] * 4, out_channels=32),
            rpn_head=dict(in_channels=32, feat_channels=32),
            roi_head=dict(
                bbox_roi_extractor=dict(out_channels=32),
                bbox_head=dict(in_channels=32, fc_out_channels=64),
                mask_roi_extractor=dict(out_channels=32),
                mask_head=dict(in_channels=32, conv_out_channels=32)))
    raise ValueError(f'family={family!r} is not one of {list(DENSE_CONFIGS)}')


def coco_data(data_root: str,
              scale: Tuple[int, int],
              workers: Optional[Dict] = None,
              meta_keys: Optional[Tuple] = None) -> Dict:
    """Loaders and evaluators of a generated COCO-format set (``data_root``
    ends in ``/``): ``train_dataloader`` (batch 2, random flips), ``val_``
    and ``test_dataloader`` (batch 1), ``val_`` and ``test_evaluator``;
    images resized to ``scale`` (w, h) with their ratio kept; ``workers``:
    the loaders' worker settings (default :data:`LOADER`); ``meta_keys``:
    those of both pipelines' ``PackDetInputs``."""
    workers = LOADER if workers is None else workers
    keys = meta_keys or ('img_id', 'img_path', 'ori_shape', 'img_shape',
                         'scale_factor')
    pack = dict(type='PackDetInputs', meta_keys=keys)
    load = dict(type='LoadAnnotations', with_bbox=True, with_mask=True)
    resize = dict(type='Resize', scale=scale, keep_ratio=True)
    train = [
        dict(type='LoadImageFromFile'), load, resize,
        dict(type='RandomFlip', prob=0.5),
        pack if meta_keys else dict(type='PackDetInputs')
    ]
    test = [dict(type='LoadImageFromFile'), resize, load, pack]
    val = dict(
        batch_size=1,
        **workers,
        dataset=dict(data_root=data_root, pipeline=test))
    ann = dict(ann_file=data_root + 'annotations/instances_val2017.json')
    return dict(
        train_dataloader=dict(
            batch_size=2,
            **workers,
            dataset=dict(data_root=data_root, pipeline=train)),
        val_dataloader=val,
        test_dataloader=val,
        val_evaluator=ann,
        test_evaluator=ann)


def ade_data(data_root: str,
             crop: int,
             workers: Optional[Dict] = None,
             flip: bool = False) -> Dict:
    """Loaders of a generated ADE20K-format set: ``train_dataloader``
    (batch 2, random ``crop`` x ``crop`` crops, random flips with
    ``flip``), ``val_`` and ``test_dataloader`` (batch 1, whole images);
    ``workers`` as for :func:`coco_data`."""
    workers = LOADER if workers is None else workers
    load = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations', reduce_zero_label=True)
    ]
    pack = [dict(type='PackSegInputs')]
    val = dict(
        batch_size=1,
        **workers,
        dataset=dict(data_root=data_root, pipeline=load + pack))
    train = load + [dict(type='RandomCrop', crop_size=(crop, crop))
                    ] + [dict(type='RandomFlip', prob=0.5)] * flip + pack
    return dict(
        train_dataloader=dict(
            batch_size=2,
            **workers,
            dataset=dict(data_root=data_root, pipeline=train)),
        val_dataloader=val,
        test_dataloader=val)
