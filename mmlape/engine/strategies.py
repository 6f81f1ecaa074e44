"""mmengine's FSDP strategy, resuming its optimizer with the torch that
mmlape pins.

References:
    mmengine 0.10.7's ``FSDPStrategy.load_optim_state_dict`` calls
    ``FSDP.optim_state_dict_to_load(optim_state_dict, model, optim)``, the
    argument order of torch 2.0; torch 2.1 and later take
    ``(model, optim, optim_state_dict)``, so every ``--resume`` under
    mmengine's FSDP strategy fails (``TypeError: unhashable type: 'dict'``,
    measured with torch 2.13).

The tools run a config's ``FSDPStrategy`` as :class:`LaPEFSDPStrategy`
(:func:`~.runner_setup.check_flexible_runner`), which changes nothing
else.
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
