"""Compare PE joins and PE types over seeds: one sweep, one table.

Every valid combination of ``--pe-join`` and ``--pe-type`` on BASE_CONFIG
(a classification config) is trained with ``tools/train.py`` and tested with
``tools/test.py``, once per seed, each run in its own work dir
(``{work_dir}/{variant}/seed{k}``) with a ``result.json``. A combination the
declarations refuse (a join that acts on an absolute PE, on a rotary PE
alone) is listed in one line and skipped. The sweep resumes: a run with a
``result.json`` is read, not run again; a killed run (no ``result.json``)
runs again; a failed run is reported in the table. ``--report-only``
rebuilds the report from the work dirs alone.

The report (``report.md``, ``report.csv``): top-1 per variant as mean and
standard deviation over the seeds, the difference to ``--baseline`` (the
first variant by default) with a 95% Welch interval, parameters and the
seconds per training iteration from the logs.

Example:
    python tools/analysis/compare.py configs/demo/deit-demo_pos-shapes.py \\
        --pe-join default lape mpvg --pe-type learnable --seeds 3

Not yet here (issue 50): runs across the GPUs of a node or on Slurm, the
resolution sweep per checkpoint, the figure.
"""
import argparse
import csv
import json
import math
import os
import os.path as osp
import statistics
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

from tools.common import UsageError, fail  # noqa: E402
from tools.demo import run as run_tool  # noqa: E402

#: Two-sided 97.5% quantiles of Student's t by degrees of freedom (1..30;
#: beyond, the normal's 1.96).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(dof: float) -> float:
    """The t quantile for ``dof`` degrees of freedom (rounded down)."""
    index = max(1, int(math.floor(dof)))
    return _T975[index - 1] if index <= len(_T975) else 1.96


def mean_std(values):
    """Mean and sample standard deviation (0 for one value)."""
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else 0.0)


def welch_interval(a, b):
    """The difference of means ``mean(a) - mean(b)`` and its 95% Welch
    interval half-width (nan with fewer than two values a side)."""
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return diff, float('nan')
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, 0.0
    dof = (va + vb)**2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return diff, t975(dof) * math.sqrt(va + vb)


def variants(joins, pe_types, with_cls_token=True):
    """``(name, join, setting, cfg options)`` of each valid combination, and
    ``(name, why)`` of each refused one, from the declarations."""
    from mmlape.models.layers import pe_join_classes
    from mmlape.models.layers.pos_embed import join_pe_type, parse_pe_setting
    classes = {k.lower(): (k, c) for k, c in pe_join_classes().items()}
    valid, refused = [], []
    for join in joins:
        if join.lower() not in classes:
            raise UsageError(f'--pe-join {join}: unknown; choose from '
                             f'{sorted(classes)}')
        jname, cls = classes[join.lower()]
        for setting in pe_types:
            try:
                args = parse_pe_setting(setting)
            except ValueError as err:
                raise UsageError(f'--pe-type {setting}: {err}') from None
            name = f'{jname.lower()}_{setting}'
            if not cls.fits(join_pe_type(setting)):
                refused.append(
                    (name, f'{jname} does not take pe_type '
                     f'{setting!r} (it takes {list(cls.pe_types)})'))
                continue
            options = [
                f'model.backbone.pe_join.type={jname}',
                f'model.backbone.pe_type={args["pe_type"]}',
                f'model.backbone.ape_type={args["ape_type"]}'
                if args['ape_type'] else 'model.backbone.ape_type=None'
            ]
            if with_cls_token and not cls.allows_cls_token:
                options += [
                    'model.backbone.with_cls_token=False',
                    'model.backbone.out_type=avg_featmap'
                ]
            valid.append((name, jname, setting, options))
    return valid, refused


def seconds_per_iter(work_dir):
    """Seconds per training iteration from the newest run's log (a killed
    run before it left its own)."""
    import glob
    import re
    logs = sorted(
        glob.glob(osp.join(work_dir, '*', '*.log')), key=osp.getmtime)
    stamp = re.compile(r'^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d).*'
                       r'Iter\(train\) \[\s*(\d+)/\d+\]')
    points = []
    for line in open(logs[-1]) if logs else ():
        m = stamp.match(line)
        if m:
            points.append(
                (int(m.group(2)),
                 time.mktime(time.strptime(m.group(1), '%Y/%m/%d %H:%M:%S'))))
    if len(points) < 2:
        return float('nan')
    (i0, t0), (i1, t1) = points[0], points[-1]
    return (t1 - t0) / max(1, i1 - i0)


