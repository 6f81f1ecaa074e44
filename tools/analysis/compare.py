"""Compare PE joins and PE types as the papers do: every variant over
several seeds, tested, evaluated at other input sizes; one table per
metric with the spread.

References:
    The LaPE (ICCV 2023) and RoPE-ViT (ECCV 2024) comparisons: one recipe,
    several seeds, top-1 as mean and spread, other sizes without
    fine-tuning. The official DeiT code's ``run_with_submitit.py``.

Every valid ``--pe-join`` x ``--pe-type`` variant of BASE_CONFIG is
trained (``tools/train.py``), tested (``tools/test.py``) and evaluated at
``--resolutions`` (``tools/analysis/resolution_sweep.py``) once per seed,
in ``{work_dir}/{variant}/seed{k}`` with a ``result.json``; here, one
per GPU of a node, or as Slurm jobs through submitit. The same command
resumes. ``report.md``, ``report_{metric}.csv``, ``compare.png``:
docs/compare.md.

Example:
    python tools/analysis/compare.py configs/deit/deit-small_4xb256_in1k.py \\
        --pe-join default lape mpvg --pe-type learnable rope_mixed \\
        --seeds 3 --resolutions 160 224 320 --launcher slurm \\
        --slurm partition=gpu
"""
import csv
import datetime
import glob
import importlib
import json
import math
import os
import os.path as osp
import re
import statistics
import subprocess
import sys
import threading
import time
import traceback
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

from tools import common
from tools.common import (CfgOptionsAction, ToolParser, UsageError, fail,
                          interrupted_line, positive_int)

LAUNCHERS = ('none', 'node', 'slurm', 'submitit-local')
#: The test metrics shown, when the runs report them (else all numbers).
METRICS = ('accuracy/top1', 'mIoU', 'coco/bbox_mAP', 'coco/segm_mAP')
#: mmengine's progress lines (``Iter(train) [ 4/600]``, ``Epoch(train)
#: [3][ 100/1251]``) and resolution_sweep.py's (``demo.py 24x24: 97.50``).
PROGRESS = re.compile(r'(?:Epoch|Iter)\((train|val|test)\)\s*'
                      r'(?:\[\s*(\d+)\])?\s*\[\s*(\d+)/(\d+)\]')
SIZE_LINE = re.compile(r'^\S+ (\d+x\d+): (\S+)$')
#: A run's result, last attempt and submitit job; the sweep's plan.
RESULT, SPEC, JOB, SWEEP = 'result.json', 'spec.json', 'job.json', 'sweep.json'
#: What a run keeps of an earlier attempt with the same options.
KEPT = ('checkpoint', 'train_seconds', 'seconds_per_iter', 'images_per_s',
        'metrics', 'resolutions')
#: Slurm states of a job that has not ended.
IN_FLIGHT = ('PENDING', 'RUNNING', 'REQUEUED', 'CONFIGURING', 'COMPLETING',
             'RESIZING', 'SUSPENDED')
_LOCK = threading.Lock()
#: Reading a config through mmengine is not thread-safe (its ``ast`` parse
#: raises a spurious ``SystemError`` on CPython 3.11, gh-106905; resolving a
#: ``mmpretrain::`` base through ``pkg_resources`` a ``TypeError``): the
#: runs' threads read one at a time.
_CONFIG_LOCK = threading.Lock()


def _say(text: str) -> None:
    """Print one line whole, whichever thread prints."""
    with _LOCK:
        sys.stdout.write(text + '\n')
        sys.stdout.flush()


def welch_interval(a: Sequence[float],
                   b: Sequence[float],
                   level: float = 0.95) -> Tuple[float, float, float]:
    """``mean(a) - mean(b)`` and its ``level`` Welch t-interval (scipy's
    ``ttest_ind`` with unequal variances; ``[70, 72, 74]`` against ``[69,
    70, 71]``: 2.0 in [-2.16, 6.16]); nan bounds with one value on a side
    or no spread on either."""
    diff = statistics.fmean(a) - statistics.fmean(b)
    if min(len(a), len(b)) < 2 or max(a) == min(a) and max(b) == min(b):
        return diff, math.nan, math.nan
    from scipy import stats
    with warnings.catch_warnings():  # one side without spread: it warns
        warnings.simplefilter('ignore', RuntimeWarning)
        ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(level)
    return diff, float(ci.low), float(ci.high)


# ----------------------------------------------------------------------
# the variants
def load_config(config: str, options: Sequence[str] = ()):
    """``config`` with ``options`` (``KEY=VALUE`` strings) merged, as
    ``tools/train.py`` reads it (a malformed option: one line)."""
    parser = ToolParser(prog='compare.py')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction)
    parsed = parser.parse_args(['--cfg-options', *options] if options else [])
    return common.load_config(config, parsed.cfg_options, 'none', None)


