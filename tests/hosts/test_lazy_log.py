"""``LazyRuntimeInfoHook``: a training step's logged values stay on the
device until something reads them, and the message hub, the log and the
checkpoints' message hub come out as with mmengine's ``RuntimeInfoHook``."""
import collections
import copy
import glob
import json
import os
import os.path as osp
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import DEMO
from mmengine.config import Config
from mmengine.hooks import Hook, LoggerHook, RuntimeInfoHook
from mmengine.logging import MessageHub
from mmengine.runner import Runner
from torch.overrides import TorchFunctionMode

from mmlape.hosts import LazyRuntimeInfoHook
from mmlape.utils import safe_torch_load
from mmlape.utils.errors import ConfigError, InputError

pytestmark = pytest.mark.usefixtures('one_thread')

#: What reads a tensor's values into Python: on a GPU each one waits for
#: the work that makes the tensor.
READS = {
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__,
    torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__index__,
    torch.Tensor.numpy
}
#: The keys whose values are the run's timings, not the step's.
TIMINGS = ('train/time', 'train/data_time', 'val/time', 'val/data_time')


class ReadCounter(TorchFunctionMode):
    """Counts the reads of tensor values, per training iteration."""

    def __init__(self):
        super().__init__()
        self.iteration = None
        self.reads = collections.defaultdict(list)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READS and self.iteration is not None:
            self.reads[self.iteration].append(func.__name__)
        return func(*args, **(kwargs or {}))


class MarkIterations(Hook):
    priority = 'HIGHEST'

    def __init__(self, counter):
        self.counter = counter

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        self.counter.iteration = runner.iter

    def after_train(self, runner):
        self.counter.iteration = None


def demo_cfg(data,
             work_dir,
             runtime_info,
             iters=7,
             log_every=3,
             ckpt_every=5,
             clip_grad=None):
    """The demo config on the GPU configs' path (the stacked batch, mmlape's
    preprocessor with DeiT's Mixup and CutMix), tiny."""
    cfg = Config.fromfile(DEMO)
    if clip_grad is not None:
        cfg.optim_wrapper.clip_grad = clip_grad
    for split in ('train', 'val', 'test'):
        cfg[f'{split}_dataloader'].dataset.data_root = data
        cfg[f'{split}_dataloader'].collate_fn = dict(type='default_collate')
    cfg.data_preprocessor = dict(
        type='LaPEClsDataPreprocessor',
        num_classes=4,
        mean=[110., 110., 110.],
        std=[60., 60., 60.],
        to_rgb=True,
        batch_augments=dict(augments=[
            dict(type='Mixup', alpha=0.8),
            dict(type='CutMix', alpha=1.0)
        ]))
    cfg.train_dataloader.batch_size = 8
    cfg.train_cfg.max_iters = iters
    cfg.train_cfg.val_interval = iters
    cfg.param_scheduler = [
        dict(type='LinearLR', start_factor=0.1, by_epoch=False, end=iters)
    ]
    cfg.default_hooks.logger.interval = log_every
    # (a window of the interval: it starts at the last log; other windows
    # are the unit tests' below)
    cfg.log_processor.window_size = log_every
    cfg.default_hooks.checkpoint.interval = ckpt_every
    cfg.default_hooks.checkpoint.max_keep_ckpts = 3
    cfg.default_hooks.runtime_info = dict(type=runtime_info)
    cfg.work_dir = work_dir
    cfg.experiment_name = runtime_info
    return cfg


def train(cfg):
    counter = ReadCounter()
    runner = Runner.from_cfg(cfg)
    runner.register_hook(MarkIterations(counter))
    with counter:
        runner.train()
    return runner, counter


def train_lines(work_dir):
    """The log's training lines, without the timings."""
    logs = [
        osp.join(work_dir, d, f'{d}.log') for d in sorted(
            p for p in os.listdir(work_dir) if re.fullmatch(r'\d{8}_\d{6}', p))
    ]
    lines = []
    for log in logs:
        for line in open(log):
            if 'Iter(train)' in line:
                line = line.split(' - mmengine - INFO - ')[1]
                lines.append(
                    re.sub(r'\s+(eta|time|data_time): \S+( \S+)?', '',
                           line.strip()))
    return lines


def json_entries(work_dir):
    (path, ) = glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))
    with open(path) as f:
        return [json.loads(line) for line in f]


