"""Official LaPE checkpoints of every PE type and join, converted with
``tools/convert/to_mmlape.py --family vit``, load strictly and give the
official logits.

The official model is ``lape_official_reference`` (its equations, its key
names, its PE tables), saved as the official ``main.py`` saves it (with
``args``). The mmlape model each run maps to is written out here from the
official code's forward (not read from the converter's table): with the
relative PE only ``LN`` (first release: ``LaPE``) normalises the bias
tables; ``--join-type LaPE`` chains the PE norms, the first release's
``--pe_joining LaPE`` does not.
"""
import sys

import pytest
import torch
from conftest import assert_close_f32, build_classifier
from lape_official_reference import (CURRENT, FIRST, IMG, PATCH, official_args,
                                     official_logits, official_state,
                                     save_official, sin_1d, sin_2d)

from mmlape.apis import check_checkpoint_fits
from mmlape.models import LaPEViT
from mmlape.models.checkpoint.official_lape import OfficialRun, check_fixed_pe
from mmlape.models.checkpoint.vit import convert_checkpoint
from mmlape.utils.errors import CheckpointError

sys.path.insert(0, 'tools/convert')
import to_mmlape

PE_TYPES = {
    'learnable': 'learnable',
    '1D_sin': 'sincos1d',
    '2D_sin': 'sincos2d',
    '2D_RPE': 'relative',
    'RPE': 'relative'
}


def expected_backbone(pe, join, release):
    """The mmlape ``pe_type`` and ``pe_join`` of an official run."""
    pe_type = PE_TYPES[pe]
    if pe_type == 'relative':
        normed = join == 'LN' or (release == 'first' and join == 'LaPE')
        return pe_type, dict(type='LaPE' if normed else 'Default')
    if join == 'LaPE':
        return pe_type, dict(type='LaPE', hierarchical=release == 'current')
    return pe_type, dict(type={
        'share': 'Share',
        'unshare': 'Unshare'
    }.get(join, 'Default'))


def classifier(pe_type, pe_join):
    return build_classifier(
        dict(
            type='LaPEViT',
            arch='test-tiny',
            img_size=IMG,
            patch_size=PATCH,
            pe_type=pe_type,
            pe_join=pe_join),
        dict(type='VisionTransformerClsHead', num_classes=10,
             in_channels=64)).eval()


def write_config(path, pe_type, pe_join):
    path.write_text(
        'model = dict(type="ImageClassifier", backbone=dict('
        f'type="LaPEViT", arch="test-tiny", img_size={IMG}, '
        f'patch_size={PATCH}, pe_type={pe_type!r}, pe_join={pe_join!r}))\n')
    return str(path)


RUNS = [('current', pe, join)
        for pe, join in CURRENT] + [('first', pe, join) for pe, join in FIRST]


@pytest.mark.parametrize('release,pe,join', RUNS)
def test_official_checkpoint_loads_strictly_with_official_logits(
        release, pe, join, tmp_path, capsys):
    sd = official_state(pe, join, release)
    src = save_official(tmp_path / 'official.pth', sd, pe, join, release)
    pe_type, pe_join = expected_backbone(pe, join, release)
    out = str(tmp_path / 'mmlape.pth')
    config = write_config(tmp_path / 'cfg.py', pe_type, pe_join)
    assert to_mmlape.main(['--family', 'vit', src, out, '--config',
                           config]) == 0
    printed = capsys.readouterr().out
    assert f'--pe {pe}' in printed and f'pe_type={pe_type!r}' in printed
    ckpt = torch.load(out)
    recorded = ckpt['meta']['official_lape']
    assert recorded['backbone'] == dict(pe_type=pe_type, pe_join=pe_join)
    assert recorded['release'] == release
    # the fixed PE is checked and dropped; a learnable one is kept (an
    # unshared one stacked)
    assert ('backbone.pos_embed' in ckpt['state_dict']) == (pe == 'learnable')
    assert not any(
        k.startswith('backbone.pos_embed') and k[-1].isdigit()
        for k in ckpt['state_dict'])

    clf = classifier(pe_type, pe_join)
    clf.load_state_dict(ckpt['state_dict'], strict=True)
    check_checkpoint_fits(clf, out, 'checkpoint')  # what tools/test.py runs
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        want = official_logits(sd, img, pe, join, release)
        got = clf(img, mode='tensor')
    assert want.std() > 0.1  # not a degenerate comparison
    assert_close_f32(got, want, ulps=64)


