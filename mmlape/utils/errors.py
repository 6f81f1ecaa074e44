"""Errors that mean "the input is wrong", not "mmlape has a bug".

mmlape raises a subclass of :class:`InputError` where it checks an input
(config, command-line value, checkpoint, data file, work dir). The tools
print it as one line and exit with status 2 wherever it surfaces; any other
exception is a bug and keeps its traceback.
"""

__all__ = [
    'InputError', 'ConfigError', 'CheckpointError', 'CheckpointNotFoundError',
    'CheckpointPermissionError', 'CheckpointSaveError', 'DataError',
    'UsageError', 'WorkDirError', 'WorkDirInUseError', 'one_line'
]


class InputError(Exception):
    """A problem with the user's input, explained by the message."""


class ConfigError(InputError, ValueError):
    """A config value, a ``--cfg-options`` entry or a command-line flag that
    cannot be used."""


class UsageError(ConfigError):
    """A wrong command-line argument, config value or path; tools print it
    without a traceback and exit with status 2."""


class CheckpointError(InputError, ValueError):
    """A checkpoint that cannot be read, or that belongs to another
    model."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """A checkpoint path that names no file."""


class WorkDirError(InputError, OSError):
    """A file of the work dir that could not be written; the message names
    the file, the cause and the checkpoint that is intact."""


class WorkDirInUseError(InputError):
    """The work dir is held by another run (its process and host are
    named)."""


class CheckpointSaveError(WorkDirError):
    """A checkpoint that could not be written; the message names the file,
    the cause and the checkpoint that is intact."""


class CheckpointPermissionError(CheckpointSaveError, PermissionError):
    """A checkpoint that could not be written for lack of permission (still
    a ``PermissionError`` for code that catches one)."""


class DataError(InputError, ValueError):
    """A data file (annotation, image) that cannot be read."""


def one_line(err: BaseException) -> str:
    """The message of an input error as one line.

    A DataLoader worker's error carries the worker's traceback in its
    message; only its last line is kept, without ``module.Class:``.

    Args:
        err (BaseException): The error.

    Returns:
        str: The message on one line.

    Example:
        >>> one_line(DataError('image "a.png" does not exist'))
        'image "a.png" does not exist'
    """
    text = str(err).strip()
    if 'Original Traceback' in text:
        last = [line for line in text.splitlines() if line.strip()][-1]
        name = type(err).__name__
        if f'{name}: ' in last:
            last = last.split(f'{name}: ', 1)[1]
        text = last.strip()
    return ' '.join(text.split())