def scalars(hub_state):
    return {
        key: (buffer.data[0].tolist(), buffer.data[1].tolist())
        for key, buffer in hub_state['log_scalars'].items()
        if key not in TIMINGS
    }


def run_both(data, tmp_path_factory, **kwargs):
    runs = {}
    for hook in ('RuntimeInfoHook', 'LazyRuntimeInfoHook'):
        work = str(tmp_path_factory.mktemp(hook))
        runner, counter = train(demo_cfg(data, work, hook, **kwargs))
        runs[hook] = SimpleNamespace(runner=runner, counter=counter, work=work)
    return runs


@pytest.fixture(scope='module')
def both_runs(pos_shapes_data, tmp_path_factory):
    return run_both(pos_shapes_data, tmp_path_factory)


@pytest.fixture(scope='module')
def clipped_runs(pos_shapes_data, tmp_path_factory):
    """Gradient clipping, as Swin's recipe has it (a norm the demo's
    gradients exceed, so that it clips)."""
    return run_both(
        pos_shapes_data, tmp_path_factory, clip_grad=dict(max_norm=0.05))


def test_the_message_hub_and_the_log_are_mmengines(both_runs):
    eager, lazy = both_runs['RuntimeInfoHook'], both_runs[
        'LazyRuntimeInfoHook']
    assert isinstance(
        next(h for h in lazy.runner.hooks if isinstance(h, RuntimeInfoHook)),
        LazyRuntimeInfoHook)
    got = scalars(lazy.runner.message_hub.state_dict())
    want = scalars(eager.runner.message_hub.state_dict())
    assert got == want
    assert list(got) == list(want)  # the keys in mmengine's order too
    assert len(got['train/loss'][0]) == 7  # every iteration, in order
    # the log: iterations 3 and 6 (every 3)
    lines = train_lines(lazy.work)
    assert lines == train_lines(eager.work)
    assert [re.search(r'\[(\d+)/7\]', line).group(1)
            for line in lines] == ['3', '6']
    # scalars.json: the same entries, keys in the same order
    assert [list(entry) for entry in json_entries(lazy.work)] == \
        [list(entry) for entry in json_entries(eager.work)]


def test_a_checkpoint_between_logs_saves_every_value(both_runs):
    """Iteration 5 is saved between the logs of 3 and 6: the two values
    kept since the log are in its message hub."""
    hubs = {
        hook: safe_torch_load(osp.join(run.work, 'iter_5.pth'))['message_hub']
        for hook, run in both_runs.items()
    }
    got = scalars(hubs['LazyRuntimeInfoHook'])
    assert got == scalars(hubs['RuntimeInfoHook'])
    assert len(got['train/loss'][0]) == 5


def test_steps_between_logs_read_nothing_from_the_device(both_runs):
    """mmengine's hook reads every iteration's loss; the lazy one reads all
    that it kept, in one go, on the first iteration (its keys take their
    place in the hub), on those the logger prints (3, 6) and on the one
    whose checkpoint is saved (5)."""
    eager = both_runs['RuntimeInfoHook'].counter.reads
    lazy = both_runs['LazyRuntimeInfoHook'].counter.reads
    assert all(eager[i].count('item') >= 1 for i in range(7))
    for i in (1, 3):
        assert lazy[i] == [], (i, lazy[i])
    for i in (0, 2, 4, 5):  # runner.iter counts from 0
        assert lazy[i] == ['tolist'], (i, lazy[i])
    # the last (6) is saved, then validates: its reads follow the hand-over
    assert lazy[6][0] == 'tolist'


