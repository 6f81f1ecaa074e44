"""Launch helpers shared by ``tools/train.py`` and ``tools/test.py``.

References:
    mmengine's ``Runner.setup_env`` (it initialises the process group only
    when none exists) and ``Runner.wrap_model`` (``model_wrapper_cfg`` wins
    over its default ``device_ids``).

mmengine's pytorch and slurm launchers assume GPUs: they call
``torch.cuda.set_device``, default to nccl and wrap DDP with
``device_ids=[LOCAL_RANK]``. On a machine without CUDA,
:func:`setup_cpu_distributed` initialises the process group with gloo itself
and sets ``device_ids=None``, so the same ``tools/dist_train.sh`` runs N CPU
processes and ``tools/slurm_train.sh`` runs on CPU nodes.

The checks here raise :class:`~mmlape.utils.errors.InputError` subclasses at
the place where they look at the input (a path, an option value, a
checkpoint and the model it records), so the tools can report them as one
line at any stage of a run.
"""
import ast
import datetime
import importlib
import inspect
import os
import os.path as osp
import re
import subprocess
import tempfile
import zipfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.logging import print_log

from mmlape.utils.device import require_usable_gpu
from mmlape.utils.errors import CheckpointError, ConfigError, DataError

__all__ = [
    'UsageError', 'backbone_differences', 'check_checkpoint_fits',
    'check_dataset_paths', 'check_work_dir', 'find_resume_checkpoint',
    'is_complete_checkpoint', 'merge_cfg_options', 'note_finetune_sources',
    'recorded_model', 'register_scope_modules', 'setup_cpu_distributed',
    'slurm_to_torch_env', 'use_checked_image_loading'
]


class UsageError(ConfigError):
    """A wrong command-line argument, config value or path; tools print it
    without a traceback and exit with status 2."""


def setup_cpu_distributed(cfg: Config) -> bool:
    """Prepare a distributed run on CPU; a no-op when CUDA is available.

    The CPU path is taken only where the machine has no NVIDIA GPU, or where
    ``MMLAPE_ALLOW_CPU=1`` asks for it: a GPU that torch cannot use stops
    the run (:func:`~mmlape.utils.device.require_usable_gpu`).

    Args:
        cfg (Config): The run's config; ``cfg.launcher`` must be set.

    Returns:
        bool: Whether the CPU (gloo) path was taken.

    Raises:
        CudaUnusableError: An NVIDIA GPU is here and torch cannot use it.
    """
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return False
    require_usable_gpu()
    env_cfg = cfg.setdefault('env_cfg', {})
    dist_cfg = env_cfg.setdefault('dist_cfg', {})
    dist_cfg['backend'] = 'gloo'
    if not dist.is_initialized():
        if cfg.launcher == 'slurm':
            slurm_to_torch_env(dist_cfg.get('port'))
        elif cfg.launcher != 'pytorch':
            raise UsageError(
                f'launcher={cfg.launcher!r} without CUDA is not supported; '
                f'use tools/dist_train.sh (torchrun, launcher=pytorch) or '
                f'tools/slurm_train.sh (launcher=slurm)')
        timeout = datetime.timedelta(seconds=dist_cfg.get('timeout', 1800))
        dist.init_process_group(
            backend='gloo',
            rank=int(os.environ['RANK']),
            world_size=int(os.environ['WORLD_SIZE']),
            timeout=timeout)
    wrapper = dict(cfg.get('model_wrapper_cfg') or {})
    wrapper.setdefault('type', 'MMDistributedDataParallel')
    wrapper.setdefault('broadcast_buffers', False)
    wrapper.setdefault('find_unused_parameters',
                       cfg.get('find_unused_parameters', False))
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper
    return True