def run_one(config, work_dir, options, seed, tag):
    """Train and test one run; its ``result.json``."""
    from mmlape.utils.safe_load import safe_torch_load
    opts = list(options) + [f'randomness.seed={seed}']
    t0 = time.time()
    run_tool([
        sys.executable, 'tools/train.py', config, '--work-dir', work_dir,
        '--cfg-options'
    ] + opts, tag)
    with open(osp.join(work_dir, 'last_checkpoint')) as f:
        ckpt = f.read().strip()
    run_tool([
        sys.executable, 'tools/test.py', config, ckpt, '--work-dir',
        osp.join(work_dir, 'test'), '--cfg-options'
    ] + opts, tag)
    with open(osp.join(work_dir, 'test', 'test_metrics.json')) as f:
        metrics = json.load(f)
    state = safe_torch_load(ckpt, map_location='cpu')
    params = sum(v.numel() for k, v in state['state_dict'].items()
                 if not k.startswith('data_preprocessor'))
    return dict(
        status='done',
        metrics=metrics,
        params=params,
        seconds_per_iter=seconds_per_iter(work_dir),
        train_seconds=time.time() - t0)


def report(rows, baseline, metric='accuracy/top1'):
    """The markdown table and csv rows of ``rows`` (variant -> results)."""
    names = list(rows)
    base = baseline or names[0]
    base_values = [
        r['metrics'][metric] for r in rows.get(base, [])
        if r.get('status') == 'done'
    ]
    head = [
        'variant', 'seeds', f'{metric} mean', 'std', f'vs {base}', '95% CI',
        'params', 's/iter', 'failed'
    ]
    table = []
    for name in names:
        done = [r for r in rows[name] if r.get('status') == 'done']
        failed = len(rows[name]) - len(done)
        if not done:
            table.append([name, 0, '', '', '', '', '', '', failed])
            continue
        values = [r['metrics'][metric] for r in done]
        mean, std = mean_std(values)
        if name == base or not base_values:
            diff, half = '', ''
        else:
            d, h = welch_interval(values, base_values)
            diff, half = f'{d:+.2f}', (f'±{h:.2f}' if h == h else 'n/a')
        table.append([
            name,
            len(done), f'{mean:.2f}', f'{std:.2f}', diff, half,
            f'{done[0]["params"]:,}',
            f'{statistics.fmean(r["seconds_per_iter"] for r in done):.3f}',
            failed
        ])
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)] + [
        '| ' + ' | '.join(str(c) for c in row) + ' |' for row in table
    ]
    return '\n'.join(lines), [head] + table


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config')
    parser.add_argument('--pe-join', nargs='+', default=['default'])
    parser.add_argument('--pe-type', nargs='+', default=['learnable'])
    parser.add_argument('--seeds', type=int, default=1)
    parser.add_argument('--work-dir', default='work_dirs/compare')
    parser.add_argument('--baseline', help='variant to compare with')
    parser.add_argument(
        '--report-only',
        action='store_true',
        help='the report from the work dirs alone')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        default=[],
        help='key=value options for every run')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    with fail():
        if not osp.isfile(args.config):
            raise UsageError(f'config file "{args.config}" does not exist')
        if args.seeds < 1:
            raise UsageError('--seeds: 1 or more')
        valid, refused = variants(args.pe_join, args.pe_type)
        for name, why in refused:
            print(f'skipped {name}: {why}', flush=True)
        if not valid:
            raise UsageError('no valid combination of --pe-join and '
                             '--pe-type')
        if args.baseline and args.baseline not in [v[0] for v in valid]:
            raise UsageError(f'--baseline {args.baseline}: not a variant '
                             f'of this sweep ({[v[0] for v in valid]})')
    config = osp.abspath(args.config)
    rows = {}
    total = len(valid) * args.seeds
    k = 0
    for name, _, _, options in valid:
        rows[name] = []
        for seed in range(args.seeds):
            k += 1
            work = osp.abspath(osp.join(args.work_dir, name, f'seed{seed}'))
            path = osp.join(work, 'result.json')
            if osp.isfile(path):
                with open(path) as f:
                    rows[name].append(json.load(f))
                print(f'[{k}/{total}] {name} seed {seed}: read', flush=True)
                continue
            if args.report_only:
                rows[name].append(dict(status='missing'))
                continue
            print(f'[{k}/{total}] {name} seed {seed}: running', flush=True)
            try:
                result = run_one(config, work,
                                 options + list(args.cfg_options), seed,
                                 f'{k}/{total} {name} s{seed}')
            except SystemExit as err:  # the tool failed: reported
                result = dict(status='failed', error=str(err))
            result.update(variant=name, seed=seed, options=options)
            if result['status'] == 'done':
                with open(path, 'w') as f:
                    json.dump(result, f, indent=1)
            rows[name].append(result)
    text, table = report(rows, args.baseline)
    os.makedirs(args.work_dir, exist_ok=True)
    with open(osp.join(args.work_dir, 'report.md'), 'w') as f:
        f.write(text + '\n')
    with open(osp.join(args.work_dir, 'report.csv'), 'w', newline='') as f:
        csv.writer(f).writerows(table)
    print(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
