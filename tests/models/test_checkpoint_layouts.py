"""The checkpoint layouts users hold load, each from a file in that layout.

(a) an official ViT-Adapter detection/segmentation checkpoint (``backbone.``
keys, DeiT's 1 + N-row PE kept without a class token), (b) a distilled DeiT
(``dist_token``, 2 + N-row PE, ``head_dist``), (c) the official LaPE code's
relative-PE checkpoints (``blocks.{i}.attn.pe_norm``, a stored
``relative_position_index``). The files are written with the key names of
the official code, read from its modules (listed in OFFICIAL_ADAPTER_KEYS).
"""
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import (assert_close_f32, build_classifier, randomize,
                      save_backbone_checkpoint)
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mmlape.apis import check_checkpoint_fits
from mmlape.models import LaPEViT, LaPEViTAdapter
from mmlape.models.checkpoint import Layout
from mmlape.models.checkpoint.common import select_backbone
from mmlape.models.checkpoint.vit import convert_layout, detect_layout

sys.path.insert(0, 'tools/convert')
import to_mmlape

# Keys of the official ViT-Adapter backbone (czczup/ViT-Adapter,
# detection|segmentation/mmdet_custom|mmseg_custom/models/backbones/
# vit_adapter.py, adapter_modules.py, base/vit.py, ops/modules/
# ms_deform_attn.py) for a 4-layer, 4-interaction model.
OFFICIAL_ADAPTER_KEYS = [
    'pos_embed', 'level_embed', 'patch_embed.proj.weight',
    'patch_embed.proj.bias', 'blocks.0.norm1.weight', 'blocks.0.attn.qkv.bias',
    'blocks.0.attn.proj.weight', 'blocks.0.norm2.bias',
    'blocks.0.mlp.fc1.weight', 'blocks.0.mlp.fc2.bias', 'blocks.0.gamma1',
    'blocks.3.gamma2', 'spm.stem.0.weight', 'spm.stem.1.weight',
    'spm.stem.1.running_mean', 'spm.stem.1.num_batches_tracked',
    'spm.stem.3.weight', 'spm.stem.4.bias', 'spm.stem.6.weight',
    'spm.stem.7.running_var', 'spm.conv2.0.weight', 'spm.conv2.1.weight',
    'spm.conv3.0.weight', 'spm.conv4.1.bias', 'spm.fc1.weight', 'spm.fc4.bias',
    'interactions.0.injector.gamma',
    'interactions.0.injector.query_norm.weight',
    'interactions.0.injector.feat_norm.bias',
    'interactions.0.injector.attn.sampling_offsets.weight',
    'interactions.0.injector.attn.attention_weights.bias',
    'interactions.0.injector.attn.value_proj.weight',
    'interactions.0.injector.attn.output_proj.bias',
    'interactions.1.extractor.query_norm.weight',
    'interactions.1.extractor.attn.sampling_offsets.bias',
    'interactions.1.extractor.ffn.fc1.weight',
    'interactions.1.extractor.ffn.dwconv.dwconv.weight',
    'interactions.1.extractor.ffn.fc2.bias',
    'interactions.1.extractor.ffn_norm.weight',
    'interactions.3.extra_extractors.0.attn.value_proj.weight',
    'interactions.3.extra_extractors.1.ffn_norm.bias', 'up.weight', 'up.bias',
    'norm1.weight', 'norm2.running_mean', 'norm3.bias',
    'norm4.num_batches_tracked'
]


def adapter(**kwargs):
    return LaPEViTAdapter('test-tiny', img_size=64, **kwargs)


def official_adapter_state(seed=0):
    """An official ViT-Adapter backbone state: the model's tensors with
    DeiT's class row (never used by the official model) in front of the
    4x4 patch rows."""
    torch.manual_seed(seed)
    src = adapter()
    randomize(src)
    sd = dict(src.state_dict())
    sd['pos_embed'] = torch.cat([torch.randn(1, 1, 64), sd['pos_embed']],
                                dim=1)
    return src, sd


def test_official_adapter_key_names_are_mmlapes():
    _, sd = official_adapter_state()
    missing = [k for k in OFFICIAL_ADAPTER_KEYS if k not in sd]
    assert not missing
    assert sd['pos_embed'].shape == (1, 17, 64) and 'cls_token' not in sd


