"""``--compile`` and the ``compile`` config key: the train step, validation
and testing run compiled; dense models compile their encoder blocks only;
every compiled graph is logged; where compiling cannot work the run goes
on eager after one line."""
import copy
import logging
import os.path as osp
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from conftest import DEMO, demo_options, run
from mmengine.config import Config
from mmengine.logging import MMLogger

from mmlape.hosts.compile import (CompileHook, compile_targets,
                                  compile_unavailable, graph_count,
                                  recompile_limit_name, use_compile_hook)
from mmlape.models.layers import TransformerBlock
from mmlape.utils.errors import ConfigError

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo as dynamo
    name = recompile_limit_name()
    limit = getattr(dynamo.config, name)
    dynamo.reset()
    yield
    dynamo.reset()
    setattr(dynamo.config, name, limit)


class Records(logging.Handler):

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def fake_runner(model, scope='mmpretrain'):
    logger = MMLogger.get_instance('test_compile')
    records = Records()
    logger.addHandler(records)
    runner = SimpleNamespace(
        model=model,
        logger=logger,
        cfg=Config(dict(default_scope=scope)),
        iter=0)
    return runner, records


class Wrapper(nn.Module):
    """A task model: what the hook sees of mmpretrain/mmdet/mmseg ones."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone


def test_config_key_becomes_the_hook():
    cfg = Config(dict(compile=True, custom_hooks=[dict(type='EMAHook')]))
    assert use_compile_hook(cfg)
    assert cfg.compile is False  # mmengine's own compile of train_step off
    assert cfg.custom_hooks == [dict(type='EMAHook'), dict(type='CompileHook')]
    cfg = Config(dict(compile=dict(backend='aot_eager', mode=None)))
    assert use_compile_hook(cfg)
    assert cfg.custom_hooks == [
        dict(type='CompileHook', backend='aot_eager', mode=None)
    ]
    assert not use_compile_hook(Config(dict(compile=False)))
    assert not use_compile_hook(Config(dict()))
    with pytest.raises(ConfigError, match="compile='yes'"):
        use_compile_hook(Config(dict(compile='yes')))


def test_command_line_flag_sets_the_key(tmp_path):
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(__file__))))
    from tools.common import load_config
    path = tmp_path / 'c.py'
    path.write_text("compile = dict(mode='max-autotune')\n")
    cfg = load_config(str(path), None, 'none', None, 'aot_eager')
    assert cfg.compile == dict(mode='max-autotune', backend='aot_eager')
    cfg = load_config(str(path), None, 'none', None, 'default')
    assert cfg.compile == dict(mode='max-autotune')
    path.write_text('x = 1\n')
    assert load_config(str(path), None, 'none', None, 'default').compile
    assert load_config(str(path), None, 'none', None).get('compile') is None


def test_unknown_backend_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        CompileHook(backend='inductr')
    assert "compile.backend='inductr' is not a torch.compile backend" in \
        str(err.value) and "'inductor'" in str(err.value)
    with pytest.raises(ConfigError, match='compile.regional'):
        CompileHook(regional='yes')


def test_unavailable_compiler_runs_eager_after_one_line(
        monkeypatch, fresh_dynamo):
    from conftest import tiny_vit

    import mmlape.hosts.compile as compile_module
    monkeypatch.setattr(compile_module, 'compile_unavailable',
                        lambda backend, device: 'no compiler (test)')
    model = Wrapper(tiny_vit())
    runner, records = fake_runner(model)
    CompileHook().before_run(runner)
    assert records.lines == [
        'torch.compile: no compiler (test); the run goes on eager'
    ]
    assert all(
        getattr(m, '_compiled_call_impl', None) is None
        for m in model.modules())


def test_a_failing_backend_runs_eager_after_one_line(fresh_dynamo):
    """The backend fails compiling the first forward (as with a damaged
    inductor cache): one line, every target eager from then on, the same
    outputs; the model's own errors still raise and keep it compiled."""
    import torch._dynamo as dynamo
    from conftest import tiny_vit

    def broken(gm, example_inputs):
        raise OSError('libcache.so: file too short')

    if 'broken_for_test' not in dynamo.list_backends(exclude_tags=()):
        dynamo.register_backend(broken, name='broken_for_test')
    # an error of the model's own code is not taken for the backend's: the
    # trace fails before the backend is asked, and the error is raised
    model = Wrapper(tiny_vit())
    runner, records = fake_runner(model, scope='mmseg')
    hook = CompileHook(backend='broken_for_test')
    hook.before_run(runner)
    blocks = [m for m in model.modules() if isinstance(m, TransformerBlock)]
    assert blocks and all(b._compiled_call_impl is not None for b in blocks)
    with pytest.raises(RuntimeError):
        blocks[0](torch.randn(2, 5, 7))  # 7 channels, the block has 64
    assert all(b._compiled_call_impl is not None for b in blocks)
    assert hook.active and len(records.lines) == 1
    # the backend's own failure: eager from then on, said once
    model.eval()
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = Wrapper(copy.deepcopy(model.backbone)).backbone(img)[0]
        got = model.backbone(img)[0]
    assert torch.equal(got, want)
    assert records.lines[-1] == (
        'torch.compile: the broken_for_test backend failed (OSError: '
        'libcache.so: file too short); the run goes on eager')
    assert len(records.lines) == 2  # the hook's first line, then this one
    assert all(b._compiled_call_impl is None for b in blocks)
    assert not hook.active
    with torch.no_grad():
        assert torch.equal(model.backbone(img)[0], want)
    assert len(records.lines) == 2  # said once