def _quiet_build(cfg):
    """The model of ``cfg`` built on the CPU, mmengine's info lines off."""
    import logging

    from mmlape.analysis import build_from_config
    logging.disable(logging.WARNING)
    try:
        return build_from_config(cfg)[0]
    finally:
        logging.disable(logging.NOTSET)


def base_facts(cfg) -> dict:
    """What the variants need to know of the config's model, from a dry
    build (the backbone's own answers, no names compared)."""
    import inspect
    backbone = getattr(_quiet_build(cfg), 'backbone', None)
    join = getattr(backbone, 'pe_join', None)
    if join is None:
        raise UsageError(f'the backbone of "{cfg.filename}" '
                         f'({type(backbone).__name__}) has no PE join')
    custom = cfg.get('optim_wrapper', {}).get('paramwise_cfg',
                                              {}).get('custom_keys')
    return dict(
        backbone=type(backbone).__name__,
        takes=sorted(inspect.signature(type(backbone)).parameters),
        pe_setting=getattr(backbone, 'pe_setting', join.pe_type),
        with_cls_token=bool(join.with_cls_token),
        staged=bool(join.staged),
        out_type=getattr(backbone, 'out_type', None),
        classifier=cfg.model.get('type') == 'ImageClassifier',
        no_decay_keys=None if custom is None else sorted(custom))


def variants(joins: Sequence[str], pe_types: Optional[Sequence[str]],
             facts: dict) -> Tuple[List[dict], List[Tuple[str, str]]]:
    """The valid combinations of ``joins`` and ``pe_types`` (None: the
    config's own PE) on a model described by ``facts``, as ``dict(variant,
    join, pe_type, options)``, and the refused ones with the reason. The
    options set the join and the PE, drop the class token where the join
    allows none (GAP instead) and keep a new PE's parameters out of weight
    decay as the recipe keeps its own. UsageError: an unknown or repeated
    join or PE setting."""
    from mmlape.models.layers import pe_join_classes
    from mmlape.models.layers.pos_embed import (join_pe_type, parse_pe_setting,
                                                pe_type_part)
    classes = {k.lower(): (k, c) for k, c in pe_join_classes().items()}
    lowered = [j.lower() for j in joins]
    for flag, given in (('--pe-join', lowered), ('--pe-type', pe_types or [])):
        twice = sorted({g for g in given if given.count(g) > 1})
        if twice:
            raise UsageError(f'{flag} names {twice[0]} twice')
    settings = pe_types or [facts['pe_setting']]
    for setting in settings:
        try:
            parse_pe_setting(setting)
        except ValueError as err:
            raise UsageError(f'--pe-type {setting}: {err}') from None
    valid, refused = [], []
    for join in lowered:
        if join not in classes:
            raise UsageError(f'--pe-join {join}: unknown; choose from '
                             f'{sorted(classes)}')
        jname, cls = classes[join]
        for setting in settings:
            name = join + (f'_{setting}' if pe_types else '')
            pe = join_pe_type(setting)
            why = None
            if pe_types and 'pe_type' not in facts['takes']:
                why = f'{facts["backbone"]} takes no pe_type (its PE is fixed)'
            elif not cls.accepts(pe):
                why = (f'{jname} does not take pe_type {setting!r} (it takes '
                       f'{list(cls.pe_types)})')
            elif not cls.fits(pe, staged=facts['staged']):
                why = (f'{jname} does not run on a staged backbone '
                       f'({facts["backbone"]})')
            if why:
                refused.append((name, why))
                continue
            options = [f'model.backbone.pe_join.type={jname}']
            if pe_types:
                args = parse_pe_setting(setting)
                options += [
                    f'model.backbone.pe_type={args["pe_type"]}',
                    f'model.backbone.ape_type={args["ape_type"]}'
                ]
                keys = facts['no_decay_keys']
                for part in filter(None, args.values() if keys else []):
                    options += [
                        f'optim_wrapper.paramwise_cfg.custom_keys.{p}.'
                        f'decay_mult=0.0' for p in pe_type_part(part).no_decay
                        if not any(p in k for k in keys)
                    ]
            if facts['with_cls_token'] and not cls.allows_cls_token:
                options.append('model.backbone.with_cls_token=False')
                if facts['out_type'] == 'cls_token':
                    options.append('model.backbone.out_type=avg_featmap')
            valid.append(
                dict(
                    variant=name, join=jname, pe_type=setting,
                    options=options))
    return valid, refused