@pytest.mark.parametrize(
    'state, want',
    [
        (dict(
            pos_embed=torch.zeros(1, 197, 8), cls_token=torch.zeros(1, 1, 8)),
         ('deit', ('cls', ))),
        (dict(
            pos_embed=torch.zeros(1, 198, 8),
            cls_token=torch.zeros(1, 1, 8),
            dist_token=torch.zeros(1, 1, 8)), ('deit-distilled',
                                               ('cls', 'dist'))),
        # official ViT-Adapter: no class token, yet a 197-row PE
        (dict(pos_embed=torch.zeros(1, 197, 8), level_embed=torch.zeros(3, 8)),
         ('vit-adapter', ('unused', ))),
        # mmlape's own ViT-Adapter: patch rows only
        (dict(pos_embed=torch.zeros(1, 196, 8), level_embed=torch.zeros(3, 8)),
         ('mmlape', ())),
        (dict(pos_embed=torch.zeros(1, 196, 8)), ('timm', ())),
    ])
def test_extra_rows_come_from_the_layout(state, want):
    state = dict(state, **{'blocks.0.norm1.weight': torch.ones(8)})
    layout = detect_layout(state)
    assert (layout.name, layout.extra_rows) == want


def test_official_vit_adapter_via_init_cfg(tmp_path):
    """(a) The official detection file initialises LaPEViTAdapter (default
    join): every tensor lands, the PE loses only the unused class row, and
    the PE the blocks receive is the official one (rows 1: resized)."""
    src, sd = official_adapter_state()
    path = tmp_path / 'mask_rcnn_deit_adapter_tiny_fpn_3x_coco.pth'
    save_backbone_checkpoint(
        sd,
        path, {'neck.lateral_convs.0.conv.weight': torch.randn(4, 64, 1, 1)},
        meta=dict(mmdet_version='2.22.0', CLASSES=['a', 'b']))
    model = adapter(
        init_cfg=dict(
            type='Pretrained', checkpoint=str(path), prefix='backbone.'))
    model.init_weights()
    got = model.state_dict()
    assert set(got) == set(sd)
    for key, value in sd.items():
        want = value[:, 1:] if key == 'pos_embed' else value
        torch.testing.assert_close(got[key], want, rtol=0, atol=0, msg=key)
    # what the official forward adds to the tokens for a 6x4 patch grid
    official = F.interpolate(
        sd['pos_embed'][:, 1:].reshape(1, 4, 4, 64).permute(0, 3, 1, 2),
        size=(6, 4),
        mode='bicubic',
        align_corners=False).flatten(2).transpose(1, 2)
    torch.testing.assert_close(model.resized_pos_embed((6, 4)), official)
    model.eval()
    img = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(model(img), src.eval()(img)):
            torch.testing.assert_close(a, b)


def _dense_model(path, task):
    cfg = Config.fromfile(path)
    cfg.model.backbone.update(
        arch='test-tiny',
        img_size=64,
        init_cfg=None,
        interaction_indexes=None,
        deform_num_heads=2)
    if task == 'det':
        cfg.model.backbone.window_size = 0
        cfg.model.backbone.adapter_norm_cfg = dict(type='BN')
        cfg.model.neck.update(in_channels=[64] * 4, out_channels=16)
        cfg.model.rpn_head.update(in_channels=16, feat_channels=16)
        roi = cfg.model.roi_head
        roi.bbox_roi_extractor.out_channels = 16
        roi.bbox_head.update(in_channels=16, fc_out_channels=16)
        roi.mask_roi_extractor.out_channels = 16
        roi.mask_head.update(in_channels=16, conv_out_channels=16)
        from mmdet.registry import MODELS
        from mmdet.utils import register_all_modules
    else:
        cfg.model.backbone.adapter_norm_cfg = dict(type='BN')
        cfg.model.decode_head.update(
            in_channels=[64] * 4, channels=16, norm_cfg=dict(type='BN'))
        cfg.model.auxiliary_head.update(
            in_channels=64, channels=16, norm_cfg=dict(type='BN'))
        from mmseg.registry import MODELS
        from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return MODELS.build(cfg.model)


@pytest.mark.parametrize('task, config', [
    ('det', 'configs/vit_adapter/mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py'),
    ('seg', 'configs/vit_adapter/'
     'upernet_vit-adapter-tiny_8xb2-160k_ade20k-512x512.py'),
])
def test_official_vit_adapter_whole_model(task, config, tmp_path):
    """(a) A whole official detector/segmentor file: ``load_state_dict``
    (what ``tools/test.py`` and ``load_from`` do) takes it strictly, and the
    converted file passes the tools' exact-fit check."""
    torch.manual_seed(0)
    model = _dense_model(config, task)
    randomize(model)
    ours = model.state_dict()
    official = dict(ours)
    official['backbone.pos_embed'] = torch.cat(
        [torch.randn(1, 1, 64), ours['backbone.pos_embed']], dim=1)
    fresh = _dense_model(config, task)
    fresh.load_state_dict(official, strict=True)
    for key, value in fresh.state_dict().items():
        torch.testing.assert_close(value, ours[key], rtol=0, atol=0)
    src, dst = tmp_path / 'official.pth', tmp_path / 'mmlape.pth'
    torch.save({'meta': {}, 'state_dict': official}, src)
    assert to_mmlape.main(['--family', 'vit', str(src), str(dst)]) == 0
    state = check_checkpoint_fits(fresh, str(dst), 'test')
    assert state['backbone.pos_embed'].shape == (1, 16, 64)
    assert torch.load(dst)['meta']['layout'] == 'vit-adapter'


