"""T2T-ViT, CeiT, ViT-Lite and CCT: official checkpoint layouts and
reference forward passes written from the papers' equations.

Deliberately independent of mmlape's modules: the layouts below are the key
names and shapes of the official repositories (yitu-opensource/T2T-ViT,
coeusguo/ceit, SHI-Labs/Compact-Transformers), built with random values,
and the reference forwards read those keys with plain tensor ops, one
equation per line. mmlape's converters and models must reproduce them.

The joins follow docs/methods.md (as ``reference.py`` does for DeiT): a
state dict may carry LaPE's ``blocks.{i}.pe_norm.*`` and MPVG's
``pe_join.last_norm.*``.
"""
import math
import re

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------
# layouts


def _w(*shape, scale=0.1):
    return torch.randn(*shape) * scale


def _ln(sd, key, dims):
    sd[f'{key}.weight'] = 1 + _w(dims)
    sd[f'{key}.bias'] = _w(dims)


def _lin(sd, key, out, inp, bias=True):
    sd[f'{key}.weight'] = _w(out, inp, scale=inp**-0.5)
    if bias:
        sd[f'{key}.bias'] = _w(out)


def _bn(sd, key, dims):
    sd[f'{key}.weight'] = 1 + _w(dims)
    sd[f'{key}.bias'] = _w(dims)
    sd[f'{key}.running_mean'] = _w(dims)
    sd[f'{key}.running_var'] = 0.5 + torch.rand(dims)
    sd[f'{key}.num_batches_tracked'] = torch.tensor(7)


def sinusoid(n, d):
    """T2T-ViT's table: angle ``p / 10000^(2 floor(j/2) / d)``, sin on even
    channels, cos on odd ones."""
    p = torch.arange(n, dtype=torch.float64)[:, None]
    j = torch.arange(d, dtype=torch.float64)[None]
    angle = p / torch.pow(10000.,
                          2 * torch.div(j, 2, rounding_mode='floor') / d)
    table = torch.where(j.long() % 2 == 0, torch.sin(angle), torch.cos(angle))
    return table.float()[None]


def _vit_blocks(sd, prefix, depth, dims, qkv_bias):
    for i in range(depth):
        b = f'{prefix}{i}'
        _ln(sd, f'{b}.norm1', dims)
        _lin(sd, f'{b}.attn.qkv', 3 * dims, dims, qkv_bias)
        _lin(sd, f'{b}.attn.proj', dims, dims)
        _ln(sd, f'{b}.norm2', dims)


