"""A new join reaches every tool through the registry: the test registers
one class (what a new join's library file holds) and the complexity table,
the model index and the benchmarks' join lists take it, unedited."""
import os.path as osp
import sys

import pytest
import torch
from conftest import ROOT

from mmlape.models.layers import (BasePEJoin, PEPlan, pe_join_classes,
                                  pe_join_names)
from mmlape.registry import PE_JOINS

sys.path.insert(0, ROOT)
sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
import bench_dense_learning  # noqa: E402
import bench_gpu  # noqa: E402
import bench_joins  # noqa: E402
import bench_vit_adapter  # noqa: E402
from gpu.common import Bench  # noqa: E402
from gpu.deit import deit_models  # noqa: E402
from gpu.dense import dense_configs  # noqa: E402

from tools.analysis import complexity, model_index  # noqa: E402

GAP = dict(with_cls_token=False, out_type='avg_featmap')


@pytest.fixture
def toy_join():
    """``Toy``: the raw PE at the input and on every layer's attention
    input, no class token (GAP), configs named ``*-toy*``; registered for
    one test and removed after it."""

    class ToyJoin(BasePEJoin):
        name = 'Toy'
        allows_cls_token = False
        config_suffix = '-toy'

        def plan(self, pos, rel_biases, pe_norms, carry=None):
            return PEPlan(
                self.num_layers, input=pos, attn=[pos] * self.num_layers)

    PE_JOINS.register_module(name='Toy', module=ToyJoin)
    try:
        yield ToyJoin
    finally:
        PE_JOINS.module_dict.pop('Toy')


#: The papers' joins and what their classes declare: config suffix,
#: baseline, class token allowed, runs on a staged backbone, runs with a
#: fixed sin-cos PE, adds a PE at the final norm.
PAPER_JOINS = {
    'Default': ('', True, True, True, True, False),
    'Share': (None, True, True, False, True, False),
    'Unshare': (None, True, True, False, False, False),
    'LaPE': ('-lape', False, True, True, True, False),
    'PVG': ('-pvg', False, False, True, True, False),
    'MPVG': ('-mpvg', False, False, True, True, True),
}


def test_the_registry_holds_the_papers_joins():
    """What each of the papers' joins declares; any other join may be
    registered beside them, in any order."""
    joins = pe_join_classes()
    assert set(PAPER_JOINS) <= set(joins)
    assert {
        name: (cls.config_suffix, cls.baseline, cls.allows_cls_token,
               cls.fits(staged=True), cls.fits('sincos1d'),
               cls.adds_pe_at_final_norm)
        for name, cls in joins.items() if name in PAPER_JOINS
    } == PAPER_JOINS
    with_configs = pe_join_classes(with_configs=True)
    assert {n
            for n, v in PAPER_JOINS.items()
            if v[0] is not None} <= set(with_configs)
    assert all(c.config_suffix is not None for c in with_configs.values())


def test_a_new_join_reaches_the_complexity_table(toy_join, capsys):
    # no arguments of its own: LaPEViT builds a join without a class token
    # so (CeiT-Ti's row adds LCA over the GAP tokens)
    assert ('Toy', {}) in complexity.arch_joins('deit-tiny')
    assert complexity.arch_joins('test-tiny')[-1] == ('Toy', {})
    assert complexity.arch_joins('ceit-tiny')[-1] == (
        'Toy',
        dict(
            with_cls_token=False, pooling=dict(type='LCA', layer_token='gap')))
    # configs-only rows (the dense backbones) take it; Swin does not: the
    # toy join does not support stages
    assert [j for j, _ in complexity.arch_joins('vit-adapter-tiny')
            ] == list(pe_join_classes(with_configs=True))
    assert complexity.arch_joins('vit-adapter-tiny')[-1][0] == 'Toy'
    assert 'Toy' not in dict(complexity.arch_joins('swin-tiny'))
    assert complexity.main(['--archs', 'test-tiny']) == 0
    rows = {
        ln.split('|')[2].strip(): ln.split('|')
        for ln in capsys.readouterr().out.splitlines()
        if ln.startswith('| test-tiny')
    }
    # measured: no parameter of its own; no class token and no PE row of
    # one (-2C, as PVG without its norms)
    assert int(rows['Toy'][6].replace(',', '')) == -2 * 64
    assert float(rows['Toy'][5]) > 0


