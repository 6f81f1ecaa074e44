"""Test a checkpoint with an mmlape config (mmpretrain, mmdet or mmseg).

Prints the metrics and writes them to ``<work_dir>/test_metrics.json``.

Example:
    python tools/test.py configs/deit/deit-tiny-lape_4xb256_in1k.py \
        work_dirs/deit-tiny-lape_4xb256_in1k/epoch_300.pth
"""
import json
import os
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

from tools.common import (ToolParser, UsageError, fail, finish, load_config,
                          parse_common, setup_runner)


def parse_args(argv=None):
    parser = ToolParser(description='Test a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='where to save logs and metrics')
    parser.add_argument('--out', help='dump the predictions (.pkl)')
    parser.add_argument(
        '--show-dir',
        help='save drawn predictions under the work dir '
        'in this folder')
    return parse_common(parser, argv)


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


def main(argv=None):
    args = parse_args(argv)
    with fail():
        cfg = load_config(args.config, args.cfg_options, args.launcher,
                          args.work_dir, args.compile)
        cfg.load_from = args.checkpoint
        if args.show_dir:
            add_show_dir(cfg, args.show_dir)
        if args.out:
            if not args.out.endswith(('.pkl', '.pickle')):
                raise UsageError('--out must end with .pkl or .pickle')
            evaluator = cfg.test_evaluator
            evaluator = (
                list(evaluator)
                if isinstance(evaluator, list) else [evaluator])
            evaluator.append(dict(type='DumpResults', out_file_path=args.out))
            cfg.test_evaluator = evaluator
        runner = setup_runner(cfg, ('test', ))
        from mmlape.apis import check_checkpoint_fits
        from mmlape.engine.runner_setup import when_model_built
        when_model_built(runner, check_checkpoint_fits, args.checkpoint,
                         'checkpoint', cfg)
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