@pytest.mark.parametrize('pe', ['learnable', '1D_sin', '2D_sin'])
def test_first_release_lape_does_not_load_into_hierarchical_join(
        pe, tmp_path, capsys):
    """The first release normalises the raw PE in every layer: a config,
    a backbone or a converted file with the chained join is refused."""
    sd = official_state(pe, 'LaPE', 'first')
    src = save_official(tmp_path / 'first.pth', sd, pe, 'LaPE', 'first')
    pe_type = PE_TYPES[pe]
    config = write_config(tmp_path / 'cfg.py', pe_type,
                          dict(type='LaPE'))  # hierarchical by default
    out = str(tmp_path / 'mmlape.pth')
    assert to_mmlape.main(['--family', 'vit', src, out, '--config',
                           config]) == 2
    err = capsys.readouterr().err.strip()
    assert '\n' not in err
    assert "--pe_joining LaPE" in err
    assert ("pe_join is dict(type='LaPE', hierarchical=False) there but "
            "dict(type='LaPE', hierarchical=True) in this config") in err
    assert "'hierarchical': False" in err or 'hierarchical=False' in err
    # converted without a config, it records the run ...
    assert to_mmlape.main(['--family', 'vit', src, out]) == 0
    # ... so tools/test.py refuses a hierarchical config, keys alike ...
    with pytest.raises(
            CheckpointError, match=r'hierarchical=True\) in this config'):
        check_checkpoint_fits(
            classifier(pe_type, dict(type='LaPE')), out, 'checkpoint')
    check_checkpoint_fits(
        classifier(pe_type, dict(type='LaPE', hierarchical=False)), out,
        'checkpoint')
    # ... and neither file loads into a hierarchical LaPE backbone
    for path in (src, out):
        model = LaPEViT(
            'test-tiny',
            img_size=IMG,
            patch_size=PATCH,
            pe_type=pe_type,
            pe_join='LaPE',
            init_cfg=dict(type='Pretrained', checkpoint=path))
        with pytest.raises(
                ValueError, match=r'hierarchical=True\) in this backbone'):
            model.init_weights()
    for path in (src, out):
        model = LaPEViT(
            'test-tiny',
            img_size=IMG,
            patch_size=PATCH,
            pe_type=pe_type,
            pe_join=dict(type='LaPE', hierarchical=False),
            init_cfg=dict(type='Pretrained', checkpoint=path))
        model.init_weights()
        torch.testing.assert_close(model.blocks[2].pe_norm.bias,
                                   sd['blocks.2.pe_norm.bias'])


@pytest.mark.parametrize('release,join,code', [('current', 'LaPE', 0),
                                               ('first', 'LaPE', 2),
                                               ('current', 'basic', 2)])
def test_the_repositorys_lape_config_checks_the_run(release, join, code,
                                                    tmp_path, capsys):
    """configs/deit/deit-tiny-lape is the chained LaPE join: a
    ``--join-type LaPE`` file fits it, a first-release LaPE file or a
    ``basic`` one does not."""
    sd = official_state('learnable', join, release)
    src = save_official(
        tmp_path / 'x.pth',
        sd,
        'learnable',
        join,
        release,
        model='deit_tiny_patch16_224')
    config = 'configs/deit/deit-tiny-lape_4xb256_in1k.py'
    assert to_mmlape.main([
        '--family', 'vit', src,
        str(tmp_path / 'out.pth'), '--config', config
    ]) == code
    assert bool(capsys.readouterr().err) == bool(code)


