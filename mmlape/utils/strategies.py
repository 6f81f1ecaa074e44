"""Which of mmengine's ``FlexibleRunner`` strategies mmlape's checkpoints
serve.

mmlape's atomic saves, ``--resume`` and safe loading work on one file; a
strategy that saves a folder (DeepSpeed, ColossalAI, FSDP's ``'local'``
shards) is refused with one line (:func:`strategy_refusal`).
"""
from typing import Optional

__all__ = ['strategy_refusal']

_ADVICE = ("use strategy=dict(type='DDPStrategy') or "
           "dict(type='FSDPStrategy', state_dict_cfg='full')")


def strategy_refusal(cls: type,
                     state_dict_type: Optional[str] = None) -> Optional[str]:
    """Why mmlape's checkpoints cannot serve a strategy, or None.

    Args:
        cls (type): The strategy class.
        state_dict_type (str, optional): For an FSDP strategy, the name of
            its ``StateDictType`` (``'FULL_STATE_DICT'``, ...).

    Returns:
        str | None: One line naming the strategy, what it saves and what
        works instead.

    Example:
        >>> from mmengine._strategy import DDPStrategy, FSDPStrategy
        >>> strategy_refusal(DDPStrategy) is None
        True
        >>> strategy_refusal(FSDPStrategy, 'LOCAL_STATE_DICT')[:40]
        "FSDPStrategy with state_dict_cfg='local'"
    """
    from mmengine._strategy import FSDPStrategy, SingleDeviceStrategy
    name = cls.__name__
    if not issubclass(cls, SingleDeviceStrategy):
        return (f'{name} saves each checkpoint as a folder in its own '
                f"layout, which mmlape's atomic checkpoints, --resume and "
                f'safe loading do not handle; {_ADVICE}')
    if issubclass(cls, FSDPStrategy) and state_dict_type != 'FULL_STATE_DICT':
        shown = dict(LOCAL_STATE_DICT="'local'").get(state_dict_type or '',
                                                     repr(state_dict_type))
        return (f'{name} with state_dict_cfg={shown} saves each checkpoint '
                f'as a folder of per-rank shards, which --resume, '
                f"tools/test.py and mmlape's atomic checkpoints do not "
                f'handle; {_ADVICE}')
    return None
