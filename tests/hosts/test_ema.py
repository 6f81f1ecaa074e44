"""``LaPEExponentialMovingAverage``: mmengine's moving average of a model
updated with one multi-tensor operation. Every averaged tensor equals
mmengine's bit for bit, step by step, with and without averaged buffers
and at an interval; the checkpoint is mmengine's; one operation updates
all the parameters; and T2T-ViT's configs keep mmpretrain's EMA settings.
"""
import copy
import os.path as osp

import pytest
import torch
import torch.nn as nn
from conftest import ROOT
from mmengine.config import Config
from mmengine.model import ExponentialMovingAverage
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from mmlape.hosts.ema import LaPEExponentialMovingAverage


class Ops(TorchDispatchMode):
    """The names of the ATen operations dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _model(seed=0):
    """Parameters of several shapes, a float and an integer buffer."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(),
        nn.Linear(4 * 4 * 4, 5), nn.LayerNorm(5))


def _train_a_little(model, gen):
    """New parameter and buffer values, as a training step leaves them."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen))
        bn = model[1]
        bn.running_mean.add_(torch.randn(4, generator=gen))
        bn.num_batches_tracked += 1


@pytest.mark.parametrize('update_buffers', [False, True])
@pytest.mark.parametrize('interval', [1, 3])
def test_equal_to_mmengine_bit_for_bit(update_buffers, interval):
    model = _model()
    kwargs = dict(
        momentum=0.3, interval=interval, update_buffers=update_buffers)
    host = ExponentialMovingAverage(model, **kwargs)
    ours = LaPEExponentialMovingAverage(model, **kwargs)
    gen = torch.Generator().manual_seed(1)
    for step in range(7):
        _train_a_little(model, gen)
        host.update_parameters(model)
        ours.update_parameters(model)
        a, b = host.state_dict(), ours.state_dict()
        assert list(a) == list(b)
        for key in a:
            assert a[key].dtype == b[key].dtype, key
            assert torch.equal(a[key], b[key]), (step, key)
    # the average moved away from the first copy, and not onto the model
    weight = ours.module[0].weight
    assert not torch.equal(weight, model[0].weight)
    assert int(ours.steps) == 7


@pytest.mark.parametrize('momentum', [4e-5, 0.3])
def test_a_momentum_set_later_is_followed(momentum):
    """The T2T-ViT momentum too; a momentum changed between updates (as a
    hook may) is the one the next update uses, as in mmengine."""
    model = _model()
    host = ExponentialMovingAverage(model, momentum=0.1)
    ours = LaPEExponentialMovingAverage(model, momentum=0.1)
    gen = torch.Generator().manual_seed(2)
    for step in range(4):
        if step == 2:
            host.momentum = ours.momentum = momentum
        _train_a_little(model, gen)
        host.update_parameters(model)
        ours.update_parameters(model)
        for key, value in host.state_dict().items():
            assert torch.equal(value, ours.state_dict()[key]), (step, key)


def test_one_operation_updates_every_parameter():
    model = _model()
    host = ExponentialMovingAverage(model, momentum=0.1)
    ours = LaPEExponentialMovingAverage(model, momentum=0.1)
    host.update_parameters(model)  # the first step copies
    ours.update_parameters(model)
    with Ops() as host_ops:
        host.update_parameters(model)
    with Ops() as our_ops:
        ours.update_parameters(model)
    params = len(list(model.parameters()))
    assert host_ops.names.count('lerp_.Scalar') == params == 8
    assert our_ops.names.count('_foreach_lerp_.Scalar') == 1
    assert 'lerp_.Scalar' not in our_ops.names


class Reads(TorchFunctionMode):
    """The reads of tensor values into Python (on a GPU, each waits for the
    work that makes the tensor)."""
    READS = {
        torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__,
        torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__
    }

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.READS:
            self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize('interval', [1, 2])
def test_updates_read_nothing_from_the_device(interval):
    """mmengine compares its ``steps`` buffer at every update; mmlape's
    reads it once, at the first."""
    model = _model()
    host = ExponentialMovingAverage(model, momentum=0.1, interval=interval)
    ours = LaPEExponentialMovingAverage(model, momentum=0.1, interval=interval)
    with Reads() as first:
        ours.update_parameters(model)
    assert first.names  # the count, read once
    with Reads() as host_reads:
        for _ in range(4):
            host.update_parameters(model)
    with Reads() as our_reads:
        for _ in range(4):
            ours.update_parameters(model)
    assert len(host_reads.names) >= 4
    assert our_reads.names == []
    assert int(ours.steps) == 5


def test_a_loaded_count_is_followed():
    """A state dict loaded after updates brings its own ``steps``: the
    next updates (an interval of 3) follow it as mmengine's do."""
    model = _model()
    gen = torch.Generator().manual_seed(3)
    saved = ExponentialMovingAverage(model, momentum=0.2, interval=3)
    for _ in range(4):
        _train_a_little(model, gen)
        saved.update_parameters(model)
    ours = LaPEExponentialMovingAverage(model, momentum=0.2, interval=3)
    for _ in range(2):  # its count on the host: 2
        ours.update_parameters(model)
    host = ExponentialMovingAverage(_model(seed=7), momentum=0.2, interval=3)
    for ema in (ours, host):
        ema.load_state_dict(copy.deepcopy(saved.state_dict()))
    for step in range(5):
        _train_a_little(model, gen)
        for ema in (ours, host):
            ema.update_parameters(model)
        for key, value in host.state_dict().items():
            assert torch.equal(value, ours.state_dict()[key]), (step, key)
    assert int(ours.steps) == 9