def distilled_deit(patch_size=8, img_size=32):
    """An official distilled DeiT file (timm names) and the non-distilled
    backbone it must load as."""
    src = LaPEViT('test-tiny', img_size=img_size, patch_size=patch_size)
    randomize(src)
    sd = dict(src.state_dict())
    pe = sd['pos_embed']
    sd['pos_embed'] = torch.cat(
        [pe[:, :1], torch.randn(1, 1, 64), pe[:, 1:]], dim=1)
    sd.update({
        'dist_token': torch.randn(1, 1, 64),
        'head.weight': torch.randn(10, 64),
        'head.bias': torch.randn(10),
        'head_dist.weight': torch.randn(10, 64),
        'head_dist.bias': torch.randn(10)
    })
    return src, sd


def test_distilled_deit_through_the_tool(tmp_path):
    """(b) The class row and the patch rows survive, the distillation row,
    token and head go; the classifier equals the backbone it came from."""
    src, sd = distilled_deit()
    assert sd['pos_embed'].shape == (1, 18, 64)
    path, out = tmp_path / 'deit_distilled.pth', tmp_path / 'mmlape.pth'
    torch.save({'model': sd}, path)
    assert to_mmlape.main(['--family', 'vit', str(path), str(out)]) == 0
    ckpt = torch.load(out)
    assert ckpt['meta']['layout'] == 'deit-distilled'
    assert not any('dist' in k for k in ckpt['state_dict'])
    clf = build_classifier(
        dict(type='LaPEViT', arch='test-tiny', img_size=32, patch_size=8),
        dict(type='VisionTransformerClsHead', num_classes=10,
             in_channels=64)).eval()
    clf.load_state_dict(ckpt['state_dict'], strict=True)
    torch.testing.assert_close(clf.backbone.pos_embed, src.pos_embed)
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = F.linear(src.eval()(img)[0], sd['head.weight'], sd['head.bias'])
        torch.testing.assert_close(clf(img, mode='tensor'), want)