def t2t_layout(dims=64,
               depth=2,
               hidden=128,
               token_dims=16,
               img=64,
               num_classes=10,
               attention='performer'):
    """Official T2T-ViT state dict (``T2T_ViT``), random values."""
    sd = {}
    for i, inp in ((1, 3 * 49), (2, token_dims * 9)):
        key = f'tokens_to_token.attention{i}'
        _ln(sd, f'{key}.norm1', inp)
        if attention == 'performer':
            _lin(sd, f'{key}.kqv', 3 * token_dims, inp)
            _lin(sd, f'{key}.proj', token_dims, token_dims)
            _ln(sd, f'{key}.norm2', token_dims)
            _lin(sd, f'{key}.mlp.0', token_dims, token_dims)
            _lin(sd, f'{key}.mlp.2', token_dims, token_dims)
            m = token_dims // 2
            w = torch.nn.init.orthogonal_(torch.empty(m, token_dims))
            sd[f'{key}.w'] = w * math.sqrt(m)
        else:
            _lin(sd, f'{key}.attn.qkv', 3 * token_dims, inp, bias=False)
            _lin(sd, f'{key}.attn.proj', token_dims, token_dims)
            _ln(sd, f'{key}.norm2', token_dims)
            _lin(sd, f'{key}.mlp.fc1', token_dims, token_dims)
            _lin(sd, f'{key}.mlp.fc2', token_dims, token_dims)
    _lin(sd, 'tokens_to_token.project', dims, token_dims * 9)
    sd['cls_token'] = _w(1, 1, dims)
    sd['pos_embed'] = sinusoid((img // 16)**2 + 1, dims)
    _vit_blocks(sd, 'blocks.', depth, dims, qkv_bias=False)
    for i in range(depth):
        _lin(sd, f'blocks.{i}.mlp.fc1', hidden, dims)
        _lin(sd, f'blocks.{i}.mlp.fc2', dims, hidden)
    _ln(sd, 'norm', dims)
    _lin(sd, 'head', num_classes, dims)
    return sd


def ceit_layout(dims=64, depth=2, hidden=128, img=64, num_classes=10):
    """Official CeiT state dict (``CeIT`` with ``Image2Tokens``)."""
    sd = {}
    sd['i2t.backbone.conv.weight'] = _w(64, 3, 7, 7, scale=0.05)
    _bn(sd, 'i2t.backbone.bn', 64)
    sd['i2t.proj.weight'] = _w(dims, 64, 4, 4, scale=0.03)
    sd['i2t.proj.bias'] = _w(dims)
    sd['cls_token'] = _w(1, 1, dims)
    sd['pos_embed'] = _w(1, (img // 16)**2 + 1, dims)
    _vit_blocks(sd, 'blocks.', depth, dims, qkv_bias=True)
    for i in range(depth):
        leff = f'blocks.{i}.leff'
        sd[f'{leff}.conv1.weight'] = _w(hidden, dims, 1, 1, scale=dims**-.5)
        sd[f'{leff}.conv1.bias'] = _w(hidden)
        _bn(sd, f'{leff}.bn1', hidden)
        sd[f'{leff}.conv2.weight'] = _w(hidden, 1, 3, 3, scale=0.3)
        sd[f'{leff}.conv2.bias'] = _w(hidden)
        _bn(sd, f'{leff}.bn2', hidden)
        sd[f'{leff}.conv3.weight'] = _w(dims, hidden, 1, 1, scale=hidden**-.5)
        sd[f'{leff}.conv3.bias'] = _w(dims)
        _bn(sd, f'{leff}.bn3', dims)
    _ln(sd, 'lca.norm1', dims)
    _lin(sd, 'lca.attn.qkv', 3 * dims, dims)
    _lin(sd, 'lca.attn.proj', dims, dims)
    _ln(sd, 'lca.norm2', dims)
    _lin(sd, 'lca.feedforward.fc1', hidden, dims)
    _lin(sd, 'lca.feedforward.fc2', dims, hidden)
    sd['pos_layer_embed'] = _w(1, depth, dims)
    _ln(sd, 'norm', dims)
    _lin(sd, 'head', num_classes, dims)
    return sd


def compact_layout(kind, dims=64, depth=2, hidden=128, num_classes=10):
    """Official ViT-Lite-x/4 (``kind='vit_lite'``) or CCT-x/3x1
    (``kind='cct'``) state dict at 32x32."""
    sd = {}
    if kind == 'vit_lite':
        sd['tokenizer.conv_layers.0.0.weight'] = _w(dims, 3, 4, 4, scale=.1)
        sd['tokenizer.conv_layers.0.0.bias'] = _w(dims)
        sd['classifier.class_emb'] = _w(1, 1, dims)
        rows = 64 + 1
    else:
        sd['tokenizer.conv_layers.0.0.weight'] = _w(dims, 3, 3, 3, scale=.2)
        sd['classifier.attention_pool.weight'] = _w(1, dims, scale=0.3)
        sd['classifier.attention_pool.bias'] = _w(1)
        rows = 256
    sd['classifier.positional_emb'] = _w(1, rows, dims, scale=0.2)
    for i in range(depth):
        b = f'classifier.blocks.{i}'
        _ln(sd, f'{b}.pre_norm', dims)
        _lin(sd, f'{b}.self_attn.qkv', 3 * dims, dims, bias=False)
        _lin(sd, f'{b}.self_attn.proj', dims, dims)
        _ln(sd, f'{b}.norm1', dims)
        _lin(sd, f'{b}.linear1', hidden, dims)
        _lin(sd, f'{b}.linear2', dims, hidden)
    _ln(sd, 'classifier.norm', dims)
    _lin(sd, 'classifier.fc', num_classes, dims)
    return sd


def add_join_norms(sd, join, depth, dims, prefix=''):
    """LaPE's/MPVG's PE norms, in mmlape's (and the LaPE code's) names."""
    first = 0 if join == 'lape' else 1
    for i in range(first, depth):
        _ln(sd, f'{prefix}blocks.{i}.pe_norm', dims)
    if join == 'mpvg':
        _ln(sd, f'{prefix}pe_join.last_norm', dims)
    return sd


# ----------------------------------------------------------------------
# equations


def ln(sd, key, x, eps):
    return F.layer_norm(x, (x.shape[-1], ), sd[f'{key}.weight'],
                        sd[f'{key}.bias'], eps)


def lin(sd, key, x):
    return F.linear(x, sd[f'{key}.weight'], sd.get(f'{key}.bias'))


def bn(sd, key, x, eps=1e-5):
    """Inference BatchNorm: ``(x - mean) / sqrt(var + eps) * w + b``."""
    shape = (1, -1, 1, 1)
    mean = sd[f'{key}.running_mean'].reshape(shape)
    var = sd[f'{key}.running_var'].reshape(shape)
    return ((x - mean) / torch.sqrt(var + eps) *
            sd[f'{key}.weight'].reshape(shape) +
            sd[f'{key}.bias'].reshape(shape))


def softmax_attention(q, k, v, scale):
    """``softmax(q k^T * scale) v`` over the last two axes."""
    return ((q @ k.transpose(-1, -2)) * scale).softmax(-1) @ v


def msa(sd, key, h, heads, qkv='attn.qkv', proj='attn.proj'):
    """Multi-head self-attention, scale ``head_dims ** -0.5``."""
    b, n, c = h.shape
    d = c // heads
    q, k, v = lin(sd, f'{key}.{qkv}', h).reshape(b, n, 3, heads,
                                                 d).permute(2, 0, 3, 1, 4)
    out = softmax_attention(q, k, v, d**-0.5)
    return lin(sd, f'{key}.{proj}', out.transpose(1, 2).reshape(b, n, c))


def mlp(sd, fc1, fc2, h):
    return lin(sd, fc2, F.gelu(lin(sd, fc1, h)))


def performer_layer(sd, key, x, eps=1e-5):
    """T2T's Performer token layer (value shortcut)."""
    h = ln(sd, f'{key}.norm1', x, eps)
    k, q, v = lin(sd, f'{key}.kqv', h).chunk(3, dim=-1)
    w = sd[f'{key}.w']
    m = w.shape[0]

    def phi(u):  # positive random features of exp(q . k)
        return torch.exp(u @ w.T - (u * u).sum(-1, keepdim=True) / 2) / \
            math.sqrt(m)

    kp, qp = phi(k), phi(q)
    num = torch.einsum('btm,bmd->btd', qp, torch.einsum('bsm,bsd->bmd', kp, v))
    den = torch.einsum('btm,bm->bt', qp, kp.sum(1))[..., None]
    y = v + lin(sd, f'{key}.proj', num / (den + 1e-8))
    return y + mlp(sd, f'{key}.mlp.0', f'{key}.mlp.2',
                   ln(sd, f'{key}.norm2', y, eps))


def transformer_token_layer(sd, key, x, scale, eps=1e-5):
    """T2T's Transformer token layer (T2T-ViT_t), one head."""
    h = ln(sd, f'{key}.norm1', x, eps)
    q, k, v = lin(sd, f'{key}.attn.qkv', h).chunk(3, dim=-1)
    y = v + lin(sd, f'{key}.attn.proj', softmax_attention(q, k, v, scale))
    return y + mlp(sd, f'{key}.mlp.fc1', f'{key}.mlp.fc2',
                   ln(sd, f'{key}.norm2', y, eps))


def t2t_tokens(sd, img, attention='performer', scale=None):
    """Soft split (7/4/2) -> layer -> soft split (3/2/1) -> layer -> soft
    split (3/2/1) -> project."""
    b = img.shape[0]
    x = F.unfold(img, 7, padding=2, stride=4).transpose(1, 2)
    h, w = [(s + 4 - 7) // 4 + 1 for s in img.shape[-2:]]
    for i in (1, 2):
        key = f'tokens_to_token.attention{i}'
        if attention == 'performer':
            x = performer_layer(sd, key, x)
        else:
            s = scale or (x.shape[-1])**-0.5
            x = transformer_token_layer(sd, key, x, s)
        x = x.transpose(1, 2).reshape(b, -1, h, w)
        x = F.unfold(x, 3, padding=1, stride=2).transpose(1, 2)
        h, w = (h + 1) // 2, (w + 1) // 2
    return lin(sd, 'tokens_to_token.project', x), (h, w)


def i2t_tokens(sd, img):
    """CeiT's stem: conv 7x7/2 -> BN -> max-pool 3x3/2 -> 4x4 patches."""
    x = F.conv2d(img, sd['i2t.backbone.conv.weight'], stride=2, padding=3)
    x = F.max_pool2d(bn(sd, 'i2t.backbone.bn', x), 3, 2, 1)
    x = F.conv2d(x, sd['i2t.proj.weight'], sd['i2t.proj.bias'], stride=4)
    return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])


def compact_tokens(sd, img, kind):
    weight = sd['tokenizer.conv_layers.0.0.weight']
    if kind == 'vit_lite':  # 4x4 patches
        x = F.conv2d(
            img, weight, sd['tokenizer.conv_layers.0.0.bias'], stride=4)
    else:  # conv 3x3/1 pad 1 -> ReLU -> max-pool 3x3/2
        x = F.max_pool2d(F.relu(F.conv2d(img, weight, padding=1)), 3, 2, 1)
    return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])


def leff(sd, key, h, hw):
    """LeFF on the patch tokens; extra tokens unchanged."""
    b, n, c = h.shape
    e = n - hw[0] * hw[1]
    x = h[:, e:].transpose(1, 2).reshape(b, c, *hw)
    x = F.gelu(
        bn(sd, f'{key}.bn1',
           F.conv2d(x, sd[f'{key}.conv1.weight'], sd[f'{key}.conv1.bias'])))
    x = F.gelu(
        bn(
            sd, f'{key}.bn2',
            F.conv2d(
                x,
                sd[f'{key}.conv2.weight'],
                sd[f'{key}.conv2.bias'],
                padding=1,
                groups=x.shape[1])))
    x = bn(sd, f'{key}.bn3',
           F.conv2d(x, sd[f'{key}.conv3.weight'], sd[f'{key}.conv3.bias']))
    return torch.cat([h[:, :e], x.flatten(2).transpose(1, 2)], dim=1)


def lca(sd, cls_tokens, heads, eps=1e-6):
    """CeiT's LCA over the class tokens of all layers; then the norm."""
    t = torch.stack(cls_tokens, dim=1) + sd['pos_layer_embed']
    b, n, c = t.shape
    d = c // heads
    h = ln(sd, 'lca.norm1', t, eps)
    w, bias = sd['lca.attn.qkv.weight'], sd['lca.attn.qkv.bias']
    q = F.linear(h[:, -1:], w[:c], bias[:c]).reshape(b, 1, heads, d)
    kv = F.linear(h, w[c:], bias[c:]).reshape(b, n, 2, heads, d)
    k, v = kv[:, :, 0], kv[:, :, 1]
    out = softmax_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), d**-0.5)
    z = t[:, -1:] + lin(sd, 'lca.attn.proj',
                        out.transpose(1, 2).reshape(b, 1, c))
    z = z + mlp(sd, 'lca.feedforward.fc1', 'lca.feedforward.fc2',
                ln(sd, 'lca.norm2', z, eps))
    return ln(sd, 'norm', z[:, 0], eps)


