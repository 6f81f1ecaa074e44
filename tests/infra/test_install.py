"""mmlape installed from a wheel (not editable), used from a directory
outside the repository: the configs and tools ship in ``mmlape/.mim`` and
configs elsewhere inherit ``mmlape::`` bases, dense ones included; the
wheel ``python -m build`` makes installs into a fresh virtual environment
and resolves ``mmlape::`` bases there."""
import glob
import os.path as osp
import shutil
import site
import sys
import textwrap
import zipfile

import pytest
from conftest import ROOT, run

#: What a source distribution of mmlape holds (what setup.py reads).
SOURCES = ('setup.py', 'setup.cfg', 'MANIFEST.in', 'README.md', 'CHANGELOG.md',
           'CITATION.cff', 'LICENSE', 'model-index.yml', 'requirements',
           'mmlape', 'configs', 'tools')


def copy_sources(dst) -> str:
    """The sources of an sdist, copied to ``dst`` (the checkout's
    ``mmlape/.mim`` links left out, as a fresh clone has none)."""
    dst.mkdir()
    ignore = shutil.ignore_patterns('__pycache__', '*.pyc', '.mim')
    for name in SOURCES:
        path = osp.join(ROOT, name)
        if osp.isdir(path):
            shutil.copytree(path, dst / name, ignore=ignore)
        else:
            shutil.copy(path, dst / name)
    return str(dst)


USER_CONFIGS = {
    'my_deit.py':
    """
    _base_ = 'mmlape::deit/deit-tiny-lape_4xb256_in1k.py'
    model = dict(backbone=dict(drop_path_rate=0.2))
    """,
    'my_mask_rcnn.py':
    """
    _base_ = ('mmlape::vit_adapter/'
              'mask-rcnn_vit-adapter-tiny-lape_fpn_3x_coco.py')
    train_dataloader = dict(dataset=dict(pipeline={{_base_.train_pipeline}}))
    """,
    'my_upernet.py':
    """
    _base_ = ('mmlape::vit_adapter/'
              'upernet_vit-adapter-tiny-mpvg_8xb2-160k_ade20k-512x512.py')
    """,
    'my_segmenter.py':
    """
    _base_ = ('mmlape::segmenter/'
              'segmenter_vit-tiny-pvg_mask_8xb1-160k_ade20k-512x512.py')
    """,
    'my_demo.py':
    """
    _base_ = 'mmlape::demo/deit-demo-lape_pos-shapes.py'
    """,
    'my_upernet_model.py':
    """
    _base_ = 'mmlape::_base_/models/upernet_vit-adapter-tiny.py'
    model = dict(backbone=dict(pe_join=dict(type='LaPE')))
    """,
}

