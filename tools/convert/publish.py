"""Publish a trained mmlape checkpoint: its weights and the record of its
model, without the training state.

The checkpoint a run saves (``src``: a path or a URL, ``.pth`` or
``.safetensors``) keeps only ``state_dict`` and ``meta``: the optimizer,
the message hub, the parameter schedulers, mmengine's ``ema_state_dict``
and any other runtime state are dropped. ``meta`` stays whole: its
``cfg`` (the config text) is how ``tools/test.py`` and the other tools
know which model a file is, beside ``dataset_meta``, ``experiment_name``,
``epoch``/``iter``, ``seed`` and ``mmengine_version``; the tool adds
``published_weights`` (``'model'`` or ``'ema'``).

A run with mmengine's ``EMAHook`` saves the EMA weights under
``state_dict`` and the trained model's own under ``ema_state_dict``
(``module.<name>``, beside the hook's ``steps``). The trained model's
weights are published (swapped back from ``ema_state_dict``), or with
``--ema`` the EMA weights; ``--ema`` of a file without EMA weights is
refused.

Two files are written to ``out_dir``, each named with the first 8 hex
digits of its own sha256, as OpenMMLab's publish tools name theirs
(``{stem}-{sha256[:8]}``, no date): ``{stem}-{sha8}.pth`` (``torch.save``)
and ``{stem}-{sha8}.safetensors`` (its ``meta`` as JSON in the header);
both load wherever mmlape reads a checkpoint, URLs included. ``stem`` is
the recorded experiment's config name (``experiment_name`` without
mmengine's timestamp), else ``src``'s file name, or ``--name``. An
existing file is overwritten only with ``--force``. The tool prints what
it dropped, each file's size and sha256, and the ``Weights:`` line to
paste under the config's entry of ``configs/<family>/metafile.yml``
(``tools/analysis/model_index.py`` keeps it; ``get_model('mmlape::<name>',
pretrained=True)`` then loads that URL safely).

Refused in one line (exit status 2): a missing or unreadable ``src``, an
unsafe pickle, a checkpoint that records no mmlape model (``meta['cfg']``
with an mmlape backbone, or a converted official LaPE file's record).

Example:
    python tools/convert/publish.py work_dirs/deit-tiny-lape/epoch_300.pth \
        published/ --url-prefix https://example.org/mmlape

References:
    OpenMMLab's ``tools/model_converters/publish_model.py`` of mmpretrain
    and mmdetection (the keys dropped, the ``-{sha256[:8]}`` file name);
    mmengine's ``mmengine/hooks/ema_hook.py`` (``EMAHook``'s swap of
    ``state_dict`` and ``ema_state_dict`` when it saves).
"""
import glob
import hashlib
import os
import os.path as osp
import pickle
import re
import sys
from collections import OrderedDict
from typing import Dict, List, Mapping, Optional, Tuple

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)
from tools.common import ToolParser  # noqa: E402

#: What a published checkpoint keeps; every other top-level key is runtime
#: state (mmdetection's publish tool keeps the same two).
KEPT = ('meta', 'state_dict')
#: The prefix of the trained model's keys in ``ema_state_dict``.
EMA_PREFIX = 'module.'
#: mmengine's timestamp at the end of ``experiment_name``.
TIMESTAMP = re.compile(r'_\d{8}_\d{6}$')
#: The ``Weights:`` URL's stand-in when no ``--url-prefix`` is given
#: (``tools/analysis/model_index.py`` refuses it: not a URL).
PLACEHOLDER = '<URL-PREFIX>'


class PublishError(ValueError):
    """A checkpoint that cannot be published (one line)."""


def parse_args(argv=None):
    parser = ToolParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        'src',
        help='the checkpoint a run saved: a path or a URL, .pth or '
        '.safetensors')
    parser.add_argument(
        'out_dir', help='where to write the .pth and .safetensors files')
    parser.add_argument(
        '--name',
        metavar='STEM',
        help='the files\' name before -{sha256[:8]} (default: the recorded '
        'config\'s name, else the name of src)')
    parser.add_argument(
        '--ema',
        action='store_true',
        help='publish the EMA weights (of a run with mmengine\'s EMAHook) '
        'instead of the trained model\'s')
    parser.add_argument(
        '--url-prefix',
        metavar='URL',
        help='where the files will be served (e.g. https://example.org/'
        'mmlape): the printed Weights: line is this URL with the .pth\'s '
        'name')
    parser.add_argument(
        '--force',
        action='store_true',
        help='overwrite output files that exist')
    args = parser.parse_args(argv)
    if args.name is not None and (not args.name.strip('. ') or any(
            c in args.name for c in '/\\') or args.name != args.name.strip()):
        parser.error(f'--name "{args.name}" is no file name stem')
    if args.url_prefix is not None:
        if not re.match(r'^[A-Za-z][\w+.-]*://\S+$', args.url_prefix):
            parser.error(f'--url-prefix "{args.url_prefix}" is no URL '
                         f'(scheme://...)')
        args.url_prefix = args.url_prefix.rstrip('/')
    return args


