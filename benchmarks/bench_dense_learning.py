"""Do the dense models learn? Small models trained on generated data.

Trains, through ``tools/train.py`` and ``tools/test.py`` and the real
configs (shrunk), on the COCO-format and ADE20K-format sets of
:mod:`mmlape.datasets.dense`:

- the small ViT-Adapter Mask R-CNN (96 dims, 4 layers, 3 heads, the
  dense-chain tests' shape), one run per PE join;
- a ResNet-18 Mask R-CNN (mmdet's ResNet, BN, no pretraining) with the same
  neck, heads, data, schedule and optimizer: the reference;
- the small ViT-Adapter UperNet, one run per PE join;

and prints bbox / segm mAP, box AP50 and mIoU side by side, with the wall
time of every run. ``--pretrain`` first trains a small DeiT of each join
with ``tools/train.py`` on generated data (the users' path: fine-tuning
from a pretrained DeiT) and initialises the ViT-Adapters from it.

Example:
    python benchmarks/bench_dense_learning.py --seeds 0 1
    python benchmarks/bench_dense_learning.py --models det-vit det-r18 \\
        --joins Default --epochs 12
"""
import argparse
import json
import os
import os.path as osp
import subprocess
import sys
import time

from small_dense import ARCH, adapter_backbone

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DET_BASE = 'configs/vit_adapter/mask-rcnn_vit-adapter-tiny{}_fpn_3x_coco.py'
SEG_BASE = ('configs/vit_adapter/upernet_vit-adapter-tiny{}_8xb2-160k_'
            'ade20k-512x512.py')
DEMO = 'configs/demo/deit-demo_pos-shapes.py'
LOADER = dict(num_workers=0, persistent_workers=False)
WIDTH = 64  # neck and head channels


def small_adapter(img_size=128, checkpoint=None):
    """Backbone overrides: the dense-chain tests' small ViT-Adapter
    (``small_dense``), BN in the adapter."""
    return adapter_backbone(
        img_size=img_size,
        adapter_norm_cfg=dict(type='BN'),
        init_cfg=(dict(
            type='Pretrained', checkpoint=checkpoint, prefix='backbone.')
                  if checkpoint else None))


def det_overrides(data,
                  backbone,
                  neck_in,
                  epochs,
                  lr,
                  seed,
                  batch=4,
                  milestone=None,
                  val_interval=None,
                  size=(128, 160)):
    """Overrides that shrink the Mask R-CNN config to the generated COCO
    set: 128x160 images at their own size, 64-channel neck and heads,
    AdamW, one lr step."""
    milestone = milestone or max(1, round(epochs * 0.8))
    pack = dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor', 'flip', 'flip_direction'))
    # the images' own size (a no-op resize that records scale_factor)
    resize = dict(type='Resize', scale=size[::-1], keep_ratio=True)
    train = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations', with_bbox=True, with_mask=True), resize,
        dict(type='RandomFlip', prob=0.5), pack
    ]
    test = [
        dict(type='LoadImageFromFile'), resize,
        dict(type='LoadAnnotations', with_bbox=True, with_mask=True), pack
    ]
    val_loader = dict(
        batch_size=4, **LOADER, dataset=dict(data_root=data, pipeline=test))
    evaluator = dict(ann_file=data + 'annotations/instances_val2017.json')
    w = WIDTH
    return dict(
        model=dict(
            backbone=backbone,
            neck=dict(in_channels=neck_in, out_channels=w),
            rpn_head=dict(in_channels=w, feat_channels=w),
            roi_head=dict(
                bbox_roi_extractor=dict(out_channels=w),
                bbox_head=dict(in_channels=w, fc_out_channels=2 * w),
                mask_roi_extractor=dict(out_channels=w),
                mask_head=dict(in_channels=w, conv_out_channels=w)),
            # about two objects per image: fewer proposals and RoIs than
            # COCO's settings, the same for every backbone
            train_cfg=dict(
                rpn_proposal=dict(nms_pre=1000, max_per_img=300),
                rcnn=dict(sampler=dict(num=128))),
            test_cfg=dict(rpn=dict(nms_pre=1000, max_per_img=300))),
        train_dataloader=dict(
            batch_size=batch,
            **LOADER,
            dataset=dict(data_root=data, pipeline=train)),
        val_dataloader=val_loader,
        test_dataloader=val_loader,
        val_evaluator=evaluator,
        test_evaluator=evaluator,
        optim_wrapper=dict(optimizer=dict(lr=lr)),
        train_cfg=dict(max_epochs=epochs, val_interval=val_interval or epochs),
        param_scheduler=[
            dict(
                type='LinearLR',
                start_factor=0.01,
                by_epoch=False,
                begin=0,
                end=50),
            dict(
                type='MultiStepLR',
                begin=0,
                end=epochs,
                by_epoch=True,
                milestones=[milestone],
                gamma=0.1)
        ],
        default_hooks=dict(
            checkpoint=dict(interval=val_interval or epochs, max_keep_ckpts=3),
            logger=dict(interval=10)),
        randomness=dict(seed=seed))