def test_a_failed_update_keeps_the_count():
    """An update that raises (here a model without the averaged keys)
    counts no step, as mmengine's: the next ones stay equal to it."""
    model = _model()
    host = ExponentialMovingAverage(model, momentum=0.5, interval=2)
    ours = LaPEExponentialMovingAverage(model, momentum=0.5, interval=2)
    gen = torch.Generator().manual_seed(4)
    for ema in (host, ours):
        ema.update_parameters(model)
        ema.update_parameters(model)
        with pytest.raises(KeyError):
            ema.update_parameters(nn.Sequential())
    for step in range(3):
        _train_a_little(model, gen)
        for ema in (host, ours):
            ema.update_parameters(model)
        for key, value in host.state_dict().items():
            assert torch.equal(value, ours.state_dict()[key]), (step, key)
    assert int(ours.steps) == int(host.steps) == 5


def test_checkpoint_loads_either_way():
    """An mmengine EMA checkpoint loads into mmlape's and back: the same
    keys, and the next updates equal."""
    model = _model()
    host = ExponentialMovingAverage(model, momentum=0.2)
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        _train_a_little(model, gen)
        host.update_parameters(model)
    ours = LaPEExponentialMovingAverage(_model(seed=5), momentum=0.2)
    ours.load_state_dict(copy.deepcopy(host.state_dict()))
    back = ExponentialMovingAverage(_model(seed=6), momentum=0.2)
    back.load_state_dict(copy.deepcopy(ours.state_dict()))
    _train_a_little(model, gen)
    for ema in (host, ours, back):
        ema.update_parameters(model)
    for key, value in host.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key]), key
        assert torch.equal(value, back.state_dict()[key]), key


def test_t2t_config_builds_it_with_mmpretrain_settings():
    """The T2T-ViT configs name it in mmpretrain's ``EMAHook``, with
    mmpretrain's T2T-ViT momentum and priority, and the hook builds it
    (in mmpretrain's scope, as the runner does)."""
    pytest.importorskip('mmpretrain')
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import HOOKS
    from mmpretrain.utils import register_all_modules
    register_all_modules(False)
    cfg = Config.fromfile(
        osp.join(ROOT, 'configs/t2t_vit/t2t-vit-7-lape_8xb64_in1k.py'))
    import mmpretrain
    host = Config.fromfile(
        osp.join(
            osp.dirname(mmpretrain.__file__), '.mim', 'configs', 't2t_vit',
            't2t-vit-t-14_8xb64_in1k.py'))
    (ours, ), (theirs, ) = cfg.custom_hooks, host.custom_hooks
    assert {k: v for k, v in ours.items() if k != 'ema_type'} == \
        {k: v for k, v in theirs.items() if k != '_scope_'}
    assert 'ema_type' not in theirs  # mmengine's ExponentialMovingAverage
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        hook_cfg = copy.deepcopy(ours)
        hook_cfg.pop('priority')  # the runner's, as it registers the hook
        hook = HOOKS.build(hook_cfg)

        class Runner:
            model = _model()

        hook.before_run(Runner)
    assert type(hook.ema_model) is LaPEExponentialMovingAverage
    assert hook.ema_model.momentum == pytest.approx(4e-5)


def test_tied_weights_and_autograd_as_mmengine():
    """A weight two modules share is listed twice by the state dict:
    mmengine updates it twice, and so does mmlape's (one after the other).
    The update changes ``.data``, as mmengine's: autograd's version of
    the averaged parameters does not move."""

    class Tied(nn.Module):

        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.b = nn.Linear(3, 3)
            self.b.weight = self.a.weight

    model = Tied()
    kwargs = dict(momentum=0.25, update_buffers=True)
    host = ExponentialMovingAverage(model, **kwargs)
    ours = LaPEExponentialMovingAverage(model, **kwargs)
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen))
        host.update_parameters(model)
        ours.update_parameters(model)
    for key, value in host.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key]), key
    plain = LaPEExponentialMovingAverage(_model(), momentum=0.1)
    plain.update_parameters(_model(seed=1))
    versions = [p._version for p in plain.module.parameters()]
    plain.update_parameters(_model(seed=2))
    assert [p._version for p in plain.module.parameters()] == versions
