"""Shared test setup and helpers.

Test modules import the helpers by name (``from conftest import ROOT,
run``); pytest puts this folder on ``sys.path``. Tests that start
subprocesses or train end to end carry ``@pytest.mark.slow``:
``pytest -m "not slow"`` is the quick loop, CI runs everything. The tests
under ``infra/`` (install, environment, GPU scripts, CUDA build) are marked
``infra``: ``pytest -m "not slow and not infra"`` (``make test-fast``) is
the fastest loop.
"""
import os
import os.path as osp
import random
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModel
from torch.utils.data import Dataset

os.environ.setdefault('OMP_NUM_THREADS', '2')
torch.set_num_threads(2)


@pytest.fixture(scope='module')
def one_thread():
    """Torch on one thread for a module: tiny models run far faster so on a
    shared machine (``pytestmark = pytest.mark.usefixtures('one_thread')``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fresh_default_scope():
    """No default scope during the test, as in a fresh process, and the
    previous ones back after it: mmengine keeps default scopes process-wide
    (a Runner of another test leaves its own; the host inferencers leave
    theirs), and a registry builds in the current one."""
    from mmengine.registry import DefaultScope
    saved = dict(DefaultScope._instance_dict)
    DefaultScope._instance_dict.clear()
    yield
    DefaultScope._instance_dict.clear()
    DefaultScope._instance_dict.update(saved)


#: The repository root (tools and configs are run from here).
ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: The demo config, relative to ROOT.
DEMO = 'configs/demo/deit-demo_pos-shapes.py'
#: A tiny ViT for tests: 64 dims, 4 layers (``arch='test-tiny'``) on 32x32
#: inputs of 8x8 patches (a 4x4 grid).
IMG = 32

#: The seed of every test. ``MMLAPE_TEST_SEED=N pytest ...`` runs the suite
#: under another one: no assertion may hold for one seed only.
SEED = int(os.environ.get('MMLAPE_TEST_SEED', '0'))


def seed_everything(seed: int = SEED) -> None:
    """Seed torch, numpy's global generator (mmcv's random transforms,
    mmengine's choice of a run's seed) and :mod:`random`."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


#: The folder of the infrastructure tests, each marked ``infra``.
INFRA = osp.join(osp.dirname(osp.abspath(__file__)), 'infra') + os.sep


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark every test under tests/infra/ ``infra`` (before ``-m``
    selects): ``-m "not infra"`` is the developer's fast loop, CI runs
    them."""
    for item in items:
        if str(item.path).startswith(INFRA):
            item.add_marker(pytest.mark.infra)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Seed before a test's fixtures are set up: a module- or session-scoped
    fixture draws the same numbers whichever test first asks for it."""
    seed_everything()


@pytest.fixture(scope='session')
def hosts_applied():
    """mmlape's adjustments of the host libraries, applied as the tools
    apply them (:func:`mmlape.hosts.apply`; ``import mmlape`` applies none):
    for tests that run mmengine's runner on its own checkpoints, read them
    with a plain ``torch.load`` or use mmpretrain's hub by name
    (``pytestmark = pytest.mark.usefixtures('hosts_applied')``). The
    adjustments stay for the rest of the session, as in a tool's process."""
    import mmlape.hosts
    mmlape.hosts.apply()


@pytest.fixture(autouse=True)
def _seed():
    """Seed again after the wider fixtures, before the test's own: a test
    draws the same numbers in any order and alone."""
    seed_everything()


#: float32's unit in the last place at 1 (``2**-23``).
EPS32 = torch.finfo(torch.float32).eps