def slurm_to_torch_env(port=None) -> None:
    """Set torch's rendezvous variables from those of a Slurm task.

    As mmengine's slurm launcher does: ``RANK`` from ``SLURM_PROCID``,
    ``WORLD_SIZE`` from ``SLURM_NTASKS``, ``LOCAL_RANK`` from
    ``SLURM_LOCALID``, ``MASTER_ADDR`` (unless set) from the first host of
    ``SLURM_NODELIST`` (``scontrol show hostnames``), ``MASTER_PORT`` from
    ``port``, the environment, or 29500.

    Args:
        port (int, optional): ``env_cfg.dist_cfg.port``. Defaults to None.

    Raises:
        UsageError: When a Slurm variable is missing (not inside ``srun``).
    """
    missing = [
        name for name in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST')
        if name not in os.environ
    ]
    if missing:
        raise UsageError(
            f'--launcher slurm: {", ".join(missing)} not set; start the job '
            f'with srun (tools/slurm_train.sh, tools/slurm_test.sh)')
    env = os.environ
    if 'MASTER_ADDR' not in env:
        nodes = env['SLURM_NODELIST']
        try:
            out = subprocess.run(['scontrol', 'show', 'hostnames', nodes],
                                 capture_output=True,
                                 text=True)
            hosts, why = out.stdout.split(), out.stderr.strip()
        except FileNotFoundError:
            hosts, why = [], 'scontrol not found'
        if not hosts:
            raise UsageError(
                f'--launcher slurm: "scontrol show hostnames {nodes}" '
                f'failed ({why or "no hosts"}); set MASTER_ADDR to the '
                f'first node of the job')
        env['MASTER_ADDR'] = hosts[0]
    if port is not None:
        env['MASTER_PORT'] = str(port)
    env.setdefault('MASTER_PORT', '29500')
    env['RANK'] = env['SLURM_PROCID']
    env['WORLD_SIZE'] = env['SLURM_NTASKS']
    env['LOCAL_RANK'] = env.get('SLURM_LOCALID', '0')


def register_scope_modules(cfg: Config) -> str:
    """Register the modules of the config's ``default_scope`` library.

    Returns:
        str: The scope (``mmpretrain``, ``mmdet`` or ``mmseg``).

    Raises:
        UsageError: When the config names no known scope.
    """
    scope = cfg.get('default_scope')
    if scope not in ('mmpretrain', 'mmdet', 'mmseg'):
        raise UsageError(
            f"the config's default_scope is {scope!r}; mmlape's tools run "
            f"mmpretrain, mmdet and mmseg configs (inherit one of their "
            f"default runtimes)")
    module = importlib.import_module(f'{scope}.utils')
    module.register_all_modules(init_default_scope=False)
    return scope


def _dataset_cfgs(cfg: Config, phases):
    for phase in phases:
        loader = cfg.get(f'{phase}_dataloader')
        if not loader:
            continue
        stack = [(f'{phase}_dataloader.dataset', loader.get('dataset'))]
        while stack:
            where, ds = stack.pop()
            if not isinstance(ds, dict):
                continue
            yield where, ds
            if isinstance(ds.get('dataset'), dict):
                stack.append((where + '.dataset', ds['dataset']))
            for i, sub in enumerate(ds.get('datasets') or []):
                stack.append((f'{where}.datasets[{i}]', sub))


def check_dataset_paths(cfg: Config, phases=('train', 'val', 'test')) -> None:
    """Fail early, and clearly, when a dataset path does not exist.

    Checks ``data_root``, ``ann_file`` (which must not be empty either) and
    the folders of ``data_prefix`` of every dataset (wrappers included) of
    the given phases.

    Raises:
        UsageError: Names the config key and the missing path.
        DataError: Names an empty annotation file.
    """
    for where, ds in _dataset_cfgs(cfg, phases):
        root = ds.get('data_root') or ''
        paths = []
        if root:
            paths.append(('data_root', root))
        ann = ds.get('ann_file')
        if ann:
            paths.append(('ann_file', os.path.join(root, ann)))
        prefix = ds.get('data_prefix')
        if isinstance(prefix, str):
            prefix = dict(prefix=prefix)
        for key, value in (prefix or {}).items():
            if isinstance(value, str) and value:
                paths.append((f'data_prefix.{key}', os.path.join(root, value)))
        for key, path in paths:
            if not os.path.exists(path):
                raise UsageError(
                    f'dataset path "{path}" does not exist ({where}.{key}). '
                    f'Put the data there, or point the config at it, e.g. '
                    f'--cfg-options {where}.data_root=/path/to/data')
            if key == 'ann_file' and os.path.isfile(path) and _is_blank(path):
                raise DataError(f'annotation file "{path}" is empty '
                                f'({where}.ann_file)')


