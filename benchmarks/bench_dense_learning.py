"""Do the dense models learn? Small models trained, through
``tools/train.py`` and ``tools/test.py`` and the real configs (shrunk), on
the generated COCO- and ADE20K-format sets of :mod:`mmlape.datasets.dense`:
the small ViT-Adapter Mask R-CNN (the dense-chain tests' ViT) per PE join,
a ResNet-18 Mask R-CNN with the same neck, heads, data and schedule (the
reference) and the small ViT-Adapter UperNet per join; bbox / segm mAP,
box AP50, mIoU and each run's wall time side by side. ``--pretrain`` first
trains a small DeiT of each join and starts the ViT-Adapters from it
(docs/analysis.md reads them).

Example:
    python benchmarks/bench_dense_learning.py --seeds 0 1
    python benchmarks/bench_dense_learning.py --models det-vit det-r18 \\
        --joins Default --epochs 12
"""
import json
import os
import os.path as osp
import sys
import time

from shared import (GAP, ROOT, join_class, join_names, parser, run_tool, table,
                    write_config)
from small_dense import (ARCH, DENSE_CONFIGS, LOADER, adapter_backbone,
                         ade_data, coco_data)

DET_BASE = DENSE_CONFIGS['mask-rcnn']
SEG_BASE = DENSE_CONFIGS['upernet']
DEMO = 'configs/demo/deit-demo_pos-shapes.py'
WIDTH = 64  # neck and head channels