def assert_close_f32(actual: torch.Tensor,
                     expected: torch.Tensor,
                     ulps: float = 32,
                     msg: Optional[str] = None) -> None:
    """Assert that two float32 computations of the same values agree up to
    rounding.

    Two paths through the same arithmetic in another order (another
    library's kernels, a reference written from the equations) differ by
    rounding that scales with the magnitudes summed, not with each result:
    an element that cancels to near zero keeps the absolute error of the
    large terms it came from. So the tolerance is ``ulps`` float32 ulps of
    each element plus ``ulps`` ulps of the largest magnitude in
    ``expected``: it holds at any scale of the weights, where a fixed
    ``atol`` of 1e-5 asks two kernels for 3 ulps at values near 50 (and
    failed so). A wrong term is of the order of the values and still fails.

    Args:
        actual (Tensor): The computed values.
        expected (Tensor): The values of the other path.
        ulps (float): Rounding allowed, in ulps of the largest magnitude.
            Defaults to 32: measured over seeds and thread counts, a ViT
            forward against mmseg's or a reference uses at most 4, Swin
            against mmpretrain's at resized inputs up to 34 (its callers
            pass 256).
        msg (str, optional): Prefix of the failure message.
    """
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.
    torch.testing.assert_close(
        actual,
        expected,
        rtol=ulps * EPS32,
        atol=ulps * EPS32 * scale,
        msg=(lambda m: f'{msg}: {m}') if msg else None)


def _kill_session(pid: int) -> None:
    """Kill what is left of the process session ``pid`` leads."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(args: List[str],
        check: bool = True,
        threads: int = 1,
        timeout: int = 900,
        cwd: str = ROOT,
        env: Optional[dict] = None,
        **kwargs) -> subprocess.CompletedProcess:
    """Run a command from the repository root, capturing its output.

    Args:
        args (list[str]): The command.
        check (bool): Fail the test, with the output's tail, when the
            command exits non-zero. Defaults to True.
        threads (int): ``OMP_NUM_THREADS`` of the command. Defaults to 1.
        timeout (int): Seconds. Defaults to 900.
        cwd (str): Working directory. Defaults to the repository root.
        env (dict, optional): Extra environment variables.
    """
    full_env = dict(
        os.environ,
        PYTHONUNBUFFERED='1',
        PYTHONHASHSEED='0',
        OMP_NUM_THREADS=str(threads))
    full_env.update(env or {})
    # In a session of its own: whatever it starts (torchrun's ranks, their
    # loader workers) is ended with it, and a test never leaves processes
    # behind for the tests after it.
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        start_new_session=True,
        **kwargs)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                stdout, stderr = proc.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                if proc.poll() is not None:
                    # it has ended; what it left running holds its output
                    _kill_session(proc.pid)
                elif time.monotonic() > deadline:
                    _kill_session(proc.pid)
                    stdout, stderr = proc.communicate()
                    raise AssertionError(
                        f'{args} did not end within {timeout} s:\n'
                        f'{stdout[-3000:]}\n{stderr[-3000:]}') from None
    finally:
        _kill_session(proc.pid)
    out = subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)
    if check and out.returncode:
        raise AssertionError(f'{args} failed:\n{out.stdout[-3000:]}\n'
                             f'{out.stderr[-3000:]}')
    return out


def run_python(args: List[str], threads: int = 2, **kwargs) -> str:
    """Run ``python ARGS`` (this interpreter) from the repository root.

    Returns:
        str: stdout and stderr together.
    """
    out = run([sys.executable] + list(args), threads=threads, **kwargs)
    return out.stdout + out.stderr


def config_joins() -> Dict[str, str]:
    """``{config-name suffix: join}`` of every join that has configs
    (``''``: ``Default``), in the registry's order."""
    from mmlape.models.layers import pe_join_classes
    return {
        cls.config_suffix: name
        for name, cls in pe_join_classes(with_configs=True).items()
    }


def tiny_vit(pe_join='Default',
             with_cls_token: bool = True,
             out_type: str = 'raw',
             **kwargs):
    """The tiny test ViT (``test-tiny``, 32x32 inputs, 8x8 patches)."""
    from mmlape.models import LaPEViT
    return LaPEViT(
        'test-tiny',
        img_size=IMG,
        patch_size=8,
        pe_join=pe_join,
        with_cls_token=with_cls_token,
        out_type=out_type,
        **kwargs)


