"""The model index (model-index.yml, configs/*/metafile.yml) against the
configs, the built backbones and the READMEs."""
import glob
import os.path as osp
import re

import pytest
import yaml
from conftest import ROOT

from tools.analysis import model_index


def load_index():
    with open(osp.join(ROOT, 'model-index.yml')) as f:
        root = yaml.safe_load(f)
    collections, models = {}, []
    for path in root['Import']:
        with open(osp.join(ROOT, path)) as f:
            meta = yaml.safe_load(f)
        for col in meta['Collections']:
            assert col['Name'] not in collections, col['Name']
            collections[col['Name']] = col
        models.extend(meta['Models'])
    return root, collections, models


ROOT_INDEX, COLLECTIONS, MODELS = load_index()


def all_configs():
    files = glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True)
    return sorted(
        osp.relpath(f, ROOT) for f in files
        if '_base_' not in osp.relpath(f, ROOT).split(osp.sep))


def test_every_config_has_exactly_one_entry():
    assert ROOT_INDEX['Import'] == [
        f'configs/{family}/metafile.yml' for family in model_index.FAMILIES
    ]
    listed = [m['Config'] for m in MODELS]
    assert len(listed) == len(set(listed)), 'a config is listed twice'
    assert sorted(listed) == all_configs()
    names = [m['Name'] for m in MODELS]
    assert len(names) == len(set(names))
    for m in MODELS:
        assert osp.isfile(osp.join(ROOT, m['Config'])), m['Config']
        assert m['Name'] == osp.splitext(osp.basename(m['Config']))[0]
        assert m['In Collection'] in COLLECTIONS
        # its own family's metafile
        family = m['Config'].split('/')[1]
        assert COLLECTIONS[m['In Collection']]['Name'] == (
            model_index.FAMILIES[family][0])
        # null, or the URL of a published checkpoint (publish.py)
        assert m['Weights'] is None or model_index.is_weights_url(
            m['Weights']), m['Weights']
        meta = m['Metadata']
        assert isinstance(meta['Parameters'], int) and meta['Parameters'] > 0
        assert isinstance(meta['FLOPs'], int) and meta['FLOPs'] > 0


def test_results_are_the_published_numbers_marked_as_such():
    by_name = {m['Name']: m for m in MODELS}
    with_results = {n for n, m in by_name.items() if 'Results' in m}
    assert with_results == set(model_index.PUBLISHED)
    for name in with_results:
        for result in by_name[name]['Results']:
            assert result['Published'] is True
            assert 'AAAI 2025' in result['Source']
            assert set(result) == {
                'Task', 'Dataset', 'Metrics', 'Published', 'Source'
            }
    # spot checks against the papers' tables
    top1 = 'Top 1 Accuracy'

    def metrics(name):
        result, = by_name[name]['Results']
        return result['Metrics']

    assert metrics('deit-tiny-lape_4xb256_in1k') == {top1: 72.94}
    assert metrics('deit-base-mpvg_4xb256_in1k') == {top1: 82.42}
    assert metrics('mask-rcnn_vit-adapter-tiny_fpn_3x_coco') == {
        'box AP': 45.9,
        'mask AP': 41.0
    }
    assert metrics(
        'upernet_vit-adapter-tiny-mpvg_8xb2-160k_ade20k-512x512') == {
            'mIoU': 41.69
        }
    assert metrics('t2t-vit-7-pvg_in1k-pre_1xb128-60e_cifar100') == {
        top1: 83.39
    }
    # no paper reports these configs
    for name in ('deit-demo_pos-shapes', 'cct-7-3x1-lape_1xb128-300e_cifar100',
                 'segmenter_vit-tiny-lape_mask_8xb1-160k_ade20k-512x512'):
        assert 'Results' not in by_name[name]
    # the metafiles say in words that the numbers were not reproduced
    for path in ROOT_INDEX['Import']:
        text = open(osp.join(ROOT, path)).read()
        assert 'PUBLISHED' in text and 'not\n# reproduced' in text