def test_a_failing_inductor_names_its_cache(monkeypatch):
    from types import SimpleNamespace

    import mmlape.hosts.compile as compile_module
    err = SimpleNamespace(
        inner_exception=ImportError(
            '/cache/xi/k.main.so: file too short\nmore lines'))
    line = CompileHook(backend='inductor')._failed_line(err)
    assert line == (
        'torch.compile: the inductor backend failed (ImportError: '
        '/cache/xi/k.main.so: file too short); the run goes on eager. A '
        'damaged compile cache is a common cause: remove '
        f'{compile_module.inductor_cache_dir()} (or point '
        'TORCHINDUCTOR_CACHE_DIR elsewhere) and start again to compile')

    def unwritable():
        raise PermissionError('/tmp')

    monkeypatch.setattr(compile_module, 'inductor_cache_dir', unwritable)
    line = CompileHook(backend='inductor')._failed_line(err)
    assert "remove inductor's cache folder (or point" in line


def test_missing_cpp_compiler_is_named():
    from torch._inductor import config
    from torch._inductor.cpp_builder import cpp_compiler_search
    cpp_compiler_search.cache_clear()
    try:
        with config.patch({'cpp.cxx': (None, '/nonexistent/c++')}):
            reason = compile_unavailable('inductor', 'cpu')
    finally:
        cpp_compiler_search.cache_clear()
    assert 'C++ compiler' in reason and '/nonexistent/c++' in reason
    assert compile_unavailable('eager', 'cpu') is None


def test_classifier_compiles_its_backbone_whole(fresh_dynamo):
    from conftest import tiny_vit
    model = Wrapper(tiny_vit(out_type='cls_token'))
    runner, records = fake_runner(model)
    hook = CompileHook(backend='eager', recompile_limit=5)
    hook.before_run(runner)
    import torch._dynamo as dynamo
    assert getattr(dynamo.config, recompile_limit_name()) == 5
    assert model.backbone._compiled_call_impl is not None
    assert 'the backbone (LaPEViT) whole' in records.lines[-1]
    img = torch.randn(2, 3, 32, 32)
    start = graph_count()
    model.backbone.train()
    model.backbone(img)[0].sum().backward()
    hook.after_train_iter(runner, 0)
    assert records.lines[-1] == (
        f'torch.compile: 1 graph(s) compiled at train iter 1 '
        f'({start + 1} in all)')
    hook.after_train_iter(runner, 1)  # nothing new: nothing logged
    assert records.lines[-1].endswith(f'({start + 1} in all)')
    assert len(records.lines) == 2


def test_dense_model_compiles_blocks_and_survives_new_sizes(fresh_dynamo):
    """ViT-Adapter in a detection/segmentation scope: only the encoder
    blocks are compiled (mmcv's deformable attention stays outside), the
    outputs equal eager's, and after one change of image size (dynamic
    shapes from then on) further sizes compile nothing."""
    from mmlape.models import LaPEViTAdapter
    torch.manual_seed(0)
    backbone = LaPEViTAdapter(
        'test-tiny', img_size=64, pe_join='LaPE', drop_path_rate=0.1)
    model = Wrapper(backbone)
    targets, what = compile_targets(model, 'auto', 'mmseg')
    assert targets == list(backbone.blocks) and 'regional' in what
    compiled = {id(m) for t in targets for m in t.modules()}
    assert not any(
        id(m) in compiled
        for m in backbone.modules() if 'Deform' in type(m).__name__)
    reference = copy.deepcopy(backbone)
    runner, records = fake_runner(model, 'mmseg')
    CompileHook(backend='eager').before_run(runner)
    counts = []
    for size in (64, 96, 128, 160):
        outs = []
        for net in (backbone, reference):
            torch.manual_seed(size)  # the same input and drop paths
            img = torch.randn(2, 3, size, size)
            net.train()
            feats = net(img)
            sum(f.sum() for f in feats).backward()
            net.eval()
            with torch.no_grad():
                outs.append(feats + net(img))
        for a, b in zip(*outs):
            torch.testing.assert_close(a, b)
        counts.append(graph_count())
    assert counts[2] == counts[3], counts  # third and fourth size: none new
    assert counts[3] - counts[0] < counts[0], counts  # blocks only again