def test_rpe_with_join_type_lape_is_plain_relative_pe(tmp_path, capsys):
    """``--pe 2D_RPE --join-type LaPE``: the official model adds the raw
    bias tables (``RPE_Attention`` only normalises them for ``LN``), so it
    is mmlape's Default join with the relative PE; a relative LaPE config
    is refused."""
    sd = official_state('2D_RPE', 'LaPE')
    assert not any('pe_norm' in k for k in sd)
    src = save_official(tmp_path / 'rpe.pth', sd, '2D_RPE', 'LaPE')
    out = str(tmp_path / 'mmlape.pth')
    config = write_config(tmp_path / 'cfg.py', 'relative', dict(type='LaPE'))
    assert to_mmlape.main(['--family', 'vit', src, out, '--config',
                           config]) == 2
    err = capsys.readouterr().err
    assert ("pe_join is dict(type='Default') there but dict(type='LaPE'"
            in err)
    assert "pe_join=dict(type='Default')" in err
    config = write_config(tmp_path / 'cfg.py', 'relative',
                          dict(type='Default'))
    assert to_mmlape.main(['--family', 'vit', src, out, '--config',
                           config]) == 0


def test_config_with_another_pe_type_is_refused(tmp_path, capsys):
    sd = official_state('1D_sin', 'basic')
    src = save_official(tmp_path / 'sin.pth', sd, '1D_sin', 'basic')
    config = write_config(tmp_path / 'cfg.py', 'learnable',
                          dict(type='Default'))
    assert to_mmlape.main([
        '--family', 'vit', src,
        str(tmp_path / 'out.pth'), '--config', config
    ]) == 2
    err = capsys.readouterr().err
    assert ("pe_type is 'sincos1d' there but 'learnable' in this config"
            in err)
    assert "pe_type='sincos1d'" in err


@pytest.mark.parametrize('pe', ['1D_sin', '2D_sin'])
def test_a_fixed_pe_unlike_mmlapes_is_refused(pe, tmp_path, capsys):
    """A stored fixed PE is dropped only when it is mmlape's table: a
    difference beyond float32 rounding is refused, naming the largest."""
    sd = official_state(pe, 'basic')
    sd['pos_embed'] = sd['pos_embed'].clone()
    sd['pos_embed'].view(-1)[70] += 0.01  # row 1, channel 6
    src = save_official(tmp_path / 'bad.pth', sd, pe, 'basic')
    assert to_mmlape.main(['--family', 'vit', src,
                           str(tmp_path / 'out.pth')]) == 2
    err = capsys.readouterr().err.strip()
    assert '\n' not in err
    assert 'largest difference is 0.01 (row 1, channel 6' in err


def test_fixed_pe_is_recognised_without_args():
    """A file without ``args``: a 2-D PE is the official ``1D_sin``; a
    3-D one that is mmlape's table to rounding is a fixed PE; a learned
    PE stays."""
    assert check_fixed_pe(sin_1d(17, 64), None) == 'sincos1d'
    assert check_fixed_pe(sin_2d(4, 64), None) == 'sincos2d'
    assert check_fixed_pe(sin_1d(17, 64)[None], None) == 'sincos1d'
    assert check_fixed_pe(torch.randn(1, 17, 64) * .02, None) is None
    with pytest.raises(ValueError, match='largest difference'):
        check_fixed_pe(sin_1d(17, 64) + 0.1, None)
    # told it is fixed: another table is refused, not kept
    with pytest.raises(ValueError, match="pe_type='sincos2d'"):
        check_fixed_pe(sin_1d(17, 64)[None], 'sincos2d')
    assert check_fixed_pe(torch.randn(1, 17, 64), 'learnable') is None
    sd = official_state('2D_sin', 'share')
    ckpt = convert_checkpoint({'model': sd})
    assert 'backbone.pos_embed' not in ckpt['state_dict']
    assert 'official_lape' not in ckpt['meta']
    assert any('fixed sincos2d PE' in n for n in ckpt['meta']['notes'])


def test_weights_that_are_not_the_recorded_run_are_refused(tmp_path, capsys):
    sd = official_state('learnable', 'basic')
    src = save_official(tmp_path / 'x.pth', sd, 'learnable', 'LaPE')
    assert to_mmlape.main(['--family', 'vit', src,
                           str(tmp_path / 'out.pth')]) == 2
    err = capsys.readouterr().err
    assert '--join-type LaPE' in err and 'none are there' in err


