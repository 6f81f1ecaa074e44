"""``tools/convert/to_timm.py``: an mmlape ViT classifier whose join and PE
timm computes becomes a timm state dict that ``timm.create_model`` with the
printed arguments loads strictly and that gives the same logits; a join,
PE or family timm lacks is refused in one line."""
import sys

import pytest
import safetensors.torch
import timm  # a test requirement (requirements/tests.txt)
import torch
from conftest import ROOT, build_classifier, randomize

sys.path.insert(0, ROOT)
from tools.convert import to_mmlape, to_timm  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')

#: The tiny arch: 64 dims, 2 layers, 2 heads (head_dims 32).
ARCH = dict(embed_dims=64, num_layers=2, num_heads=2, feedforward_channels=256)
HEAD = dict(type='VisionTransformerClsHead', num_classes=5, in_channels=64)
LINEAR = dict(type='LinearClsHead', num_classes=5, in_channels=64)


def backbone_cfg(**options):
    """The tiny ViT (32x32 images, 8x8 patches) with ``options``."""
    return dict(
        dict(type='LaPEViT', arch=ARCH, img_size=32, patch_size=8), **options)


def model_text(backbone, head=HEAD):
    """A config's text, as mmengine records it in ``meta['cfg']``."""
    return (f"model = dict(type='ImageClassifier', backbone={backbone!r}, "
            f'head={head!r})\n')


def save_classifier(path, backbone, head=HEAD, record=True):
    """A tiny classifier with every weight drawn afresh, saved as mmengine
    saves one (the config in ``meta['cfg']`` unless ``record`` is
    False)."""
    model = build_classifier(backbone, head).eval()
    randomize(model, 0.3, (0.5, 1.5))
    meta = dict(cfg=model_text(backbone, head)) if record else {}
    torch.save(dict(state_dict=model.state_dict(), meta=meta), path)
    return model


def printed_model(out, dst):
    """Run the two lines the tool printed to create the timm model and
    load ``dst`` into it."""
    lines = [
        line for line in out.splitlines()
        if line.startswith(('model = timm.create_model(',
                            'model.load_state_dict('))
    ]
    assert len(lines) == 2 and repr(str(dst)) in lines[1], out
    scope = dict(timm=timm, torch=torch, safetensors=safetensors)
    for line in lines:
        exec(line, scope)
    return scope['model'].eval()


def same_logits(ours, theirs, size=(32, 32)):
    img = torch.randn(2, 3, *size)
    with torch.no_grad():
        want = ours(img, mode='tensor')
        got = theirs(img)
    assert want.abs().max() > 1e-1  # not a degenerate comparison
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


#: Every combination timm computes: (backbone options, head, timm class,
#: name, the printed arguments checked).
SUPPORTED = {
    'learnable-cls':
    (dict(), HEAD, 'VisionTransformer', 'deit_tiny_patch16_224',
     dict(global_pool='token', no_embed_class=False, fc_norm=False)),
    'learnable-gap-fc-norm':
    (dict(out_type='avg_featmap', final_norm=False), LINEAR,
     'VisionTransformer', 'deit_tiny_patch16_224',
     dict(global_pool='avg', fc_norm=True, final_norm=True)),
    'learnable-gap-two-norms':
    (dict(with_cls_token=False,
          out_type='avg_featmap'), HEAD, 'Eva', 'eva_giant_patch14_224',
     dict(
         global_pool='avg',
         use_fc_norm=True,
         use_post_transformer_norm=True,
         use_rot_pos_emb=False)),
    'sincos1d-pre-norm': (dict(pe_type='sincos1d', pre_norm=True), HEAD,
                          'VisionTransformer', 'deit_tiny_patch16_224',
                          dict(pre_norm=True, no_embed_class=False)),
    'sincos2d-layer-scale':
    (dict(pe_type='sincos2d', layer_scale_init_value=0.1, img_size=(32, 48)),
     HEAD, 'VisionTransformer', 'deit_tiny_patch16_224',
     dict(img_size=(32, 48), init_values=0.1, no_embed_class=True)),
    'rope-axial':
    (dict(pe_type='rope_axial', layer_scale_init_value=0.1), HEAD, 'Eva',
     'vit_small_patch16_rope_224',
     dict(rope_type='cat', rope_temperature=100., use_abs_pos_emb=False)),
    'rope-axial-theta-sincos2d-ape':
    (dict(pe_type='rope_axial', rope_theta=33.,
          ape_type='sincos2d'), HEAD, 'Eva', 'eva_giant_patch14_224',
     dict(rope_temperature=33., use_abs_pos_emb=True, no_embed_class=True)),
    'rope-mixed': (dict(pe_type='rope_mixed'), HEAD, 'Eva',
                   'eva_giant_patch14_224',
                   dict(rope_type='mixed', use_abs_pos_emb=False)),
    'rope-mixed-ape-gap': (dict(
        pe_type='rope_mixed',
        ape_type='learnable',
        layer_scale_init_value=0.1,
        with_cls_token=False,
        out_type='avg_featmap'), HEAD, 'Eva',
                           'vit_small_patch16_rope_mixed_ape_224',
                           dict(
                               class_token=False,
                               global_pool='avg',
                               use_abs_pos_emb=True)),
}


