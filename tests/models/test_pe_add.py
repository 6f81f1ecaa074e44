"""The per-layer PE add (``mmlape.models.layers.pe_add.add_attn_pe``) at
its edges: every input PyTorch's ``(h + pe)`` under autocast takes gives
the same values and gradients (a PE with a batch of its own, float64
tokens, meta tensors), through a trace and called directly with
autograd."""
import pytest
import torch
from torch import nn

from mmlape.models.layers import pe_add


def _reference(h, pe, dtype):
    """What the attention's projection sees without mmlape's add."""
    return (h + pe).to(dtype)


@pytest.mark.parametrize('pe_shape', [(1, 5, 8), (3, 5, 8), (5, 8), (1, 1, 8),
                                      (3, 1, 8)])
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_the_pe_gradient_is_summed_over_its_broadcast(pe_shape, dtype):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 5, 8, generator=g, requires_grad=True)
    pe = torch.randn(*pe_shape, generator=g, requires_grad=True)
    up = torch.randn(3, 5, 8, generator=g).to(dtype)
    with torch.autocast('cpu', dtype=dtype):
        out = pe_add.add_attn_pe(h * 1, pe)
    assert out.dtype == dtype
    assert torch.equal(out, _reference(h, pe, dtype))
    got = torch.autograd.grad(out, (h, pe), up)
    want = torch.autograd.grad(_reference(h, pe, dtype), (h, pe), up)
    assert got[0].shape == h.shape and got[1].shape == pe.shape
    assert torch.equal(got[0], want[0])
    # the reference sums the rounded gradient in its own order
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-5)


def test_add_to_dtype_records_autograd_when_asked_directly():
    h = torch.randn(2, 5, 8, requires_grad=True)
    pe = torch.randn(1, 5, 8, requires_grad=True)
    out = pe_add.add_to_dtype(h, pe, torch.bfloat16)
    assert out.requires_grad and out.dtype == torch.bfloat16
    assert torch.equal(out, _reference(h, pe, torch.bfloat16))
    out.float().sum().backward()
    assert torch.equal(h.grad, torch.ones_like(h))
    assert torch.equal(pe.grad, torch.full_like(pe, 2.))
    with torch.no_grad():
        assert not pe_add.add_to_dtype(h, pe, torch.bfloat16).requires_grad


def test_float64_tokens_stay_float64_as_autocast_leaves_them():
    """Autocast casts float32 (and the other half type) only; a float64
    model under it keeps float64, and so does the add."""
    lin = nn.Linear(8, 8).double()
    h, pe = torch.randn(2, 5, 8).double(), torch.randn(1, 5, 8).double()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        want = lin(h + pe)
        out = pe_add.add_attn_pe(h.clone(), pe)
        assert out.dtype == torch.float64
        assert torch.equal(lin(out), want)


@pytest.mark.parametrize('autocast', [False, True])
def test_meta_tensors_take_the_plain_add(autocast):
    """Shape inference on the meta device (autocast knows no such device
    type) gets the add's shape and dtype."""
    h = torch.empty(2, 5, 8, device='meta')
    pe = torch.empty(1, 5, 8, device='meta')
    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
        out = pe_add.add_attn_pe(h, pe)
    assert out.shape == (2, 5, 8) and out.dtype == torch.float32
    assert out.device.type == 'meta'


def test_a_trace_records_the_add(monkeypatch):
    """Under ``torch.jit.trace`` the add is PyTorch's ``h + pe`` (a
    trace does not record a Triton launch), with the same values."""
    launched = []
    monkeypatch.setattr(pe_add, 'add_to_dtype',
                        lambda *args, **kw: launched.append(1))

    def layer(h, pe):
        with torch.autocast('cpu', dtype=torch.bfloat16):
            return pe_add.add_attn_pe(h * 1, pe).to(torch.bfloat16)

    h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
    traced = torch.jit.trace(layer, (h, pe), check_trace=False)
    assert not launched
    h2 = torch.randn(2, 5, 8)
    assert torch.equal(traced(h2, pe), _reference(h2, pe, torch.bfloat16))
