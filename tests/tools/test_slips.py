"""Slips end in one line, before the work (issue 46).

Each slip a new user made is tried through the tools as users call them
(a subprocess on the demo config and tiny generated data): it ends with
one line on stderr that names the problem and the fix, exit status 2 (130
for Ctrl-C), no traceback, and before training or evaluation starts where
the problem can be known then (no checkpoint, no ``test_metrics.json``).
The checks that are plain functions are also tested in process.

A tool run spends most of its ~9 s importing, on one core: the runs of
the selected tests (:func:`slip_runs`) start together when the first of
them is asked for, two at a time, and each test reads its own.
"""
import os
import os.path as osp
import pickle
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import (ROOT, demo_options, one_line_error, run, tiny_backbone,
                      tool_options)
from mmengine.config import Config

from mmlape.apis import (check_resume_optimizer, check_run_values,
                         find_resume_checkpoint, is_complete_checkpoint)
from mmlape.apis.model_check import optimizer_differences
from mmlape.hosts.compile import check_compile_options, inductor_modes
from mmlape.models.checkpoint.recorded import recorded_run_config
from mmlape.utils.errors import (CheckpointError, ConfigError, InputError,
                                 UsageError)
from mmlape.utils.safe_load import safe_torch_load

sys.path.insert(0, ROOT)
from tools import common, train  # noqa: E402
from tools.convert import to_mmlape  # noqa: E402

pytestmark = pytest.mark.slow

DEMO = 'configs/demo/deit-demo_pos-shapes.py'