@pytest.mark.parametrize('case', list(SUPPORTED))
def test_supported_model_gives_timm_the_same_logits(case, tmp_path, capsys):
    options, head, family, name, printed = SUPPORTED[case]
    backbone = backbone_cfg(**options)
    src = tmp_path / 'mmlape.pth'
    ours = save_classifier(src, backbone, head)
    dst = tmp_path / ('timm.safetensors' if 'sincos' in case else 'timm.pth')
    assert to_timm.main([str(src), str(dst)]) == 0
    out = capsys.readouterr().out
    assert f"timm's {family} {name}" in out
    theirs = printed_model(out, dst)
    assert type(theirs).__name__ == family
    assert theirs.pretrained_cfg['architecture'] == name
    for key, value in printed.items():
        assert f'{key}={value!r}' in out, key
    same_logits(
        ours, theirs,
        backbone['img_size'] if isinstance(backbone['img_size'], tuple) else
        (32, 32))
    if dst.suffix == '.safetensors':  # a flat state dict, as timm's files
        state = safetensors.torch.load_file(dst)
        assert set(state) == set(theirs.state_dict())


def test_rope_vit_file_comes_back_as_it_was(tmp_path, capsys):
    """A timm RoPE-ViT file converted to mmlape (``to_mmlape.py``, no
    recorded config) and back with ``--config``: timm's name, every tensor
    as it was, the class-token PE row left out again."""
    name = 'vit_small_patch16_rope_mixed_ape_224'
    source = timm.create_model(
        name,
        pretrained=False,
        img_size=32,
        patch_size=8,
        embed_dim=64,
        depth=2,
        num_heads=2,
        num_classes=5,
        init_values=0.1).eval()
    randomize(source, 0.3, (0.5, 1.5))
    original = tmp_path / 'timm.pth'
    torch.save(source.state_dict(), original)
    mmlape_file = tmp_path / 'mmlape.pth'
    assert to_mmlape.main(['--family', 'vit',
                           str(original),
                           str(mmlape_file)]) == 0
    config = tmp_path / 'config.py'
    config.write_text(
        model_text(
            backbone_cfg(
                pe_type='rope_mixed',
                ape_type='learnable',
                layer_scale_init_value=1e-5)))
    back = tmp_path / 'back.pth'
    capsys.readouterr()
    assert to_timm.main([str(mmlape_file),
                         str(back), '--config',
                         str(config)]) == 0
    out = capsys.readouterr().out
    assert f"timm's Eva {name}" in out and 'no_embed_class=True' in out
    got = torch.load(back, weights_only=True)
    want = source.state_dict()
    assert set(got) == set(want)
    for key, value in want.items():
        assert torch.equal(got[key], value), key
    same = printed_model(out, back)
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(same(img), source(img), rtol=0, atol=0)


