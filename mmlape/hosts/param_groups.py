"""One optimizer parameter group per set of options.

mmengine's ``DefaultOptimWrapperConstructor`` gives every parameter a
group of its own once a config sets ``paramwise_cfg`` (DeiT's recipe does,
for the weight decay of norms, biases, the PE and the class token): 176
groups for DeiT-Ti. PyTorch's optimizers loop over the groups in Python
and launch their kernels per group, fused AdamW included, so every
training step pays for each group on the host
(``benchmarks/bench_host_loop.py``, section ``optimizer``; docs/speed.md,
"Feeding the GPU").
:class:`LaPEOptimWrapperConstructor` builds the same
per-parameter options and then joins the parameters whose options are
equal into one group, in the order they first appear: every parameter
keeps its learning rate, weight decay and the rest, and the optimizer
makes the same update. The DeiT configs get 3 groups (DeiT's official
code, timm's optimizer factory, has 2, with and without weight decay;
mmengine keeps a ``decay_mult`` entry in the groups of ``custom_keys``,
which makes a third).

An optimizer state saved with one group per parameter (by mmengine's
constructor) still loads: the optimizer regroups it the same way first.
The parameter schedulers resume their per-group values as saved, matched
to the groups by position, so such a state is refused, with a message
that says how to resume it, where the scheduled options (learning rate,
momentum) of the old and new group at a position differ (e.g. groups
with different ``lr_mult``). The other way round, a state saved in joined
groups does not load with mmengine's constructor.
"""
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapper
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS

__all__ = ['LaPEOptimWrapperConstructor', 'merge_param_groups']


def _options(group: Dict) -> Dict:
    return {k: v for k, v in group.items() if k != 'params'}


def merge_param_groups(groups: List[Dict]) -> List[Dict]:
    """Join the groups whose options (every key but ``params``) are equal.

    The joined groups come in the order of their first member; within one,
    the parameters keep their order.

    Example:
        >>> a, b, c = (nn.Parameter(torch.zeros(1)) for _ in range(3))
        >>> merged = merge_param_groups([
        ...     dict(params=[a], weight_decay=0.05),
        ...     dict(params=[b], weight_decay=0.0),
        ...     dict(params=[c], weight_decay=0.05)])
        >>> [(len(g['params']), g['weight_decay']) for g in merged]
        [(2, 0.05), (1, 0.0)]
    """
    merged: List[Dict] = []
    seen = set()
    for group in groups:
        for param in group['params']:
            if id(param) in seen:
                # one group each, PyTorch refuses this; joined, it would
                # step the parameter twice
                raise ValueError(
                    'a parameter appears in more than one parameter group '
                    '(one shared by two modules, e.g. tied weights: set '
                    'paramwise_cfg.bypass_duplicate=True to skip its '
                    'second name)')
            seen.add(id(param))
        options = _options(group)
        for joined in merged:
            if _options(joined) == options:
                joined['params'].extend(group['params'])
                break
        else:
            merged.append(dict(options, params=list(group['params'])))
    return merged


#: Group options that mmengine's parameter schedulers set.
_SCHEDULED = ('lr', 'initial_lr', 'momentum', 'betas')


def _regroup_state(optimizer: torch.optim.Optimizer,
                   state_dict: Dict) -> Optional[Dict]:
    """``load_state_dict`` pre-hook: a state saved with more groups than
    ``optimizer`` has (one per parameter, by mmengine's constructor) is
    regrouped as :func:`merge_param_groups` grouped the parameters; a
    state that does not regroup to the optimizer's groups is left to
    PyTorch's checks."""
    saved = state_dict['param_groups']
    if len(saved) <= len(optimizer.param_groups):
        return None
    merged = merge_param_groups(saved)
    if [len(g['params']) for g in merged] != \
            [len(g['params']) for g in optimizer.param_groups]:
        return None
    # mmengine's parameter schedulers resume their own per-group lists
    # (base values, last values) as saved, one entry per old group, and
    # zip them with the optimizer's groups: old group j stands for new
    # group j. That holds only where the scheduled options agree.
    for j, group in enumerate(merged):
        for key in _SCHEDULED:
            if saved[j].get(key) != group.get(key):
                raise ValueError(
                    'cannot resume this optimizer state in groups joined by '
                    'LaPEOptimWrapperConstructor: it was saved with one '
                    f'group per parameter, and old group {j} has {key}='
                    f'{saved[j].get(key)!r} where joined group {j} has '
                    f'{group.get(key)!r}, so the resumed parameter '
                    'schedulers would give the groups wrong values. Resume '
                    'with the constructor it was saved with: --cfg-options '
                    'optim_wrapper.constructor=DefaultOptimWrapperConstructor')
    # PyTorch pairs the saved parameter ids with the optimizer's parameters
    # in group order, so the joined groups' ids find their parameters and
    # the state keyed by them as they are
    return dict(state_dict, param_groups=merged)


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class LaPEOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """mmengine's default constructor, with the parameters whose options
    are equal in one group (see the module's docstring).

    Config::

        optim_wrapper = dict(
            constructor='LaPEOptimWrapperConstructor',
            optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
            paramwise_cfg=dict(flat_decay_mult=0.0))
    """

    def add_params(self,
                   params: List[Dict],
                   module: nn.Module,
                   prefix: str = '',
                   is_dcn_module=None) -> None:
        if prefix:  # mmengine's recursion into the children
            super().add_params(params, module, prefix, is_dcn_module)
            return
        per_parameter: List[Dict] = []
        super().add_params(per_parameter, module, prefix, is_dcn_module)
        merged = merge_param_groups(per_parameter)
        params.extend(merged)
        print_log(
            f'optimizer: {len(per_parameter)} parameters in {len(merged)} '
            'groups, one per set of options (LaPEOptimWrapperConstructor)',
            logger='current')

    def __call__(self, model: nn.Module) -> OptimWrapper:
        wrapper = super().__call__(model)
        optimizer = wrapper.optimizer
        # mmengine hands the groups over inside its config, as ConfigDicts,
        # whose reads cost the optimizer's every step (a DeiT-Ti step reads
        # them ~530 times); plain dicts of the same items, as a resumed
        # optimizer's groups are anyway. Only torch.optim's optimizers:
        # others (ZeRO's) may hold their groups elsewhere too.
        if type(optimizer).__module__.startswith('torch.optim'):
            optimizer.param_groups[:] = [
                dict(g) for g in optimizer.param_groups
            ]
        optimizer.register_load_state_dict_pre_hook(_regroup_state)
        return wrapper
