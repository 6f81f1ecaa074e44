"""The per-layer PE add's Triton kernel (``mmlape.models.layers.pe_add``):
its indexing and rounding in Triton's interpreter on the CPU, when it is
used, and the fall-back to PyTorch's add after a first result that differs
or an error, said once."""
import types

import pytest
import torch

from mmlape.models.layers import pe_add


@pytest.fixture
def interpreted(monkeypatch):
    """The kernel built anew under Triton's CPU interpreter (the tests
    that run it need Triton; the others do not)."""
    pytest.importorskip('triton')
    monkeypatch.setenv('TRITON_INTERPRET', '1')
    monkeypatch.setattr(pe_add, '_TRITON_KERNEL', None)
    monkeypatch.setattr(pe_add, '_TRITON_CHECKED', {})
    yield
    monkeypatch.setattr(pe_add, '_TRITON_KERNEL', None)


@pytest.mark.parametrize('samples', [1, 2, pe_add._SAMPLES])
@pytest.mark.parametrize('shape', [(3, 197, 12), (2, 5, 8), (1, 4, 1030),
                                   (9, 3, 7)])
def test_kernel_adds_the_pe_to_every_sample(interpreted, shape, samples):
    # a sample of 2364 values spans three programs, the last one masked;
    # a batch that samples per program does not divide leaves the last
    # program's extra samples masked
    g = torch.Generator().manual_seed(0)
    h = torch.randn(*shape, generator=g) * 100
    pe = torch.randn(1, *shape[1:], generator=g)
    out = torch.full_like(h, float('nan'), dtype=torch.float16)
    out = pe_add._launch(h, pe, out, samples)
    assert torch.equal(out, (h + pe).half())
    # the interpreter rounds to bfloat16 half-up (a GPU: to nearest even),
    # so on the CPU the bits agree within one unit of the last place
    out = pe_add._launch(h, pe, torch.empty_like(h, dtype=torch.bfloat16),
                         samples)
    want = (h + pe).bfloat16()
    ulps = out.view(torch.int16).int() - want.view(torch.int16).int()
    assert ulps.abs().max() <= 1 and (out.sign() == want.sign()).all()


def test_kernel_writes_nothing_past_the_batch(interpreted):
    """The last program's samples beyond the batch are masked: the memory
    after the output is left as it was (and the input past ``h`` unread)."""
    g = torch.Generator().manual_seed(0)
    h_buf = torch.randn(8, 5, 8, generator=g)
    pe = torch.randn(1, 5, 8, generator=g)
    out_buf = torch.full((8, 5, 8), 7.0, dtype=torch.float16)
    h, out = h_buf[:3], out_buf[:3]
    pe_add._launch(h, pe, out, 4)
    assert torch.equal(out, (h + pe).half())
    assert (out_buf[3:] == 7).all()


def test_the_kernel_is_for_large_tensors_only():
    """Below the threshold the launch costs more than the kernel saves;
    with autograd (training) the threshold is higher."""
    for grad, big in ((True, pe_add._TRITON_MIN_NUMEL['train']),
                      (False, pe_add._TRITON_MIN_NUMEL['eval'])):
        assert pe_add._worth_triton(torch.empty(big, device='meta'), grad)
        assert not pe_add._worth_triton(
            torch.empty(big - 1, device='meta'), grad)
    deit_b = torch.empty(128, 197, 768, device='meta')  # 19.4M values
    deit_ti = torch.empty(256, 197, 192, device='meta')  # 9.7M values
    assert pe_add._worth_triton(deit_b, grad=True)
    assert pe_add._worth_triton(deit_b, grad=False)
    # DeiT-Ti b256 trains with PyTorch's add, evaluates with the kernel
    assert not pe_add._worth_triton(deit_ti, grad=True)
    assert pe_add._worth_triton(deit_ti, grad=False)
    assert pe_add._worth_triton(deit_ti)  # no autograd unless said
    # DeiT-Ti b128 (4.8M values) is launch-bound either way
    assert not pe_add._worth_triton(
        torch.empty(128, 197, 192, device='meta'), grad=False)


@pytest.mark.parametrize('grad', [False, True])
def test_the_threshold_follows_autograd(grad, on_cpu, monkeypatch):
    """``add_attn_pe`` asks for the training threshold when it records
    autograd and the eval one when it does not (``torch.no_grad``, or
    nothing that requires a gradient)."""
    asked = []

    def fits(h, pe, dtype, grad=False):
        asked.append(grad)
        return False

    monkeypatch.setattr(pe_add, '_triton_fits', fits)
    h = torch.randn(2, 5, 8, requires_grad=grad)
    pe = torch.randn(1, 5, 8, requires_grad=grad)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = pe_add.add_attn_pe(h.clone(), pe)
    assert asked == [grad]
    assert out.requires_grad == grad
    assert torch.equal(out, (h + pe).bfloat16())
    if grad:  # under no_grad the same tensors take the eval threshold
        with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
            pe_add.add_attn_pe(h.clone(), pe)
        assert asked == [True, False]