def r18_backbone():
    return dict(
        _delete_=True,
        type='ResNet',
        depth=18,
        num_stages=4,
        out_indices=(0, 1, 2, 3),
        frozen_stages=-1,
        norm_cfg=dict(type='BN', requires_grad=True),
        norm_eval=False,
        style='pytorch',
        init_cfg=None)


def seg_overrides(data, backbone, iters, lr, seed, crop=64):
    """Overrides that shrink the UperNet config to the generated ADE20K
    set: random ``crop`` x ``crop`` crops, sliding-window testing, a linear
    warm-up and a poly decay over ``iters``."""
    crop = (crop, crop)
    load = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations', reduce_zero_label=True)
    ]
    val_loader = dict(
        batch_size=1,
        **LOADER,
        dataset=dict(
            data_root=data, pipeline=load + [dict(type='PackSegInputs')]))
    warmup = max(1, iters // 10)
    return dict(
        model=dict(
            backbone=backbone,
            data_preprocessor=dict(size=crop),
            decode_head=dict(in_channels=[96] * 4, channels=32),
            auxiliary_head=dict(in_channels=96, channels=16),
            test_cfg=dict(
                mode='slide',
                crop_size=crop,
                stride=(crop[0] * 3 // 4, crop[1] * 3 // 4))),
        train_dataloader=dict(
            batch_size=4,
            **LOADER,
            dataset=dict(
                data_root=data,
                pipeline=load + [
                    dict(type='RandomCrop', crop_size=crop),
                    dict(type='RandomFlip', prob=0.5),
                    dict(type='PackSegInputs')
                ])),
        val_dataloader=val_loader,
        test_dataloader=val_loader,
        optim_wrapper=dict(optimizer=dict(lr=lr)),
        train_cfg=dict(max_iters=iters, val_interval=iters),
        param_scheduler=[
            dict(
                type='LinearLR',
                start_factor=0.01,
                by_epoch=False,
                begin=0,
                end=warmup),
            dict(
                type='PolyLR',
                power=1.0,
                eta_min=0.0,
                by_epoch=False,
                begin=warmup,
                end=iters)
        ],
        default_hooks=dict(
            checkpoint=dict(interval=iters, save_best=None),
            logger=dict(interval=50)),
        randomness=dict(seed=seed))


def deit_overrides(data, join, iters, seed, size=128):
    """The demo DeiT config at patch 16 on ``size`` x ``size`` images, the
    small ViT of the dense models, for ``iters`` iterations."""
    backbone = dict(
        arch=dict(ARCH, _delete_=True),
        img_size=size,
        patch_size=16,
        pe_join=dict(type=join))
    if not join_class(join).allows_cls_token:
        backbone.update(with_cls_token=False, out_type='avg_featmap')
    warmup = max(1, iters // 12)
    return dict(
        model=dict(backbone=backbone),
        train_dataloader=dict(dataset=dict(data_root=data)),
        val_dataloader=dict(dataset=dict(data_root=data)),
        test_dataloader=dict(dataset=dict(data_root=data)),
        train_cfg=dict(max_iters=iters, val_interval=iters),
        param_scheduler=[
            dict(
                type='LinearLR', start_factor=0.01, by_epoch=False,
                end=warmup),
            dict(
                type='CosineAnnealingLR',
                by_epoch=False,
                begin=warmup,
                end=iters)
        ],
        default_hooks=dict(checkpoint=dict(interval=iters)),
        randomness=dict(seed=seed))


def config_joins():
    """Joins of the runs: every registered join that has configs."""
    from mmlape.models.layers import pe_join_classes
    return list(pe_join_classes(with_configs=True))


def join_class(join):
    from mmlape.registry import PE_JOINS
    return PE_JOINS.module_dict[join]


def write_config(path, base, overrides):
    """A config that inherits ``base`` and sets ``overrides``."""
    lines = [f'_base_ = {osp.join(ROOT, base)!r}']
    lines += [f'{k} = {v!r}' for k, v in overrides.items()]
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return path


def run(args, log, threads=None):
    env = dict(os.environ, PYTHONUNBUFFERED='1', PYTHONPATH=ROOT)
    if threads:
        env['OMP_NUM_THREADS'] = str(threads)
    with open(log, 'a') as f:
        out = subprocess.run(
            [sys.executable] + args,
            cwd=ROOT,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT)
    if out.returncode:
        raise RuntimeError(f'{args[0]} failed (exit {out.returncode}); '
                           f'see {log}')


def train_and_test(config, work, threads=None):
    """Train with tools/train.py, test the last checkpoint with
    tools/test.py; the test metrics plus the wall time in seconds.
    ``threads`` sets OMP_NUM_THREADS of both (default: inherited)."""
    os.makedirs(work, exist_ok=True)
    log = osp.join(work, 'run.log')
    start = time.time()
    run(['tools/train.py', config, '--work-dir', work, '--no-validate'], log,
        threads)
    with open(osp.join(work, 'last_checkpoint')) as f:
        ckpt = f.read().strip()
    run(['tools/test.py', config, ckpt, '--work-dir', work], log, threads)
    with open(osp.join(work, 'test_metrics.json')) as f:
        metrics = json.load(f)
    metrics['wall_s'] = time.time() - start
    metrics['checkpoint'] = ckpt
    return metrics


def detection_report(config, checkpoint, num_images=16):
    """What a trained Mask R-CNN's RoI heads read, on the test images: the
    largest difference between the RoI features of its FPN outputs and of
    contiguous copies of them (non-zero when a channels-last map reaches
    mmcv's CPU RoIAlign, the cause of issue 16), and the RPN's recall at
    IoU 0.5 among its 10 and 100 best proposals."""
    import torch
    from mmdet.registry import DATASETS, MODELS
    from mmdet.structures.bbox import bbox2roi, bbox_overlaps
    from mmengine.config import Config
    from mmengine.dataset import pseudo_collate
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint

    import mmlape.hosts
    mmlape.hosts.apply()  # mmengine reads the run's checkpoint safely
    init_default_scope('mmdet')
    cfg = Config.fromfile(config)
    model = MODELS.build(cfg.model)
    load_checkpoint(model, checkpoint, map_location='cpu', logger='silent')
    model.eval()
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    data = model.data_preprocessor(
        pseudo_collate(
            [dataset[i] for i in range(min(num_images, len(dataset)))]), False)
    samples = data['data_samples']
    with torch.no_grad():
        feats = model.extract_feat(data['inputs'])
        proposals = model.rpn_head.predict(feats, samples, rescale=False)
        rois = bbox2roi([p.bboxes[:100] for p in proposals])
        extractor = model.roi_head.bbox_roi_extractor
        got = extractor(feats[:extractor.num_inputs], rois)
        want = extractor(
            [f.contiguous() for f in feats[:extractor.num_inputs]], rois)
    report = {'RoI feature error': float((got - want).abs().max())}
    total = sum(len(s.gt_instances) for s in samples)
    for k in (10, 100):
        found = sum(
            int((bbox_overlaps(s.gt_instances.bboxes, p.bboxes[:k]).max(
                1).values >= 0.5).sum()) for p, s in zip(proposals, samples))
        report[f'RPN recall@{k}'] = found / total
    return report


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--work-dir',
        default='work_dirs/bench_dense_learning',
        help='data, configs, logs and checkpoints go here')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0])
    parser.add_argument(
        '--joins',
        nargs='+',
        default=config_joins(),
        choices=config_joins(),
        help='PE joins of the ViT-Adapter runs')
    parser.add_argument(
        '--models',
        nargs='+',
        default=['det-vit', 'det-r18', 'seg-vit'],
        choices=['det-vit', 'det-r18', 'seg-vit'])
    parser.add_argument(
        '--epochs', type=int, default=12, help='Mask R-CNN epochs')
    parser.add_argument(
        '--milestone',
        type=int,
        default=None,
        help='epoch of the lr step (x0.1); defaults to 80%% of --epochs')
    parser.add_argument('--lr', type=float, default=6e-4, help='AdamW lr')
    parser.add_argument(
        '--seg-iters', type=int, default=300, help='UperNet iterations')
    parser.add_argument(
        '--seg-crop', type=int, default=64, help='UperNet crop side')
    parser.add_argument('--num-train', type=int, default=96)
    parser.add_argument('--num-val', type=int, default=16)
    parser.add_argument(
        '--pretrain',
        type=int,
        default=0,
        metavar='ITERS',
        help='first pretrain a DeiT of each join with tools/train.py for '
        'ITERS iterations (generated position-shapes set, 128x128, patch '
        '16) and initialise the ViT-Adapters from it; 0 trains from '
        'scratch')
    parser.add_argument(
        '--diagnose',
        action='store_true',
        help='after training, report for every Mask R-CNN whether its RoI '
        'features read the FPN maps correctly, and its RPN recall')
    parser.add_argument(
        '--jobs', type=int, default=1, help='runs at the same time')
    parser.add_argument(
        '--threads', type=int, default=1, help='OMP threads per run')
    return parser.parse_args(argv)


def plan(args, data, pretrained):
    """(name, config) of every run."""
    runs = []
    coco, ade = data['coco'], data['ade']
    tag = '-pretrained' if pretrained else ''
    for seed in args.seeds:
        for model in args.models:
            if model == 'det-r18':
                runs.append((f'det-r18_s{seed}', 'ResNet-18', seed,
                             DET_BASE.format(''),
                             det_overrides(
                                 coco,
                                 r18_backbone(), [64, 128, 256, 512],
                                 args.epochs,
                                 args.lr,
                                 seed,
                                 milestone=args.milestone)))
                continue
            for join in args.joins:
                backbone = small_adapter(128, pretrained.get(join))
                if model == 'det-vit':
                    base = DET_BASE.format(join_class(join).config_suffix)
                    over = det_overrides(
                        coco,
                        backbone, [96] * 4,
                        args.epochs,
                        args.lr,
                        seed,
                        milestone=args.milestone)
                else:
                    base = SEG_BASE.format(join_class(join).config_suffix)
                    over = seg_overrides(ade, backbone, args.seg_iters,
                                         args.lr, seed, args.seg_crop)
                runs.append(
                    (f'{model}-{join}{tag}_s{seed}', join, seed, base, over))
    return runs


def main(argv=None):
    from concurrent.futures import ThreadPoolExecutor

    from mmlape.datasets import (generate_ade20k, generate_coco_instances,
                                 generate_pos_shapes)
    args = parse_args(argv)
    work = osp.abspath(args.work_dir)
    data = dict(
        coco=osp.join(work, 'data', 'coco') + '/',
        ade=osp.join(work, 'data', 'ade'),
        deit=osp.join(work, 'data', 'pos_shapes'))
    generate_coco_instances(
        data['coco'], num_train=args.num_train, num_val=args.num_val)
    generate_ade20k(
        data['ade'], num_train=args.num_train, num_val=args.num_val)
    pool = ThreadPoolExecutor(args.jobs)
    pretrained = {}
    if args.pretrain:
        generate_pos_shapes(
            data['deit'], num_train=4000, num_val=400, size=128)
        joins = [j for j in args.joins]

        def pretrain(join):
            name = f'deit-{join}'
            # the demo config with the join and, without a class token, GAP
            cfg = write_config(
                osp.join(work, 'configs', name + '.py'), DEMO,
                deit_overrides(data['deit'], join, args.pretrain, 0))
            m = train_and_test(cfg, osp.join(work, name), args.threads)
            print(
                f'{name}: top-1 {m.get("accuracy/top1", float("nan")):.1f}'
                f' ({m["wall_s"]:.0f} s)',
                flush=True)
            return join, m['checkpoint']

        pretrained = dict(pool.map(pretrain, joins))
    runs = plan(args, data, pretrained)

    def one(run_):
        name, label, seed, base, over = run_
        cfg = write_config(osp.join(work, 'configs', name + '.py'), base, over)
        m = train_and_test(cfg, osp.join(work, name), args.threads)
        print(f'{name}: {m}', flush=True)
        return name, m

    results = dict(pool.map(one, runs))
    print()
    print(f'Mask R-CNN: {args.epochs} epochs, step at '
          f'{args.milestone or max(1, round(args.epochs * 0.8))}; UperNet: '
          f'{args.seg_iters} iterations; AdamW lr {args.lr}; '
          f'{args.num_train} train / {args.num_val} val images; ' +
          (f'ViT from a DeiT pretrained {args.pretrain} iterations' if args.
           pretrain else 'from scratch'))
    print('| run | seed | bbox mAP | box AP50 | segm mAP | mIoU | wall s |')
    print('|---|---|---|---|---|---|---|')
    for name, label, seed, _, _ in runs:
        m = results[name]

        def fmt(key, digits=3):
            return f'{m[key]:.{digits}f}' if key in m else '-'

        kind = name.split('_s')[0]
        print(f'| {kind} | {seed} | {fmt("coco/bbox_mAP")} | '
              f'{fmt("coco/bbox_mAP_50")} | {fmt("coco/segm_mAP")} | '
              f'{fmt("mIoU", 1)} | {m["wall_s"]:.0f} |')
    if args.diagnose:
        print()
        for name, *_ in runs:
            if name.startswith('det-'):
                report = detection_report(
                    osp.join(work, 'configs', name + '.py'),
                    results[name]['checkpoint'])
                print(name,
                      ', '.join(f'{k} {v:.3f}' for k, v in report.items()))


if __name__ == '__main__':
    main()