@pytest.mark.parametrize('join, pe_type, ape_type',
                         [('LaPE', 'rope_mixed', 'learnable'),
                          ('Default', 'rope_axial', None)])
def test_rotary_model_compiled_by_block_compiles_once(fresh_dynamo, join,
                                                      pe_type, ape_type):
    """A rotary PE reaches each compiled block as a q/k map made anew by
    every training step's plan: the second and later steps of one size
    compile no new graph (in training and in evaluation), and the outputs
    equal eager's."""
    from conftest import tiny_vit
    torch.manual_seed(0)
    backbone = tiny_vit(
        join, pe_type=pe_type, ape_type=ape_type, drop_path_rate=0.1)
    reference = copy.deepcopy(backbone)
    runner, _ = fake_runner(Wrapper(backbone), 'mmseg')
    CompileHook(backend='eager').before_run(runner)
    assert backbone.blocks[0]._compiled_call_impl is not None
    counts = []
    for step in range(3):
        outs = []
        for net in (backbone, reference):
            torch.manual_seed(step)  # the same input and drop paths
            img = torch.randn(2, 3, 32, 32)
            net.train()
            out = net(img)[0]
            out.sum().backward()
            outs.append(out)
        torch.testing.assert_close(*outs)
        counts.append(graph_count())
    for _ in range(2):
        backbone.eval()
        with torch.no_grad():
            backbone(img)
        counts.append(graph_count())
    assert counts[0] == counts[1] == counts[2], counts
    assert counts[3] == counts[4], counts
    for (name, p), q in zip(backbone.named_parameters(),
                            reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


@pytest.mark.slow
def test_inductor_on_cpu_equals_eager(fresh_dynamo):
    """The one test of the real compiler: a tiny LaPE ViT compiled by
    inductor gives eager's outputs and gradients."""
    from conftest import tiny_vit
    torch.manual_seed(0)
    model = tiny_vit('LaPE', out_type='cls_token')
    img = torch.randn(2, 3, 32, 32)
    model.train()
    ref = model(img)[0]
    ref.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    runner, _ = fake_runner(Wrapper(model))
    CompileHook(backend='inductor').before_run(runner)
    out = model(img)[0]
    out.square().sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for name, p in model.named_parameters():
        # inductor sums in another order: relative to the gradient's scale
        error = (p.grad - grads[name]).abs().max()
        assert error <= 1e-3 * grads[name].abs().max() + 1e-7, name


@pytest.mark.slow
def test_train_validate_and_test_compiled(pos_shapes_data, tmp_path):
    """``--compile``: train, validate and test run compiled and log their
    graphs; the checkpoint keeps its names (testing eager loads it)."""
    work = str(tmp_path / 'work')
    opts = demo_options(pos_shapes_data, 3, 3)
    out = run([
        sys.executable, 'tools/train.py', DEMO, '--work-dir', work,
        '--compile', 'eager'
    ] + opts)
    log = out.stdout + out.stderr
    assert ('torch.compile (backend=eager): the backbone (LaPEViT) whole'
            in log)
    assert 'graph(s) compiled at train iter 1' in log
    assert 'graph(s) compiled during validation' in log
    ckpt = osp.join(work, 'iter_3.pth')
    tested = {}
    for flag in ([], ['--compile', 'eager']):
        out = run(
            [sys.executable, 'tools/test.py', DEMO, ckpt, '--work-dir', work] +
            flag + opts)
        log = out.stdout + out.stderr
        assert ('graph(s) compiled during testing' in log) == bool(flag)
        tested[bool(flag)] = out.stdout.strip().splitlines()[-1]
    assert tested[True] == tested[False]  # the same metrics


@pytest.mark.slow
def test_no_compiler_goes_on_eager(pos_shapes_data, tmp_path):
    work = str(tmp_path / 'work')
    opts = demo_options(pos_shapes_data, 1, 1)
    out = run(
        [
            sys.executable, 'tools/train.py', DEMO, '--work-dir', work,
            '--compile'
        ] + opts,
        env=dict(CXX='/nonexistent/c++'))
    lines = [
        line for line in (out.stdout + out.stderr).splitlines()
        if 'torch.compile' in line
    ]
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        "inductor needs a C++ compiler on the CPU and found none (tried "
        "['/nonexistent/c++']; set CXX); the run goes on eager")
    assert osp.isfile(osp.join(work, 'iter_1.pth'))
