"""``torch.compile`` for training, validation and testing.

:class:`CompileHook` compiles the model in place (state-dict names kept)
before the run; mmengine's ``compile`` key compiles ``train_step`` only.
A classifier's backbone is compiled whole; a dense model has each encoder
block compiled (regional), so mmcv's ops stay outside the graphs and a new
image size recompiles one block. Where compiling cannot work (no
compiler, or the backend fails compiling a forward: a damaged cache), one
line says so and the run goes on eager. The tools turn ``compile = True`` or
``compile = dict(...)`` into this hook (:func:`use_compile_hook`).

References:
    PyTorch's regional compilation recipe.
"""
import shutil
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS as MMENGINE_HOOKS

from mmlape.models.layers import SwinBlock, TransformerBlock
from mmlape.registry import HOOKS
from mmlape.utils.errors import ConfigError

__all__ = [
    'CompileHook', 'check_compile_options', 'compile_targets',
    'compile_unavailable', 'graph_count', 'inductor_cache_dir',
    'inductor_modes', 'recompile_limit_name', 'use_compile_hook'
]

#: The encoder blocks a regional compile compiles.
BLOCK_TYPES = (TransformerBlock, SwinBlock)
#: Task scopes whose models see images of many sizes.
DENSE_SCOPES = ('mmdet', 'mmseg')


def recompile_limit_name() -> str:
    """The name of dynamo's recompile limit in this torch
    (``cache_size_limit`` before torch 2.7)."""
    import torch._dynamo as dynamo
    return next(
        name for name in ('recompile_limit', 'cache_size_limit')
        if hasattr(dynamo.config, name))


def graph_count() -> int:
    """Graphs compiled in this process so far (every backend's)."""
    from torch._dynamo.utils import counters
    return int(counters['stats']['unique_graphs'])


def compile_unavailable(backend: str, device: str) -> Optional[str]:
    """Why ``torch.compile`` with ``backend`` cannot run on ``device``
    (``'cuda'`` or ``'cpu'``), or None when it can."""
    if not hasattr(torch, 'compile'):
        return f'torch {torch.__version__} has no torch.compile'
    try:
        import torch._dynamo as dynamo
        dynamo.is_dynamo_supported()
    except Exception as err:  # e.g. a Python version dynamo does not support
        return f'torch.compile is not supported here ({err})'
    if backend != 'inductor':
        return None
    if device == 'cuda':
        from torch.utils._triton import has_triton
        if not has_triton():
            return ('inductor needs Triton for this GPU and none is usable '
                    '(pip install triton, or a GPU of compute capability '
                    '>= 7.0)')
        return None
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        get_cpp_compiler()
    except ImportError:
        if shutil.which('g++') is None:
            return 'inductor needs a C++ compiler on the CPU and found none'
    except Exception:
        from torch._inductor import config
        return (f'inductor needs a C++ compiler on the CPU and found none '
                f'(tried {[c for c in config.cpp.cxx if c]}; set CXX)')
    return None