@pytest.mark.parametrize('release,pe,join,message', [
    ('current', '1D_RPE', 'basic', 'does not offer'),
    ('current', 'RPE', 'basic', 'does not offer'),
    ('current', 'learnable', 'LN', 'no counterpart'),
    ('first', '2D_RPE', 'default', 'does not offer'),
])
def test_runs_without_a_counterpart_are_refused(release, pe, join, message):
    run = OfficialRun(release, pe, join)
    with pytest.raises(ValueError, match=message):
        run.backbone()


def test_recorded_args_are_read_from_the_namespace():
    args = official_args('2D_sin', 'share', model='deit_small_patch16_224')
    from mmlape.models.checkpoint.official_lape import read_official_run
    run = read_official_run({'model': {}, 'args': args})
    assert run == OfficialRun('current', '2D_sin', 'share',
                              'deit_small_patch16_224', IMG)
    assert run.arch() == dict(arch='deit-small', patch_size=16, img_size=IMG)
    first = read_official_run({'args': official_args('RPE', 'LaPE', 'first')})
    assert first.release == 'first' and first.option == '--pe_joining'
    assert first.backbone() == dict(
        pe_type='relative', pe_join=dict(type='LaPE'))
    # a plain DeiT run records no PE choice
    assert read_official_run({'args': {'model': 'deit_tiny'}}) is None


@pytest.mark.parametrize('release,join', [('current', 'LN'),
                                          ('first', 'LaPE')])
def test_relative_lape_norm_is_the_officials_at_its_init_scale(
        release, join, tmp_path):
    """The official bias norm is ``nn.LayerNorm(num_patches)``, eps 1e-5.
    At the scale the official code draws its PEs (0.02) the eps matters:
    the backbone's 1e-6 would move the logits far beyond rounding."""
    pe = '2D_RPE' if release == 'current' else 'RPE'
    sd = official_state(pe, join, release, table_std=0.02)
    src = save_official(tmp_path / 'rpe.pth', sd, pe, join, release)
    out = str(tmp_path / 'mmlape.pth')
    assert to_mmlape.main(['--family', 'vit', src, out]) == 0
    clf = classifier('relative', dict(type='LaPE'))
    clf.load_state_dict(torch.load(out)['state_dict'], strict=True)
    norms = [blk.pe_norm for blk in clf.backbone.blocks]
    assert {(n.eps, n.normalized_shape) for n in norms} == {(1e-5, (16, ))}
    assert clf.backbone.norm.eps == 1e-6  # the backbone keeps DeiT's
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        want = official_logits(sd, img, pe, join, release)
        assert_close_f32(clf(img, mode='tensor'), want, ulps=64)
        for norm in norms:
            norm.eps = 1e-6
        clf.backbone.train(False)  # drops the cached PE plans
        wrong = clf(img, mode='tensor')
    assert (wrong - want).abs().max() > 1e-3


def test_methods_doc_maps_every_official_name():
    """docs/methods.md's table names every ``--pe`` and join of both
    releases with the mmlape options the converter writes."""
    from conftest import ROOT

    from mmlape.models.checkpoint.official_lape import (OFFICIAL_JOINS,
                                                        OFFICIAL_PES)
    with open(f'{ROOT}/docs/methods.md') as f:
        doc = f.read()
    section = doc.split('## Official LaPE checkpoints')[1].split('\n## ')[0]
    rows = [line for line in section.splitlines() if line.startswith('|')]
    for pe, pe_type in OFFICIAL_PES.items():
        assert any(f'`{pe}`' in r and f'`{pe_type}`' in r for r in rows), pe
    for (release, kind, join), (mmlape, hier) in OFFICIAL_JOINS.items():
        hier_text = '-' if hier is None else f'`{hier}`'
        assert any(
            r.startswith(f'| {release} |') and f'{join}`' in r
            and f'| `{mmlape}` |' in r and f'| {hier_text}' in r
            for r in rows), (release, kind, join)