def _is_blank(path: str, limit: int = 1 << 16) -> bool:
    """Whether a file is empty or only white space (files up to ``limit``
    bytes are read; a larger one is not blank)."""
    size = os.path.getsize(path)
    if size == 0:
        return True
    if size > limit:
        return False
    with open(path, 'rb') as f:
        return not f.read().strip()


def check_work_dir(work_dir: str) -> None:
    """Create the work dir and make sure files can be written in it.

    Raises:
        UsageError: The work dir is under a file, cannot be created, or
            cannot be written; the message names it and the reason.
    """
    path = osp.abspath(work_dir)
    parent = path
    while not osp.exists(parent) and osp.dirname(parent) != parent:
        parent = osp.dirname(parent)
    if not osp.isdir(parent):
        raise UsageError(f'work dir "{work_dir}" cannot be created: '
                         f'"{parent}" is a file')
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise UsageError(f'work dir "{work_dir}" cannot be created: '
                         f'{err.strerror}') from None
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise UsageError(f'work dir "{work_dir}" cannot be written: '
                         f'{err.strerror}') from None


# ----------------------------------------------------------------------
# --cfg-options

_MISSING = object()


def _lookup(cfg: Any, key: str) -> Any:
    node = cfg._cfg_dict if isinstance(cfg, Config) else cfg
    for part in key.split('.'):
        if isinstance(node, (list, tuple)) and part.isdigit():
            index = int(part)
            if index >= len(node):
                return _MISSING
            node = node[index]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return _MISSING
    return node


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _option_value(key: str, old: Any, new: Any) -> Any:
    """``new`` checked against the type of the value it replaces."""
    if old is _MISSING or old is None or new is None:
        return new
    problem = None
    if isinstance(old, bool):
        if not isinstance(new, bool):
            problem = f'expects true or false (the config has {old})'
    elif isinstance(old, int):
        if isinstance(new, float) and new.is_integer():
            new = int(new)
        if not _is_number(new) or isinstance(new, float):
            problem = f'expects an integer (the config has {old})'
    elif isinstance(old, float):
        if not _is_number(new):
            problem = f'expects a number (the config has {old})'
    elif isinstance(old, str):
        if _is_number(new):
            new = str(new)
    elif isinstance(old, dict):
        if not isinstance(new, dict):
            problem = 'expects a dict (the config has one there)'
    if problem:
        raise ConfigError(f'--cfg-options {key}={new!r}: {problem}')
    return new


def merge_cfg_options(cfg: Config, options: Dict[str, Any]) -> None:
    """Apply ``--cfg-options`` (parsed by mmengine's ``DictAction``) to
    ``cfg``, refusing a value of the wrong type.

    A value that replaces a number must be a number (an integer where the
    config has an integer), one that replaces a bool a bool, one that
    replaces a dict a dict; ``None`` may replace anything. A number given
    where the config has a string is used as that string.

    Args:
        cfg (Config): The config, changed in place.
        options (dict): ``{'a.b.c': value}`` as ``DictAction`` parses them.

    Raises:
        ConfigError: Names the option, the value and what it expects, or
            why the key cannot be set.

    Example:
        >>> cfg = Config(dict(train_cfg=dict(max_iters=600)))
        >>> merge_cfg_options(cfg, {'train_cfg.max_iters': 'abc'})
        Traceback (most recent call last):
        ...
        mmlape.utils.errors.ConfigError: --cfg-options train_cfg.max_iters='abc': expects an integer (the config has 600)
    """  # noqa: E501
    checked = {
        key: _option_value(key, _lookup(cfg, key), value)
        for key, value in options.items()
    }
    for key, value in checked.items():
        try:
            cfg.merge_from_dict({key: value})
        except (KeyError, TypeError, ValueError) as err:
            # mmengine's merge refuses an index past a list's end, or a key
            # below a value that is not a dict.
            reason = err.args[0] if isinstance(err, KeyError) and err.args \
                else str(err)
            raise ConfigError(f'--cfg-options {key}={value!r}: '
                              f'{reason}') from None


# ----------------------------------------------------------------------
# checkpoints: which one to resume, and whether it fits the config