class Stream:
    """The PE each layer's attention input receives (docs/methods.md)."""

    def __init__(self, sd, pos, join, eps):
        self.sd, self.pos, self.join, self.eps = sd, pos, join, eps
        self.stream = pos

    def input_pe(self):
        return self.pos if self.join in ('default', 'pvg', 'mpvg') else None

    def layer(self, i, prefix=''):
        if self.join == 'default' or (self.join != 'lape' and i == 0):
            return None
        p = ln(self.sd, f'{prefix}blocks.{i}.pe_norm', self.stream, self.eps)
        self.stream = p
        return p


def reference_family(model, sd, img, join='default', heads=2):
    """Features of one of the four families (before the classifier).

    Args:
        model (str): ``'t2t'``, ``'t2t_transformer'``, ``'ceit'``,
            ``'vit_lite'`` or ``'cct'``.
        sd (dict): Official-layout state dict (plus PE norms for a join).
        img (Tensor): Images.
        join (str): ``default``, ``lape``, ``pvg`` or ``mpvg``. PVG/MPVG
            models have no class token: the state dict's class token and PE
            class row are not used, and the output is GAP (for CeiT: LCA
            replaced by GAP; for CCT: SeqPool stays).
        heads (int): Heads of the encoder.
    """
    gap = join in ('pvg', 'mpvg')
    if model.startswith('t2t'):
        x, hw = t2t_tokens(sd, img,
                           'performer' if model == 't2t' else 'transformer')
        eps, cls = 1e-5, sd.get('cls_token')
        pos = sinusoid(hw[0] * hw[1] + (cls is not None), x.shape[-1])
    elif model == 'ceit':
        x, hw = i2t_tokens(sd, img)
        eps, cls, pos = 1e-6, sd.get('cls_token'), sd['pos_embed']
    else:
        x, hw = compact_tokens(sd, img, model)
        eps = 1e-5
        cls = sd.get('classifier.class_emb')
        pos = sd['classifier.positional_emb']
    assert not (gap and cls is not None), 'PVG/MPVG have no class token'
    if cls is not None:
        x = torch.cat([cls.expand(x.shape[0], -1, -1), x], dim=1)
    pe = Stream(sd, pos, join, eps)
    if pe.input_pe() is not None:
        x = x + pe.input_pe()
    compact = model in ('vit_lite', 'cct')
    prefix = 'classifier.blocks.' if compact else 'blocks.'
    cls_tokens = []
    depth = len({
        m.group(1)
        for m in (re.match(rf'^{re.escape(prefix)}(\d+)\.', k) for k in sd)
        if m
    })
    for i in range(depth):
        b = f'{prefix}{i}'
        p = pe.layer(i)
        if compact:
            h = ln(sd, f'{b}.pre_norm', x, eps)
            h = h if p is None else h + p
            x = x + msa(sd, b, h, heads, 'self_attn.qkv', 'self_attn.proj')
            x = ln(sd, f'{b}.norm1', x, eps)  # the stream itself
            x = x + mlp(sd, f'{b}.linear1', f'{b}.linear2', x)
        else:
            h = ln(sd, f'{b}.norm1', x, eps)
            h = h if p is None else h + p
            x = x + msa(sd, b, h, heads)
            h = ln(sd, f'{b}.norm2', x, eps)
            if model == 'ceit':
                x = x + leff(sd, f'{b}.leff', h, hw)
            else:
                x = x + mlp(sd, f'{b}.mlp.fc1', f'{b}.mlp.fc2', h)
            cls_tokens.append(x[:, 0])
    if model == 'ceit' and not gap:
        return lca(sd, cls_tokens, heads, eps)
    y = ln(sd, 'classifier.norm' if compact else 'norm', x, eps)
    if join == 'mpvg':
        y = y + ln(sd, 'pe_join.last_norm', pos, eps)
    if model == 'cct':
        weights = lin(sd, 'classifier.attention_pool', y).softmax(dim=1)
        return (weights.transpose(1, 2) @ y)[:, 0]
    if gap:
        return y.mean(dim=1)
    return y[:, 0]


def head_of(model, sd):
    """The classifier's (weight, bias) in an official layout."""
    key = 'classifier.fc' if model in ('vit_lite', 'cct') else 'head'
    return sd[f'{key}.weight'], sd[f'{key}.bias']
