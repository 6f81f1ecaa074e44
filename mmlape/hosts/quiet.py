"""Known harmless notices of the host libraries, kept out of a run's
output.

Each notice listed comes from the libraries' own calls in an ordinary run
and asks nothing of the user. The tools apply :func:`quiet_host_notices`
(Python warnings) and :func:`quiet_logger` (the run's logger) so that an
error's one line is not buried; other warnings are untouched.
"""
import logging
import re
import warnings

__all__ = [
    'HARMLESS_LOG_MESSAGES', 'HARMLESS_WARNINGS', 'quiet_host_notices',
    'quiet_logger'
]

#: ``(category, message regex)`` of Python warnings that say nothing a user
#: can act on.
HARMLESS_WARNINGS = (
    # mmengine and mmcv import pkg_resources (setuptools < 81).
    (UserWarning, r'pkg_resources is deprecated'),
    # mmengine's set_multi_processing, once per rank of a distributed run.
    (UserWarning, r'Setting (OMP|MKL)_NUM_THREADS environment variable'),
    # torch's DDP, given broadcast_buffers=False by mmengine's wrapper.
    (FutureWarning, r'`broadcast_buffers` is deprecated'),
    # torch's FSDP, called so by mmengine's FSDPStrategy.
    (FutureWarning, r'FSDP\.state_dict_type\(\) and '
     r'FSDP\.set_state_dict_type\(\) are being deprecated'),
    # mmseg's own calls and defaults in its configs.
    (UserWarning, r'``build_loss`` would be deprecated soon'),
    (UserWarning, r'Default ``avg_non_ignore`` is False'),
    (UserWarning, r'The draw is False, it means that the hook for '
     r'visualization will not take effect'),
    (UserWarning, r'`reduce_zero_label` will be deprecated'),
)

#: Messages mmengine logs as warnings on every run with a checkpoint hook.
HARMLESS_LOG_MESSAGES = (
    r'"FileClient" will be deprecated in future',
    r'"HardDiskBackend" is the alias of "LocalBackend"',
)


def quiet_host_notices() -> None:
    """Ignore the warnings of :data:`HARMLESS_WARNINGS` in this process."""
    for category, message in HARMLESS_WARNINGS:
        warnings.filterwarnings('ignore', message=message, category=category)


class _DropHarmless(logging.Filter):
    """Drops the records of :data:`HARMLESS_LOG_MESSAGES`."""

    pattern = re.compile('|'.join(HARMLESS_LOG_MESSAGES))

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(str(record.msg))


def quiet_logger(logger: logging.Logger) -> None:
    """Drop :data:`HARMLESS_LOG_MESSAGES` from ``logger`` (once)."""
    if not any(isinstance(f, _DropHarmless) for f in logger.filters):
        logger.addFilter(_DropHarmless())
