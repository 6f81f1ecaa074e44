"""FLOPs as ``torch.utils.flop_counter`` counts them (a multiply-add is 2
FLOPs), attention included on every device.

torch's counter has formulas for the CUDA kernels of
``F.scaled_dot_product_attention`` but not for the CPU one
(``aten._scaled_dot_product_flash_attention_for_cpu``), so on a CPU a
ViT's attention products (``q @ k.T`` and the weighted sum of ``v``) would
go uncounted: DeiT-Ti would count 2.15 GFLOPs instead of 2.51 (the DeiT
paper's 1.3 G multiply-adds). :func:`flop_counter` maps the CPU kernel and
its backward to torch's own formulas for the CUDA ones.

Example:
    >>> import torch
    >>> q = torch.randn(1, 2, 10, 8)
    >>> with flop_counter() as counter:
    ...     _ = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    >>> counter.get_total_flops() == 2 * (2 * 2 * 10 * 10 * 8)
    True
"""
import torch
from torch.utils import flop_counter as fc

__all__ = ['flop_counter']


def _attention(query, key, value, *args, out_val=None, **kwargs) -> int:
    return fc.sdpa_flop_count(query.shape, key.shape, value.shape)


def _attention_backward(grad_out,
                        query,
                        key,
                        value,
                        *args,
                        out_val=None,
                        **kwargs) -> int:
    return fc.sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape,
                                       value.shape)


# (the counter passes the tensors themselves to a formula marked raw)
_attention._get_raw = _attention_backward._get_raw = True  # type: ignore


def flop_counter(**kwargs) -> fc.FlopCounterMode:
    """torch's ``FlopCounterMode`` (``display=False`` unless given) with
    the CPU attention kernels counted as their CUDA counterparts are."""
    aten = torch.ops.aten
    mapping = {}
    for name, formula in (
        ('_scaled_dot_product_flash_attention_for_cpu', _attention),
        ('_scaled_dot_product_flash_attention_for_cpu_backward',
         _attention_backward),
    ):
        if hasattr(aten, name):
            mapping[getattr(aten, name)] = formula
    kwargs.setdefault('display', False)
    return fc.FlopCounterMode(custom_mapping=mapping, **kwargs)