def test_distilled_deit_initialises_vit_adapter(tmp_path):
    """(b) The motivating route: a distilled DeiT initialises ViT-Adapter
    (no class token): only the patch rows are its PE."""
    src, sd = distilled_deit(patch_size=16, img_size=64)
    path = tmp_path / 'deit_distilled.pth'
    torch.save({'model': sd}, path)
    model = adapter(init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    torch.testing.assert_close(model.pos_embed, src.pos_embed[:, 1:])
    torch.testing.assert_close(model.blocks[3].mlp.fc2.weight,
                               src.blocks[3].mlp.fc2.weight)


def test_layout_errors_name_the_problem():
    # a dist_token but no distillation row: the patch rows are not a grid
    bad = {
        'cls_token': torch.zeros(1, 1, 8),
        'dist_token': torch.zeros(1, 1, 8),
        'pos_embed': torch.zeros(1, 17, 8),
        'blocks.0.norm1.weight': torch.ones(8)
    }
    with pytest.raises(ValueError, match='2 extra rows.*15 patch rows'):
        convert_layout(bad)
    with pytest.raises(ValueError, match='no keys under prefix "neck."'):
        select_backbone({'backbone.pos_embed': torch.zeros(1)}, 'neck.')


def official_relative_index(side):
    """The LaPE code's RPE_Attention index, as that code builds it."""
    coords = torch.stack(
        torch.meshgrid(
            [torch.arange(side), torch.arange(side)], indexing='ij'))
    flat = torch.flatten(coords, 1)
    rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += side - 1
    rel[:, :, 1] += side - 1
    rel[:, :, 0] *= 2 * side - 1
    return rel.sum(-1)


def official_relative_forward(sd, img, eps=1e-5):
    """The LaPE code's 2D-RPE DeiT forward (join 'LN'), written from its
    vision_transformer.py: no absolute PE; per layer the bias table, indexed
    and normalised over the key axis by attn.pe_norm, is added to the
    patch-patch logits."""
    x = F.conv2d(
        img,
        sd['patch_embed.proj.weight'],
        sd['patch_embed.proj.bias'],
        stride=8).flatten(2).transpose(1, 2)
    x = torch.cat([sd['cls_token'].expand(x.shape[0], -1, -1), x], dim=1)
    b, n, c = x.shape
    heads = 2
    for i in range(4):
        p = f'blocks.{i}.'
        h = F.layer_norm(x, (c, ), sd[p + 'norm1.weight'],
                         sd[p + 'norm1.bias'], 1e-6)
        qkv = F.linear(h, sd[p + 'attn.qkv.weight'], sd[p + 'attn.qkv.bias'])
        q, k, v = qkv.reshape(b, n, 3, heads,
                              c // heads).permute(2, 0, 3, 1, 4)
        attn = (q * (c // heads)**-0.5) @ k.transpose(-2, -1)
        index = sd[p + 'attn.relative_position_index']
        bias = sd[p + 'attn.relative_position_bias_table'][index.view(-1)]
        bias = bias.view(n - 1, n - 1, -1).permute(2, 0, 1)
        if p + 'attn.pe_norm.weight' in sd:
            bias = F.layer_norm(bias, (n - 1, ), sd[p + 'attn.pe_norm.weight'],
                                sd[p + 'attn.pe_norm.bias'], eps)
        attn[:, :, 1:, 1:] += bias
        h = (attn.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
        x = x + F.linear(h, sd[p + 'attn.proj.weight'],
                         sd[p + 'attn.proj.bias'])
        h = F.layer_norm(x, (c, ), sd[p + 'norm2.weight'],
                         sd[p + 'norm2.bias'], 1e-6)
        h = F.linear(
            F.gelu(
                F.linear(h, sd[p + 'mlp.fc1.weight'], sd[p + 'mlp.fc1.bias'])),
            sd[p + 'mlp.fc2.weight'], sd[p + 'mlp.fc2.bias'])
        x = x + h
    x = F.layer_norm(x, (c, ), sd['norm.weight'], sd['norm.bias'], 1e-6)
    return F.linear(x[:, 0], sd['head.weight'], sd['head.bias'])


@pytest.mark.parametrize('join', ['LaPE', 'Default'])
def test_official_lape_relative_checkpoint(join, tmp_path):
    """(c) The LaPE code's relative-PE file (join 'LN' or 'basic') converts
    and gives the official forward's logits."""
    torch.manual_seed(0)
    ours = LaPEViT(
        'test-tiny',
        img_size=32,
        patch_size=8,
        pe_type='relative',
        pe_join=join)
    randomize(ours)
    official = {}
    for key, value in ours.state_dict().items():
        m = key.split('.')
        if len(m) > 2 and m[2] == 'pe_norm':
            key = '.'.join(m[:2] + ['attn'] + m[2:])
        official[key] = value.clone()
    for i in range(4):
        official[f'blocks.{i}.attn.relative_position_index'] = \
            official_relative_index(4)
    official['head.weight'] = torch.randn(10, 64)
    official['head.bias'] = torch.randn(10)
    assert detect_layout(official).name == 'lape-relative'
    assert ('blocks.0.attn.pe_norm.weight' in official) == (join == 'LaPE')
    path, out = tmp_path / 'lape_rpe.pth', tmp_path / 'mmlape.pth'
    torch.save({'model': official}, path)
    assert to_mmlape.main(['--family', 'vit', str(path), str(out)]) == 0
    clf = build_classifier(
        dict(
            type='LaPEViT',
            arch='test-tiny',
            img_size=32,
            patch_size=8,
            pe_type='relative',
            pe_join=join),
        dict(type='VisionTransformerClsHead', num_classes=10,
             in_channels=64)).eval()
    clf.load_state_dict(torch.load(out)['state_dict'], strict=True)
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = official_relative_forward(official, img)
        got = clf(img, mode='tensor')
    assert want.abs().max() > 1e-2
    # The LaPE code's bias norm is nn.LayerNorm(num_patches), eps 1e-5, and
    # so is mmlape's: the two agree to rounding.
    assert_close_f32(got, want, ulps=64)


def test_relative_checkpoint_with_another_index_is_refused():
    state = {
        'cls_token': torch.zeros(1, 1, 8),
        'blocks.0.norm1.weight': torch.ones(8),
        'blocks.0.attn.relative_position_index':
        official_relative_index(4).flip(0)
    }
    assert detect_layout(state) == Layout('lape-relative', 'timm', ('cls', ))
    with pytest.raises(ValueError, match='other offsets'):
        convert_layout(state)