def test_a_new_join_reaches_the_model_index(toy_join):
    methods = [
        n for n, c in pe_join_classes(with_configs=True).items()
        if not c.baseline
    ]
    assert {'LaPE', 'PVG', 'MPVG'} <= set(methods) and methods[-1] == 'Toy'
    assert model_index.method_joins() == methods
    collection, = model_index.metafile('demo', [], {})['Collections']
    assert collection['Metadata']['Architecture'] == ['ViT'] + methods
    # the published numbers stay those of the papers' joins
    assert not [n for n in model_index.published() if '-toy' in n]


def test_a_new_join_reaches_the_benchmarks(toy_join):
    # bench_joins: every join that fits the model, GAP without a class
    # token, held to the cost targets (not a baseline)
    assert bench_joins.model_configs('deit-tiny')['Toy'] == dict(
        type='LaPEViT', arch='deit-tiny', img_size=224, pe_join='Toy', **GAP)
    assert 'Toy' in bench_joins.model_configs('t2t-vit-7')  # fixed PE
    assert 'Toy' not in bench_joins.swin_models()
    assert bench_joins.targeted('Toy') and not bench_joins.targeted('Share')
    # bench_gpu: the --joins and --compile-joins defaults, the DeiT models,
    # the dense configs
    args = bench_gpu.parse_args(['--device', 'cpu', '--tiny'])
    assert args.joins[-1] == 'Toy' and args.compile_joins[-1] == 'Toy'
    assert bench_gpu.parse_args(['--joins',
                                 'toy,default']).joins == ['Toy', 'Default']
    model = deit_models(Bench(args), 'tiny')['Toy']()
    assert model.backbone.pe_join.name == 'Toy'
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 1000)
    assert dense_configs('upernet')['Toy'] == osp.join(
        ROOT, 'configs', 'vit_adapter',
        'upernet_vit-adapter-tiny-toy_8xb2-160k_ade20k-512x512.py')
    # bench_vit_adapter and bench_dense_learning: the joins with configs
    assert bench_vit_adapter.joins()[-1] == 'Toy'
    args = bench_dense_learning.parse_args([])
    assert args.joins[-1] == 'Toy'
    runs = bench_dense_learning.plan(
        args, dict(coco='c/', ade='a'), pretrained={})
    assert ('configs/vit_adapter/mask-rcnn_vit-adapter-tiny-toy_fpn_3x_'
            'coco.py') in [base for _, _, _, base, _ in runs]


def test_the_toy_join_is_gone_after_its_test():
    assert 'Toy' not in pe_join_names()
    assert 'Toy' not in bench_gpu.parse_args([]).joins


def test_every_pe_setting_reaches_the_tools(capsys):
    """The PE settings (every ``pe_type``, each rotary type beside each
    absolute PE) come from the type lists: complexity.py, bench_joins and
    bench_gpu measure each with the joins that fit it, unedited; a rotary
    PE alone takes the default join only."""
    from mmlape.models.layers.pos_embed import (join_pe_type, parse_pe_setting,
                                                pe_settings)
    joins = pe_join_classes()
    for setting in pe_settings():
        fit = [n for n, c in joins.items() if c.fits(join_pe_type(setting))]
        assert [j for j, _ in complexity.arch_joins('deit-tiny', setting)
                ] == fit, setting
        configs = bench_joins.model_configs('deit-tiny', setting)
        assert list(configs) == fit, setting
        pe = {k: v for k, v in parse_pe_setting(setting).items() if v}
        assert all({k: c[k]
                    for k in pe} == pe for c in configs.values()), setting
        if setting.startswith('rope_') and '+' not in setting:
            assert fit == ['Default']
    assert 'mmpretrain ViT' in bench_joins.model_configs('deit-tiny')
    assert complexity.main([
        '--archs', 'test-tiny', 'swin-tiny', '--pe', 'rope_mixed',
        'rope_axial+sincos2d'
    ]) == 0
    out = capsys.readouterr().out
    labels = [ln.split('|')[1:3] for ln in out.splitlines()]
    assert [' test-tiny rope_mixed ', ' Default '] in labels
    assert [' test-tiny rope_axial+sincos2d ', ' MPVG '] in labels
    assert not any('swin' in label for label, _ in labels)  # its own PE
    args = bench_gpu.parse_args(
        ['--device', 'cpu', '--tiny', '--pe', 'rope_mixed'])
    models = deit_models(Bench(args), 'tiny')
    assert list(models) == ['Default']  # no reference model either
    model = models['Default']()
    assert model.backbone.pe_setting == 'rope_mixed'
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 1000)