def test_a_clipped_norm_is_logged_as_mmengine_logs_it(clipped_runs):
    """mmengine's optimizer wrapper logs the norm it clips to with
    ``float`` on every step; kept with the step's values, it reaches the
    message hub, the log and the checkpoints the same, and the steps
    between logs read nothing."""
    eager = clipped_runs['RuntimeInfoHook']
    lazy = clipped_runs['LazyRuntimeInfoHook']
    got = scalars(lazy.runner.message_hub.state_dict())
    want = scalars(eager.runner.message_hub.state_dict())
    assert got == want
    assert list(got) == list(want)
    assert list(got)[:4] == [
        'train/base_lr', 'train/lr', 'train/grad_norm', 'train/loss'
    ]
    norms = got['train/grad_norm'][0]
    assert len(norms) == 7 and min(norms) > 0.05  # it clipped, every step
    lines = train_lines(lazy.work)
    assert lines == train_lines(eager.work) and len(lines) == 2
    assert all(' grad_norm: ' in line for line in lines)
    assert scalars(
        safe_torch_load(osp.join(lazy.work, 'iter_5.pth'))['message_hub']) \
        == scalars(
            safe_torch_load(osp.join(eager.work, 'iter_5.pth'))['message_hub'])
    reads = eager.counter.reads
    assert all(reads[i].count('__float__') == 1 for i in range(7))
    reads = lazy.counter.reads
    for i in (1, 3):
        assert reads[i] == [], (i, reads[i])
    for i in (0, 2, 4, 5):
        assert reads[i] == ['tolist'], (i, reads[i])
    # the parameters: clipped as before
    for (name, a), b in zip(lazy.runner.model.named_parameters(),
                            eager.runner.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


class FakeLoader(list):
    dataset = None


def fake_runner(hooks=(), loader_len=1000, name='test_lazy_log', window=10):
    hub = MessageHub(name)
    return SimpleNamespace(
        message_hub=hub,
        hooks=list(hooks),
        log_processor=SimpleNamespace(window_size=window),
        train_dataloader=FakeLoader(range(loader_len)),
        iter=0,
        epoch=0,
        max_epochs=1,
        max_iters=10000,
        cfg=None)


def step_outputs(i):
    return collections.OrderedDict(
        loss=torch.tensor(1.5 + i, dtype=torch.float32),
        loss_half=torch.tensor(0.1 * i, dtype=torch.float16),
        loss_bf16=torch.tensor([0.3 + i], dtype=torch.bfloat16),
        loss_double=torch.tensor(1 / 3 + i, dtype=torch.float64),
        count=torch.tensor(i, dtype=torch.int64),
        finite=torch.tensor(i % 2 == 0),
        number=0.25 * i,
        array=np.array([i], dtype=np.float32))


def run_hook(hook, runner, iters):
    hook.before_train(runner)
    for i in range(iters):
        runner.iter = i
        hook.after_train_iter(runner, i, outputs=step_outputs(i))


def hub_values(hub):
    return {
        key: [(type(v), v) for v in buffer.data[0].tolist()]
        for key, buffer in hub.log_scalars.items()
    }


def test_every_dtype_reaches_the_hub_as_item_gives_it():
    eager, lazy = fake_runner(name='eager'), fake_runner(name='lazy')
    run_hook(RuntimeInfoHook(), eager, 5)
    run_hook(LazyRuntimeInfoHook(interval=2), lazy, 5)
    # iterations 0-3 are handed over (every 2); the fifth is kept
    assert len(lazy.message_hub.log_scalars['train/loss'].data[0]) == 4
    got, want = hub_values(lazy.message_hub), hub_values(eager.message_hub)
    assert set(got) == set(want)
    for key in want:
        assert got[key] == want[key][:4], key
    # the buffers' own dtypes too (numpy keeps an int history as ints)
    for key, buffer in eager.message_hub.log_scalars.items():
        assert lazy.message_hub.log_scalars[key].data[0].dtype == \
            buffer.data[0].dtype, key


def test_flush_hands_over_what_is_kept():
    hook, runner = LazyRuntimeInfoHook(interval=10), fake_runner()
    run_hook(hook, runner, 3)
    # the first iteration's keys are new: handed over at once
    assert runner.message_hub.log_scalars['train/loss'].data[0].tolist() == [
        1.5
    ]
    hook.flush(runner)
    assert runner.message_hub.log_scalars['train/loss'].data[0].tolist() == [
        1.5, 2.5, 3.5
    ]
    hook.flush(runner)  # nothing kept: nothing added
    assert len(runner.message_hub.log_scalars['train/loss'].data[0]) == 3


def hand_overs(hook, runner, iters, outputs=None):
    """Run ``iters`` iterations; the hub's sizes after each hand-over, and
    whether every logging iteration of the runner's loggers found all its
    values there."""
    handed, complete = [], True
    hook.before_train(runner)
    for i in range(iters):
        runner.iter = i
        hook.after_train_iter(
            runner,
            i,
            outputs=outputs(i) if outputs else dict(
                loss=torch.tensor(float(i))))
        buffer = runner.message_hub.log_scalars.get('train/loss')
        size = 0 if buffer is None else len(buffer.data[0])
        if size and size not in handed:
            handed.append(size)
        if any(h.every_n_inner_iters(i, h.interval) for h in runner.hooks):
            complete &= size == i + 1
    return handed, complete


@pytest.mark.parametrize(
    'loggers, interval, iters, window, expected',
    [
        ([3], None, 10, 'epoch', [1, 3, 6, 9]),
        # (the log processor's window of 10 starts after 140 and 290)
        ([150], None, 300, 10, [1, 100, 140, 150, 200, 290, 300]),
        ([], None, 250, 10, [1, 100, 200]),
        ([4, 50], None, 60, 4,
         [1] + list(range(4, 45, 4)) + [46, 48, 50, 52, 56, 60]),
        ([10], 3, 30, 10, [1, 3, 6, 9, 10, 12, 15, 18, 20, 21, 24, 27, 30]),
    ])
def test_every_logging_iteration_finds_its_values(loggers, interval, iters,
                                                  window, expected):
    """The hook hands over on every iteration any ``LoggerHook`` logs,
    whatever its own interval (the loggers' smallest, at most 100, by
    default), and on the first."""
    hook = LazyRuntimeInfoHook(interval=interval)
    runner = fake_runner([LoggerHook(interval=i) for i in loggers],
                         window=window)
    handed, complete = hand_overs(hook, runner, iters)
    assert complete
    assert handed == expected


@pytest.mark.parametrize('window, expected', [(2, [1, 3, 5, 8, 10]),
                                              (5, [1, 5, 10]),
                                              (10, [1, 5, 10]),
                                              (7, [1, 3, 5, 8, 10]),
                                              ('epoch', [1, 5, 10])])
def test_a_logged_window_starts_at_a_hand_over(window, expected):
    """The log processor averages the last ``window`` iterations' times: the
    iteration before them hands over too, so the window is timed from a
    step that has ended (a window of whole intervals starts at a log)."""
    hook = LazyRuntimeInfoHook()
    runner = fake_runner([LoggerHook(interval=5)], window=window)
    handed, complete = hand_overs(hook, runner, 10)
    assert complete
    assert handed == expected


@pytest.mark.parametrize('ignore_last, expected', [
    (False, [1, 5, 6, 10, 11, 15, 16, 19, 20, 21, 23]),
    (True, [1, 5, 6, 10, 11, 15, 16, 20, 21, 23]),
])
def test_the_epochs_last_window_starts_at_a_hand_over(ignore_last, expected):
    """An epoch of 23 iterations logged every 5, and at its end (23) where
    the logger logs the last iterations: the window of 4 before that log
    starts after iteration 19. Where it does not, no hand-over for it."""
    hook = LazyRuntimeInfoHook()
    runner = fake_runner([LoggerHook(interval=5, ignore_last=ignore_last)],
                         loader_len=23,
                         window=4)
    handed, complete = hand_overs(hook, runner, 23)
    assert complete
    assert handed == expected


def test_keys_take_mmengines_order():
    """A key enters the hub when mmengine's hook would put it there:
    before the timer's ``time`` of its first iteration, also when it
    first appears later."""

    def outputs(i):
        out = collections.OrderedDict(loss=torch.tensor(float(i)))
        if i >= 3:
            out['loss_aux'] = torch.tensor(2. * i)
        return out

    hubs = []
    for hook in (RuntimeInfoHook(), LazyRuntimeInfoHook()):
        runner = fake_runner([LoggerHook(interval=5)],
                             name=type(hook).__name__)
        hook.before_train(runner)
        for i in range(8):
            runner.iter = i
            runner.message_hub.update_scalar('train/data_time', 0.01)
            hook.after_train_iter(runner, i, outputs=outputs(i))
            runner.message_hub.update_scalar('train/time', 0.1)
        hook.after_train(runner)
        hubs.append(runner.message_hub)
    eager, lazy = hubs
    assert list(lazy.log_scalars) == list(eager.log_scalars) == [
        'train/data_time', 'train/loss', 'train/time', 'train/loss_aux'
    ]
    for key, buffer in eager.log_scalars.items():
        assert lazy.log_scalars[key].data[0].tolist() == \
            buffer.data[0].tolist(), key


def test_the_end_of_an_epoch_hands_over():
    hook, runner = LazyRuntimeInfoHook(interval=100), fake_runner(loader_len=3)
    run_hook(hook, runner, 3)
    assert len(runner.message_hub.log_scalars['train/loss'].data[0]) == 3


def test_a_non_scalar_value_is_named_at_once():
    hook, runner = LazyRuntimeInfoHook(), fake_runner()
    hook.before_train(runner)
    with pytest.raises(
            InputError, match=r"'loss_cls' as a tensor of shape "
            r'\(2,\)'):
        hook.after_train_iter(
            runner,
            0,
            outputs=dict(loss=torch.tensor(1.), loss_cls=torch.ones(2)))


@pytest.mark.parametrize('interval', [0, -1, 2.5, True, '10'])
def test_a_bad_interval_is_refused(interval):
    with pytest.raises(ConfigError, match=re.escape(f'interval={interval!r}')):
        LazyRuntimeInfoHook(interval=interval)


def test_kept_values_hold_no_graph_and_no_later_change():
    """What is kept is a copy, without autograd history: a logged tensor
    changed in place afterwards (memory that CUDA graphs reuse, say) is
    logged as it was."""
    hook, runner = LazyRuntimeInfoHook(interval=10), fake_runner()
    hook.before_train(runner)
    hook.after_train_iter(runner, 0, outputs=dict(loss=torch.tensor(0.)))
    w = torch.ones(3, requires_grad=True)
    loss = (w * 2).sum()
    hook.after_train_iter(runner, 1, outputs=dict(loss=loss))
    (_, stacks), = hook._pending
    (stack, ) = stacks.values()
    assert stack.grad_fn is None and not stack.requires_grad
    with torch.no_grad():
        loss.add_(100.)
    hook.flush(runner)
    assert runner.message_hub.log_scalars['train/loss'].data[0].tolist() == [
        0., 6.
    ]


def test_the_hook_is_found_from_every_host_scope():
    from mmengine.registry import HOOKS, DefaultScope
    for scope in ('mmpretrain', 'mmdet', 'mmseg'):
        with DefaultScope.overwrite_default_scope(scope):
            hook = HOOKS.build(dict(type='LazyRuntimeInfoHook'))
        assert isinstance(hook, LazyRuntimeInfoHook), scope
    copy.deepcopy(hook)


# ----------------------------------------------------------------------
# values the step logs itself: log_scalar, log_clip_lazily


def clipped_wrapper(wrapper_type='OptimWrapper', lazy=True, **clip):
    from mmengine.registry import OPTIM_WRAPPERS

    from mmlape.hosts import log_clip_lazily
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    wrapper = OPTIM_WRAPPERS.build(
        dict(
            type=wrapper_type,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            clip_grad=clip or None))
    if lazy:
        log_clip_lazily(wrapper)
    return model, wrapper


def clipped_step(model, wrapper):
    x = torch.arange(8.).reshape(2, 4)
    wrapper.update_params(model(x).pow(2).sum())


@pytest.mark.parametrize('wrapper_type', ['OptimWrapper', 'AmpOptimWrapper'])
def test_a_lazy_clip_clips_and_logs_as_mmengines(wrapper_type, monkeypatch):
    """Without a lazy hook the norm goes into the hub at once, as
    mmengine's ``float``; the parameters are clipped the same."""
    from mmengine.optim.optimizer import amp_optimizer_wrapper
    monkeypatch.setattr(amp_optimizer_wrapper, 'is_cuda_available',
                        lambda: True)  # (its GradScaler is off on a CPU)
    MessageHub.get_instance('test_lazy_clip_mmengine')
    hub = MessageHub.get_current_instance()
    runs = {}
    for lazy in (False, True):
        model, wrapper = clipped_wrapper(wrapper_type, lazy, max_norm=1.0)
        assert (wrapper.clip_func is torch.nn.utils.clip_grad_norm_) != lazy
        clipped_step(model, wrapper)
        norms = hub.log_scalars['train/grad_norm'].data[0].tolist()
        runs[lazy] = (norms[-1],
                      [p.detach().clone() for p in model.parameters()])
    assert runs[True][0] == runs[False][0] > 1.0
    for a, b in zip(runs[True][1], runs[False][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_hook_rebinds_a_plain_wrappers_clip():
    """The clipping of a wrapper as mmengine builds it (no mmlape
    constructor) is rebound when the lazy hook starts training, once."""
    hook, runner = LazyRuntimeInfoHook(interval=10), fake_runner(
        name='test_lazy_clip_rebound')
    model, wrapper = clipped_wrapper(lazy=False, max_norm=1.0)
    assert wrapper.clip_func is torch.nn.utils.clip_grad_norm_
    runner.optim_wrapper = wrapper
    hook.before_train(runner)
    rebound = wrapper.clip_func
    assert rebound.__name__ == 'clip_grad_norm_and_log'
    hook.before_train(runner)  # a second start does not wrap it again
    assert wrapper.clip_func is rebound


def test_a_lazy_clip_is_kept_while_the_hook_trains():
    hook, runner = LazyRuntimeInfoHook(interval=10), fake_runner(
        name='test_lazy_clip_kept')
    model, wrapper = clipped_wrapper(max_norm=1.0)
    wrapper.message_hub = runner.message_hub
    runner.optim_wrapper = wrapper
    hook.before_train(runner)
    assert wrapper.clip_func is not torch.nn.utils.clip_grad_norm_
    norms = []
    for i in range(3):
        runner.iter = i
        with ReadCounter() as counter:
            counter.iteration = i
            clipped_step(model, wrapper)
        assert counter.reads == {}  # nothing read during the step
        norms.append(hook._step[-1][1].item())
        hook.after_train_iter(runner, i, outputs=dict(loss=torch.tensor(i)))
    # iteration 0 brought new keys (handed over); 1 and 2 are kept
    hub = runner.message_hub
    assert list(hub.log_scalars) == ['train/grad_norm', 'train/loss']
    assert len(hub.log_scalars['train/grad_norm'].data[0]) == 1
    hook.after_train(runner)
    assert hub.log_scalars['train/grad_norm'].data[0].tolist() == \
        pytest.approx(norms, rel=0, abs=0)
    assert hub.log_scalars['train/loss'].data[0].tolist() == [0, 1, 2]
    # after training, what the step logs goes in at once again
    clipped_step(model, wrapper)
    assert len(hub.log_scalars['train/grad_norm'].data[0]) == 4


def test_a_run_that_ended_in_an_error_keeps_no_other_wrappers_values():
    """A run whose training raised never reaches ``after_train``: its hook
    still keeps what its own wrapper logs, and nothing of another wrapper
    (built later, on the same message hub), whose values go in at once."""
    from mmengine.optim import OptimWrapperDict

    from mmlape.hosts.lazy_log import _optim_wrappers
    hook, runner = LazyRuntimeInfoHook(), fake_runner(
        name='test_lazy_clip_error')
    _, crashed = clipped_wrapper(max_norm=1.0)
    crashed.message_hub = runner.message_hub
    runner.optim_wrapper = crashed
    hook.before_train(runner)  # ... and the run raises: no after_train
    model, later = clipped_wrapper(max_norm=1.0)
    later.message_hub = runner.message_hub
    clipped_step(model, later)
    assert len(runner.message_hub.log_scalars['train/grad_norm'].data[0]) \
        == 1
    assert hook._step == []
    # every wrapper of an OptimWrapperDict is the run's
    both = OptimWrapperDict(a=crashed, b=later)
    assert _optim_wrappers(
        SimpleNamespace(optim_wrapper=both)) == [crashed, later]
    assert _optim_wrappers(SimpleNamespace(optim_wrapper=dict(a=1))) == []


def test_a_value_clip_and_no_clip_are_left_alone():
    _, by_value = clipped_wrapper(type='value', clip_value=1.0)
    assert by_value.clip_func is torch.nn.utils.clip_grad_value_
    _, none = clipped_wrapper()
    assert not none.clip_grad_kwargs
    assert getattr(none, 'clip_func', None) is None


@pytest.mark.parametrize('training', [True, False])
def test_log_scalar_names_a_non_scalar_at_once(training):
    from mmlape.hosts import log_scalar
    hook, runner = LazyRuntimeInfoHook(), fake_runner(
        name='test_lazy_log_scalar')
    _, wrapper = clipped_wrapper(max_norm=1.0)
    wrapper.message_hub = runner.message_hub
    runner.optim_wrapper = wrapper
    if training:
        hook.before_train(runner)
    with pytest.raises(
            InputError, match=r"'train/grad_norm' as a tensor "
            r'of shape \(3,\)'):
        log_scalar(wrapper, 'train/grad_norm', torch.ones(3))