def inductor_cache_dir() -> str:
    """Where inductor keeps its compiled kernels in this process."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:  # torch < 2.6
        from torch._inductor.runtime.runtime_utils import cache_dir
    return cache_dir()


def _known_backends() -> List[str]:
    import torch._dynamo as dynamo
    return sorted(set(dynamo.list_backends(exclude_tags=())))


def inductor_modes() -> List[str]:
    """The modes torch.compile's inductor backend takes (``mode=None`` is
    its default), as this torch lists them."""
    try:
        from torch._inductor import list_mode_options
    except ImportError:  # an older torch: the modes of its documentation
        return [
            'default', 'reduce-overhead', 'max-autotune',
            'max-autotune-no-cudagraphs'
        ]
    return list(list_mode_options())


def check_compile_options(backend: str = 'inductor',
                          mode: Optional[str] = None,
                          dynamic: Optional[bool] = None,
                          regional: Union[bool, str] = 'auto',
                          **others) -> None:
    """Refuse, before the run, the ``compile`` options that torch refuses
    only when the first step compiles: a backend it does not have, a mode
    the inductor backend does not know (the other backends ignore the mode,
    with a warning of torch's, and so are let be), a ``dynamic`` other than
    True, False or None; and a ``regional`` other than True, False or
    ``'auto'``.

    Raises:
        ConfigError: One line naming the key, the value and what is
            allowed.

    Example:
        >>> check_compile_options(mode='turbo')
        Traceback (most recent call last):
        ...
        mmlape.utils.errors.ConfigError: compile.mode='turbo' is not a mode of torch.compile's inductor backend; choose one of ['default', 'lite', 'reduce-overhead', 'max-autotune-no-cudagraphs', 'max-autotune'] or None
    """  # noqa: E501
    if regional not in (True, False, 'auto'):
        raise ConfigError(f'compile.regional={regional!r}: expected '
                          f"True, False or 'auto'")
    known = _known_backends()
    if backend not in known:
        raise ConfigError(f'compile.backend={backend!r} is not a '
                          f'torch.compile backend; choose one of {known}')
    if backend == 'inductor' and mode is not None and \
            mode not in inductor_modes():
        raise ConfigError(f'compile.mode={mode!r} is not a mode of '
                          f"torch.compile's inductor backend; choose one of "
                          f'{inductor_modes()} or None')
    if not (dynamic is None or isinstance(dynamic, bool)):
        raise ConfigError(f'compile.dynamic={dynamic!r}: expected True, '
                          f'False or None (torch.compile\'s dynamic shapes: '
                          f'always, never, or after a shape changes)')


def compile_targets(
        model: nn.Module,
        regional: Union[bool, str] = 'auto',
        scope: Optional[str] = None) -> Tuple[List[nn.Module], str]:
    """The modules to compile and a phrase for the log.

    Args:
        model (nn.Module): The task model (unwrapped).
        regional (bool | str): Compile each encoder block (True), the
            backbone whole (False), or ``'auto'``: blocks for mmdet/mmseg
            and models without a backbone, else the backbone.
        scope (str, optional): The config's ``default_scope``.
    """
    backbone = getattr(model, 'backbone', None)
    if regional == 'auto':
        regional = scope in DENSE_SCOPES or backbone is None
    if not regional:
        if backbone is None:
            raise ConfigError('compile.regional=False needs a model with a '
                              '`backbone`')
        return [backbone], f'the backbone ({type(backbone).__name__}) whole'
    blocks = [m for m in model.modules() if isinstance(m, BLOCK_TYPES)]
    if not blocks:
        raise ConfigError(f'compile.regional: {type(model).__name__} has '
                          f'no encoder blocks to compile')
    return blocks, (f'each of the {len(blocks)} encoder blocks '
                    f'({type(blocks[0]).__name__}; regional)')


class CompileHook(Hook):
    """Compile the model before the run: training, validation and testing
    then run compiled.

    Args:
        backend (str): ``torch.compile``'s backend. Defaults to
            ``'inductor'``.
        mode (str, optional): Its mode (inductor). Defaults to None.
        dynamic (bool, optional): Its ``dynamic``. Defaults to None:
            static shapes first, dynamic after a shape changes once.
        fullgraph (bool): Fail on a graph break. Defaults to False.
        regional (bool | str): See :func:`compile_targets`. Defaults to
            ``'auto'``.
        recompile_limit (int): Compiles of one code object before dynamo
            gives up on it (and runs it eager, with a warning in the log).
            Defaults to 16.

    Example:
        >>> custom_hooks = [dict(type='CompileHook', backend='inductor')]
    """
    priority = 'VERY_HIGH'

    def __init__(self,
                 backend: str = 'inductor',
                 mode: Optional[str] = None,
                 dynamic: Optional[bool] = None,
                 fullgraph: bool = False,
                 regional: Union[bool, str] = 'auto',
                 recompile_limit: int = 16) -> None:
        check_compile_options(
            backend=backend, mode=mode, dynamic=dynamic, regional=regional)
        self.options = dict(
            backend=backend, mode=mode, dynamic=dynamic, fullgraph=fullgraph)
        self.regional = regional
        self.recompile_limit = int(recompile_limit)
        self.active = False
        self._logged = 0

    def before_run(self, runner) -> None:
        if self.active:
            return
        model = runner.model.module if is_model_wrapper(
            runner.model) else runner.model
        device = next(model.parameters()).device.type
        reason = compile_unavailable(self.options['backend'], device)
        if reason is not None:
            runner.logger.warning(f'torch.compile: {reason}; the run goes on '
                                  f'eager')
            return
        targets, what = compile_targets(model, self.regional,
                                        runner.cfg.get('default_scope'))
        import torch._dynamo as dynamo
        setattr(dynamo.config, recompile_limit_name(), self.recompile_limit)
        options = {k: v for k, v in self.options.items() if v is not None}
        for module in targets:
            module.compile(**options)
            module._compiled_call_impl = self._guarded(
                module, module._compiled_call_impl, targets, runner.logger)
        self.active = True
        self._logged = graph_count()
        runner.logger.info(
            f'torch.compile ({self._describe()}): {what}; the train step, '
            f'validation and testing run compiled (the first iterations '
            f'compile; each compiled graph is logged)')

    def _guarded(self, module: nn.Module, compiled, targets: List[nn.Module],
                 logger):
        """``compiled``, which on a failure of the backend itself while it
        compiles a forward (a damaged compile cache, a compiler that breaks
        on the generated code) turns compiling off for every target, says
        so in one line and runs the call eager: the run goes on. Errors of
        the model's own code are raised as they are, and so is a failure
        while the backward compiles (at the first backward: a step half
        done cannot be taken again)."""
        from torch._dynamo.exc import BackendCompilerFailed

        def call(*args, **kwargs):
            try:
                return compiled(*args, **kwargs)
            except BackendCompilerFailed as err:
                for target in targets:
                    target._compiled_call_impl = None
                self.active = False
                logger.warning(self._failed_line(err))
                return module._call_impl(*args, **kwargs)

        return call

    def _failed_line(self, err: Exception) -> str:
        backend = self.options['backend']
        cause = getattr(err, 'inner_exception', None) or err
        first = (str(cause).strip().splitlines() or [''])[0]
        line = (f'torch.compile: the {backend} backend failed '
                f'({type(cause).__name__}: {first}); the run goes on eager')
        if backend != 'inductor':
            return line
        try:
            folder = inductor_cache_dir()
        except Exception:  # the hint must not hide the failure
            folder = "inductor's cache folder"
        return (f'{line}. A damaged compile cache is a common cause: remove '
                f'{folder} (or point TORCHINDUCTOR_CACHE_DIR elsewhere) and '
                f'start again to compile')

    def _describe(self) -> str:
        return ', '.join(f'{k}={v}' for k, v in self.options.items()
                         if v is not None and v is not False)

    def _log_new_graphs(self, runner, where: str) -> None:
        if not self.active:
            return
        total = graph_count()
        if total != self._logged:
            new, self._logged = total - self._logged, total
            runner.logger.info(
                f'torch.compile: {new} graph(s) compiled {where} '
                f'({total} in all)')

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None) -> None:
        self._log_new_graphs(runner, f'at train iter {runner.iter + 1}')

    def after_val_epoch(self, runner, metrics=None) -> None:
        self._log_new_graphs(runner, 'during validation')

    def after_test_epoch(self, runner, metrics=None) -> None:
        self._log_new_graphs(runner, 'during testing')


HOOKS.register_module(module=CompileHook)
MMENGINE_HOOKS.register_module(module=CompileHook)


def use_compile_hook(cfg) -> bool:
    """Turn the config's ``compile`` key (True or :class:`CompileHook`
    options) into a hook in ``custom_hooks`` and switch mmengine's own
    compile off.

    Args:
        cfg (Config): The run's config, changed in place.

    Returns:
        bool: Whether the run compiles.
    """
    value = cfg.get('compile', None)
    hooks = list(cfg.get('custom_hooks', None) or [])
    if not value:
        return any(h.get('type') == 'CompileHook' for h in hooks)
    if not isinstance(value, (bool, dict)):
        raise ConfigError(f'compile={value!r}: expected True, False or a '
                          f'dict of options')
    options: Dict = {} if value is True else dict(value)
    options.pop('type', None)
    check_compile_options(**options)
    hooks = [h for h in hooks if h.get('type') != 'CompileHook']
    hooks.append(dict(type='CompileHook', **options))
    cfg.custom_hooks = hooks
    cfg.compile = False
    return True
