"""mmengine's FSDP strategy, resuming its optimizer with the torch that
mmlape pins.

mmengine 0.10.7 calls ``FSDP.optim_state_dict_to_load`` in torch 2.0's
argument order, which torch >= 2.1 refuses, so ``--resume`` fails. The
tools run a config's ``FSDPStrategy`` as :class:`LaPEFSDPStrategy`, which
changes nothing else.
"""
import inspect

from mmengine.registry import STRATEGIES

__all__ = ['LaPEFSDPStrategy']

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
