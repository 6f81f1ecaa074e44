"""The official LaPE code's DeiT, written from its equations.

Deliberately independent of mmlape: the weights are a state dict with the
official key names (Ingrid725/LaPE, ``vision_transformer.py``), drawn from
a seed, and the forward pass reads them with plain tensor ops. The PE
tables are built as the official code builds them (in float32, angles
rounded before the sine), the joins as its ``forward_features`` and
``Block``/``RPE_Attention`` apply them, for both releases:

- ``current`` (``--join-type``): ``basic``, ``share``, ``LaPE`` (the PE
  norms chained), ``unshare`` (``pos_embed{i}`` per layer) and ``LN`` for
  the relative PE (both built by the model, not offered by ``main.py``);
  with ``--pe 2D_RPE`` every join but ``LN`` adds the raw bias tables.
- ``first`` (``--pe_joining``, September 2023): ``default``, ``LaPE`` (each
  layer normalises the raw PE); ``--pe RPE --pe_joining LaPE`` normalises
  the bias tables.

The official relative-PE models cannot run their own forward (the
current code unpacks the tensor an ``RPE_Block`` returns as a pair, the
first release reads a ``pos_embed`` they lack); this reference runs their
blocks one after the other, as ``RPE_Block`` computes them.

A checkpoint is saved as the official ``main.py`` saves it: ``model``,
``optimizer``, ``lr_scheduler``, ``epoch``, ``model_ema``, ``scaler`` and
``args`` (an ``argparse.Namespace``).
"""
import argparse
import math

import torch
import torch.nn.functional as F

#: The tiny model of the tests: mmlape's ``arch='test-tiny'`` on 32x32
#: inputs of 8x8 patches (a 4x4 grid).
DIMS, DEPTH, HEADS, HIDDEN, IMG, PATCH, CLASSES = 64, 4, 2, 256, 32, 8, 10
#: DeiT's LayerNorm eps (``partial(nn.LayerNorm, eps=1e-6)``), used by the
#: blocks, the final norm and the absolute PE norms.
EPS = 1e-6
#: ``RPE_Attention.pe_norm`` is ``nn.LayerNorm(num_patches)``: eps 1e-5.
RPE_NORM_EPS = 1e-5

#: Every PE and join of each release (``main.py``'s choices, plus the
#: joins that the model builds but ``main.py`` does not offer: ``unshare``
#: with the learnable PE, ``LN`` with the relative one).
CURRENT = [(pe, join) for pe in ('learnable', '1D_sin', '2D_sin', '2D_RPE')
           for join in ('basic', 'share', 'LaPE')] + [('learnable', 'unshare'),
                                                      ('2D_RPE', 'LN')]
FIRST = [(pe, join) for pe in ('learnable', '1D_sin', '2D_sin', 'RPE')
         for join in ('default', 'LaPE')]