CHECK = """
import importlib
import os.path as osp
import sys

import mmlape
from mmengine.config import Config
from mmengine.registry import METRICS, MODELS, TRANSFORMS, DefaultScope

site = sys.argv[1]
assert mmlape.__file__.startswith(site), mmlape.__file__
mim = osp.join(site, 'mmlape', '.mim')


def load(name, scope, base):
    cfg = Config.fromfile(name)
    assert cfg.default_scope == scope, cfg.default_scope
    assert osp.join(mim, 'configs', base) in cfg.text, 'base not installed'
    importlib.import_module(f'{scope}.utils').register_all_modules(False)
    return cfg


cfg = load('my_deit.py', 'mmpretrain', 'deit/deit-tiny_4xb256_in1k.py')
backbone = cfg.model.backbone
assert (backbone.type, backbone.pe_join.type) == ('LaPEViT', 'LaPE')
assert backbone.drop_path_rate == 0.2 and backbone.arch == 'deit-tiny'

cfg = load('my_upernet.py', 'mmseg', 'vit_adapter/upernet_vit-adapter-'
           'tiny_8xb2-160k_ade20k-512x512.py')
assert cfg.model.backbone.type == 'LaPEViTAdapter'
assert cfg.model.backbone.pe_join.type == 'MPVG'
with DefaultScope.overwrite_default_scope('mmseg'):
    assert MODELS.build(cfg.model.backbone).final_norm  # MPVG's last term
assert cfg.model.backbone.init_cfg.checkpoint.endswith('-mpvg_in1k.pth')

cfg = load('my_segmenter.py', 'mmseg', 'segmenter/segmenter_vit-tiny_mask_'
           '8xb1-160k_ade20k-512x512.py')
assert cfg.model.backbone.pe_join.type == 'PVG'

# The stamped mmlape scope builds the host's classes.
cfg = load('my_mask_rcnn.py', 'mmdet', 'vit_adapter/mask-rcnn_vit-adapter-'
           'tiny_fpn_3x_coco.py')
with DefaultScope.overwrite_default_scope('mmdet'):
    pipeline = [
        TRANSFORMS.build(t) for t in cfg.train_dataloader.dataset.pipeline
    ]
    model = MODELS.build(cfg.model)
assert type(pipeline[-1]).__module__.startswith('mmdet.'), pipeline[-1]
assert type(model).__name__ == 'MaskRCNN'
assert type(model.backbone).__name__ == 'LaPEViTAdapter'
assert model.backbone.pe_join.name == 'LaPE'

cfg = load('my_demo.py', 'mmpretrain', 'demo/deit-demo_pos-shapes.py')
with DefaultScope.overwrite_default_scope('mmpretrain'):
    model = MODELS.build(cfg.model)
    metric = METRICS.build(cfg.val_evaluator)
assert type(model).__module__.startswith('mmpretrain.')
assert model.backbone.pe_join.name == 'LaPE'
# the demo's metric: mmlape's, on mmpretrain's Accuracy
from mmpretrain.evaluation import Accuracy
assert type(metric).__name__ == 'LaPEAccuracy'
assert isinstance(metric, Accuracy)

# The model bases ship too: one backbone definition, in mmseg's UperNet.
cfg = Config.fromfile('my_upernet_model.py')
shared = osp.join(mim, 'configs', '_base_', 'models', 'vit-adapter-tiny.py')
assert shared in cfg.text
assert cfg.model.backbone.type == 'LaPEViTAdapter'
assert cfg.model.backbone.pe_join.type == 'LaPE'
assert cfg.model.decode_head.type == 'UPerHead'

# The tools ship too, and run from the installed package.
sys.path.insert(0, mim)
from tools.train import parse_args
assert parse_args(['my_demo.py', '--launcher', 'slurm']).launcher == 'slurm'
assert osp.isfile(osp.join(mim, 'tools', 'slurm_train.sh'))
print('ok')
"""


@pytest.mark.slow
def test_configs_inherit_mmlape_bases_from_a_wheel(tmp_path):
    src = copy_sources(tmp_path / 'src')
    pip = [sys.executable, '-m', 'pip']
    run(pip + [
        'wheel', '--no-deps', '--no-build-isolation', '--no-index', '-q', '-w',
        str(tmp_path / 'wheels'),
        str(src)
    ])
    wheel, = glob.glob(str(tmp_path / 'wheels' / 'mmlape-*.whl'))
    names = set(zipfile.ZipFile(wheel).namelist())
    dist_info = osp.basename(wheel).split('-py')[0] + '.dist-info'
    assert {n.split('/')[0] for n in names} == {'mmlape', dist_info}
    assert f'{dist_info}/licenses/LICENSE' in names
    for name in (
            'configs/deit/deit-tiny-lape_4xb256_in1k.py',
            'configs/vit_adapter/mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py',
            'configs/demo/deit-demo_pos-shapes.py', 'model-index.yml',
            'configs/deit/metafile.yml', 'tools/train.py',
            'tools/slurm_train.sh', 'tools/common.py'):
        assert f'mmlape/.mim/{name}' in names, name
    site = str(tmp_path / 'site')
    run(pip +
        ['install', '--no-deps', '--no-index', '-q', '--target', site, wheel])
    user = tmp_path / 'elsewhere'
    user.mkdir()
    for name, text in USER_CONFIGS.items():
        (user / name).write_text(textwrap.dedent(text))
    (user / 'check.py').write_text(CHECK)
    out = run([sys.executable, 'check.py', site],
              cwd=str(user),
              threads=2,
              env=dict(PYTHONPATH=site))
    assert out.stdout.strip().splitlines()[-1] == 'ok', out.stdout[-2000:]


