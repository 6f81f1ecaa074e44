"""mmengine's strategies as mmlape runs them: which ones its checkpoints
serve, and FSDP resuming its optimizer with the torch that mmlape pins.

- :func:`strategy_refusal`: mmlape's atomic saves, ``--resume`` and safe
  loading work on one file; a strategy that saves a folder (DeepSpeed,
  ColossalAI, FSDP's ``'local'`` shards) is refused with one line.
- :class:`LaPEFSDPStrategy`: mmengine 0.10.7 calls
  ``FSDP.optim_state_dict_to_load`` in torch 2.0's argument order, which
  torch >= 2.1 refuses, so ``--resume`` fails. The tools run a config's
  ``FSDPStrategy`` as this class, which changes nothing else.
"""
import inspect
from typing import Optional

from mmengine.registry import STRATEGIES

__all__ = ['LaPEFSDPStrategy', 'strategy_refusal']

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


try:
    from mmengine._strategy.fsdp import FSDP, FSDPStrategy
except ImportError:  # pragma: no cover - torch without FSDP
    FSDPStrategy = None

if FSDPStrategy is not None:

    @STRATEGIES.register_module()
    class LaPEFSDPStrategy(FSDPStrategy):
        """mmengine's ``FSDPStrategy`` whose ``--resume`` calls torch's
        ``FSDP.optim_state_dict_to_load`` in the argument order of the
        installed torch.

        Takes the arguments of ``FSDPStrategy``.

        Example:
            >>> strategy = dict(type='LaPEFSDPStrategy',
            ...                 state_dict_cfg='full')
        """

        def load_optim_state_dict(self, state_dict: dict) -> None:
            optimizer = self.optim_wrapper.optimizer
            params = inspect.signature(FSDP.optim_state_dict_to_load)
            if next(iter(params.parameters)) == 'model':  # torch >= 2.1
                state = FSDP.optim_state_dict_to_load(self.model, optimizer,
                                                      state_dict)
            else:  # pragma: no cover - torch 2.0
                state = FSDP.optim_state_dict_to_load(state_dict, self.model,
                                                      optimizer)
            self.optim_wrapper.load_state_dict(state)
else:  # pragma: no cover
    LaPEFSDPStrategy = None