def plan(args) -> dict:
    """The sweep of ``args``: its variants (each checked by a dry build,
    with its parameter count), the refused ones, seeds and sizes."""
    from mmlape.utils.errors import one_line
    from tools.analysis.resolution_sweep import native_size
    config = osp.abspath(args.config)
    cfg = load_config(config, args.cfg_options)
    facts = base_facts(cfg)
    if args.resolutions and not facts['classifier']:
        raise UsageError(f'--resolutions evaluates classifiers; the model '
                         f'of "{args.config}" is {cfg.model.get("type")}')
    valid, refused = variants(args.pe_join, args.pe_type, facts)
    for v in list(valid):
        try:
            model = _quiet_build(
                load_config(config, args.cfg_options + v['options']))
        except (ValueError, TypeError, KeyError, AssertionError) as err:
            valid.remove(v)
            refused.append((v['variant'], one_line(err)))
            continue
        v['params'] = sum(p.numel() for p in model.parameters())
    if not valid:
        raise UsageError('no valid combination of --pe-join and --pe-type: ' +
                         '; '.join(f'{n}: {why}' for n, why in refused))
    names = [v['variant'] for v in valid]
    if args.baseline and args.baseline not in names:
        raise UsageError(f'--baseline {args.baseline}: not a variant of '
                         f'this sweep ({names})')
    return dict(
        config=config,
        cfg_options=list(args.cfg_options),
        variants=valid,
        refused=refused,
        seeds=list(range(args.first_seed, args.first_seed + args.seeds)),
        resolutions=sorted(args.resolutions or []),
        train_size=native_size(cfg),
        baseline=args.baseline or names[0])


def specs(sweep: dict, work_dir: str) -> List[dict]:
    """One run per variant and seed, in the sweep's order."""
    runs = [(v, s) for v in sweep['variants'] for s in sweep['seeds']]
    return [
        dict(
            v,
            seed=s,
            config=sweep['config'],
            options=v['options'] + sweep['cfg_options'] +
            [f'randomness.seed={s}'],
            resolutions=sweep['resolutions'],
            work_dir=osp.join(work_dir, v['variant'], f'seed{s}'),
            k=k,
            total=len(runs)) for k, (v, s) in enumerate(runs, 1)
    ]


# ----------------------------------------------------------------------
# one run
def progress_text(line: str) -> Optional[str]:
    """A short note of a tool's progress line (``train 4/600 loss 1.234
    0.050 s/iter eta 0:01:10``, ``sweep 24x24 top-1 97.50``), or None."""
    m = SIZE_LINE.match(line.strip())
    if m:
        return f'sweep {m.group(1)} top-1 {m.group(2)}'
    m = PROGRESS.search(line)
    if not m:
        return None
    phase, epoch, done, total = m.groups()
    text = phase + (f' epoch {epoch}' if epoch else '') + f' {done}/{total}'
    if phase != 'train':
        return text
    for key, fmt in (('loss', ' loss {:.3f}'), ('time', ' {:.3f} s/iter')):
        found = re.search(rf'\b{key}: ([\d.]+)', line)
        if found:
            text += fmt.format(float(found.group(1)))
    eta = re.search(r'eta: ((?:\d+ days?, )?[\d:]+)', line)
    return text + (f' eta {eta.group(1)}' if eta else '')