#: Run by the virtual environment's Python in a folder of its own: mmlape
#: and its ``mmlape::`` bases come from the environment, not the checkout.
VENV_CHECK = """
import os.path as osp
import sys

import mmlape
import mmlape.hosts.applied  # what the configs' custom_imports name
from mmengine.config import Config

site = sys.argv[1]
assert mmlape.__file__ == osp.join(site, 'mmlape', '__init__.py'), \\
    mmlape.__file__
assert mmlape.__version__ == sys.argv[2], mmlape.__version__
cfg = Config.fromfile('my_deit.py')
base = osp.join(site, 'mmlape', '.mim', 'configs', 'deit',
                'deit-tiny-lape_4xb256_in1k.py')
assert base in cfg.text, cfg.text[:2000]
assert cfg.model.backbone.type == 'LaPEViT'
assert cfg.model.backbone.pe_join.type == 'LaPE'
assert 'mmlape.hosts.applied' in cfg.custom_imports.imports
print('ok')
"""


@pytest.mark.slow
def test_built_wheel_resolves_mmlape_bases_in_a_fresh_venv(tmp_path):
    """``python -m build --wheel --no-isolation`` (as docs/install.md
    says), the wheel installed with ``--no-deps`` into a new virtual
    environment that sees this one's packages (torch, mmcv, the hosts), and
    a config elsewhere reading an ``mmlape::`` base with that
    environment's Python; the build leaves the sources' ``mmlape/.mim``
    alone."""
    from mmlape import __version__
    src = copy_sources(tmp_path / 'src')
    run([
        sys.executable, '-m', 'build', '--wheel', '--no-isolation', '--outdir',
        str(tmp_path / 'dist'), src
    ])
    assert not osp.exists(osp.join(src, 'mmlape', '.mim'))
    wheel, = glob.glob(str(tmp_path / 'dist' / 'mmlape-*.whl'))
    assert osp.basename(wheel).startswith(f'mmlape-{__version__}-')
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ('mmlape/.mim/model-index.yml',
                 'mmlape/.mim/configs/deit/deit-tiny-lape_4xb256_in1k.py',
                 'mmlape/.mim/configs/_base_/models/vit-adapter-tiny.py',
                 'mmlape/.mim/tools/train.py',
                 'mmlape/.mim/tools/misc/collect_env.py',
                 'mmlape/.mim/tools/analysis/get_flops.py'):
        assert name in names, name
    venv = tmp_path / 'venv'
    run([
        sys.executable, '-m', 'venv', '--system-site-packages',
        '--without-pip',
        str(venv)
    ])
    python = str(venv / 'bin' / 'python')
    venv_site = run([
        python, '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))'
    ]).stdout.strip()
    if sys.prefix != sys.base_prefix:
        # run from a virtual environment: its packages, after the new one's
        with open(osp.join(venv_site, 'outer.pth'), 'w') as f:
            f.write('\n'.join(site.getsitepackages()) + '\n')
    # pip of the packages it sees; --force-reinstall: this environment's
    # mmlape (editable, outside the new one) counts as installed
    run([
        python, '-m', 'pip', 'install', '--no-deps', '--no-index',
        '--force-reinstall', '-q', wheel
    ])
    user = tmp_path / 'elsewhere'
    user.mkdir()
    (user / 'my_deit.py'
     ).write_text("_base_ = 'mmlape::deit/deit-tiny-lape_4xb256_in1k.py'\n")
    (user / 'check.py').write_text(VENV_CHECK)
    out = run([python, 'check.py', venv_site, __version__],
              cwd=str(user),
              threads=2,
              env=dict(PYTHONPATH=''))
    assert out.stdout.strip().splitlines()[-1] == 'ok', out.stdout[-2000:]