@pytest.mark.parametrize('join,options', [
    ('Share', {}),
    ('Unshare', {}),
    ('LaPE', {}),
    ('PVG', dict(with_cls_token=False, out_type='avg_featmap')),
    ('MPVG', dict(with_cls_token=False, out_type='avg_featmap')),
])
def test_join_timm_lacks_is_refused_in_one_line(join, options, tmp_path,
                                                capsys):
    src, dst = tmp_path / 'mmlape.pth', tmp_path / 'timm.pth'
    save_classifier(src, backbone_cfg(pe_join=join, **options))
    assert to_timm.main([str(src), str(dst)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith(f'error: timm has no {join} join') and \
        '\n' not in err and 'Traceback' not in err
    assert not captured.out and not dst.exists()


@pytest.mark.parametrize(
    'backbone,head,message', [
        (backbone_cfg(pe_type='relative'), HEAD,
         "timm's ViTs have no relative PE (pe_type='relative')"),
        (dict(type='LaPEViT', arch='cct-7/3x1'), dict(LINEAR, in_channels=256),
         'the cct-7/3x1 arch: timm\'s ViTs embed patches with one strided '
         'convolution; this backbone\'s tokenizer is ConvTokenizer'),
        (dict(type='LaPEViT', arch='vit-lite-7/4'),
         dict(LINEAR, in_channels=256), 'the vit-lite-7/4 arch: timm\'s ViTs '
         'build their LayerNorms with eps 1e-06; blocks.0.norm1 has eps 1e-05'
         ),
        (dict(
            type='LaPESwin',
            arch=dict(embed_dims=32, depths=[1, 1], num_heads=[1, 2]),
            img_size=32,
            window_size=2,
            out_indices=(1, )), dict(LINEAR, in_channels=64),
         'timm has no counterpart of the recorded config\'s LaPESwin backbone'
         ),
        (backbone_cfg(), dict(
            HEAD, hidden_dim=32), 'timm\'s ViTs have no pre-logits layer'),
    ],
    ids=['relative', 'cct', 'vit-lite', 'swin', 'pre-logits'])
def test_what_timm_lacks_is_refused_in_one_line(backbone, head, message,
                                                tmp_path, capsys):
    src, dst = tmp_path / 'mmlape.pth', tmp_path / 'timm.pth'
    save_classifier(src, backbone, head)
    assert to_timm.main([str(src), str(dst)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f'error: {message}') and '\n' not in err, err


def test_the_backbone_comes_from_a_config(tmp_path, capsys):
    """No recorded config: refused without ``--config``, converted with
    one; a ``--config`` that contradicts the recorded one is refused."""
    backbone = backbone_cfg(pe_type='sincos2d')
    src, dst = tmp_path / 'mmlape.pth', tmp_path / 'timm.pth'
    ours = save_classifier(src, backbone, record=False)
    assert to_timm.main([str(src), str(dst)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f'error: checkpoint "{src}" records no config '
                   f'(meta["cfg"]): pass --config CONFIG, the mmlape config '
                   f'that trained it')
    config = tmp_path / 'config.py'
    with pytest.raises(SystemExit) as stop:
        to_timm.main([str(src), str(dst), '--config', str(config)])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and err.startswith(
        f'error: config file "{config}" does not exist') and '\n' not in err
    config.write_text(model_text(backbone))
    assert to_timm.main([str(src), str(dst), '--config', str(config)]) == 0
    same_logits(ours, printed_model(capsys.readouterr().out, dst))
    # a config of another PE type than the recorded one
    save_classifier(src, backbone_cfg(pe_type='sincos1d'))
    assert to_timm.main(
        [str(src), str(dst), '--force', '--config',
         str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert "model.backbone.pe_type is 'sincos1d' there but 'sincos2d' in " \
        'this config' in err and '\n' not in err


def test_existing_dst_is_kept_without_force(tmp_path, capsys):
    src, dst = tmp_path / 'mmlape.pth', tmp_path / 'timm.pth'
    save_classifier(src, backbone_cfg())
    dst.write_bytes(b'keep')
    assert to_timm.main([str(src), str(dst)]) == 2
    assert 'exists; pass --force' in capsys.readouterr().err
    assert dst.read_bytes() == b'keep'
    assert to_timm.main([str(src), str(dst), '--force']) == 0
    assert 'head.weight' in torch.load(dst, weights_only=True)
