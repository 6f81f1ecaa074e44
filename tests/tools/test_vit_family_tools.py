"""T2T-ViT, CeiT, ViT-Lite and CCT through the tools: tools/train.py and
tools/test.py on tiny versions of the real configs (generated ImageNet-
layout and CIFAR-100 pickle-layout data), the ImageNet -> CIFAR-100
fine-tuning chain of T2T-ViT, and the analysis tools on each family."""
import csv
import json
import os.path as osp
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT
from generated_cifar import accept_generated_files, make_cifar100

from mmlape.datasets import generate_pos_shapes
from mmlape.utils import safe_torch_load

sys.path.insert(0, ROOT)
from tools import test as test_tool  # noqa: E402
from tools import train as train_tool  # noqa: E402
from tools.analysis import pe_similarity, token_pe_correlation  # noqa: E402

pytestmark = pytest.mark.slow

LN5 = dict(type='LN', eps=1e-5)
TINY = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
ARCHS = {
    't2t':
    dict(
        TINY,
        tokenizer=dict(type='T2T', token_dims=8),
        pe_type='sincos1d',
        qkv_bias=False,
        norm_cfg=LN5),
    'ceit':
    dict(
        TINY,
        tokenizer=dict(type='I2T', conv_channels=8),
        ffn=dict(type='LeFF'),
        out_type='pooled',
        pooling=dict(type='LCA')),
    'vit_lite':
    dict(
        TINY,
        img_size=32,
        tokenizer=dict(
            type='Patch', patch_size=4, weight_init='kaiming_normal'),
        qkv_bias=False,
        norm_cfg=LN5,
        norm2_in_residual=True,
        pos_embed_std=0.2,
        cls_token_std=0.),
    'cct':
    dict(
        TINY,
        img_size=32,
        tokenizer=dict(type='Conv'),
        with_cls_token=False,
        out_type='pooled',
        pooling=dict(type='SeqPool'),
        qkv_bias=False,
        norm_cfg=LN5,
        norm2_in_residual=True,
        pos_embed_std=0.2),
}
RUNS = {
    # family: (config, data, layers that receive a PE)
    't2t': ('t2t_vit/t2t-vit-7-lape_8xb64_in1k.py', 'imagenet', 2),
    'ceit': ('ceit/ceit-tiny_4xb256_in1k.py', 'imagenet', 2),
    'vit_lite':
    ('vit_lite/vit-lite-7-4-pvg_1xb128-310e_cifar100.py', 'cifar', 2),
    'cct': ('cct/cct-7-3x1-lape_1xb128-300e_cifar100.py', 'cifar', 2),
}


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp('data')
    imagenet = str(root / 'imagenet')
    generate_pos_shapes(imagenet, num_train=4, num_val=2, seed=1)
    cifar = make_cifar100(str(root / 'cifar'), num_train=4, num_test=2)
    accept_generated_files()
    return dict(imagenet=imagenet, cifar=cifar)


def tiny_config(tmp_path, name, base, family, data_root, **backbone):
    """A config file inheriting the real one, with a tiny arch, the
    generated data, one epoch of two iterations and mmengine's checkpoint
    hook (the configs name mmlape's atomic one)."""
    imports = ['mmlape'] + (['cifar_checksums_off'] if 'cifar' in base else [])
    loader = dict(
        batch_size=2, num_workers=0, dataset=dict(data_root=data_root))
    text = '\n'.join([
        f"_base_ = {osp.join(ROOT, 'configs', base)!r}",
        f'custom_imports = dict(imports={imports!r}, '
        'allow_failed_imports=False)',
        'model = dict(backbone='
        f'{dict(backbone, arch=dict(ARCHS[family], _delete_=True))!r}, '
        'head=dict(in_channels=32))',
        f'train_dataloader = {loader!r}',
        f'val_dataloader = {loader!r}',
        f'test_dataloader = {loader!r}',
        'train_cfg = dict(max_epochs=1)',
        "default_hooks = dict(checkpoint=dict(type='CheckpointHook'), "
        'logger=dict(interval=1))',
    ])
    path = tmp_path / f'{name}.py'
    path.write_text(text + '\n')
    return str(path)


@pytest.mark.parametrize('family', list(RUNS))
def test_train_test_and_analyse(family, data, tmp_path):
    base, kind, pe_layers = RUNS[family]
    config = tiny_config(tmp_path, family, base, family, data[kind])
    work = str(tmp_path / 'work')
    assert train_tool.main([config, '--work-dir', work]) == 0
    ckpt = osp.join(work, 'epoch_1.pth')
    state = safe_torch_load(ckpt)
    assert state['meta']['epoch'] == 1 and state['meta']['iter'] == 2
    if family == 't2t':
        # the config's moving average (LaPEExponentialMovingAverage)
        # updated on both iterations, its keys mmengine's
        ema = state['ema_state_dict']
        assert int(ema['steps']) == 2
        assert {k[len('module.'):]
                for k in ema if k != 'steps'} == set(state['state_dict'])
    assert test_tool.main([config, ckpt, '--work-dir',
                           str(tmp_path / 'test')]) == 0
    with open(tmp_path / 'test' / 'test_metrics.json') as f:
        metrics = json.load(f)
    assert 0 <= metrics['accuracy/top1'] <= 100

    # PE similarity: every layer that receives a PE has a finite map
    sim_dir = tmp_path / 'sim'
    assert pe_similarity.main([config, ckpt, '--out-dir', str(sim_dir)]) == 0
    maps = np.load(sim_dir / 'maps.npy')
    assert maps.shape[0] == 2 and np.isfinite(maps[:pe_layers]).all()
    sim = np.load(sim_dir / 'similarity.npy')
    assert np.allclose(np.diagonal(sim[0]), 1, atol=1e-4)

    # token-PE correlation on images of the data
    images = osp.join(data['imagenet'], 'train')
    corr_dir = tmp_path / 'corr'
    assert token_pe_correlation.main([
        config, ckpt, '--data', images, '--num-images', '2', '--out-dir',
        str(corr_dir)
    ]) == 0
    with open(corr_dir / 'token_pe_correlation.csv') as f:
        rows = list(csv.DictReader(f))
    assert [int(r['layer']) for r in rows] == [0, 1]
    assert all(-1 <= float(r['mean_r']) <= 1 for r in rows)

    if family == 't2t':
        # the CIFAR-100 fine-tune starts from this ImageNet checkpoint
        fine = tiny_config(
            tmp_path,
            'fine',
            't2t_vit/t2t-vit-7-lape_in1k-pre_1xb128-60e_cifar100.py',
            family,
            data['cifar'],
            init_cfg=dict(checkpoint=ckpt))
        fine_work = str(tmp_path / 'fine')
        assert train_tool.main([fine, '--work-dir', fine_work]) == 0
        tuned = safe_torch_load(osp.join(fine_work,
                                         'epoch_1.pth'))['state_dict']
        pre = state['state_dict']
        # loaded from the ImageNet checkpoint; the class token and the
        # final norm are not trained (lr_mult 0), the rest is
        for key in ('backbone.cls_token', 'backbone.norm.weight'):
            torch.testing.assert_close(tuned[key], pre[key])
        assert not torch.equal(tuned['backbone.blocks.0.pe_norm.weight'],
                               pre['backbone.blocks.0.pe_norm.weight'])