def run_tool(cmd: List[str], step: str, spec: dict,
             gpu: Optional[str]) -> None:
    """Run a tool of the repository on ``gpu`` alone (when given), its
    output kept in the run's ``{step}.out``, its progress echoed. Raises
    CalledProcessError (``cmd``: the step, ``output``: its line) if it
    fails, KeyboardInterrupt on Ctrl-C."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    if gpu is not None:
        env['CUDA_VISIBLE_DEVICES'] = gpu
    tag = f'  [{spec["variant"]}]'
    note = f'(seed {spec["seed"]}, run {spec["k"]}/{spec["total"]})'
    proc = subprocess.Popen([sys.executable, *cmd],
                            cwd=ROOT,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            text=True,
                            env=env)
    lines, last = [], None
    out = osp.join(spec['work_dir'], f'{step}.out')
    with open(out, 'w', buffering=1) as log:
        for line in proc.stdout:
            lines.append(line)
            log.write(line)
            text = progress_text(line)
            if text and text != last:
                last = text
                _say(f'{tag} {text} {note}')
    code = proc.wait()
    if code in (130, -2):
        raise KeyboardInterrupt
    if code:
        for line in lines[-20:]:
            _say(f'{tag} | {line.rstrip()}')
        said = [s.strip() for s in lines if s.strip()] or ['no output']
        errors = [s for s in said if s.startswith('error: ')]
        raise subprocess.CalledProcessError(code, step, (errors or said)[-1])


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path: str, data) -> None:
    """Write ``data`` as json, atomically (a killed writer leaves the old
    file or none, never half a file)."""
    os.makedirs(osp.dirname(path), exist_ok=True)
    tmp = f'{path}.tmp{os.getpid()}'
    with open(tmp, 'w') as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def train_speed(work_dir: str, batch_size: int) -> Tuple[float, float]:
    """Seconds per training iteration (the median logged ``time`` of the
    newest training log's ``scalars.json``) and images/s; nan when
    nothing was logged."""
    logs = glob.glob(osp.join(work_dir, '2*', 'vis_data', 'scalars.json'))
    for path in sorted(logs, reverse=True):
        with open(path) as f:
            entries = [json.loads(line) for line in f if line.strip()]
        times = [float(e['time']) for e in entries if 'loss' in e]
        if times:
            per_iter = statistics.median(times)
            return per_iter, batch_size / per_iter
    return math.nan, math.nan


def _same_run(result: Optional[dict], spec: dict) -> bool:
    return bool(result) and result.get('options') == spec['options']


def finished(spec: dict) -> Tuple[Optional[dict], str]:
    """The run's ``result.json`` if it is finished for ``spec`` (done, the
    same options, every size evaluated), else None and why it runs."""
    result = _read_json(osp.join(spec['work_dir'], RESULT))
    if result is None:
        return None, 'killed before' if osp.isdir(spec['work_dir']) else ''
    if not _same_run(result, spec):
        return None, 'its options changed'
    if result.get('status') != 'done':
        return None, 'failed before'
    missing = [
        s for s in spec['resolutions']
        if str(s) not in result.get('resolutions', {})
    ]
    return (None, f'sizes {missing} to evaluate') if missing else (result, '')


def _run_config(path: str):
    """The config a run's ``tools/train.py`` wrote, read under
    :data:`_CONFIG_LOCK`."""
    from mmengine.config import Config
    with _CONFIG_LOCK:
        return Config.fromfile(path)


def execute(spec: dict, gpu: Optional[str] = None) -> dict:
    """One run: train, test, the resolution sweep; writes its
    ``result.json`` (``status`` ``done``, or ``failed`` with the step and
    its line) and returns it. What an earlier attempt with the same
    options finished is kept, its training resumed."""
    work, config, options = spec['work_dir'], spec['config'], spec['options']
    os.makedirs(work, exist_ok=True)
    prev = _read_json(osp.join(work, RESULT))
    prev = prev if _same_run(prev, spec) and osp.isfile(
        prev.get('checkpoint', '')) else {}
    attempt = _read_json(osp.join(work, SPEC))
    _write_json(osp.join(work, SPEC), spec)
    result = {
        k: spec[k]
        for k in ('variant', 'join', 'pe_type', 'seed', 'params', 'options')
    }
    result.update({k: prev[k] for k in KEPT if k in prev})
    # tools/train.py writes the config it ran beside its checkpoints
    result.update(config=osp.join(work, osp.basename(config)), gpu=gpu)
    t0, step = time.time(), 'train'
    try:
        if 'checkpoint' not in result:
            resume = ['--resume'] if _same_run(attempt or spec, spec) else []
            run_tool([
                'tools/train.py', config, '--work-dir', work, *resume,
                '--cfg-options', *options
            ], step, spec, gpu)
            with open(osp.join(work, 'last_checkpoint')) as f:
                result['checkpoint'] = f.read().strip()
            result['train_seconds'] = time.time() - t0
            batch = _run_config(result['config']).train_dataloader
            result['seconds_per_iter'], result['images_per_s'] = train_speed(
                work, batch.batch_size)
        step = 'test'
        if 'metrics' not in result:
            run_tool([
                'tools/test.py', config, result['checkpoint'], '--work-dir',
                osp.join(work, 'test'), '--cfg-options', *options
            ], step, spec, gpu)
            with open(osp.join(work, 'test', 'test_metrics.json')) as f:
                result['metrics'] = json.load(f)
        step = 'sweep'
        sizes = result.setdefault('resolutions', {})
        missing = [str(s) for s in spec['resolutions'] if str(s) not in sizes]
        if missing:
            test_set = _run_config(result['config']).test_dataloader
            out = osp.join(work, 'sweep')
            run_tool([
                'tools/analysis/resolution_sweep.py', result['config'],
                result['checkpoint'], '--sizes', *missing, '--data',
                test_set.dataset.data_root, '--labels', spec['variant'],
                '--out-dir', out
            ], step, spec, gpu)
            with open(osp.join(out, 'resolution_sweep.csv')) as f:
                row = next(csv.DictReader(f))
            sizes.update(
                {s: float(row[s]) if row[s] else None
                 for s in missing})
        result['status'] = 'done'
    except subprocess.CalledProcessError as err:  # a tool failed
        result.update(status='failed', step=err.cmd, error=err.output)
    except (OSError, ValueError, KeyError, AttributeError) as err:  # files
        result.update(
            status='failed', step=step, error=f'{type(err).__name__}: {err}')
    result['seconds'] = time.time() - t0
    _write_json(osp.join(work, RESULT), result)
    return result


# ----------------------------------------------------------------------
# the launchers
def _left(start: float, done: int, total: int) -> str:
    """The time the sweep has left, at its pace so far."""
    if not done or done >= total:
        return ''
    left = (time.time() - start) / done * (total - done)
    return (f'; {total - done} to go, '
            f'~{datetime.timedelta(seconds=round(left))} left')


def _head(spec: dict) -> str:
    return (f'[{spec["k"]}/{spec["total"]}] {spec["variant"]} '
            f'seed {spec["seed"]}')


def _outcome(spec: dict, result: dict) -> str:
    if result.get('status') != 'done':
        return (f'{_head(spec)}: failed ({result.get("step")}): '
                f'{result.get("error")}')
    took = datetime.timedelta(seconds=round(result.get('seconds', 0)))
    metric = [
        f', {m} {result["metrics"][m]:.2f}' for m in METRICS
        if m in result['metrics']
    ][:1]
    return f'{_head(spec)}: done in {took}{"".join(metric)}'


def visible_gpus(count: Optional[int]) -> List[Optional[str]]:
    """``--launcher node``'s slots: ``count`` of the visible GPUs (default:
    all); without a GPU, ``count`` runs at a time on the CPU."""
    names = os.environ.get('CUDA_VISIBLE_DEVICES')
    if names is None:
        import torch
        names = ','.join(map(str, range(torch.cuda.device_count())))
    ids = [n.strip() for n in names.split(',') if n.strip()]
    if not ids and count is None:
        raise UsageError('--launcher node: no GPU visible; --gpus N runs N '
                         'runs at a time on the CPU')
    if ids and (count or 0) > len(ids):
        raise UsageError(f'--gpus {count}: only {len(ids)} GPUs visible')
    return ids[:count] if ids else [None] * count


def _failed(spec: dict, step: str, error: str) -> dict:
    """A run that ended outside its tools (its job, or this script), as
    its ``result.json`` records it."""
    result = {k: spec[k] for k in ('variant', 'seed', 'options')}
    result.update(status='failed', step=step, error=error)
    _write_json(osp.join(spec['work_dir'], RESULT), result)
    return result


def run_local(pending: List[dict], results: dict,
              gpus: List[Optional[str]]) -> None:
    """``--launcher none`` (one slot, ``[None]``) or ``node`` (a slot per
    GPU): one run per slot at a time, its tools seeing only its GPU. No
    run is lost unsaid: one that raises is recorded failed (its
    traceback printed), and a tool stopped by Ctrl-C stops the sweep
    (KeyboardInterrupt here once the other slots' runs end)."""
    todo, start, done, stopped = list(pending), time.time(), [], []

    def work(gpu):
        try:
            while True:
                with _LOCK:
                    if not todo:
                        return
                    spec = todo.pop(0)
                why = f' ({spec["reason"]})' if spec.get('reason') else ''
                on = f' on GPU {gpu}' if gpu is not None else ''
                _say(f'{_head(spec)}: running{on}{why}')
                try:
                    result = execute(spec, gpu)
                except Exception as err:  # a bug: the run reported failed
                    traceback.print_exc()
                    result = _failed(spec, 'compare',
                                     f'{type(err).__name__}: {err}')
                results[spec['variant'], spec['seed']] = result
                done.append(spec)
                _say(
                    _outcome(spec, result) +
                    _left(start, len(done), len(pending)))
        except KeyboardInterrupt:  # the main thread reports it
            stopped.append(gpu)

    threads = [
        threading.Thread(target=work, args=(g, ), daemon=True) for g in gpus
    ]
    for t in threads:
        t.start()
    for t in threads:  # in steps: Ctrl-C reaches this thread
        while t.is_alive():
            t.join(0.5)
    if stopped:
        raise KeyboardInterrupt


def submitit_executor(args):
    """submitit's executor for ``--launcher slurm`` (``--slurm``: its
    Slurm parameters) or ``submitit-local``: a job per run, one GPU each;
    one line without submitit (optional), Slurm or a known parameter."""
    try:
        import submitit
    except ImportError:
        raise UsageError(
            f'--launcher {args.launcher} needs submitit, an '
            f'optional dependency: pip install submitit') from None
    import torch
    cluster = 'slurm' if args.launcher == 'slurm' else 'local'
    slurm = {
        f'slurm_{k}': int(v) if v.isdigit() else v
        for k, v in (o.split('=', 1) for o in args.slurm)
    }
    try:
        executor = submitit.AutoExecutor(
            folder=osp.join(osp.abspath(args.work_dir), 'submitit', '%j'),
            cluster=cluster)
        executor.update_parameters(
            name='mmlape-compare',
            timeout_min=2800,  # as DeiT; --slurm time=MINUTES
            tasks_per_node=1,
            # the local executor gives every job the first GPU
            gpus_per_node=int(cluster == 'slurm' or torch.cuda.is_available()),
            cpus_per_task=10,  # as DeiT
            slurm_signal_delay_s=120,
            **slurm)
    except RuntimeError as err:  # submitit's: no srun, not a Slurm node
        raise UsageError(f'--launcher {args.launcher}: {err}') from None
    except NameError as err:  # submitit's: an unknown parameter
        raise UsageError(f'--slurm: {str(err).splitlines()[0]}') from None
    return executor


def _log_progress(work_dir: str) -> str:
    """The newest progress line in a run's tool output (``*.out``)."""
    outs = sorted(glob.glob(osp.join(work_dir, '*.out')), key=osp.getmtime)
    for path in reversed(outs):
        with open(path, errors='replace') as f:
            found = [t for t in map(progress_text, f) if t]
        if found:
            return found[-1]
    return 'starting'


def run_submitit(pending: List[dict], results: dict, args, executor) -> None:
    """``--launcher slurm`` / ``submitit-local``: the runs as a job array,
    a job still in Slurm from an earlier call waited for, not submitted
    again; every ``--poll`` seconds the jobs' progress from their logs."""
    import submitit
    jobs, submit = [], []
    for spec in pending:
        record = _read_json(osp.join(spec['work_dir'], JOB))
        job = record and record['cluster'] == 'slurm' and submitit.SlurmJob(
            record['folder'], record['job_id'])
        if not job or job.state not in IN_FLIGHT:  # UNKNOWN: no sacct
            submit.append(spec)
            continue
        _say(f'{_head(spec)}: still in Slurm job {job.job_id} ({job.state}); '
             f'not submitted again')
        jobs.append((spec, job))
    if submit:
        # the jobs import this module by name, from this checkout
        os.environ['PYTHONPATH'] = os.pathsep.join(
            [ROOT] + [p for p in [os.environ.get('PYTHONPATH')] if p])
        fn = importlib.import_module('tools.analysis.compare').execute
        with executor.batch():
            new = [executor.submit(fn, spec) for spec in submit]
        for spec, job in zip(submit, new):
            record = dict(
                job_id=str(job.job_id),
                cluster=executor.cluster,
                folder=str(executor.folder))
            _write_json(osp.join(spec['work_dir'], JOB), record)
            why = f' ({spec["reason"]})' if spec.get('reason') else ''
            _say(f'{_head(spec)}: submitted as job {job.job_id}{why}')
        jobs += zip(submit, new)
    if args.no_wait:
        _say(f'{len(jobs)} jobs in flight; the same command (or --report-only)'
             f' later collects them')
        return
    start, shown = time.time(), 0.
    while not all(job.done() for _, job in jobs):
        if time.time() - shown >= args.poll:
            shown = time.time()
            done = sum(job.done() for _, job in jobs)
            _say(f'[{args.launcher}] {done}/{len(jobs)} jobs done' +
                 _left(start, done, len(jobs)))
            for spec, job in jobs:
                if not job.done():
                    _say(f'  [{spec["variant"]}] seed {spec["seed"]} job '
                         f'{job.job_id} {job.state}: '
                         f'{_log_progress(spec["work_dir"])}')
        time.sleep(min(args.poll, 2.))
    for spec, job in jobs:
        try:
            result = job.result()
        except Exception as err:  # killed, timed out, preempted: reported
            from mmlape.utils.errors import one_line
            result = _failed(spec, 'job', f'job {job.job_id}: {one_line(err)}')
        results[spec['variant'], spec['seed']] = result
        _say(_outcome(spec, result))


# ----------------------------------------------------------------------
# the report
def _size_metric(size) -> str:
    return f'top-1 at {size}x{size}'


def summarize(sweep: dict, results: Dict) -> List[dict]:
    """One row per metric and variant: the values over the seeds, mean,
    std, the difference to the baseline with its 95% interval, the runs
    failed or missing, parameters, images/s (nan: not defined)."""
    nan = math.nan
    done = [r for r in results.values() if r.get('status') == 'done']
    reported = list(
        dict.fromkeys(k for r in done for k, v in r['metrics'].items()
                      if isinstance(v, (int, float))))
    metrics = [(m, 'metrics', m)
               for m in [m for m in METRICS if m in reported] or reported]
    metrics += [(_size_metric(s), 'resolutions', str(s))
                for s in sweep['resolutions']]
    rows = []
    for metric, part, key in metrics:
        group = {}
        for v in sweep['variants']:
            runs = [results.get((v['variant'], s)) for s in sweep['seeds']]
            ok = [r for r in runs if r and r.get('status') == 'done']
            values = [r[part][key] for r in ok if r[part].get(key) is not None]
            speed = [
                r['images_per_s'] for r in ok
                if math.isfinite(r['images_per_s'])
            ]
            group[v['variant']] = dict(
                v,
                metric=metric,
                values=values,
                runs=len(runs),
                failed=len(runs) - len(ok) - runs.count(None),
                missing=runs.count(None),
                images_per_s=statistics.fmean(speed) if speed else nan,
                mean=statistics.fmean(values) if values else nan,
                std=statistics.stdev(values) if len(values) > 1 else nan)
        base = group[sweep['baseline']]['values']
        for name, row in group.items():
            compared = name != sweep['baseline'] and base and row['values']
            row['diff'], row['low'], row['high'] = welch_interval(
                row['values'], base) if compared else (nan, ) * 3
        rows += group.values()
    return rows


def _num(x: float, digits: int, sign: str = '') -> str:
    return '' if x != x else f'{x:{sign}.{digits}f}'


def markdown(sweep: dict, rows: List[dict], results: Dict) -> str:
    """The report as markdown: one table per metric, then what was
    skipped, failed or is missing."""
    base, seeds = sweep['baseline'], sweep['seeds']
    out = [
        f'# PE comparison: {osp.basename(sweep["config"])}', '',
        f'{len(sweep["variants"])} variants x {len(seeds)} seed(s) '
        f'({", ".join(map(str, seeds))}): mean ± std over the seeds (sample '
        f'std); Δ: the difference of means to {base}, with its 95% Welch '
        f't-interval; images/s: training throughput from the logs.'
    ]
    for metric in dict.fromkeys(r['metric'] for r in rows):
        group = [r for r in rows if r['metric'] == metric]
        values = [x for r in group for x in r['values']]
        n = 3 if values and max(map(abs, values)) <= 1 else 2  # mAP: 0-1
        out += [
            '', f'## {metric}', '',
            f'| variant | seeds | mean ± std | Δ vs {base} | 95% CI of Δ '
            f'| params | images/s |', '|---|---|---|---|---|---|---|'
        ]
        for r in group:
            notes = [f'{r[k]} {k}' for k in ('failed', 'missing') if r[k]]
            count = f'{len(r["values"])}/{r["runs"]}' + (
                f' ({", ".join(notes)})' if notes else '')
            mean = _num(r['mean'], n) or 'n/a'
            if r['std'] == r['std']:
                mean += f' ± {_num(r["std"], n)}'
            ci = 'n/a' if r['low'] != r['low'] else (
                f'[{_num(r["low"], n, "+")}, {_num(r["high"], n, "+")}]')
            cells = [
                r['variant'], count, mean,
                _num(r['diff'], n, '+'), ci if r['diff'] == r['diff'] else '',
                f'{r["params"]:,}',
                _num(r['images_per_s'], 0)
            ]
            out.append('| ' + ' | '.join(cells) + ' |')
    if sweep['refused']:
        out += ['', 'Skipped (not a valid combination):']
        out += [f'- {name}: {why}' for name, why in sweep['refused']]
    failed = [
        f'- {v} seed {s} ({r.get("step")}): {r.get("error")}'
        for (v, s), r in results.items() if r.get('status') != 'done'
    ]
    if failed:
        out += ['', 'Failed runs:', *failed]
    missing = [
        f'{v["variant"]} seed {s}' for v in sweep['variants']
        for s in sweep['seeds'] if (v['variant'], s) not in results
    ]
    if missing:
        out += [
            '', f'Missing runs (not run, or still running): '
            f'{", ".join(missing)}'
        ]
    return '\n'.join(out) + '\n'


def csv_name(metric: str) -> str:
    """The file of ``metric``'s csv table (``accuracy/top1``:
    ``report_accuracy-top1.csv``, ``top-1 at 24x24``:
    ``report_top-1_at_24x24.csv``)."""
    return 'report_' + re.sub(r'[^\w.-]+', '_', metric.replace('/', '-')) \
        + '.csv'


def write_csv(rows: List[dict], work_dir: str) -> List[str]:
    """One csv table per metric (:func:`csv_name`), one row per variant
    (``values``: the per-seed values, ``;``-separated; empty: not
    defined); returns the files' names."""
    head = ('variant', 'join', 'pe_type', 'seeds', 'failed', 'missing', 'mean',
            'std', 'diff', 'low', 'high', 'params', 'images_per_s', 'values')
    names = []
    for metric in dict.fromkeys(r['metric'] for r in rows):
        names.append(csv_name(metric))
        with open(osp.join(work_dir, names[-1]), 'w', newline='') as f:
            writer = csv.DictWriter(f, head, extrasaction='ignore')
            writer.writeheader()
            for r in rows:
                if r['metric'] != metric:
                    continue
                writer.writerow({
                    k: '' if isinstance(v, float) and v != v else v
                    for k, v in r.items()
                } | dict(
                    seeds=len(r['values']),
                    values=';'.join(f'{x:g}' for x in r['values'])))
    return names


def report(sweep: dict, results: Dict, work_dir: str) -> str:
    """Write ``report.md``, a csv table per metric and (with sizes)
    ``compare.png`` (top-1 against size, mean ± std shaded) into
    ``work_dir``; returns the markdown."""
    rows = summarize(sweep, results)
    text = markdown(sweep, rows, results)
    with open(osp.join(work_dir, 'report.md'), 'w') as f:
        f.write(text)
    write_csv(rows, work_dir)
    sizes = sweep['resolutions']
    if sizes:
        from tools.analysis.resolution_sweep import plot
        stat = {(r['variant'], r['metric']): r for r in rows}
        names = [v['variant'] for v in sweep['variants']]
        means, stds = [], []
        for name in names:
            means.append({'train size': sweep['train_size']})
            stds.append({})
            for s in sizes:
                row = stat[name, _size_metric(s)]
                means[-1][s], stds[-1][s] = row['mean'], row['std']
        plot(
            means, names, sizes, osp.join(work_dir, 'compare.png'),
            f'{osp.basename(sweep["config"])}: mean ± std over '
            f'{len(sweep["seeds"])} seed(s)', stds)
    return text


# ----------------------------------------------------------------------
# the command
def parse_args(argv=None):
    parser = ToolParser(
        description=__doc__.split('\n\n')[0].replace('\n', ' '),
        epilog='More: docs/compare.md')
    add = parser.add_argument
    add('config', nargs='?', help='the base config (not for --report-only)')
    add('--pe-join', nargs='+', help='joins (default: those with configs)')
    add('--pe-type', nargs='+', help="PE settings (default: the config's)")
    add('--seeds', type=positive_int, default=1, help='seeds per variant')
    add('--first-seed', type=int, default=0, help='the first seed (0)')
    add('--resolutions', nargs='+', type=positive_int, help='input sides')
    add('--work-dir', default='work_dirs/compare')
    add('--baseline', help='the variant compared with (default: the first)')
    add('--launcher', choices=LAUNCHERS, default='none', help='where to run')
    add('--gpus', type=positive_int, help='node: runs at a time (all GPUs)')
    add('--slurm', nargs='+', default=[], help="submitit's Slurm KEY=VALUE")
    add('--no-wait', action='store_true', help='slurm: submit and return')
    add('--poll', type=float, default=60., help='slurm: report every POLL s')
    add('--report-only', action='store_true', help='report from --work-dir')
    add('--cfg-options', nargs='+', default=[], help='options for each run')
    args = parser.parse_args(argv)
    if not (args.config or args.report_only):
        parser.error('the base config is required (except with '
                     '--report-only)')
    bad = [o for o in args.slurm if '=' not in o]
    if bad:
        parser.error(f'--slurm expects KEY=VALUE, got "{bad[0]}"')
    if args.pe_join is None:
        from mmlape.models.layers import pe_join_classes
        args.pe_join = [n.lower() for n in pe_join_classes(with_configs=True)]
    if args.resolutions and len(set(args.resolutions)) != len(
            args.resolutions):
        parser.error(f'--resolutions repeats a size: {args.resolutions}')
    return args


def run_comparison(args) -> Tuple[dict, Dict, str]:
    """Plan, run (or with ``--report-only`` read) and report the sweep of
    ``args``: the sweep, the results by ``(variant, seed)``, the report's
    markdown. An input error ends the process with one line, status 2."""
    work_dir = osp.abspath(args.work_dir)
    with fail():
        if args.report_only:
            sweep = _read_json(osp.join(work_dir, SWEEP))
            if sweep is None:
                raise UsageError(f'--report-only: no {SWEEP} in '
                                 f'"{args.work_dir}" (not the work dir of a '
                                 f'comparison)')
            names = [v['variant'] for v in sweep['variants']]
            if args.baseline and args.baseline not in names:
                raise UsageError(f'--baseline {args.baseline}: not a variant '
                                 f'of this sweep ({names})')
            sweep['baseline'] = args.baseline or sweep['baseline']
            found = (
                _read_json(osp.join(spec['work_dir'], RESULT))
                for spec in specs(sweep, work_dir))
            results = {(r['variant'], r['seed']): r for r in found if r}
            return sweep, results, report(sweep, results, work_dir)
        executor = None
        if args.launcher in ('slurm', 'submitit-local'):
            executor = submitit_executor(args)
        gpus = visible_gpus(args.gpus) if args.launcher == 'node' else [None]
        sweep = plan(args)
    for name, why in sweep['refused']:
        _say(f'skipped {name}: {why}')
    os.makedirs(work_dir, exist_ok=True)
    _write_json(osp.join(work_dir, SWEEP), sweep)
    results, pending = {}, []
    for spec in specs(sweep, work_dir):
        result, spec['reason'] = finished(spec)
        if result is not None:
            results[spec['variant'], spec['seed']] = result
            _say(f'{_head(spec)}: read')
        else:
            pending.append(spec)
    _say(f'{len(results)} runs read, {len(pending)} to run (launcher '
         f'{args.launcher})')
    with fail(running=True):
        if args.launcher in ('none', 'node'):
            run_local(pending, results, gpus)
        elif pending:
            run_submitit(pending, results, args, executor)
        return sweep, results, report(sweep, results, work_dir)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        sweep, results, text = run_comparison(args)
    except KeyboardInterrupt:
        print(
            interrupted_line('the finished runs are kept; the same command '
                             'resumes'),
            file=sys.stderr)
        return 130
    figure = ' and compare.png' if sweep['resolutions'] else ''
    print(f'\n{text}\nwrote {osp.join(args.work_dir, "report.md")}, '
          f'report_*.csv (one per metric){figure}')
    return int(any(r.get('status') != 'done' for r in results.values()))


if __name__ == '__main__':
    sys.exit(main())
