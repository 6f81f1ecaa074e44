"""Test a checkpoint with an mmlape config (mmpretrain, mmdet or mmseg).

Prints the metrics and writes them to ``<work_dir>/test_metrics.json``.

Example:
    python tools/test.py configs/deit/deit-tiny-lape_4xb256_in1k.py \
        work_dirs/deit-tiny-lape_4xb256_in1k/epoch_300.pth
"""
import json
import os
import os.path as osp
import signal
import sys


def _interrupted(signum, frame):
    """Ctrl-C while the libraries load: one line, status 130."""
    print('interrupted (Ctrl-C)', file=sys.stderr)
    os._exit(130)


if __name__ == '__main__':
    signal.signal(signal.SIGINT, _interrupted)

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

from tools.common import (ToolParser, UsageError, check_output_path, fail,
                          finish, load_config, parse_common, setup_runner)


def parse_args(argv=None):
    parser = ToolParser(description='Test a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument(
        'checkpoint',
        help='checkpoint file or URL (downloaded once to the torch hub '
        'cache); .pth or .safetensors')
    parser.add_argument('--work-dir', help='where to save logs and metrics')
    parser.add_argument('--out', help='dump the predictions (.pkl)')
    parser.add_argument(
        '--show-dir',
        help='save drawn predictions under the work dir '
        'in this folder')
    parser.add_argument(
        '--tta',
        action='store_true',
        help="test-time augmentation: the config's tta_model and "
        'tta_pipeline (mmseg: multi-scale and flip), else flip '
        '(classification, detection)')
    parser.add_argument(
        '--amp',
        action='store_true',
        help='test under automatic mixed precision (fp16 on a GPU, bf16 on '
        'the CPU)')
    return parse_common(parser, argv)


#: The TTA model of each scope when the config names none, as the hosts'
#: tools default (mmdet's with instance masks carried through the merge).
TTA_MODELS = {
    'mmpretrain':
    dict(type='AverageClsScoreTTA'),
    'mmdet':
    dict(
        type='InstanceSegTTAModel',
        tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5),
                     max_per_img=100)),
}


def _innermost(dataset):
    while 'dataset' in dataset:
        dataset = dataset['dataset']
    return dataset


def use_tta(cfg):
    """Test with test-time augmentation, as the hosts' ``--tta``: the
    config's ``tta_model`` wrapping its model and its ``tta_pipeline``;
    where the config has none, flip (the test pipeline with a
    ``TestTimeAug`` of both flips before its packing step)."""
    scope = cfg.default_scope
    if 'tta_model' not in cfg:
        if scope not in TTA_MODELS:
            raise UsageError(f'--tta: the config has no tta_model (an '
                             f'{scope} config inherits one from its '
                             f'default runtime)')
        cfg.tta_model = TTA_MODELS[scope]
    dataset = cfg.test_dataloader.dataset
    if 'tta_pipeline' not in cfg:
        if scope == 'mmseg':
            raise UsageError('--tta: the config has no tta_pipeline (an '
                             "mmseg config inherits one from its dataset's "
                             'base)')
        pipeline = list(_innermost(dataset).pipeline)
        pack = dict(pipeline[-1])
        if scope == 'mmdet' and 'meta_keys' in pack:
            pack['meta_keys'] = tuple(
                pack['meta_keys']) + ('flip', 'flip_direction')
        pipeline[-1] = dict(
            type='TestTimeAug',
            transforms=[[
                dict(type='RandomFlip', prob=1.),
                dict(type='RandomFlip', prob=0.)
            ], [pack]])
        cfg.tta_pipeline = pipeline
    cfg.model = dict(**cfg.tta_model, module=cfg.model)
    _innermost(dataset).pipeline = cfg.tta_pipeline


def show_dir_folder(cfg, show_dir):
    """Where the drawings go: ``show_dir`` itself (mmpretrain, mmseg), or
    a folder of the run under the work dir (mmdet, for a relative path;
    the run's time stamp comes between)."""
    if cfg.default_scope == 'mmdet' and not osp.isabs(show_dir):
        return osp.join(cfg.work_dir, show_dir)
    return show_dir