#: One config per family (its LaPE variant, the smallest model) for the
#: fast check; the slow test checks every config.
SAMPLE = (
    'configs/deit/deit-tiny-lape_4xb256_in1k.py',
    'configs/vit_adapter/upernet_vit-adapter-tiny-lape_8xb2-160k_ade20k-'
    '512x512.py',
    'configs/segmenter/segmenter_vit-tiny-lape_mask_8xb1-160k_ade20k-'
    '512x512.py',
    'configs/t2t_vit/t2t-vit-7-mpvg_8xb64_in1k.py',
    'configs/ceit/ceit-tiny-pvg_4xb256_in1k.py',
    'configs/vit_lite/vit-lite-7-4-lape_1xb128-310e_cifar100.py',
    'configs/cct/cct-7-3x1-mpvg_1xb128-300e_cifar100.py',
    'configs/swin/swin-tiny-lape_16xb64_in1k.py',
    'configs/demo/deit-demo-lape_pos-shapes.py',
)


def test_parameters_match_the_built_backbones_per_family():
    by_config = {m['Config']: m for m in MODELS}
    assert {c.split('/')[1] for c in SAMPLE} == set(model_index.FAMILIES)
    for config in SAMPLE:
        params, _, size = model_index.count(config, flops=False)
        meta = by_config[config]['Metadata']
        assert meta['Parameters'] == params, config
        assert meta['Input Size'] == size, config
    # the counting definition: the backbone, not the whole model (DeiT-Ti
    # is 5,717,416 with its 1000-class head)
    deit = by_config['configs/deit/deit-tiny_4xb256_in1k.py']
    assert deit['Metadata']['Parameters'] == 5_524_416
    assert deit['Metadata']['Input Size'] == 224
    upernet = by_config[SAMPLE[1]]
    assert upernet['Metadata']['Input Size'] == model_index.DENSE_SIZE


def test_position_embedding_is_the_built_backbones():
    """``Metadata.Position Embedding`` is the built backbone's PE setting
    (a name of ``pe_settings``), the rotary configs' included."""
    from mmlape.models.layers.pos_embed import pe_settings
    by_config = {m['Config']: m for m in MODELS}
    rotary = {
        'configs/deit/deit-tiny-rope-mixed_4xb256_in1k.py': 'rope_mixed',
        'configs/deit/deit-small-rope-mixed-ape-mpvg_4xb256_in1k.py':
        'rope_mixed+learnable',
        'configs/demo/deit-demo-rope-mixed_pos-shapes.py': 'rope_mixed',
    }
    for config in SAMPLE + tuple(rotary):
        meta = by_config[config]['Metadata']
        assert meta['Position Embedding'] == model_index.pe_setting(config)
        if config in rotary:
            assert meta['Position Embedding'] == rotary[config]
    assert {m['Metadata']['Position Embedding']
            for m in MODELS} <= set(pe_settings()) | {'none'}


@pytest.mark.slow
def test_parameters_and_flops_match_the_built_backbones():
    cache = {}
    for m in MODELS:
        params, flops, size = model_index.count(m['Config'], True, cache)
        meta = m['Metadata']
        assert (meta['Parameters'], meta['FLOPs'],
                meta['Input Size']) == (params, flops, size), m['Name']


def readme_config_links():
    links = set()
    for readme in [osp.join(ROOT, 'README.md')] + glob.glob(
            osp.join(ROOT, 'configs', '*', 'README.md')):
        text = open(readme).read()
        # table links, relative to the README
        for target in re.findall(r'\]\(([^)#\s]+\.py)\)', text):
            path = osp.normpath(osp.join(osp.dirname(readme), target))
            rel = osp.relpath(path, ROOT)
            if rel.startswith('configs' + osp.sep):
                links.add(rel)
        # configs named by their path (commands, text)
        links.update(re.findall(r'(?<![\w/.])configs/\w+/[\w.-]+\.py', text))
    return links


