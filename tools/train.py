"""Train a model from an mmlape config (mmpretrain, mmdet or mmseg).

The config's ``default_scope`` decides the task. Flags follow the OpenMMLab
training scripts. Distributed runs go through ``tools/dist_train.sh``
(torchrun); without CUDA they run on CPU processes with gloo.

Example:
    python tools/train.py configs/deit/deit-tiny-lape_4xb256_in1k.py
    tools/dist_train.sh configs/deit/deit-tiny-lape_4xb256_in1k.py 8
"""
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

from tools.common import (ToolParser, UsageError, check_device, fail, finish,
                          load_config, parse_common, setup_runner)


def parse_args(argv=None):
    parser = ToolParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='where to save logs and models')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from this checkpoint; without a path, from the newest '
        'complete checkpoint in the work dir')
    parser.add_argument(
        '--amp',
        action='store_true',
        help='automatic mixed precision (needs a GPU)')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the lr with the total batch size')
    parser.add_argument(
        '--no-validate',
        action='store_true',
        help='do not evaluate during training')
    return parse_common(parser, argv)


def build_cfg(args):
    import torch
    cfg = load_config(args.config, args.cfg_options, args.launcher,
                      args.work_dir, args.compile)
    if args.amp:
        check_device()  # a GPU torch cannot use: say why, not "no GPU"
        if not torch.cuda.is_available():
            raise UsageError('--amp needs a CUDA GPU; none is available')
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg or 'base_batch_size' not in \
                cfg.auto_scale_lr:
            raise UsageError('--auto-scale-lr: the config has no '
                             'auto_scale_lr.base_batch_size')
        cfg.auto_scale_lr.enable = True
    if args.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    if args.resume == 'auto':
        from mmlape.apis import find_resume_checkpoint
        found = find_resume_checkpoint(cfg)
        if found is not None:
            cfg.resume, cfg.load_from = True, found
        else:  # nothing saved yet: the run starts as a fresh one would
            cfg.resume = False
    elif args.resume is not None:
        cfg.resume, cfg.load_from = True, args.resume
    return cfg


def check_resume(model, source, cfg, runner):
    """``--resume``: the checkpoint must be the config's model
    (:func:`mmlape.apis.checked_checkpoint`) and the run's optimizer
    settings those it was saved with (:func:`mmlape.apis.
    check_resume_optimizer`)."""
    from mmlape import apis
    ckpt = apis.checked_checkpoint(model, source, '--resume', cfg)
    apis.check_resume_optimizer(runner, ckpt, source, cfg)


def fit_load_from(model, source):
    """``load_from`` decided before the run (:func:`mmlape.apis.
    fit_load_from`): a file of another layout loads converted, one that
    fits no key is refused."""
    from mmlape import apis, hosts
    converted = apis.fit_load_from(model, source)
    if converted is not None:
        hosts.provide_checkpoint(source, converted)


def main(argv=None):
    args = parse_args(argv)
    with fail():
        cfg = build_cfg(args)
        phases = ('train', ) if args.no_validate else ('train', 'val')
        runner = setup_runner(cfg, phases)
        from mmlape.apis import note_finetune_sources
        from mmlape.hosts.runner_setup import when_model_built
        if cfg.resume and cfg.load_from:
            when_model_built(runner, check_resume, cfg.load_from, cfg, runner)
        elif cfg.load_from:
            when_model_built(runner, fit_load_from, cfg.load_from)
        note_finetune_sources(cfg)
    with fail(running=True):
        runner.train()
    finish()
    return 0


if __name__ == '__main__':
    sys.exit(main())