def tool(name: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``tools/{name}.py ARGS`` as a user does."""
    return run([sys.executable, f'tools/{name}.py', *args],
               check=False,
               timeout=600)


def one_line(out: subprocess.CompletedProcess, status: int = 2) -> str:
    """The one line on stderr of a tool that ended with ``status`` and no
    traceback."""
    both = out.stdout + out.stderr
    assert out.returncode == status, both[-3000:]
    assert 'Traceback' not in both, both[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr[-3000:]
    return lines[0]


def saved(work_dir) -> list:
    """The checkpoints in ``work_dir``."""
    if not osp.isdir(work_dir):
        return []
    return sorted(n for n in os.listdir(work_dir) if n.endswith('.pth'))


def train_args(data, work, *extra, iters=1):
    """tools/train.py's arguments: the demo on ``data``, ``iters``
    iterations of 4 images."""
    return [DEMO, '--work-dir', str(work)] + demo_options(
        data, iters, batch_size=4, warmup=1) + list(extra)


@pytest.fixture(scope='module')
def files(pos_shapes_data, tmp_path_factory):
    """The demo trained for one iteration by tools/train.py (in process),
    a Share run (the default join's keys) and its conversion without
    --config, and files of the wrong kinds."""
    work = tmp_path_factory.mktemp('trained')
    assert train.main(
        [DEMO, '--work-dir', str(work / 'default')] +
        tool_options(pos_shapes_data)) == 0
    assert train.main(
        [DEMO, '--work-dir', str(work / 'share')] +
        tool_options(pos_shapes_data, 1, 'model.backbone.pe_join.type=Share')
    ) == 0
    out = dict(
        ckpt=str(work / 'default' / 'iter_1.pth'),
        share=str(work / 'share' / 'iter_1.pth'),
        share_converted=str(work / 'share' / 'converted.pth'),
        blocker=str(work / 'a_file'),
        plain=str(work / 'plain.pkl'))
    assert to_mmlape.main(
        ['--family', 'vit', out['share'], out['share_converted']]) == 0
    open(out['blocker'], 'w').close()
    with open(out['plain'], 'wb') as f:
        pickle.dump({'state_dict': {'a': 1}}, f)
    ckpt = safe_torch_load(out['ckpt'])
    ckpt['meta'] = {k: v for k, v in ckpt['meta'].items() if k != 'cfg'}
    for name, content in (('tensor', torch.zeros(3)), ('list', [1, 2]),
                          ('unknown', {
                              'state_dict': {
                                  'foo.weight': torch.zeros(2)
                              }
                          }), ('no_cfg', ckpt)):
        out[name] = str(work / f'{name}.pth')
        torch.save(content, out[name])
    return out


#: The run-time values of item 5 and the line each ends in.
RUN_VALUES = {
    'compile.mode=turbo':
    "error: compile.mode='turbo' is not a mode of torch.compile's inductor "
    'backend; choose one of {modes} or None',
    'compile.dynamic=maybe':
    "error: compile.dynamic='maybe': expected True, False or None "
    "(torch.compile's dynamic shapes: always, never, or after a shape "
    'changes)',
    'train_cfg.val_interval=0':
    'error: train_cfg.val_interval=0: expected a positive integer '
    '(validate every N iterations or epochs); to train without validating, '
    'pass --no-validate',
    'train_dataloader.batch_size=0':
    'error: train_dataloader.batch_size=0: expected a positive integer '
    '(samples per batch on each process)',
}
#: The five paths a checkpoint file takes (item 6) and the bad file each
#: gets.
BARE_PATHS = {
    'test': 'tensor',
    '--resume': 'list',
    'load_from': 'tensor',
    'init_cfg': 'list',
    'converter': 'tensor'
}


def slip_runs(data: str, f: dict, tmp) -> dict:
    """Each case's run: ``{case: (test function, tool and arguments)}``;
    case ``c`` works in ``tmp / c``."""

    def w(case):
        return str(tmp / case)

    cases = {
        'load_from':
        ('test_load_from_that_fits_no_key_is_refused', 'train',
         *train_args(data, w('load_from'), f'load_from={f["unknown"]}')),
        'out': ('test_out_that_cannot_be_written_is_refused_before_the_test',
                'test', DEMO, f['ckpt'], '--work-dir', w('out'), '--out',
                f'{f["blocker"]}/preds/out.pkl', *demo_options(data, 1)),
        'show_dir':
        ('test_show_dir_that_cannot_be_written_is_refused_before_the_test',
         'test', DEMO, f['ckpt'], '--work-dir', w('show_dir'), '--show-dir',
         f['blocker'], *demo_options(data, 1)),
        'converted_share':
        ('test_converted_share_checkpoint_keeps_its_recorded_join', 'test',
         DEMO, f['share_converted'], '--work-dir', w('converted_share'),
         *demo_options(data, 1)),
        'converter_config':
        ('test_converter_config_checks_an_mmlape_run',
         'convert/to_mmlape', '--family', 'vit', f['share'],
         w('converter_config') + '.pth', '--config', DEMO),
        'resume_optimizer': ('test_resume_with_another_optimizer_is_refused',
                             'train', *train_args(
                                 data,
                                 w('resume_optimizer'),
                                 'optim_wrapper.optimizer.type=SGD',
                                 'optim_wrapper.optimizer.lr=0.1',
                                 iters=2), '--resume', f['ckpt']),
        'resume_groups':
        ('test_resume_with_other_parameter_groups_is_refused', 'train',
         *train_args(
             data,
             w('resume_groups'),
             'optim_wrapper.paramwise_cfg.norm_decay_mult=1.0',
             iters=2), '--resume', f['no_cfg']),
        'init_cfg':
        ('test_init_cfg_of_no_known_layout_is_one_line', 'train', *train_args(
            data, w('init_cfg'), 'model.backbone.init_cfg.type=Pretrained',
            f'model.backbone.init_cfg.checkpoint='
            f'{f["unknown"]}')),
        'plain_pickle': ('test_plain_pickle_is_named',
                         'test', DEMO, f['plain'], '--work-dir',
                         w('plain_pickle'), *demo_options(data, 1)),
        'last_checkpoint': ('test_last_checkpoint_that_is_not_text', 'train',
                            *train_args(data, w('last_checkpoint')),
                            '--resume'),
    }
    for option in RUN_VALUES:
        cases[option] = ('test_run_time_values_are_checked_at_start', 'train',
                         *train_args(data, w(option), option))
    for path, kind in BARE_PATHS.items():
        bad, work = f[kind], w(f'bare{path}')
        args = {
            'test':
            ('test', DEMO, bad, '--work-dir', work, *demo_options(data, 1)),
            'converter':
            ('convert/to_mmlape', '--family', 'vit', bad, work + '.pth'),
            '--resume': ('train', *train_args(data, work), '--resume', bad),
            'load_from':
            ('train', *train_args(data, work, f'load_from={bad}')),
            'init_cfg':
            ('train',
             *train_args(data, work, 'model.backbone.init_cfg.type=Pretrained',
                         f'model.backbone.init_cfg.checkpoint={bad}')),
        }[path]
        cases[f'bare {path}'] = ('test_bare_tensor_or_list_is_no_checkpoint',
                                 *args)
    return cases


@pytest.fixture(scope='module')
def runs(request, files, pos_shapes_data, tmp_path_factory):
    """``runs(case)``: the case's finished run and its work dir."""
    tmp = tmp_path_factory.mktemp('runs')
    # a work dir whose last_checkpoint holds bytes that are not text
    os.makedirs(tmp / 'last_checkpoint')
    with open(tmp / 'last_checkpoint' / 'last_checkpoint', 'wb') as f:
        f.write(b'\xff\xfe/iter_5.pth')
    selected = {
        item.originalname
        for item in request.session.items if item.path == request.path
    }
    with ThreadPoolExecutor(2) as pool:
        started = {
            case: pool.submit(tool, *args)
            for case, (
                test, *args) in slip_runs(pos_shapes_data, files, tmp).items()
            if test in selected
        }
        yield lambda case: (started[case].result(), tmp / case)


# ----------------------------------------------------------------------
# 1. load_from that fits no key


def test_load_from_that_fits_no_key_is_refused(runs, files):
    out, work = runs('load_from')
    line = one_line(out)
    assert line.startswith(f'error: load_from: "{files["unknown"]}" fits '
                           f'none of this model\'s keys (its keys: foo (1)')
    assert 'Convert it with tools/convert/to_mmlape.py' in line
    assert saved(work) == []  # no run from scratch


def test_load_from_that_the_fit_refuses_is_refused_before_the_run(
        files, pos_shapes_data, tmp_path, capsys):
    # Patch rows that are no square grid: refused as mmengine loaded them,
    # inside runner.train(); now before the run.
    ckpt = safe_torch_load(files['ckpt'])
    ckpt['state_dict']['backbone.pos_embed'] = torch.zeros(1, 1 + 62, 96)
    path = tmp_path / 'rows.pth'
    torch.save(ckpt, path)
    line = one_line_error(
        train.main, [DEMO, '--work-dir', str(tmp_path)] +
        tool_options(pos_shapes_data, 1, f'load_from={path}'), capsys)
    assert line == (f'error: load_from: "{path}": Checkpoint does not fit: '
                    f'after its extra rows, backbone.pos_embed has 62 patch '
                    f'rows, which is not a square grid; cannot resize it to '
                    f"this model's 8x8 grid")
    assert saved(tmp_path) == ['rows.pth']


# ----------------------------------------------------------------------
# 2. tools/test.py --out, --show-dir


def test_out_that_cannot_be_written_is_refused_before_the_test(runs, files):
    out, work = runs('out')
    blocker = files['blocker']
    assert one_line(out) == (
        f'error: --out "{blocker}/preds/out.pkl": folder "{blocker}/preds" '
        f'cannot be created: "{blocker}" is a file')
    assert not osp.exists(work / 'test_metrics.json')


def test_show_dir_that_cannot_be_written_is_refused_before_the_test(
        runs, files):
    out, work = runs('show_dir')
    blocker = files['blocker']
    assert one_line(out) == (f'error: --show-dir "{blocker}": "{blocker}" is '
                             f'a file, not a folder; choose a folder')
    assert not osp.exists(work / 'test_metrics.json')


def test_output_paths_are_checked_without_creating_anything(tmp_path):
    common.check_output_path(str(tmp_path / 'a' / 'b' / 'out.pkl'), '--out')
    common.check_output_path(str(tmp_path / 'c'), '--show-dir', folder=True)
    assert os.listdir(tmp_path) == []
    with pytest.raises(UsageError, match='is a folder; give a file name'):
        common.check_output_path(str(tmp_path), '--out')
    if osp.isdir('/sys/fs'):  # sysfs: no one may write there, root neither
        with pytest.raises(UsageError) as info:
            common.check_output_path('/sys/fs/vis', '--show-dir', folder=True)
        assert str(info.value).startswith(
            '--show-dir "/sys/fs/vis": folder "/sys/fs/vis" cannot be '
            'created: ')


# ----------------------------------------------------------------------
# 3. the converter keeps an mmlape run's recorded model


def test_converted_share_checkpoint_keeps_its_recorded_join(runs, files):
    assert safe_torch_load(files['share_converted'])['meta']['cfg'] == \
        safe_torch_load(files['share'])['meta']['cfg']
    out, work = runs('converted_share')
    assert one_line(out).startswith(
        f'error: checkpoint: "{files["share_converted"]}" was saved from '
        f"another model: model.backbone.pe_join is dict(type='Share') there "
        f"but dict(type='Default') in this config.")
    assert not osp.exists(work / 'test_metrics.json')


def test_converter_config_checks_an_mmlape_run(runs):
    out, work = runs('converter_config')
    assert one_line(out) == (
        "error: the checkpoint was saved from another model: "
        "model.backbone.pe_join is dict(type='Share') there but "
        "dict(type='Default') in this config")
    assert not osp.exists(f'{work}.pth')


def _py(value) -> str:
    """``value`` as config source (dicts as ``dict(...)``)."""
    if isinstance(value, dict):
        return 'dict(' + ', '.join(f'{k}={_py(v)}'
                                   for k, v in value.items()) + ')'
    return repr(value)


def test_converter_config_checks_every_family(tmp_path, capsys):
    """Swin too: the recorded join's options against the config's."""
    from mmlape.models import LaPESwin
    args = dict(
        arch='test-tiny',
        img_size=64,
        window_size=4,
        pad_small_map=True,
        drop_path_rate=0.,
        use_abs_pos_embed=True)
    join = dict(type='LaPE', hierarchical=False)
    backbone = LaPESwin(pe_join=join, **args)
    src = tmp_path / 'swin.pth'
    model = dict(backbone=dict(type='LaPESwin', pe_join=join, **args))
    torch.save(
        {
            'state_dict': {
                f'backbone.{k}': v
                for k, v in backbone.state_dict().items()
            },
            'meta': {
                'cfg': f'model = {_py(model)}\n'
            }
        }, src)
    config, dst = tmp_path / 'swin_config.py', str(tmp_path / 'out.pth')
    model['backbone']['pe_join'] = dict(type='LaPE', hierarchical=True)
    config.write_text(f'model = {_py(model)}\n')
    argv = ['--family', 'swin', str(src), dst, '--config', str(config)]
    assert to_mmlape.main(argv) == 2
    assert capsys.readouterr().err == (
        "error: the checkpoint was saved from another model: "
        "model.backbone.pe_join is dict(type='LaPE', hierarchical=False) "
        "there but dict(type='LaPE', hierarchical=True) in this config\n")
    assert not osp.exists(dst)
    model['backbone']['pe_join'] = join
    config.write_text(f'model = {_py(model)}\n')
    assert to_mmlape.main(argv) == 0
    assert 'hierarchical=False' in safe_torch_load(dst)['meta']['cfg']


def test_only_an_mmlape_run_s_config_is_kept():
    mmlape_run = "model = dict(backbone=dict(type='LaPEViT'))"
    other = "model = dict(backbone=dict(type='VisionTransformer'))"
    assert recorded_run_config({'meta': {'cfg': mmlape_run}}) == mmlape_run
    assert recorded_run_config({'meta': {'cfg': other}}) is None
    assert recorded_run_config({'state_dict': {}}) is None


# ----------------------------------------------------------------------
# 4. --resume with other optimizer settings


def test_resume_with_another_optimizer_is_refused(runs, files):
    out, work = runs('resume_optimizer')
    ckpt = files['ckpt']
    assert one_line(out) == (
        f'error: --resume: "{ckpt}" was saved with other optimizer '
        f"settings: optim_wrapper.optimizer.type is 'AdamW' there but 'SGD' "
        f'in this config. A run resumes with the optimizer it was saved '
        f'with; to train on with these settings, start a new run from its '
        f'weights instead: --cfg-options load_from={ckpt} (without '
        f'--resume)')
    assert saved(work) == []


def test_resume_with_other_parameter_groups_is_refused(runs, files):
    # A file that records no config: the groups tell, as the run resumes.
    out, work = runs('resume_groups')
    ckpt = files['no_cfg']
    line = one_line(out)
    assert line.startswith(
        f'error: --resume: "{ckpt}" holds the optimizer state of 3 '
        f'parameter group(s) of ')
    assert 'the optimizer of this config has 4 parameter group(s)' in line
    assert line.endswith(f'--cfg-options load_from={ckpt} (without '
                         f'--resume)')
    assert saved(work) == []


def test_optimizer_differences_name_what_changed():
    adamw = dict(
        optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05, fused=True),
        paramwise_cfg=dict(custom_keys={'.pos_embed': dict(decay_mult=0.)}))
    assert optimizer_differences(adamw, adamw) == []
    # the class's defaults count; fused only picks an implementation
    same = dict(
        optimizer=dict(
            type='AdamW', lr=0.002, weight_decay=0.05, betas=[0.9, 0.999]),
        paramwise_cfg=dict(custom_keys={'.pos_embed': dict(decay_mult=0.)}),
        constructor='DefaultOptimWrapperConstructor')
    assert optimizer_differences(adamw, same) == []
    other = dict(
        optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
        paramwise_cfg=dict(custom_keys={'.pos_embed': dict(decay_mult=1.)}),
        constructor='LaPEOptimWrapperConstructor')
    assert optimizer_differences(adamw, other) == [
        ('optim_wrapper.optimizer.lr', '0.002', '0.001'),
        ('optim_wrapper.constructor', "'DefaultOptimWrapperConstructor'",
         "'LaPEOptimWrapperConstructor'"),
        ("optim_wrapper.paramwise_cfg.custom_keys['.pos_embed'].decay_mult",
         '0.0', '1.0')
    ]
    # another type: named alone (its arguments differ with it)
    sgd = dict(adamw, optimizer=dict(type='SGD', lr=0.1))
    assert optimizer_differences(adamw, sgd) == [
        ('optim_wrapper.optimizer.type', "'AdamW'", "'SGD'")
    ]


class _Runner:
    """What check_resume_optimizer uses of a runner: an optimizer wrapper
    of groups of ``sizes`` parameters, and ``resume``."""

    def __init__(self, sizes):
        from mmengine.optim import OptimWrapper
        params = [torch.nn.Parameter(torch.zeros(1)) for _ in range(5)]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        groups = [dict(params=params[s:s + n]) for s, n in zip(starts, sizes)]
        self.optim_wrapper = OptimWrapper(torch.optim.SGD(groups, 0.1))
        self.resumed = []

    def resume(self, filename):
        self.resumed.append(filename)


def test_resume_checks_the_parameter_groups_as_the_runner_resumes():
    cfg = Config(dict(optim_wrapper=dict(optimizer=dict(type='SGD', lr=.1))))
    state = dict(param_groups=[dict(params=[0, 1]), dict(params=[2, 3, 4])])
    runner = _Runner([2, 3])
    check_resume_optimizer(runner, dict(optimizer=state), 'a.pth', cfg)
    runner.resume('a.pth')
    assert runner.resumed == ['a.pth']
    runner = _Runner([5])
    check_resume_optimizer(runner, dict(optimizer=state), 'a.pth', cfg)
    with pytest.raises(CheckpointError) as info:
        runner.resume('a.pth')
    assert str(info.value).startswith(
        '--resume: "a.pth" holds the optimizer state of 2 parameter '
        'group(s) of 2, 3 parameters, the optimizer of this config has 1 '
        'parameter group(s) of 5 parameters')
    assert runner.resumed == []


# ----------------------------------------------------------------------
# 5. values that torch or mmengine refuse only at run time


@pytest.mark.parametrize('option', list(RUN_VALUES))
def test_run_time_values_are_checked_at_start(option, runs):
    out, work = runs(option)
    assert one_line(out) == RUN_VALUES[option].format(modes=inductor_modes())
    assert saved(work) == []


def test_compile_options_as_torch_takes_them():
    check_compile_options(mode='max-autotune', dynamic=None)
    check_compile_options(backend='aot_eager', mode='turbo')  # torch: ignored
    for dynamic in ('maybe', 1, 0.0):
        with pytest.raises(ConfigError, match='compile.dynamic='):
            check_compile_options(dynamic=dynamic)
    with pytest.raises(ConfigError, match="compile.mode='turbo'"):
        check_compile_options(mode='turbo')


def test_run_values_are_checked_for_the_phases_that_run():
    cfg = Config(
        dict(
            train_cfg=dict(val_interval=0),
            train_dataloader=dict(batch_size=2),
            val_dataloader=dict(batch_size=0),
            val_cfg=None,
            test_dataloader=dict(batch_size=None)))
    # no validation (--no-validate): neither interval nor val batch size
    check_run_values(cfg, ('train', 'val'))
    check_run_values(cfg, ('test', ))  # None: the host's to take
    cfg.val_cfg = dict()
    with pytest.raises(ConfigError, match='val_dataloader.batch_size=0'):
        check_run_values(cfg, ('train', 'val'))
    cfg.val_dataloader.batch_size = 1
    with pytest.raises(ConfigError, match='train_cfg.val_interval=0'):
        check_run_values(cfg, ('train', 'val'))
    cfg.train_dataloader.batch_size = 2.5
    with pytest.raises(ConfigError, match='batch_size=2.5'):
        check_run_values(cfg, ('train', ))


# ----------------------------------------------------------------------
# 6. a bare tensor or a list, on each path


@pytest.mark.parametrize('path', list(BARE_PATHS))
def test_bare_tensor_or_list_is_no_checkpoint(path, runs, files):
    out, work = runs(f'bare {path}')
    kind = BARE_PATHS[path]
    what = 'a list' if kind == 'list' else 'a single tensor of shape (3,)'
    purpose = f'{path}: ' if path in ('--resume', 'load_from') else ''
    assert one_line(out) == (
        f'error: {purpose}checkpoint "{files[kind]}" holds {what}, not a '
        f'checkpoint (a dict of tensors, or one with a "state_dict"); save '
        f"the model's state_dict() instead")
    assert saved(work) == [] and not osp.exists(f'{work}.pth')


# ----------------------------------------------------------------------
# 7. init_cfg with a file of no known layout


def test_init_cfg_of_no_known_layout_is_one_line(runs, files):
    # read while the runner initialises the weights, inside runner.train()
    out, work = runs('init_cfg')
    assert one_line(out).startswith(
        f'error: Checkpoint "{files["unknown"]}": Not a ViT checkpoint '
        f'mmlape knows: expected keys like "blocks.0.norm1.weight"')
    assert saved(work) == []


def test_checkpoint_family_refusals_are_input_errors(tmp_path):
    backbone = tiny_backbone('vit', 'Default')
    path = tmp_path / 'unknown.pth'
    torch.save({'state_dict': {'foo.weight': torch.zeros(2)}}, path)
    with pytest.raises(CheckpointError) as info:
        backbone.load_pretrained(str(path))
    assert isinstance(info.value, (InputError, ValueError))
    # a PE whose patch rows are no square grid: refused by the fit
    state = dict(tiny_backbone('vit', 'Default').state_dict())
    state['pos_embed'] = torch.zeros(1, 1 + 14, 64)
    torch.save({'state_dict': state}, path)
    with pytest.raises(CheckpointError, match='not a square grid'):
        backbone.load_pretrained(str(path))


# ----------------------------------------------------------------------
# 8. a plain pickle


def test_plain_pickle_is_named(runs, files):
    out, work = runs('plain_pickle')
    assert one_line(out) == (
        f'error: checkpoint "{files["plain"]}" cannot be read: it is a plain '
        f'Python pickle (pickle.dump), not a PyTorch checkpoint; save the '
        f'tensors with torch.save (or safetensors) instead')
    assert not osp.exists(work / 'test_metrics.json')


# ----------------------------------------------------------------------
# 9. a last_checkpoint that is not text


def test_last_checkpoint_that_is_not_text(runs):
    out, work = runs('last_checkpoint')
    assert one_line(out) == (
        f'error: --resume: "{work}/last_checkpoint" cannot be read (byte '
        f"b'\\xff' at 0 is not utf-8 text); it should hold the path of the "
        f'checkpoint to resume, and "{work}" has no complete checkpoint. '
        f'Delete it to start from the beginning, or pass a checkpoint '
        f'(--resume PATH)')
    assert saved(work) == []


def test_unreadable_last_checkpoint_beside_a_complete_one(files, tmp_path):
    shutil.copy(files['ckpt'], tmp_path / 'iter_1.pth')
    (tmp_path / 'last_checkpoint').write_bytes(b'\xff')
    cfg = Config(
        dict(
            work_dir=str(tmp_path),
            default_hooks=dict(checkpoint=dict(by_epoch=False))))
    assert find_resume_checkpoint(cfg) == str(tmp_path / 'iter_1.pth')


# ----------------------------------------------------------------------
# Ctrl-C


def test_ctrl_c_ends_in_one_line_with_status_130(pos_shapes_data, tmp_path):
    # Ctrl-C in a terminal: SIGINT to the tool and its DataLoader workers
    work = tmp_path / 'w'
    log = tmp_path / 'stdout.txt'
    args = [sys.executable, 'tools/train.py'] + train_args(
        pos_shapes_data,
        work,
        'default_hooks.checkpoint.interval=1',
        'default_hooks.checkpoint.max_keep_ckpts=3',
        'train_dataloader.num_workers=2',
        'train_dataloader.persistent_workers=True',
        iters=500)
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1')
    errors = tmp_path / 'stderr.txt'
    with open(log, 'w') as out, open(errors, 'w') as err:
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=out,
            stderr=err,
            env=env,
            start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while 'Saving checkpoint at 2 iterations' not in log.read_text():
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, 'training never started'
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
            time.sleep(1)  # what the workers would still write
        finally:
            if proc.poll() is None:
                proc.kill()
    err = errors.read_text()
    both = log.read_text() + err
    assert proc.returncode == 130, both[-3000:]
    assert 'Traceback' not in both
    assert [line for line in err.splitlines() if line.strip()] == [
        f'interrupted (Ctrl-C): the checkpoints saved in "{work}" are '
        f'whole; --resume continues from the newest'
    ]
    kept = saved(work)
    assert {'iter_1.pth', 'iter_2.pth'} & set(kept), kept
    for name in kept:
        path = str(work / name)
        assert is_complete_checkpoint(path)
        assert 'state_dict' in safe_torch_load(path)