def add_show_dir(cfg, show_dir):
    hooks = cfg.setdefault('default_hooks', {})
    vis = hooks.get('visualization')
    if not vis:
        raise UsageError('--show-dir: the config has no visualization hook')
    scope = cfg.default_scope
    if scope == 'mmpretrain':
        vis.update(enable=True, out_dir=show_dir)
    elif scope == 'mmdet':
        vis.update(draw=True, test_out_dir=show_dir)
    else:
        vis.update(draw=True)
        cfg.visualizer.save_dir = show_dir


def float32_predictions(outputs):
    """The half-precision tensors of the predictions in float32, for the
    metrics: numpy, which they convert to, has no bfloat16 (autocast on the
    CPU), and float16 boxes lose pixels."""
    import torch
    from mmengine.structures import BaseDataElement

    def cast(value):
        if isinstance(value, torch.Tensor) and value.dtype in (torch.float16,
                                                               torch.bfloat16):
            return value.float()
        if isinstance(value, BaseDataElement):
            for key, item in value.items():
                new = cast(item)
                if new is not item:
                    value.set_field(
                        new,
                        key,
                        field_type=('metainfo' if key in value.metainfo_keys()
                                    else 'data'))
        return value

    for sample in outputs:
        cast(sample)
    return outputs


def predict_in_float32(runner):
    """Cast what ``runner.model.test_step`` returns to float32."""
    model = runner.model
    test_step = model.test_step

    def float32_test_step(data):
        return float32_predictions(test_step(data))

    model.test_step = float32_test_step


def check_test_checkpoint(model, source, cfg):
    """The checkpoint must be the config's model (:func:`mmlape.apis.
    check_checkpoint_fits`; a file of another layout that the backbone's
    family reads, an official one, is converted first); the run then loads
    the state read here instead of reading the file again."""
    from mmlape import apis, hosts
    hosts.provide_checkpoint(
        source,
        apis.checked_checkpoint(
            model, source, 'checkpoint', cfg, convert=True))


def main(argv=None):
    args = parse_args(argv)
    with fail():
        cfg = load_config(args.config, args.cfg_options, args.launcher,
                          args.work_dir, args.compile)
        cfg.load_from = args.checkpoint
        if args.show_dir:
            add_show_dir(cfg, args.show_dir)
            # written only as the test ends: refused now, not after it
            check_output_path(
                args.show_dir,
                '--show-dir',
                folder=True,
                where=show_dir_folder(cfg, args.show_dir))
        if args.tta:
            use_tta(cfg)
        if args.amp:
            cfg.test_cfg = dict(cfg.get('test_cfg') or {}, fp16=True)
        if args.out:
            if not args.out.endswith(('.pkl', '.pickle')):
                raise UsageError('--out must end with .pkl or .pickle')
            check_output_path(args.out, '--out')
            evaluator = cfg.test_evaluator
            evaluator = (
                list(evaluator)
                if isinstance(evaluator, list) else [evaluator])
            evaluator.append(dict(type='DumpResults', out_file_path=args.out))
            cfg.test_evaluator = evaluator
        runner = setup_runner(cfg, ('test', ))
        if args.amp:
            predict_in_float32(runner)
        from mmlape.hosts.runner_setup import when_model_built
        when_model_built(runner, check_test_checkpoint, args.checkpoint, cfg)
    with fail(running=True):
        metrics = runner.test()
    from mmengine.dist import is_main_process
    if is_main_process():
        os.makedirs(cfg.work_dir, exist_ok=True)
        path = osp.join(cfg.work_dir, 'test_metrics.json')
        values = {k: float(v) for k, v in metrics.items()}
        with open(path, 'w') as f:
            json.dump(values, f, indent=2)
        print(json.dumps(values))
    finish()
    return 0


if __name__ == '__main__':
    sys.exit(main())