def check_mmlape(ckpt: Mapping, src: str) -> str:
    """Refuse a checkpoint that records no mmlape model.

    Returns:
        str: The recorded backbone's type.

    Raises:
        PublishError: No ``state_dict``, no recorded model, or a model of
            another library.
    """
    from mmlape.models.checkpoint.recorded import recorded_backbone
    from mmlape.registry import MODELS
    state = ckpt.get('state_dict')
    if not isinstance(state, Mapping) or not state:
        raise PublishError(
            f'checkpoint "{src}" is no mmlape training checkpoint (it has no '
            f'state_dict); publish.py publishes what mmlape trains')
    recorded = recorded_backbone(ckpt)
    if recorded is None:
        raise PublishError(
            f'checkpoint "{src}" records no mmlape model (no meta["cfg"] '
            f'with a model.backbone), so tools/test.py could not tell which '
            f'model it is; publish the checkpoint the mmlape run saved')
    kind = str(recorded[1].get('type') or '').split('.')[-1]
    import mmlape.models  # noqa: F401  (registers the backbones)
    if kind not in MODELS.module_dict:
        raise PublishError(
            f'checkpoint "{src}" records a {kind or "typeless"} backbone, '
            f'not one of mmlape\'s ({", ".join(sorted(MODELS.module_dict))})'
            f'; publish it with its own library\'s '
            f'tools/model_converters/publish_model.py')
    return kind


def chosen_weights(ckpt: Mapping, ema: bool, src: str) -> Dict:
    """The state dict to publish: the trained model's weights, or with
    ``ema`` the EMA weights.

    Raises:
        PublishError: ``ema`` of a file without EMA weights, or an
            ``ema_state_dict`` that is not ``EMAHook``'s.
    """
    state = ckpt['state_dict']
    averaged = ckpt.get('ema_state_dict')
    if averaged is None:
        if ema:
            raise PublishError(
                f'checkpoint "{src}" holds no EMA weights (no ema_state_dict:'
                f' its run had no EMAHook); publish it without --ema')
        return OrderedDict(state)
    if not isinstance(averaged, Mapping):
        raise PublishError(f'checkpoint "{src}": its ema_state_dict is a '
                           f'{type(averaged).__name__}, not EMAHook\'s dict')
    # EMAHook swapped them when it saved: state_dict holds the EMA weights
    raw = {
        k[len(EMA_PREFIX):]: v
        for k, v in averaged.items() if k.startswith(EMA_PREFIX)
    }
    extra = [k for k in raw if k not in state]
    lacking = [k for k in state if k not in raw]
    if not raw or extra or lacking:
        found = (f'{len(extra)} keys the state_dict lacks, e.g. {extra[:3]}'
                 if extra else f'it lacks {len(lacking)} keys of the '
                 f'state_dict, e.g. {lacking[:3]}'
                 if raw else f'no "{EMA_PREFIX}" keys')
        raise PublishError(f'checkpoint "{src}": its ema_state_dict is not '
                           f'EMAHook\'s ({found})')
    if ema:
        return OrderedDict(state)
    return OrderedDict((k, raw[k]) for k in state)


def published(ckpt: Mapping, ema: bool, src: str) -> Tuple[dict, List[str]]:
    """A loaded checkpoint as it is published, and the keys dropped.

    Args:
        ckpt (Mapping): The checkpoint a run saved, loaded.
        ema (bool): Publish the EMA weights instead of the trained model's.
        src (str): How messages name the checkpoint.

    Returns:
        tuple[dict, list[str]]: ``{'meta': ..., 'state_dict': ...}`` and
        the top-level keys left out.

    Raises:
        PublishError: The checkpoint records no mmlape model, or holds no
            EMA weights where ``ema`` asks for them.
    """
    check_mmlape(ckpt, src)
    state = chosen_weights(ckpt, ema, src)
    meta = dict(ckpt.get('meta') or {})
    meta['published_weights'] = 'ema' if ema else 'model'
    dropped = [k for k in ckpt if k not in KEPT]
    return dict(meta=meta, state_dict=state), dropped


def default_stem(ckpt: Mapping, src: str) -> str:
    """The recorded config's name (``experiment_name`` without mmengine's
    timestamp), else ``src``'s file name without its extension."""
    meta = ckpt.get('meta')
    name = meta.get('experiment_name') if isinstance(meta, Mapping) else None
    if isinstance(name, str):
        stem = TIMESTAMP.sub('', name)
        if stem and stem != name and '/' not in stem:
            return stem
    base = osp.basename(src.split('?')[0].rstrip('/'))
    for ext in ('.safetensors', '.pth', '.pt', '.ckpt', '.bin'):
        if base.endswith(ext):
            return base[:-len(ext)]
    return osp.splitext(base)[0] or 'checkpoint'