def test_readme_config_tables_agree_with_the_index():
    links = readme_config_links()
    assert links, 'no config linked from a README'
    indexed = {m['Config']: m for m in MODELS}
    assert links <= set(indexed), links - set(indexed)
    # each family README is the README of its collection
    for col in COLLECTIONS.values():
        if 'README' in col:
            assert osp.isfile(osp.join(ROOT, col['README']))
    # the README's config tables: every family directory it links is indexed
    text = open(osp.join(ROOT, 'README.md')).read()
    for family in re.findall(r'\]\(configs/(\w+)\)', text):
        assert f'configs/{family}/metafile.yml' in ROOT_INDEX['Import']
    assert 'model-index.yml' in text


def test_packaging_ships_the_index():
    setup = open(osp.join(ROOT, 'setup.py')).read()
    assert "'model-index.yml'" in setup
    # the sdist carries the sources a build copies into mmlape/.mim
    # (setup.py's BuildPyWithMim; the wheel's contents are checked in
    # tests/infra/test_install.py)
    manifest = open(osp.join(ROOT, 'MANIFEST.in')).read()
    assert re.search(r'^include .*\bmodel-index\.yml\b', manifest, re.M)
    assert re.search(r'^recursive-include configs .*\*\.yml', manifest, re.M)


def test_mmengine_mmlape_lookup_reads_the_index(tmp_path, monkeypatch):
    """``_base_ = 'mmlape::...'`` still resolves: mmengine loads every
    imported metafile first (a missing or broken one fails the lookup)."""
    import mmengine.config.config as mm_config
    from mmengine.config import Config
    from mmengine.config.utils import _get_cfg_metainfo

    import mmlape  # noqa: F401  (makes mmlape known to mmengine)
    mim = tmp_path / 'mmlape' / '.mim'
    mim.mkdir(parents=True)
    (mim / 'model-index.yml').symlink_to(osp.join(ROOT, 'model-index.yml'))
    (mim / 'configs').symlink_to(osp.join(ROOT, 'configs'))
    installed = mm_config.get_installed_path
    monkeypatch.setattr(
        mm_config, 'get_installed_path',
        lambda package: str(tmp_path / package)
        if package == 'mmlape' else installed(package))
    meta = _get_cfg_metainfo(
        str(tmp_path / 'mmlape'), 'deit/deit-tiny-lape_4xb256_in1k.py')
    assert meta['Config'] == 'configs/deit/deit-tiny-lape_4xb256_in1k.py'
    user = tmp_path / 'user.py'
    user.write_text("_base_ = 'mmlape::deit/deit-tiny-lape_4xb256_in1k.py'\n")
    cfg = Config.fromfile(str(user))
    assert cfg.model.backbone.pe_join.type == 'LaPE'


def test_parameters_are_counted_as_the_papers_count_them():
    """``Parameters``: the backbone with the fixed weights the official code
    stores as frozen parameters; ``Learnable Parameters``: without them; a
    classifier's ``Model Parameters``: with its head, the number the
    papers' tables print (MPVG Table 1, to its precision)."""
    by_name = {m['Name']: m['Metadata'] for m in MODELS}
    for name, meta in by_name.items():
        assert meta['Parameters'] >= meta['Learnable Parameters'] > 0, name
        classifier = not name.startswith(('mask-rcnn', 'upernet', 'segmenter'))
        assert ('Model Parameters' in meta) == classifier, name
        if classifier:
            assert meta['Model Parameters'] > meta['Parameters'], name
    t2t = by_name['t2t-vit-7_8xb64_in1k']
    # the sinusoid (197 x 256) and two Performers' features (32 x 64 each)
    assert t2t['Parameters'] - t2t['Learnable Parameters'] == (197 * 256 +
                                                               2 * 32 * 64)
    assert t2t['Model Parameters'] == 4_310_222
    table1 = {
        't2t-vit-7{}_8xb64_in1k': 4.310,
        'swin-tiny{}_16xb64_in1k': 28.589,
        'ceit-tiny{}_4xb256_in1k': 6.361,
    }
    for fmt, paper in table1.items():
        for suffix in ('', '-lape', '-pvg', '-mpvg'):
            if fmt.startswith(('t2t', 'swin')) and suffix:
                continue  # the table's other columns: not pinned here
            if fmt.startswith('ceit') and suffix in ('', '-lape'):
                continue  # 6.357M and 6.362M: CeiT's own LCA
            meta = by_name[fmt.format(suffix)]
            assert round(meta['Model Parameters'] / 1e6, 3) == paper, fmt
    assert by_name['ceit-tiny-pvg_4xb256_in1k']['Model Parameters'] == (
        6_360_744)
    assert by_name['ceit-tiny-mpvg_4xb256_in1k']['Model Parameters'] == (
        6_361_128)
    # the head is counted from the config's own head
    assert model_index.head_parameters(
        'configs/ceit/ceit-tiny_4xb256_in1k.py') == 192 * 1000 + 1000
    assert model_index.head_parameters(SAMPLE[1]) is None  # UperNet