def sin_1d(rows, dims):
    """``1D_sin``: angle ``p / 10000^(2 floor(i/2) / C)`` computed in double
    and stored in float32, then sine on even channels, cosine on odd ones;
    a 2-D ``(rows, C)`` table (``unsqueeze(0)`` is not assigned)."""
    angles = torch.tensor(
        [[p / 10000**(2 * (i // 2) / dims) for i in range(dims)]
         for p in range(rows)],
        dtype=torch.float32)
    table = angles.clone()
    table[:, 0::2] = torch.sin(angles[:, 0::2])
    table[:, 1::2] = torch.cos(angles[:, 1::2])
    return table


def sin_2d(side, dims):
    """``2D_sin``: channels ``[0, C/2)`` encode the column, ``[C/2, C)`` the
    row (sine on even, cosine on odd channels, frequencies
    ``exp(-k ln(10000) / (C/2))`` for even ``k``), in float32; a zero row
    for the class token in front; shape ``(1, 1 + side^2, C)``."""
    half = dims // 2
    freq = torch.exp(torch.arange(0., half, 2) * -(math.log(10000.0) / half))
    pos = torch.arange(0., side)[:, None] * freq  # (side, half / 2)
    col = torch.zeros(side, half)
    col[:, 0::2], col[:, 1::2] = torch.sin(pos), torch.cos(pos)
    # grid position (r, c): column part from c, row part from r
    table = torch.cat([
        col[None, :, :].expand(side, side, half), col[:, None, :].expand(
            side, side, half)
    ], -1).reshape(side * side, dims)
    return torch.cat([torch.zeros(1, dims), table])[None]


def relative_index(side):
    """``RPE_Attention.relative_position_index`` of a ``side x side``
    grid: offset ``(dr, dc)`` to ``(dr + side - 1) * (2 side - 1) + dc +
    side - 1``."""
    r, c = torch.meshgrid(
        torch.arange(side), torch.arange(side), indexing='ij')
    r, c = r.flatten(), c.flatten()
    dr = r[:, None] - r[None, :] + side - 1
    dc = c[:, None] - c[None, :] + side - 1
    return dr * (2 * side - 1) + dc


def _relative(pe):
    return pe in ('2D_RPE', 'RPE')


def _norm_layer(gen, dims):
    return (1 + 0.2 * torch.randn(dims, generator=gen),
            0.2 * torch.randn(dims, generator=gen))


def official_state(pe,
                   join,
                   release='current',
                   seed=None,
                   pe_std=0.5,
                   table_std=0.5):
    """An official model's ``state_dict`` (with its classifier), drawn from
    ``seed``.

    Args:
        pe (str): ``--pe``.
        join (str): ``--join-type`` (``--pe_joining`` for the first
            release).
        release (str): ``'current'`` or ``'first'``.
        seed (int, optional): The seed of every drawn weight; None draws
            from torch's global generator (the tests seed it).
        pe_std (float): Scale of a learnable PE.
        table_std (float): Scale of the relative bias tables (the official
            code starts them at zero; its other PEs start at
            trunc_normal(0.02)).
    """
    gen = (
        torch.default_generator
        if seed is None else torch.Generator().manual_seed(seed))
    n = (IMG // PATCH)**2
    sd = {}

    def w(*shape, std):
        return std * torch.randn(*shape, generator=gen)

    sd['cls_token'] = w(1, 1, DIMS, std=0.5)
    if pe == 'learnable' and join == 'unshare':
        for i in range(DEPTH):
            sd[f'pos_embed{i}'] = w(1, n + 1, DIMS, std=pe_std)
    elif pe == 'learnable':
        sd['pos_embed'] = w(1, n + 1, DIMS, std=pe_std)
    elif pe == '1D_sin':
        sd['pos_embed'] = sin_1d(n + 1, DIMS)
    elif pe == '2D_sin':
        sd['pos_embed'] = sin_2d(IMG // PATCH, DIMS)
    sd['patch_embed.proj.weight'] = w(
        DIMS, 3, PATCH, PATCH, std=(3 * PATCH * PATCH)**-0.5)
    sd['patch_embed.proj.bias'] = w(DIMS, std=0.1)
    lape_norm = join == 'LaPE' and not _relative(pe)
    rpe_norm = _relative(pe) and (join == 'LN' or
                                  (release == 'first' and join == 'LaPE'))
    for i in range(DEPTH):
        b = f'blocks.{i}.'
        if lape_norm:
            sd[b + 'pe_norm.weight'], sd[b + 'pe_norm.bias'] = _norm_layer(
                gen, DIMS)
        sd[b + 'norm1.weight'], sd[b + 'norm1.bias'] = _norm_layer(gen, DIMS)
        if rpe_norm:
            (sd[b + 'attn.pe_norm.weight'],
             sd[b + 'attn.pe_norm.bias']) = _norm_layer(gen, n)
        if _relative(pe):
            side = IMG // PATCH
            sd[b + 'attn.relative_position_bias_table'] = w(
                (2 * side - 1)**2, HEADS, std=table_std)
            sd[b + 'attn.relative_position_index'] = relative_index(side)
        sd[b + 'attn.qkv.weight'] = w(3 * DIMS, DIMS, std=DIMS**-0.5)
        sd[b + 'attn.qkv.bias'] = w(3 * DIMS, std=0.1)
        sd[b + 'attn.proj.weight'] = w(DIMS, DIMS, std=DIMS**-0.5)
        sd[b + 'attn.proj.bias'] = w(DIMS, std=0.1)
        sd[b + 'norm2.weight'], sd[b + 'norm2.bias'] = _norm_layer(gen, DIMS)
        sd[b + 'mlp.fc1.weight'] = w(HIDDEN, DIMS, std=DIMS**-0.5)
        sd[b + 'mlp.fc1.bias'] = w(HIDDEN, std=0.1)
        sd[b + 'mlp.fc2.weight'] = w(DIMS, HIDDEN, std=HIDDEN**-0.5)
        sd[b + 'mlp.fc2.bias'] = w(DIMS, std=0.1)
    sd['norm.weight'], sd['norm.bias'] = _norm_layer(gen, DIMS)
    sd['head.weight'] = w(CLASSES, DIMS, std=DIMS**-0.5)
    sd['head.bias'] = w(CLASSES, std=0.1)
    return sd


def _ln(sd, key, x, eps=EPS):
    return F.layer_norm(x, x.shape[-1:], sd[key + '.weight'],
                        sd[key + '.bias'], eps)


def _block(sd, i, x, attn_in=None, bias=None):
    """One block: ``x + Attn(LN1(x) [+ p]) [+ bias]``, then the MLP."""
    b = f'blocks.{i}.'
    h = _ln(sd, b + 'norm1', x)
    if attn_in is not None:
        h = h + attn_in
    bsz, n, c = h.shape
    qkv = F.linear(h, sd[b + 'attn.qkv.weight'], sd[b + 'attn.qkv.bias'])
    q, k, v = qkv.reshape(bsz, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
    logits = q @ k.transpose(-2, -1) * (c // HEADS)**-0.5
    if bias is not None:  # patch-patch logits only
        logits[:, :, 1:, 1:] += bias
    h = (logits.softmax(-1) @ v).transpose(1, 2).reshape(bsz, n, c)
    x = x + F.linear(h, sd[b + 'attn.proj.weight'], sd[b + 'attn.proj.bias'])
    h = F.gelu(
        F.linear(
            _ln(sd, b + 'norm2', x), sd[b + 'mlp.fc1.weight'],
            sd[b + 'mlp.fc1.bias']))
    return x + F.linear(h, sd[b + 'mlp.fc2.weight'], sd[b + 'mlp.fc2.bias'])


def _relative_bias(sd, i, n):
    b = f'blocks.{i}.attn.'
    table = sd[b + 'relative_position_bias_table']
    bias = table[sd[b + 'relative_position_index'].reshape(-1)]
    bias = bias.reshape(n, n, -1).permute(2, 0, 1)[None]
    if b + 'pe_norm.weight' in sd:
        bias = _ln(sd, b + 'pe_norm', bias, RPE_NORM_EPS)
    return bias


def official_logits(sd, img, pe, join, release='current'):
    """The official model's logits (eval mode: no dropout, no drop path)."""
    x = F.conv2d(
        img,
        sd['patch_embed.proj.weight'],
        sd['patch_embed.proj.bias'],
        stride=PATCH).flatten(2).transpose(1, 2)
    n = x.shape[1]
    x = torch.cat([sd['cls_token'].expand(x.shape[0], -1, -1), x], 1)
    pos = sd.get('pos_embed')
    if _relative(pe):
        for i in range(DEPTH):
            x = _block(sd, i, x, bias=_relative_bias(sd, i, n))
    elif join in ('basic', 'default'):
        x = x + pos
        for i in range(DEPTH):
            x = _block(sd, i, x)
    elif join == 'share':
        for i in range(DEPTH):
            x = _block(sd, i, x + pos)
    elif join == 'unshare':
        for i in range(DEPTH):
            x = _block(sd, i, x + sd[f'pos_embed{i}'])
    elif join == 'LaPE':
        stream = pos
        for i in range(DEPTH):
            p = _ln(sd, f'blocks.{i}.pe_norm',
                    stream if release == 'current' else pos)
            stream = p
            x = _block(sd, i, x, attn_in=p)
    else:
        raise ValueError(f'the official code has no join {join!r}')
    x = _ln(sd, 'norm', x)
    return F.linear(x[:, 0], sd['head.weight'], sd['head.bias'])


def official_args(pe, join, release='current', model='deit_test_patch8_32'):
    """``args`` as ``main.py`` records them (the fields the converter
    reads, and a few it does not). The default model name is outside the
    official registry: the tests' model is tiny."""
    args = argparse.Namespace(
        model=model,
        pe=pe,
        input_size=IMG,
        batch_size=64,
        lr=5e-4,
        drop_path=0.1,
        output_dir='result/x',
        distributed=False)
    if release == 'current':
        args.join_type = join
    else:
        args.pe_joining = join
    return args


def save_official(path, sd, pe, join, release='current', **args):
    """Save as the official ``main.py`` does (``utils.save_on_master``)."""
    model = {k: v for k, v in sd.items()}
    torch.save(
        {
            'model': model,
            'optimizer': {
                'state': {},
                'param_groups': [{
                    'lr': 5e-4,
                    'params': [0, 1]
                }]
            },
            'lr_scheduler': {
                'last_epoch': 3
            },
            'epoch': 3,
            'model_ema': {
                k: v.clone()
                for k, v in model.items()
            },
            'scaler': {
                'scale': 65536.0,
                '_growth_tracker': 0
            },
            'args': official_args(pe, join, release, **args),
        }, path)
    return str(path)
