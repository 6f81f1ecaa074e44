"""Checkpoint conversion: mmpretrain, official DeiT/LaPE (timm), mmseg."""
import sys

import pytest
import torch
from conftest import build_classifier, randomize
from mmengine.registry import DefaultScope

from mmlape.models import LaPEViT
from mmlape.models.checkpoint.vit import (convert_backbone, convert_checkpoint,
                                          convert_mmpretrain_vit,
                                          detect_format)

sys.path.insert(0, 'tools/convert')
import to_mmlape


def mmpretrain_classifier(backbone_type, **backbone):
    return build_classifier(
        dict(type=backbone_type, **backbone),
        dict(type='VisionTransformerClsHead', num_classes=10,
             in_channels=192)).eval()


@pytest.mark.parametrize('hw', [(224, 224), (160, 224)])
def test_mmpretrain_deit_tiny_same_logits(hw):
    theirs = mmpretrain_classifier(
        'VisionTransformer', arch='deit-tiny', img_size=224, patch_size=16)
    randomize(theirs, 0.2, (0.5, 1.5))
    ckpt = convert_checkpoint({'state_dict': theirs.state_dict()})
    assert ckpt['meta']['converted_from'] == 'mmpretrain'
    ours = mmpretrain_classifier(
        'LaPEViT', arch='deit-tiny', img_size=224, patch_size=16)
    ours.load_state_dict(ckpt['state_dict'], strict=True)
    img = torch.randn(2, 3, *hw)
    with torch.no_grad():
        want = theirs(img, mode='tensor')
        got = ours(img, mode='tensor')
    assert want.abs().max() > 1e-2  # not a degenerate comparison
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_official_lape_checkpoint_through_the_tool(tmp_path, capsys):
    """timm names with blocks.{i}.pe_norm and a classifier head."""
    src = LaPEViT('test-tiny', img_size=32, patch_size=8, pe_join='LaPE')
    randomize(src, 0.2, (0.5, 1.5))
    head_w, head_b = torch.randn(10, 64), torch.randn(10)
    official = dict(src.state_dict(), **{
        'head.weight': head_w,
        'head.bias': head_b
    })
    assert detect_format(official) == 'timm'
    path, out = tmp_path / 'official.pth', tmp_path / 'mmlape.pth'
    torch.save({'model': official}, path)
    assert to_mmlape.main(['--family', 'vit', str(path), str(out)]) == 0
    # The notes say where the classifier went, not that it was dropped.
    printed = capsys.readouterr().out
    assert ('the classifier went to the model\'s head (head=\'vit\'): '
            'head.weight -> head.layers.head.weight, head.bias -> '
            'head.layers.head.bias') in printed
    assert 'dropped' not in printed
    assert to_mmlape.main(['--family', 'vit',
                           str(path), str(out)]) == 2  # no overwrite
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        clf = MODELS.build(
            dict(
                type='ImageClassifier',
                backbone=dict(
                    type='LaPEViT',
                    arch='test-tiny',
                    img_size=32,
                    patch_size=8,
                    pe_join='LaPE'),
                head=dict(
                    type='VisionTransformerClsHead',
                    num_classes=10,
                    in_channels=64))).eval()
    clf.load_state_dict(torch.load(out)['state_dict'], strict=True)
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = torch.nn.functional.linear(src.eval()(img)[0], head_w, head_b)
        torch.testing.assert_close(clf(img, mode='tensor'), want)


def test_official_unshare_pos_embeds_are_stacked():
    src = LaPEViT('test-tiny', img_size=32, patch_size=8, pe_join='Unshare')
    sd = {k: v for k, v in src.state_dict().items() if k != 'pos_embed'}
    for i in range(4):
        sd[f'pos_embed{i}'] = src.pos_embed[i:i + 1].detach()
    out = convert_backbone(sd)
    torch.testing.assert_close(out['pos_embed'], src.pos_embed.detach())


def test_unknown_keys_are_an_error_not_silence():
    with pytest.raises(ValueError, match='Cannot convert key'):
        convert_mmpretrain_vit({
            'layers.0.ln1.weight': torch.ones(2),
            'layers.0.mystery.weight': torch.ones(2)
        })
    with pytest.raises(ValueError, match='Not a ViT checkpoint'):
        detect_format({'conv1.weight': torch.ones(1)})


def test_tool_reports_missing_source(tmp_path, capsys):
    assert to_mmlape.main(
        ['--family', 'vit',
         str(tmp_path / 'x.pth'),
         str(tmp_path / 'y.pth')]) == 2
    assert 'does not exist' in capsys.readouterr().err


@pytest.mark.parametrize('argv,match', [
    (['--head', 'vit'], "--head vit is not one of the swin family's"),
    (['--format', 'timm'], "--format timm is not one of the swin family's"),
    (['--no-ema'], '--no-ema is an option of --family vit-family'),
])
def test_one_converter_takes_each_family_s_options_only(
        argv, match, tmp_path, capsys):
    """``--format`` and ``--head`` take the family's choices; a family's
    own option is refused for another family (argparse's exit 2)."""
    with pytest.raises(SystemExit) as err:
        to_mmlape.main(['--family', 'swin', 'a.pth', 'b.pth', *argv])
    assert err.value.code == 2
    assert match in capsys.readouterr().err
    with pytest.raises(SystemExit):
        to_mmlape.main(['a.pth', 'b.pth'])  # the family is required