def small_adapter(img_size=128, checkpoint=None):
    """Backbone overrides: the dense-chain tests' small ViT-Adapter
    (``small_dense``), BN in the adapter."""
    init = dict(type='Pretrained', checkpoint=checkpoint, prefix='backbone.')
    return adapter_backbone(
        img_size=img_size,
        adapter_norm_cfg=dict(type='BN'),
        init_cfg=init if checkpoint else None)


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
    set: 128x160 images at their own size (a resize that records
    ``scale_factor``), 64-channel neck and heads, AdamW, one lr step."""
    milestone = milestone or max(1, round(epochs * 0.8))
    keys = ('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor',
            'flip', 'flip_direction')
    loaders = coco_data(data, size[::-1], LOADER, keys)
    loaders['train_dataloader']['batch_size'] = batch
    loaders['val_dataloader']['batch_size'] = 4  # and the test loader
    w, every = WIDTH, val_interval or epochs
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
        **loaders,
        optim_wrapper=dict(optimizer=dict(lr=lr)),
        train_cfg=dict(max_epochs=epochs, val_interval=every),
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
            checkpoint=dict(interval=every, max_keep_ckpts=3),
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
    loaders = ade_data(data, crop, LOADER, flip=True)
    loaders['train_dataloader']['batch_size'] = 4
    warmup, stride = max(1, iters // 10), crop * 3 // 4
    return dict(
        model=dict(
            backbone=backbone,
            data_preprocessor=dict(size=(crop, crop)),
            decode_head=dict(in_channels=[96] * 4, channels=32),
            auxiliary_head=dict(in_channels=96, channels=16),
            test_cfg=dict(
                mode='slide', crop_size=(crop, crop),
                stride=(stride, stride))),
        **loaders,
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
        backbone.update(GAP)
    warmup, loader = max(1, iters // 12), dict(dataset=dict(data_root=data))
    return dict(
        model=dict(backbone=backbone),
        train_dataloader=loader,
        val_dataloader=loader,
        test_dataloader=loader,
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


def train_and_test(config, work, threads=None):
    """Train with tools/train.py, test the last checkpoint with
    tools/test.py; the test metrics plus the wall time in seconds.
    ``threads`` sets OMP_NUM_THREADS of both (default: inherited)."""
    os.makedirs(work, exist_ok=True)
    log, start = osp.join(work, 'run.log'), time.time()
    tools = osp.join(ROOT, 'tools')
    run_tool([
        sys.executable,
        osp.join(tools, 'train.py'), config, '--work-dir', work,
        '--no-validate'
    ], log, threads, 'a')
    with open(osp.join(work, 'last_checkpoint')) as f:
        ckpt = f.read().strip()
    run_tool([
        sys.executable,
        osp.join(tools, 'test.py'), config, ckpt, '--work-dir', work
    ], log, threads, 'a')
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
    models = ['det-vit', 'det-r18', 'seg-vit']
    return parser(__doc__, (
        ('--work-dir', 'work_dirs/bench_dense_learning',
         'data, configs, logs and checkpoints go here'),
        ('--seeds', [0], None),
        ('--joins', join_names(True), 'PE joins of the ViT-Adapter runs',
         dict(choices=join_names(True))),
        ('--models', models, None, dict(choices=models)),
        ('--epochs', 12, 'Mask R-CNN epochs'),
        ('--milestone', int, 'epoch of the lr step (x0.1); defaults to 80%% '
         'of --epochs'),
        ('--lr', 6e-4, 'AdamW lr'),
        ('--seg-iters', 300, 'UperNet iterations'),
        ('--seg-crop', 64, 'UperNet crop side'),
        ('--num-train', 96, None),
        ('--num-val', 16, None),
        ('--pretrain', 0, 'first pretrain a DeiT of each join with '
         'tools/train.py for ITERS iterations (generated position-shapes '
         'set, 128x128, patch 16) and initialise the ViT-Adapters from it; '
         '0 trains from scratch', dict(metavar='ITERS')),
        ('--diagnose', False, 'after training, report for every Mask R-CNN '
         'whether its RoI features read the FPN maps correctly, and its RPN '
         'recall'),
        ('--jobs', 1, 'runs at the same time'),
        ('--threads', 1, 'OMP threads per run'),
    )).parse_args(argv)


def plan(args, data, pretrained):
    """(name, label, seed, base config, overrides) of every run."""
    runs = []
    coco, ade = data['coco'], data['ade']
    tag = '-pretrained' if pretrained else ''
    for seed in args.seeds:
        for model in args.models:
            if model == 'det-r18':
                over = det_overrides(
                    coco,
                    r18_backbone(), [64, 128, 256, 512],
                    args.epochs,
                    args.lr,
                    seed,
                    milestone=args.milestone)
                runs.append((f'det-r18_s{seed}', 'ResNet-18', seed,
                             DET_BASE.format(''), over))
                continue
            for join in args.joins:
                backbone = small_adapter(128, pretrained.get(join))
                suffix = join_class(join).config_suffix
                if model == 'det-vit':
                    base = DET_BASE.format(suffix)
                    over = det_overrides(
                        coco,
                        backbone, [96] * 4,
                        args.epochs,
                        args.lr,
                        seed,
                        milestone=args.milestone)
                else:
                    base = SEG_BASE.format(suffix)
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

        def pretrain(join):
            name = f'deit-{join}'
            # the demo config with the join and, without a class token, GAP
            cfg = write_config(
                osp.join(work, 'configs', name + '.py'), DEMO,
                deit_overrides(data['deit'], join, args.pretrain, 0))
            m = train_and_test(cfg, osp.join(work, name), args.threads)
            top1 = m.get('accuracy/top1', float('nan'))
            print(
                f'{name}: top-1 {top1:.1f} ({m["wall_s"]:.0f} s)', flush=True)
            return join, m['checkpoint']

        pretrained = dict(pool.map(pretrain, args.joins))
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
    rows = []
    for name, label, seed, _, _ in runs:
        m = results[name]
        rows.append([name.split('_s')[0], seed] + [
            f'{m[key]:.{digits}f}' if key in m else '-'
            for key, digits in (('coco/bbox_mAP', 3), ('coco/bbox_mAP_50', 3),
                                ('coco/segm_mAP', 3), ('mIoU', 1))
        ] + [f'{m["wall_s"]:.0f}'])
    print('\n'.join(
        table(('run', 'seed', 'bbox mAP', 'box AP50', 'segm mAP', 'mIoU',
               'wall s'), rows)))
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