def index_entry(stem: str) -> Optional[str]:
    """The metafile (relative to the repository) whose model index entry is
    named ``stem``, or None."""
    import yaml
    for path in sorted(
            glob.glob(osp.join(ROOT, 'configs', '*', 'metafile.yml'))):
        try:
            with open(path) as f:
                models = (yaml.safe_load(f) or {}).get('Models') or []
        except (OSError, yaml.YAMLError):
            continue
        if any(m.get('Name') == stem for m in models):
            return osp.relpath(path, ROOT)
    return None


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def write_files(ckpt: dict, out_dir: str, stem: str,
                force: bool) -> List[Tuple[str, int, str]]:
    """Write ``{stem}-{sha8}.pth`` and ``.safetensors`` to ``out_dir``:
    each is written whole under a temporary name, hashed, then renamed;
    nothing is renamed while one of the two names exists (without
    ``force``).

    Returns:
        list[tuple[str, int, str]]: Each file's path, size and sha256.

    Raises:
        PublishError: An output exists and ``force`` is not set.
    """
    from tools.common import save_checkpoint_file
    if osp.exists(out_dir) and not osp.isdir(out_dir):
        raise PublishError(f'out_dir "{out_dir}" is a file, not a folder')
    os.makedirs(out_dir, exist_ok=True)
    done, parts = [], []
    try:
        for ext in ('.pth', '.safetensors'):
            part = osp.join(out_dir, f'.{stem}.publishing-{os.getpid()}{ext}')
            parts.append(part)
            save_checkpoint_file(ckpt, part)
            sha = sha256_of(part)
            done.append((part, osp.join(out_dir,
                                        f'{stem}-{sha[:8]}{ext}'), sha))
        for part, path, sha in done:
            if osp.exists(path) and not force:
                same = osp.isfile(path) and sha256_of(path) == sha
                raise PublishError(f'"{path}" exists' + (
                    ' (the same file, published before)' if same else '') +
                                   '; pass --force to overwrite it')
        for part, path, _ in done:
            os.replace(part, path)
    finally:
        for part in parts:
            if osp.exists(part):
                os.remove(part)
    return [(path, osp.getsize(path), sha) for _, path, sha in done]


def size_text(size: int) -> str:
    for unit, scale in (('GiB', 1 << 30), ('MiB', 1 << 20), ('KiB', 1 << 10)):
        if size >= scale:
            return f'{size / scale:.1f} {unit}'
    return f'{size} bytes'


def report(ckpt: dict, dropped: List[str], files: List[Tuple[str, int, str]],
           args, stem: str, had_ema: bool) -> None:
    """Print what was dropped and kept, the files and the model index
    line."""
    weights = 'the EMA weights' if args.ema else 'the trained model\'s weights'
    notes = {
        'ema_state_dict':
        ('the trained model\'s weights, which the EMA weights replace'
         if args.ema else 'the trained model\'s weights were taken from it; '
         '--ema publishes the EMA weights instead')
    }
    if dropped:
        print('dropped: ' + ', '.join(f'{k} ({notes[k]})' if k in notes else k
                                      for k in dropped))
    else:
        print('dropped: nothing (the file held only state_dict and meta)')
    if had_ema and not args.ema:
        weights += ', swapped back from ema_state_dict'
    print(f'kept: state_dict ({len(ckpt["state_dict"])} tensors: {weights}) '
          f'and meta ({", ".join(sorted(ckpt["meta"]))})')
    print('wrote:')
    for path, size, sha in files:
        print(f'  {path}  {size_text(size)} ({size} bytes)  sha256 {sha}')
    pth = osp.basename(files[0][0])
    prefix = args.url_prefix or PLACEHOLDER
    entry = index_entry(stem)
    where = (f'configs/<family>/metafile.yml (mmlape\'s model index has no '
             f'entry "{stem}": under the entry of the config that trained '
             f'it)' if entry is None else entry)
    print(f'model index: in {where}, under "- Name: {stem}", in place of '
          f'"Weights: null":')
    print(f'  Weights: {prefix}/{pth}')
    if args.url_prefix is None:
        print(f'(replace {PLACEHOLDER} with where {pth} is served, or pass '
              f'--url-prefix; the .safetensors file loads by URL as well)')
    print('then python tools/analysis/model_index.py --check (it keeps the '
          'URL)')


def main(argv=None) -> int:
    args = parse_args(argv)
    from mmlape.utils.safe_load import load_checkpoint
    try:
        ckpt = load_checkpoint(args.src, 'cpu')
        out, dropped = published(ckpt, args.ema, args.src)
        stem = args.name or default_stem(ckpt, args.src)
        files = write_files(out, args.out_dir, stem, args.force)
    except (ValueError, OSError, pickle.UnpicklingError) as err:
        # CheckpointError, UnsafeCheckpointError and PublishError are
        # ValueErrors; an OSError: the output folder
        from mmlape.utils.errors import one_line
        print(f'error: {one_line(err)}', file=sys.stderr)
        return 2
    report(out, dropped, files, args, stem, 'ema_state_dict' in ckpt)
    return 0


if __name__ == '__main__':
    sys.exit(main())
