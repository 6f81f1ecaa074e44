"""Which checkpoint ``tools/train.py --resume`` (without a path) resumes.

:func:`find_resume_checkpoint` takes the newest complete checkpoint on
disk (``last_checkpoint`` can be stale after a kill), else the record.
"""
import os
import os.path as osp
import re
import zipfile
from typing import Optional, Tuple

from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.runner import find_latest_checkpoint

from mmlape.utils.errors import CheckpointError

__all__ = ['find_resume_checkpoint', 'is_complete_checkpoint']


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
    """The checkpoint hook's folder and ``filename_tmpl``."""
    hook = (cfg.get('default_hooks') or {}).get('checkpoint') or {}
    tmpl = hook.get('filename_tmpl') or ('epoch_{}.pth' if hook.get(
        'by_epoch', True) else 'iter_{}.pth')
    out_dir, folder = hook.get('out_dir'), cfg.work_dir
    if out_dir and '://' not in str(out_dir):
        folder = osp.join(out_dir, osp.basename(cfg.work_dir.rstrip(os.sep)))
    return folder, tmpl


def _read_record(work_dir: str, record: str) -> Tuple[Optional[str], str]:
    """What ``last_checkpoint`` names, read as mmengine reads it, and why
    it cannot be read ('' when it can): bytes that are not text in the
    locale's encoding (a damaged file), or an OS error."""
    if not osp.isfile(record):
        return None, ''
    try:
        return find_latest_checkpoint(work_dir) or None, ''
    except UnicodeDecodeError as err:
        return None, (f'byte {err.object[err.start:err.start + 1]!r} at '
                      f'{err.start} is not {err.encoding} text')
    except OSError as err:
        return None, err.strerror or str(err)


def find_resume_checkpoint(cfg: Config) -> Optional[str]:
    """The newest complete checkpoint of ``cfg``'s work dir (named by the
    checkpoint hook's ``filename_tmpl``), whatever ``last_checkpoint`` says;
    else the one ``last_checkpoint`` names; None when there is neither (a
    run from the start).

    Raises:
        CheckpointError: ``last_checkpoint`` names a file that is missing or
            incomplete, or cannot be read (not text), and no other complete
            checkpoint exists.
    """
    folder, tmpl = _checkpoint_naming(cfg)
    head, _, tail = tmpl.partition('{}')
    pattern = re.compile(f'^{re.escape(head)}(\\d+){re.escape(tail)}$')
    found = []
    for name in os.listdir(folder) if osp.isdir(folder) else []:
        match = pattern.match(name)
        if match:
            found.append((int(match.group(1)), osp.join(folder, name)))
    record = osp.join(cfg.work_dir, 'last_checkpoint')
    named, unreadable = _read_record(cfg.work_dir, record)
    for _, path in sorted(found, reverse=True):
        if is_complete_checkpoint(path):
            if unreadable:
                print_log(
                    f'--resume: "{record}" cannot be read ({unreadable}); '
                    f'resuming from "{path}", the newest complete '
                    f'checkpoint',
                    logger='current',
                    level=30)
            elif named and osp.abspath(named) != osp.abspath(path):
                print_log(
                    f'--resume: last_checkpoint names "{named}"; resuming '
                    f'from "{path}", the newest complete checkpoint',
                    logger='current')
            return path
        print_log(
            f'--resume: skipping "{path}", an incomplete checkpoint',
            logger='current',
            level=30)
    if unreadable:
        raise CheckpointError(
            f'--resume: "{record}" cannot be read ({unreadable}); it should '
            f'hold the path of the checkpoint to resume, and "{folder}" has '
            f'no complete checkpoint. Delete it to start from the '
            f'beginning, or pass a checkpoint (--resume PATH)')
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
