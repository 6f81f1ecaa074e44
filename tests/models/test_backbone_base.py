"""What every backbone shares through its base: a cached PE plan is never
stale, and the blocks take one PE bundle with one signature.

Every backbone: the ViT (learnable and relative PE), its family archs
(T2T-ViT's fixed sinusoid buffer, CeiT, ViT-Lite, CCT), Swin and
ViT-Adapter. A PE tensor the plan depends on (the PE itself, a PE norm, a
relative-bias table) is replaced after a cached eval pass, in each way
user code and mmengine replace one: a new ``Parameter`` (or buffer), a new
``.data`` at the address the old one freed, an in-place copy, and a write
through ``.data`` (which PyTorch does not version) followed by ``eval()``.
The cached path must then equal the plain one exactly.
"""
import copy
import functools
import inspect

import pytest
import torch
import torch.nn as nn
from conftest import tiny_backbone

from mmlape.models.layers import LayerPE, TransformerBlock
from mmlape.models.layers.block import SwinBlock

#: Tiny models run far faster on one thread of a shared machine.
pytestmark = pytest.mark.usefixtures('one_thread')

#: name -> (build, the tensors a plan depends on)
BACKBONES = {
    'deit':
    (functools.partial(tiny_backbone, 'vit',
                       'LaPE'), ['pos_embed', 'blocks.1.pe_norm.weight']),
    'deit-relative':
    (functools.partial(tiny_backbone, 'vit-relative', 'LaPE'),
     ['blocks.0.attn.relative_position_bias_table',
      'blocks.1.pe_norm.weight']),
    't2t-vit': (functools.partial(tiny_backbone, 't2t-vit', 'LaPE'),
                ['pos_embed', 'blocks.0.pe_norm.bias']),
    'ceit': (functools.partial(tiny_backbone, 'ceit', 'LaPE'),
             ['pos_embed', 'blocks.1.pe_norm.weight']),
    'vit-lite': (functools.partial(tiny_backbone, 'vit-lite', 'LaPE'),
                 ['pos_embed', 'blocks.0.pe_norm.weight']),
    'cct': (functools.partial(tiny_backbone, 'cct', 'LaPE'),
            ['pos_embed', 'blocks.1.pe_norm.weight']),
    'swin': (functools.partial(tiny_backbone, 'swin', 'MPVG'), [
        'pos_embed', 'layers.1.blocks.0.pe_norm.weight',
        'layers.0.downsample.reduction.weight', 'pe_join.last_norm.bias'
    ]),
    'vit-adapter': (functools.partial(tiny_backbone, 'vit-adapter', 'LaPE'),
                    ['pos_embed', 'blocks.2.pe_norm.weight']),
}
KINDS = ('new tensor', 'new data', 'copy', 'data copy then eval')


@functools.lru_cache(maxsize=None)
def built(name):
    torch.manual_seed(0)
    return BACKBONES[name][0]().eval()


def owner_and_name(model, path):
    owner, _, name = path.rpartition('.')
    return (model.get_submodule(owner) if owner else model), name


def replace(model, path, value, kind):
    owner, name = owner_and_name(model, path)
    old = getattr(owner, name)
    if kind == 'new tensor':
        setattr(
            owner, name,
            nn.Parameter(value) if isinstance(old, nn.Parameter) else value)
    elif kind == 'new data':
        # Free the old storage first, so that the allocator may hand its
        # address to the new data: a plan keyed on the address alone would
        # then be served stale.
        old.data = torch.empty(0)
        old.data = value.clone()
    elif kind == 'copy':
        with torch.no_grad():
            old.copy_(value)  # an in-place update: a new version
    else:
        old.data.copy_(value)  # unversioned: PyTorch cannot see it
        model.eval()


def plan_tensors(model):
    """Every tensor of the plan of the PE's own grid (what a forward pass of
    an image of the pretraining size takes)."""
    with torch.no_grad():
        plan = model.pe_plan(model.grid_size)
    return [plan.input, plan.final, plan.final_mean
            ] + plan.residual + plan.attn + plan.bias


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('name', list(BACKBONES))
def test_a_replaced_pe_tensor_never_serves_a_stale_plan(name, kind):
    model = copy.deepcopy(built(name))
    plain = copy.deepcopy(model)
    plain.cache_pe_plan = False
    gen = torch.Generator().manual_seed(1)
    for path in BACKBONES[name][1]:
        with torch.no_grad():  # the cache is in use
            assert model.pe_plan(model.grid_size) is model.pe_plan(
                model.grid_size)
        old = getattr(*owner_and_name(model, path))
        value = old.detach() + torch.randn(
            old.shape, generator=gen, dtype=old.dtype)
        replace(model, path, value, kind)
        replace(plain, path, value, 'copy')
        got, want = plan_tensors(model), plan_tensors(plain)
        assert any(t is not None for t in want)
        for a, b in zip(got, want):
            assert (a is None) == (b is None), path
            if a is not None:
                torch.testing.assert_close(a, b, rtol=0, atol=0, msg=path)
    img = torch.randn(1, 3, *model.img_size)
    with torch.no_grad():  # and the forward pass takes that plan
        for a, b in zip(model(img), plain(img)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_both_block_types_take_one_pe_bundle():
    """One signature, ``blk(x, hw, pe)``, for the ViT's and Swin's blocks;
    the plan hands each layer its bundle."""
    want = inspect.signature(TransformerBlock.forward)
    assert inspect.signature(SwinBlock.forward) == want
    assert list(want.parameters) == ['self', 'x', 'hw', 'pe']
    blk = SwinBlock(16, 2, window_size=2, shift=False)
    x, pos = torch.randn(1, 16, 16), torch.randn(1, 16, 16)
    manual = x + blk.attn(blk.norm1(x) + pos, (4, 4))
    manual = manual + blk.mlp(blk.norm2(manual))
    torch.testing.assert_close(blk(x, (4, 4), LayerPE(attn=pos)), manual)
    with pytest.raises(ValueError, match='no PE logits bias'):
        blk(x, (4, 4), LayerPE(bias=torch.zeros(1, 2, 16, 16)))
    with pytest.raises(ValueError, match='needs the patch grid'):
        blk(x)