def is_complete_checkpoint(path: str) -> bool:
    """Whether ``path`` is a whole ``torch.save`` checkpoint (a zip archive
    with its directory, written last, and the pickled data in it)."""
    if not osp.isfile(path) or not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            return any(
                name.endswith('data.pkl') for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _checkpoint_naming(cfg: Config) -> Tuple[str, str]:
    hook = (cfg.get('default_hooks') or {}).get('checkpoint') or {}
    by_epoch = hook.get('by_epoch', True)
    tmpl = hook.get('filename_tmpl') or ('epoch_{}.pth'
                                         if by_epoch else 'iter_{}.pth')
    out_dir = hook.get('out_dir')
    folder = cfg.work_dir
    if out_dir and '://' not in str(out_dir):
        folder = osp.join(out_dir, osp.basename(cfg.work_dir.rstrip(os.sep)))
    return folder, tmpl


def find_resume_checkpoint(cfg: Config) -> Optional[str]:
    """The newest complete checkpoint to resume ``cfg``'s run from.

    Looks at the files named by the checkpoint hook's ``filename_tmpl``
    (``iter_{}.pth`` / ``epoch_{}.pth``) in its directory and picks the
    highest step among the complete ones, whatever ``last_checkpoint``
    says; a partial file (a save that was killed) is skipped. When none
    is found, the file ``last_checkpoint`` names is used if it is complete.

    Args:
        cfg (Config): The run's config (``work_dir`` set).

    Returns:
        str | None: The checkpoint, or None when the work dir holds no
        checkpoint and no ``last_checkpoint`` (a run from the start).

    Raises:
        CheckpointError: ``last_checkpoint`` names a file that is missing or
            incomplete, and no other complete checkpoint exists.
    """
    folder, tmpl = _checkpoint_naming(cfg)
    head, _, tail = tmpl.partition('{}')
    pattern = re.compile('^' + re.escape(head) + r'(\d+)' + re.escape(tail) +
                         '$')
    found = []
    if osp.isdir(folder):
        for name in os.listdir(folder):
            match = pattern.match(name)
            if match:
                found.append((int(match.group(1)), osp.join(folder, name)))
    record = osp.join(cfg.work_dir, 'last_checkpoint')
    named = None
    if osp.isfile(record):
        with open(record) as f:
            named = f.read().strip() or None
    for step, path in sorted(found, reverse=True):
        if is_complete_checkpoint(path):
            if named and osp.abspath(named) != osp.abspath(path):
                print_log(
                    f'--resume: last_checkpoint names "{named}"; resuming '
                    f'from "{path}", the newest complete checkpoint',
                    logger='current')
            return path
        print_log(
            f'--resume: skipping "{path}", an incomplete checkpoint',
            logger='current',
            level=30)
    if named is None:
        print_log(
            f'--resume: no checkpoint in "{folder}" yet; the run starts '
            f'from the beginning',
            logger='current')
        return None
    if is_complete_checkpoint(named):
        return named
    state = 'is incomplete' if osp.exists(named) else 'does not exist'
    raise CheckpointError(
        f'--resume: "{record}" names "{named}", which {state}, and '
        f'"{folder}" has no other complete checkpoint. Pass a checkpoint '
        f'(--resume PATH) or train without --resume')


class _Opaque:
    """A config value that is not a literal; compared by its source."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _Opaque) and other.source == self.source

    def __repr__(self) -> str:
        return self.source


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(
            node.op, (ast.USub, ast.UAdd)) and isinstance(
                node.operand, ast.Constant) and _is_number(node.operand.value):
        value = node.operand.value
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {
            _literal(k): _literal(v)
            for k, v in zip(node.keys, node.values)
        }
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == 'dict' and not node.args
            and all(kw.arg for kw in node.keywords)):
        return {kw.arg: _literal(kw.value) for kw in node.keywords}
    return _Opaque(ast.unparse(node))


def recorded_model(meta_cfg: Any) -> Optional[dict]:
    """The ``model`` dict of the config a checkpoint records
    (``meta['cfg']``, the config's text), read without running it.

    Only literals, lists, tuples and ``dict(...)`` are evaluated; any other
    expression is kept as its source text.

    Args:
        meta_cfg: ``checkpoint['meta']['cfg']``.

    Returns:
        dict | None: The model config, or None when there is none to read.

    Example:
        >>> recorded_model("model = dict(backbone=dict(type='LaPEViT'))")
        {'backbone': {'type': 'LaPEViT'}}
    """
    if not isinstance(meta_cfg, str):
        return None
    try:
        tree = ast.parse(meta_cfg)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == 'model'):
            model = _literal(node.value)
            return model if isinstance(model, dict) else None
    return None


#: The fields of a backbone config that make a checkpoint another model's.
COMPARED_FIELDS = ('type', 'arch', 'img_size', 'pe_type', 'with_cls_token',
                   'pe_join')


def _default(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        init = klass.__dict__.get('__init__')
        if init is None:
            continue
        param = inspect.signature(init).parameters.get(name)
        if param is not None and param.default is not param.empty:
            return param.default
    return _MISSING


def _join_cfg(join: Any) -> Any:
    """A ``pe_join`` config with its type's canonical name and every option
    (defaults filled in)."""
    from mmlape.models.layers.pe_join import BasePEJoin
    from mmlape.registry import PE_JOINS
    if join is None:
        join = dict(type='Default')
    elif isinstance(join, str):
        join = dict(type=join)
    if not isinstance(join, dict):
        return join
    join = dict(join)
    lookup = {k.lower(): (k, v) for k, v in PE_JOINS.module_dict.items()}
    name, cls = lookup.get(str(join.get('type')).lower(), (None, None))
    if cls is None:
        return join
    out = dict(type=name)
    base = set(inspect.signature(BasePEJoin.__init__).parameters)
    for klass in cls.__mro__:
        if not (isinstance(klass, type) and issubclass(klass, BasePEJoin)):
            continue
        for pname, param in inspect.signature(
                klass.__init__).parameters.items():
            if (pname in base or pname in out or param.kind
                    in (param.VAR_KEYWORD, param.VAR_POSITIONAL)):
                continue
            out[pname] = join.get(
                pname,
                param.default if param.default is not param.empty else None)
    for key, value in join.items():  # options the join does not know
        out.setdefault(key, value)
    return out


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return 'dict(' + ', '.join(f'{k}={_show(v)}'
                                   for k, v in value.items()) + ')'
    return repr(value)


def _vit_arch(cls: Optional[type], arch: Any) -> Any:
    """The ViT's own arch (dims, layers, heads, FFN) that ``arch`` names;
    ViT-Adapter's presets name one, next to options of the adapter."""
    if cls is None:
        return arch
    if isinstance(arch, str):
        preset = getattr(cls, 'adapter_zoo', {}).get(arch)
        arch = preset['arch'] if isinstance(preset, dict) else arch
    if isinstance(arch, str):
        return dict(getattr(cls, 'arch_zoo', {}).get(arch, {'name': arch}))
    if isinstance(arch, dict):
        keys = ('embed_dims', 'num_layers', 'num_heads',
                'feedforward_channels')
        return {k: arch[k] for k in keys if k in arch}
    return arch


def _arch_settings(cls: type, arch: Any) -> dict:
    """Everything the arch that ``arch`` names sets (ViT-Adapter's
    presets name a ViT arch)."""
    if isinstance(arch, str):
        preset = getattr(cls, 'adapter_zoo', {}).get(arch)
        arch = preset['arch'] if isinstance(preset, dict) else arch
    if isinstance(arch, str):
        return dict(getattr(cls, 'arch_zoo', {}).get(arch, {}))
    return dict(arch) if isinstance(arch, dict) else {}


def _describe_backbone(backbone: dict) -> Dict[str, Tuple[Any, Any]]:
    """``field -> (value to show, value to compare)`` with defaults filled
    in from the backbone class."""
    from mmlape.registry import MODELS
    name = str(backbone.get('type', '')).split('.')[-1]
    try:
        cls = MODELS.get(name)
    except KeyError:
        cls = None
    out = {'type': (name, name)}
    for field in COMPARED_FIELDS[1:]:
        value = backbone.get(field, _MISSING)
        if value is _MISSING and cls is not None:
            value = _default(cls, field)
        if value is None and field in getattr(cls, 'option_defaults', {}):
            # None: the arch's own setting, else the backbone's default.
            settings = _arch_settings(
                cls, backbone.get('arch', _default(cls, 'arch')))
            value = settings.get(field, cls.option_defaults[field])
        if value is _MISSING:
            continue
        compare = value
        if field == 'arch':
            compare = _vit_arch(cls, value)
        elif field == 'img_size':
            if isinstance(value, int):
                compare = (value, value)
            elif isinstance(value, (list, tuple)):
                compare = tuple(value)
        elif field == 'pe_join':
            compare = value = _join_cfg(value)
        out[field] = (value, compare)
    return out


def backbone_differences(recorded: dict,
                         current: dict) -> List[Tuple[str, str, str]]:
    """The fields of :data:`COMPARED_FIELDS` in which two backbone configs
    differ (defaults filled in from the backbone classes).

    Args:
        recorded (dict): The backbone config a checkpoint records.
        current (dict): The backbone config of this run.

    Returns:
        list: ``(field, recorded value, current value)``, as text.

    Example:
        >>> backbone_differences(
        ...     dict(type='LaPEViT', pe_join=dict(type='Default')),
        ...     dict(type='LaPEViT', pe_join=dict(type='Share')))
        [('pe_join', "dict(type='Default')", "dict(type='Share')")]
    """
    theirs, ours = _describe_backbone(recorded), _describe_backbone(current)
    diffs = []
    for field in COMPARED_FIELDS:
        a, b = theirs.get(field), ours.get(field)
        if a is None or b is None or a[1] == b[1]:
            continue
        diffs.append((field, _show(a[0]), _show(b[0])))
    return diffs


def _cfg_backbone(cfg: Any) -> Optional[dict]:
    model = cfg.get('model') if cfg is not None else None
    backbone = model.get('backbone') if isinstance(model, dict) else None
    return backbone if isinstance(backbone, dict) else None


def check_checkpoint_fits(model: torch.nn.Module,
                          filename: str,
                          purpose: str,
                          cfg: Optional[Config] = None) -> dict:
    """Refuse a checkpoint of another model than ``model``.

    When ``cfg`` is given and the checkpoint records its config
    (``meta['cfg']``, as mmengine saves it), the backbones' type, arch,
    image size, PE type, class token and join (with its options) must match;
    then, and for a checkpoint without a recorded config, the weights must
    match ``model``'s keys and shapes exactly.

    Args:
        model (nn.Module): The built model.
        filename (str): The checkpoint.
        purpose (str): What the checkpoint is for, to start the message
            (``'--resume'``, ``'checkpoint'``).
        cfg (Config, optional): The run's config. Defaults to None.

    Returns:
        dict: The checkpoint's state dict (read safely), so that a caller
        need not read the file again.

    Raises:
        CheckpointError: The file cannot be read (names it and the reason),
            or is another model's: names each differing field with both
            values, or lists missing, unexpected and mismatched keys.
    """
    from mmlape.models.checkpoint import unwrap_state_dict
    from mmlape.utils.safe_load import safe_torch_load
    if not os.path.isfile(filename):
        raise CheckpointError(
            f'{purpose}: checkpoint "{filename}" does not exist')
    try:
        ckpt = safe_torch_load(filename, 'cpu')
    except CheckpointError as err:
        raise type(err)(f'{purpose}: {err}') from None
    meta = ckpt.get('meta') if isinstance(ckpt, dict) else None
    recorded = recorded_model(meta.get('cfg')) if isinstance(meta,
                                                             dict) else None
    backbone = _cfg_backbone(cfg)
    if recorded is not None and backbone is not None and isinstance(
            recorded.get('backbone'), dict):
        diffs = backbone_differences(recorded['backbone'], backbone)
        if diffs:
            parts = '; '.join(f'model.backbone.{field} is {theirs} there but '
                              f'{ours} in this config'
                              for field, theirs, ours in diffs)
            raise CheckpointError(
                f'{purpose}: "{filename}" was saved from another model: '
                f'{parts}. Use a checkpoint saved with this config (to '
                f'initialise from another model, use --cfg-options '
                f'load_from=... or the backbone init_cfg instead).')
    state = unwrap_state_dict(ckpt)
    own = getattr(model, 'module', model).state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f'{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}' for k in own
        if k in state and tuple(state[k].shape) != tuple(own[k].shape)
    ]
    if missing or unexpected or mismatched:
        parts = []
        for label, keys in (('missing', missing), ('unexpected', unexpected),
                            ('shape mismatch', mismatched)):
            if keys:
                parts.append(f'{len(keys)} {label} (e.g. {keys[:3]})')
        raise CheckpointError(
            f'{purpose}: "{filename}" is a checkpoint of another model: ' +
            '; '.join(parts) + '. Use a checkpoint saved with this config '
            '(to initialise from another model, use --cfg-options '
            'load_from=... or the backbone init_cfg instead).')
    return state


def _pretrained_sources(cfg: Config) -> List[Tuple[str, str, dict]]:
    """``(where, checkpoint, backbone config)`` of every weight source of
    a run that is not a resume: ``load_from`` and the backbone's
    ``init_cfg=dict(type='Pretrained', prefix='backbone.')``."""
    backbone = _cfg_backbone(cfg)
    sources = []
    if cfg.get('load_from') and not cfg.get('resume') and backbone:
        sources.append(('load_from', cfg.load_from, backbone))
    init = backbone.get('init_cfg') if backbone else None
    if (isinstance(init, dict) and init.get('type') == 'Pretrained'
            and init.get('checkpoint')
            and init.get('prefix') in ('backbone.', 'backbone')):
        sources.append(
            ('model.backbone.init_cfg', init['checkpoint'], backbone))
    return sources


def note_finetune_sources(cfg: Config) -> None:
    """Log a note for each weight source (``load_from``, a backbone's
    ``init_cfg``) saved from another backbone.

    Fine-tuning may start from another model (an MPVG checkpoint initialises
    a PVG ViT-Adapter; an ImageNet ViT a 512x512 Segmenter), so this is not
    refused: the differing fields are logged, and the loader logs the keys
    that do not fit. The checkpoint's file is checked (and refused as
    :func:`~mmlape.utils.safe_load.safe_torch_load` refuses it); only its
    ``meta`` is read (tensors are memory-mapped, not loaded).

    Raises:
        CheckpointError: A source cannot be read; names where it is set.
    """
    from mmlape.utils.safe_load import safe_torch_load
    for where, filename, backbone in _pretrained_sources(cfg):
        if '://' in str(filename):
            continue
        try:
            ckpt = safe_torch_load(filename, 'cpu', mmap=True)
        except CheckpointError as err:
            raise type(err)(f'{where}: {err}') from None
        meta = ckpt.get('meta') if isinstance(ckpt, dict) else None
        recorded = recorded_model(meta.get('cfg')) if isinstance(
            meta, dict) else None
        if not recorded or not isinstance(recorded.get('backbone'), dict):
            continue
        diffs = backbone_differences(recorded['backbone'], backbone)
        if diffs:
            text = '; '.join(f'{field} {theirs} there, {ours} here'
                             for field, theirs, ours in diffs)
            print_log(
                f'{where}: "{filename}" was saved from another backbone '
                f'({text}); its weights initialise this one for '
                f'fine-tuning (keys that do not fit are logged as it '
                f'loads)',
                logger='current')


_ALL_PHASES = ('train', 'val', 'test')


def use_checked_image_loading(cfg: Config,
                              phases: Sequence[str] = _ALL_PHASES) -> int:
    """Load images with mmlape's ``CheckedLoadImageFromFile``, which names
    a missing or corrupt image
    (:mod:`mmlape.datasets.transforms`).

    Replaces every ``LoadImageFromFile`` step (mmcv's, which all three host
    libraries use) of the given phases' dataset pipelines; the steps'
    arguments stay.

    Returns:
        int: How many steps were replaced.
    """
    names = ('LoadImageFromFile', 'mmcv.LoadImageFromFile')
    replaced = 0

    def visit(node: Any) -> None:
        nonlocal replaced
        if isinstance(node, dict):
            if node.get('type') in names:
                node['type'] = 'mmlape.CheckedLoadImageFromFile'
                replaced += 1
            for value in node.values():
                visit(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                visit(value)

    for _, ds in _dataset_cfgs(cfg, phases):
        visit(ds.get('pipeline'))
    return replaced