def test_which_tensors_the_kernel_takes(monkeypatch):
    monkeypatch.setattr(pe_add, '_TRITON_MIN_NUMEL', dict(train=1, eval=1))
    h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
    assert not pe_add._triton_fits(h, pe, torch.bfloat16)  # a CPU tensor
    fits = pe_add._shapes_fit
    assert fits(h, pe, torch.bfloat16) and fits(h, pe, torch.float16)
    assert not fits(h, pe, torch.float32)
    assert not fits(h, pe.expand(2, 5, 8), torch.bfloat16)
    assert not fits(h.transpose(1, 2), pe.transpose(1, 2), torch.bfloat16)
    assert not fits(h.half(), pe, torch.bfloat16)
    assert not fits(h, pe[:, :4], torch.bfloat16)
    assert not fits(torch.randn(0, 5, 8), pe, torch.bfloat16)
    # a sample past the kernel's int32 column index
    wide = 2**31 - pe_add._BLOCK
    assert fits(
        torch.empty(1, wide - 1, device='meta'),
        torch.empty(1, wide - 1, device='meta'), torch.bfloat16)
    assert not fits(
        torch.empty(1, wide, device='meta'), torch.empty(
            1, wide, device='meta'), torch.bfloat16)
    if torch.cuda.is_available():
        assert pe_add._triton_fits(h.cuda(), pe.cuda(), torch.bfloat16)


def test_the_fit_checks_pass_the_autograd_flag_on(monkeypatch):
    monkeypatch.setattr(pe_add, '_TRITON_MIN_NUMEL', dict(train=2**40, eval=1))
    h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
    assert pe_add._shapes_fit(h, pe, torch.bfloat16)
    assert pe_add._shapes_fit(h, pe, torch.bfloat16, grad=False)
    assert not pe_add._shapes_fit(h, pe, torch.bfloat16, grad=True)
    # a CUDA tensor's check goes on to the shapes with the flag
    asked = []
    monkeypatch.setattr(pe_add, '_shapes_fit',
                        lambda *args: asked.append(args[3]) or True)
    cuda = types.SimpleNamespace(is_cuda=True, device=pe.device)
    for grad in (True, False):
        assert pe_add._triton_fits(cuda, pe, torch.bfloat16, grad)
    assert asked == [True, False]
    # a PE on another device than the tokens is left to PyTorch's add,
    # which names the mismatch
    other = types.SimpleNamespace(is_cuda=True, device=torch.device('cuda', 0))
    assert not pe_add._triton_fits(other, pe, torch.bfloat16)
    assert asked == [True, False]


@pytest.fixture
def on_cpu(monkeypatch):
    """The kernel's path taken for CPU tensors, its launch counted."""
    monkeypatch.setattr(pe_add, '_TRITON_CHECKED', {})
    monkeypatch.setattr(pe_add, '_USE_TRITON', True)
    monkeypatch.setattr(pe_add, '_triton_fits', lambda *args: True)
    monkeypatch.setattr(pe_add, '_triton_kernel', lambda: (None, None))
    calls = []
    return calls


def test_a_checked_kernel_is_used_from_then_on(on_cpu, monkeypatch):

    def launch(h, pe, out):
        on_cpu.append(1)
        return torch.add(h, pe, out=out)

    monkeypatch.setattr(pe_add, '_launch', launch)
    h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
    for _ in range(3):
        out = pe_add.add_to_dtype(h, pe, torch.bfloat16)
        assert torch.equal(out, (h + pe).bfloat16())
    assert len(on_cpu) == 3
    assert pe_add._TRITON_CHECKED == {(None, torch.bfloat16): True}


@pytest.mark.parametrize('fault', ['differs', 'raises'])
def test_a_kernel_that_fails_its_check_is_left_for_pytorchs_add(
        fault, on_cpu, monkeypatch):
    logged = []
    monkeypatch.setattr(pe_add, 'print_log', lambda msg, logger: logged.append(
        (msg, logger)))

    def launch(h, pe, out):
        on_cpu.append(1)
        if fault == 'raises':
            raise RuntimeError('PTX .version 9.9 does not support .target\n'
                               'more lines')
        return out.fill_(0)

    monkeypatch.setattr(pe_add, '_launch', launch)
    h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
    for _ in range(3):
        out = pe_add.add_to_dtype(h, pe, torch.float16)
        assert torch.equal(out, (h + pe).half())
    assert len(on_cpu) == 1  # tried once
    assert pe_add._TRITON_CHECKED == {(None, torch.float16): False}
    assert len(logged) == 1 and logged[0][1] == 'current'
    said = logged[0][0]
    assert 'Triton kernel is not used' in said and 'cpu' in said
    why = ("its result differs from PyTorch's add" if fault == 'differs' else
           'RuntimeError: PTX .version 9.9 does not support .target')
    assert said.endswith(why), said


def test_no_first_use_check_while_a_cuda_graph_is_captured(
        on_cpu, monkeypatch):
    """The check reads its result back, which a capture forbids: during
    one, PyTorch's add is used and nothing is decided; the check runs at
    the first add outside it."""
    checks = []
    monkeypatch.setattr(pe_add, '_first_launch',
                        lambda h, pe, out, key: checks.append(key) or out)
    monkeypatch.setattr(pe_add, '_capturing', lambda h: True)
    h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
    out = pe_add.add_to_dtype(h, pe, torch.bfloat16)
    assert torch.equal(out, (h + pe).bfloat16())
    assert checks == [] and pe_add._TRITON_CHECKED == {}
    monkeypatch.setattr(pe_add, '_capturing', lambda h: False)
    pe_add.add_to_dtype(h, pe, torch.bfloat16)
    assert checks == [(None, torch.bfloat16)]
    assert not pe_add._capturing(torch.randn(1))  # a CPU tensor
