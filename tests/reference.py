"""Reference forward passes written from docs/methods.md's equations.

Deliberately independent of mmlape's plan machinery: plain tensor ops on the
model's weights, one equation per line of docs/methods.md. A model with a
rotary PE (``rope_type``) rotates every layer's queries and keys as the
RoPE-ViT paper writes it (channel pairs as complex numbers); its joins act
on the absolute PE beside it (``pos_embed``).
"""
import math

import torch
import torch.nn.functional as F


def ln(mod, x):
    return F.layer_norm(x, mod.normalized_shape, mod.weight, mod.bias, mod.eps)


def rope_rotate(t, freqs, hw, extra):
    """RoPE-ViT: in head ``h`` the channel pair ``j`` of the patch in row
    ``y``, column ``x`` (raster order, after ``extra`` tokens that are not
    rotated), read as the complex number ``t_{2j} + i t_{2j+1}``, is
    multiplied by ``exp(i (x fx[h, j] + y fy[h, j]))``."""
    h, w = hw
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
    angle = (xs.reshape(1, -1, 1) * freqs[0][:, None] +
             ys.reshape(1, -1, 1) * freqs[1][:, None])  # heads, N, d/2
    turn = torch.polar(torch.ones_like(angle), angle)
    patches = t[:, :, extra:]
    z = torch.view_as_complex(
        patches.reshape(*patches.shape[:-1], -1, 2).contiguous())
    turned = torch.view_as_real(z * turn).flatten(-2)
    return torch.cat([t[:, :, :extra], turned], dim=2)


def msa(blk, h, bias=None, rope=None):
    """``rope``: ``(grid, extra tokens)`` of a model with a rotary PE."""
    b, n, c = h.shape
    heads = blk.attn.num_heads
    qkv = F.linear(h, blk.attn.qkv.weight, blk.attn.qkv.bias)
    q, k, v = qkv.reshape(b, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
    if rope is not None:
        q = rope_rotate(q, blk.attn.rope_frequencies(), *rope)
        k = rope_rotate(k, blk.attn.rope_frequencies(), *rope)
    logits = q @ k.transpose(-1, -2) / math.sqrt(c // heads)
    if bias is not None:
        logits = logits + bias
    out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
    return F.linear(out, blk.attn.proj.weight, blk.attn.proj.bias)


def mlp(blk, h):
    h = F.gelu(F.linear(h, blk.mlp.fc1.weight, blk.mlp.fc1.bias))
    return F.linear(h, blk.mlp.fc2.weight, blk.mlp.fc2.bias)


def second_half(blk, x):
    """``x_{l+1} = x'_l + MLP(LN2_l(x'_l))``."""
    return x + mlp(blk, ln(blk.norm2, x))


def tokens_of(model, img):
    x = model.patch_embed.proj(img).flatten(2).transpose(1, 2)
    if model.with_cls_token:
        x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], 1)
    return x


def reference_forward(model,
                      img,
                      join,
                      hierarchical=True,
                      eta=None,
                      last_source='pos_0'):
    """All tokens after the final norm (``out_type='raw'``)."""
    x = tokens_of(model, img)
    pos = model.pos_embed
    blocks = model.blocks
    L = len(blocks)
    rope = None
    if getattr(model, 'rope_type', None):
        rope = (tuple(model.grid_size), model.num_extra_tokens)

    def attend(blk, h):
        return msa(blk, h, rope=rope)

    if join == 'default':
        if pos is not None:  # (none beside a rotary PE alone)
            x = x + pos
        for blk in blocks:
            x = second_half(blk, x + attend(blk, ln(blk.norm1, x)))
    elif join == 'share':
        for blk in blocks:
            x = x + pos
            x = second_half(blk, x + attend(blk, ln(blk.norm1, x)))
    elif join == 'unshare':
        for i, blk in enumerate(blocks):
            x = x + pos[i:i + 1]
            x = second_half(blk, x + attend(blk, ln(blk.norm1, x)))
    elif join == 'lape':
        eta = L if eta is None else eta
        stream = pos
        for i, blk in enumerate(blocks):
            if i < eta:
                p = ln(blk.pe_norm, stream if hierarchical else pos)
                stream = p
                x = second_half(blk, x + attend(blk, ln(blk.norm1, x) + p))
            else:
                x = second_half(blk, x + attend(blk, ln(blk.norm1, x)))
    elif join in ('pvg', 'mpvg'):
        x = x + pos
        stream = pos
        received = {}
        for i, blk in enumerate(blocks):
            if i == 0:
                x = second_half(blk, x + attend(blk, ln(blk.norm1, x)))
                continue
            p = ln(blk.pe_norm, stream)
            received[i] = p
            stream = p
            x = second_half(blk, x + attend(blk, ln(blk.norm1, x) + p))
        y = ln(model.norm, x)
        if join == 'mpvg':
            src = pos if last_source == 'pos_0' else received[last_source]
            y = y + ln(model.pe_join.last_norm, src)
        return y
    else:
        raise ValueError(join)
    return ln(model.norm, x)


def reference_relative_lape(model, img):
    """LaPE with a relative PE: each layer's bias through its own LN over
    the key axis, added to the patch-patch logits."""
    x = tokens_of(model, img)
    e = 1 if model.with_cls_token else 0
    for blk in model.blocks:
        table = blk.attn.relative_position_bias_table
        idx = blk.attn.relative_position_index
        n = idx.shape[0]
        bias = table[idx.reshape(-1)].reshape(n, n, -1).permute(2, 0, 1)
        bias = ln(blk.pe_norm, bias)
        full = torch.zeros(bias.shape[0], n + e, n + e)
        full[:, e:, e:] = bias
        x = second_half(blk, x + msa(blk, ln(blk.norm1, x), full[None]))
    return ln(model.norm, x)