def demo_options(data: str,
                 iters: int,
                 interval: Optional[int] = None,
                 batch_size: int = 8,
                 warmup: int = 2) -> List[str]:
    """``--cfg-options`` that point the demo config at ``data`` and shrink
    it to ``iters`` iterations of ``batch_size`` images, ``warmup`` of them
    linear warm-up (checkpoints every ``interval``, when given)."""
    ckpt = [
        f'default_hooks.checkpoint.interval={interval}',
        'default_hooks.checkpoint.max_keep_ckpts=5'
    ] if interval else []
    return ['--cfg-options'] + [
        f'{s}_dataloader.dataset.data_root={data}'
        for s in ('train', 'val', 'test')
    ] + [
        f'train_cfg.max_iters={iters}', f'train_cfg.val_interval={iters}'
    ] + ckpt + [
        f'train_dataloader.batch_size={batch_size}',
        f'param_scheduler.0.end={warmup}', f'param_scheduler.1.begin={warmup}',
        f'param_scheduler.1.end={max(iters, warmup + 1)}',
        'default_hooks.logger.interval=1'
    ]


def one_line_error(main, argv: List[str], capsys) -> str:
    """Run a tool's ``main`` in process; assert that it ends with exit
    status 2 and one line ``error: ...`` on stderr, and return the line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: '), err[-3000:]
    return lines[0]


def tool_options(data: str,
                 iters: int = 1,
                 *extra: str,
                 **kwargs) -> List[str]:
    """:func:`demo_options` for an in-process run of a tool: batches of 4,
    one warm-up iteration, and a fresh experiment name (in-process runs
    must not share mmengine's named instances)."""
    import time
    kwargs.setdefault('batch_size', 4)
    kwargs.setdefault('warmup', 1)
    return demo_options(data, iters, **kwargs) + [
        f'experiment_name=t{time.monotonic_ns()}', *extra
    ]


@pytest.fixture(scope='session')
def imagenet(tmp_path_factory) -> str:
    """A small generated ImageNet-layout set (8 train, 4 val JPEGs of
    40x56, 4 classes) for the configs' real pipelines and loaders."""
    from mmlape.datasets.imagenet import generate_imagenet
    root = str(tmp_path_factory.mktemp('imagenet'))
    generate_imagenet(root, 8, 4, num_classes=4, size=(40, 56))
    return root


@pytest.fixture(scope='session')
def pos_shapes_data(tmp_path_factory) -> str:
    """A small generated position-shapes set (64 train, 16 val images)."""
    from mmlape.datasets import generate_pos_shapes
    root = str(tmp_path_factory.mktemp('pos_shapes'))
    generate_pos_shapes(root, num_train=64, num_val=16, seed=1)
    return root


# ----------------------------------------------------------------------
# a toy model and dataset for mmengine's Runner (checkpoint tests)


class ToyModel(BaseModel):
    """A linear layer on 4 features, 2 classes."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, inputs, labels=None, mode='tensor'):
        inputs = torch.stack(inputs) if isinstance(inputs, list) else inputs
        out = self.linear(inputs)
        if mode == 'loss':
            return dict(loss=nn.functional.cross_entropy(out, labels))
        return out


class ToyData(Dataset):
    """8 seeded samples for :class:`ToyModel`."""

    metainfo = dict(classes=('a', 'b'))

    def __len__(self):
        return 8

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return dict(inputs=torch.randn(4, generator=g), labels=i % 2)


def n_params(model: nn.Module) -> int:
    """The number of parameter values of ``model``."""
    return sum(p.numel() for p in model.parameters())


def save_backbone_checkpoint(model,
                             path,
                             others: Optional[Dict] = None,
                             **extra) -> str:
    """Save a backbone's weights as a classifier or detector checkpoint
    holds them: a ``state_dict`` with ``backbone.``-prefixed keys.

    Args:
        model (nn.Module | dict): The backbone, or its state dict.
        path: Where to save.
        others (dict, optional): More ``state_dict`` entries (a head's,
            a neck's), unprefixed.
        **extra: Top-level entries (``meta``, ...).

    Returns:
        str: ``path``.
    """
    state = model if isinstance(model, dict) else model.state_dict()
    state = {'backbone.' + k: v for k, v in state.items()}
    state.update(others or {})
    torch.save(dict(state_dict=state, **extra), path)
    return str(path)


def randomize(module: nn.Module,
              std: float = 1.,
              vector_range: Optional[tuple] = None) -> nn.Module:
    """Draw every parameter of ``module`` afresh (distinct values, so that
    a swapped or missed weight shows): normal with ``std``, or, with
    ``vector_range``, 0- and 1-d parameters (norms, biases) uniform in
    it."""
    with torch.no_grad():
        for p in module.parameters():
            if vector_range is not None and p.dim() < 2:
                p.uniform_(*vector_range)
            else:
                p.normal_(0, std)
    return module


def build_classifier(backbone: Dict,
                     head: Dict,
                     neck: Optional[Dict] = None) -> nn.Module:
    """An mmpretrain ``ImageClassifier`` of ``backbone``, ``head`` (and
    ``neck``) configs, built in the mmpretrain scope (train mode)."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    from mmpretrain.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    cfg = dict(type='ImageClassifier', backbone=backbone, head=head)
    if neck is not None:
        cfg['neck'] = neck
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


# ----------------------------------------------------------------------
# every backbone, tiny (the backbone-contract suite and the plan-cache
# tests build them here)

#: A family arch at 64 dims, 2 layers, 2 heads.
SMALL_FAMILY = dict(
    embed_dims=64, num_layers=2, num_heads=2, feedforward_channels=128)


def _vit_pe_settings() -> Dict[str, tuple]:
    """The tiny ViT in every PE setting (``pos_embed.pe_settings``): each
    ``pe_type`` and each rotary type beside a learnable PE, read from the
    type lists, so that a new type is in the suite unedited. The PE type of
    an entry is the one its joins act on (the absolute one beside a rotary
    PE)."""
    from mmlape.models.layers.pos_embed import parse_pe_setting, pe_settings
    out = {}
    for setting in pe_settings():
        args = parse_pe_setting(setting)
        if args['ape_type'] not in (None, 'learnable'):
            continue
        name = 'vit' if setting == 'learnable' else f'vit-{setting}'
        kwargs = dict(arch='test-tiny', img_size=IMG, patch_size=8)
        kwargs.update((k, v) for k, v in args.items() if v)
        if setting == 'relative':
            kwargs['out_type'] = 'raw'
        out[name] = ('LaPEViT', args['ape_type'] or args['pe_type'], kwargs)
    return out


#: The tiny backbones: name -> (class name, PE type, build arguments).
TINY_BACKBONES = {
    **_vit_pe_settings(),
    't2t-vit': ('LaPEViT', 'sincos1d', dict(arch='t2t-vit-7', img_size=64)),
    'vit-featmap': ('LaPEViT', 'learnable',
                    dict(
                        arch='test-tiny',
                        img_size=IMG,
                        patch_size=8,
                        with_cls_token=False,
                        out_type='featmap')),
    'ceit': ('LaPEViT', 'learnable', dict(arch='ceit-tiny', img_size=64)),
    'vit-lite': ('LaPEViT', 'learnable', dict(arch='vit-lite-7/4')),
    'cct': ('LaPEViT', 'learnable', dict(arch='cct-7/3x1')),
    'swin': ('LaPESwin', 'learnable',
             dict(
                 arch='test-tiny',
                 img_size=64,
                 window_size=4,
                 pad_small_map=True,
                 out_indices=(0, 1, 2, 3),
                 drop_path_rate=0.,
                 use_abs_pos_embed=True)),
    # mmdet's and mmseg's SwinTransformer signature (no arch)
    'dense-swin': ('LaPEDenseSwin', 'learnable',
                   dict(
                       embed_dims=16,
                       depths=(2, 2, 2, 2),
                       num_heads=(1, 2, 2, 4),
                       pretrain_img_size=64,
                       window_size=4,
                       drop_path_rate=0.,
                       use_abs_pos_embed=True)),
    # mmpretrain's T2T_ViT signature (no arch), its sinusoid a buffer
    't2t-upstream': ('LaPET2TViT', 'sincos1d',
                     dict(
                         img_size=64,
                         embed_dims=64,
                         num_layers=2,
                         t2t_cfg=dict(token_dims=16),
                         layer_cfgs=dict(num_heads=2))),
    'vit-adapter': ('LaPEViTAdapter', 'learnable',
                    dict(arch='test-tiny', img_size=64, init_values=0.1)),
    # mmseg's signature: no arch; every option that adds a module is on
    'seg-vit': ('LaPESegViT', 'learnable',
                dict(
                    img_size=IMG,
                    patch_size=8,
                    embed_dims=64,
                    num_layers=4,
                    num_heads=2,
                    out_indices=(1, 3),
                    final_norm=True,
                    patch_norm=True,
                    pre_norm=True)),
}


def backbone_joins(name: str) -> List[str]:
    """The registered joins that the tiny backbone ``name`` takes, from the
    joins' declarations: a join that takes its PE type (any registered
    one), on a staged backbone (Swin) one that supports stages."""
    from mmlape.models.layers import pe_join_classes
    cls_name, pe_type, _ = TINY_BACKBONES[name]
    return [
        join for join, cls in pe_join_classes().items()
        if cls.fits(pe_type, staged='Swin' in cls_name)
    ]


def _tiny_t2t(join: str, **kwargs) -> nn.Module:
    """The tiny LaPET2TViT; a join without a class token pools by GAP."""
    from mmlape.models import LaPET2TViT
    from mmlape.models.layers import pe_join_classes
    args = dict(TINY_BACKBONES['t2t-upstream'][2])
    if not getattr(pe_join_classes()[join], 'allows_cls_token', True):
        args.update(with_cls_token=False, out_type='avg_featmap')
    args.update(kwargs)
    return LaPET2TViT(pe_join=join, **args)


def tiny_backbone(name: str, join: str = 'LaPE', **kwargs) -> nn.Module:
    """The tiny backbone ``name`` (see :data:`TINY_BACKBONES`) with the PE
    join ``join``, in train mode.

    The ViT family's archs are shrunk to :data:`SMALL_FAMILY` (T2T-ViT's
    tokenizer to 16 dims); a join without a class token
    (``allows_cls_token = False``) gets average pooling on the class-token
    ViTs (LaPEViT chooses it itself; CeiT-Ti, whose LCA pools class
    tokens, and the host-signature classes are told).
    """
    from mmlape.models import LaPESwin, LaPEViT, LaPEViTAdapter
    from mmlape.models.layers import pe_join_classes
    if TINY_BACKBONES[name][0] == 'LaPET2TViT':
        return _tiny_t2t(join, **kwargs)
    cls_name, _, args = TINY_BACKBONES[name]
    args = dict(args)
    arch = args.pop('arch', None)
    if cls_name == 'LaPEViT' and arch in LaPEViT.arch_zoo and \
            arch != 'test-tiny':
        arch = dict(LaPEViT.arch_zoo[arch], **SMALL_FAMILY)
        if 'tokenizer' in arch:  # T2T-ViT
            arch['tokenizer'] = dict(
                type='T2T', token_dims=16, attention='performer')
    join_cls = pe_join_classes()[join]
    if name == 'ceit' and not getattr(join_cls, 'allows_cls_token', True):
        # CeiT's own readout (LCA) pools class tokens: GAP here
        args.update(with_cls_token=False, out_type='avg_featmap')
    if cls_name == 'LaPESegViT' and \
            not getattr(join_cls, 'allows_cls_token', True):
        args.update(with_cls_token=False)
    args.update(kwargs)
    if cls_name in ('LaPESegViT', 'LaPEDenseSwin'):
        from mmlape import models
        return getattr(models, cls_name)(pe_join=join, **args)
    cls = dict(
        LaPEViT=LaPEViT, LaPESwin=LaPESwin,
        LaPEViTAdapter=LaPEViTAdapter)[cls_name]
    return cls(arch, pe_join=join, **args)