def test_weights_urls_are_kept(tmp_path, monkeypatch, capsys):
    """A ``Weights:`` URL pasted into an entry (from
    ``tools/convert/publish.py``) survives the rewrite and passes
    ``--check``; a placeholder is refused in one line, not written over
    (the demo family, in a copy of the tree)."""
    import shutil
    (tmp_path / 'configs').mkdir()
    for folder in ('demo', '_base_'):  # the demo and the bases it inherits
        shutil.copytree(
            osp.join(ROOT, 'configs', folder), tmp_path / 'configs' / folder)
    shutil.copy(osp.join(ROOT, 'model-index.yml'), tmp_path)
    monkeypatch.setattr(model_index, 'ROOT', str(tmp_path))
    monkeypatch.setattr(model_index, 'FAMILIES',
                        {'demo': model_index.FAMILIES['demo']})
    # each run reads and counts afresh (mmengine reads mmpretrain's whole
    # model index for each config): once is enough here
    import copy

    from mmengine.config import Config
    read, fromfile = {}, Config.fromfile
    counted, count_all = {}, model_index.count_all

    def read_once(path, *args, **kwargs):
        if path not in read:
            read[path] = fromfile(path, *args, **kwargs)
        return copy.deepcopy(read[path])

    def count_once(config, flops=True, cache=None):
        if (config, flops) not in counted:
            counted[config, flops] = count_all(config, flops)
        return counted[config, flops]

    monkeypatch.setattr(Config, 'fromfile', staticmethod(read_once))
    monkeypatch.setattr(model_index, 'count_all', count_once)
    meta = tmp_path / 'configs' / 'demo' / 'metafile.yml'
    assert model_index.main([]) == 0
    generated = meta.read_text()
    assert model_index.main(['--check']) == 0
    name = 'deit-demo_pos-shapes'
    url = f'https://example.org/mmlape/{name}-0123abcd.pth'
    entry = f'- Name: {name}\n'
    head, tail = generated.split(entry)
    pasted = head + entry + tail.replace('  Weights: null',
                                         f'  Weights: {url}', 1)
    meta.write_text(pasted)
    assert model_index.main(['--check']) == 0  # not stale
    assert model_index.main([]) == 0
    assert meta.read_text() == pasted  # kept
    models = {m['Name']: m for m in yaml.safe_load(pasted)['Models']}
    assert models[name]['Weights'] == url
    assert all(m['Weights'] is None for n, m in models.items() if n != name)
    # publish.py's placeholder, pasted as it is: refused, the file kept
    placeholder = pasted.replace('https://example.org/mmlape', '<URL-PREFIX>')
    meta.write_text(placeholder)
    capsys.readouterr()
    for args in ([], ['--check']):
        assert model_index.main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith('error: configs/demo/metafile.yml: the '
                              f'Weights of "{name}" is not a URL')
        assert '\n' not in err
        assert meta.read_text() == placeholder
    # the URL of a config that is gone is dropped, and said so
    gone = 'deit-demo-mpvg_pos-shapes'
    head, tail = generated.split(f'- Name: {gone}\n')
    meta.write_text(head + f'- Name: {gone}\n' +
                    tail.replace('  Weights: null', f'  Weights: {url}', 1))
    (tmp_path / 'configs' / 'demo' / f'{gone}.py').unlink()
    assert model_index.main([]) == 0
    assert url not in meta.read_text()
    assert f'no config is named "{gone}"' in capsys.readouterr().err
