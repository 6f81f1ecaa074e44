"""Install mmlape (`pip install --no-build-isolation -e .` or `pip install .`).

The OpenMMLab stack is installed by ``scripts/install.sh`` (it has to build
mmcv with ops against the torch that is already there), so ``setup.py`` only
declares the lightweight runtime requirements, read from
``requirements/*.txt`` (the one place the versions are written).

Like mmpretrain, mmdet and mmseg, the package carries its configs and tools
in ``mmlape/.mim/``, so that ``_base_ = 'mmlape::deit/...'`` resolves in any
directory (mmengine looks ``pkg::`` bases up in the installed package's
``.mim/configs``). Building a wheel or an sdist copies them there; an
editable install links them.
"""
import os
import os.path as osp
import shutil
import sys
from setuptools import find_packages, setup

ROOT = osp.dirname(osp.abspath(__file__))
#: What ``mmlape/.mim/`` holds (those that exist).
MIM_FILES = ('configs', 'tools', 'model-index.yml')


def read_version() -> str:
    namespace = {}
    with open(osp.join(ROOT, 'mmlape', 'version.py'), encoding='utf-8') as f:
        exec(f.read(), namespace)
    return namespace['__version__']


def read_requirements(name: str) -> list:
    path = osp.join(ROOT, 'requirements', name)
    reqs = []
    with open(path, encoding='utf-8') as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if line:
                reqs.append(line)
    return reqs


def add_mim_extension() -> None:
    """Fill ``mmlape/.mim/`` with the configs and tools.

    Copies for a wheel, an sdist or a plain install; relative symbolic links
    for an editable install (``develop``, ``editable_wheel``), so that edits
    in ``configs/`` show at once. Other commands leave it as it is.
    """
    commands = set(sys.argv[1:])
    if commands & {'develop', 'editable_wheel'}:
        mode = 'symlink'
    elif commands & {'bdist_wheel', 'sdist', 'build', 'build_py', 'install'}:
        mode = 'copy'
    else:
        return
    mim_dir = osp.join(ROOT, 'mmlape', '.mim')
    os.makedirs(mim_dir, exist_ok=True)
    for name in MIM_FILES:
        src = osp.join(ROOT, name)
        dst = osp.join(mim_dir, name)
        if not osp.exists(src):
            continue  # e.g. a wheel built from an sdist keeps its copy
        if osp.islink(dst) or osp.isfile(dst):
            os.remove(dst)
        elif osp.isdir(dst):
            shutil.rmtree(dst)
        if mode == 'symlink':
            os.symlink(osp.relpath(src, mim_dir), dst)
        elif osp.isdir(src):
            shutil.copytree(
                src,
                dst,
                ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
        else:
            shutil.copyfile(src, dst)


if __name__ == '__main__':
    add_mim_extension()
    setup(
        name='mmlape',
        version=read_version(),
        description='Layer-adaptive position embeddings (LaPE, PVG, MPVG) '
        'for Vision Transformers on the OpenMMLab stack',
        long_description=open(osp.join(ROOT, 'README.md'),
                              encoding='utf-8').read(),
        long_description_content_type='text/markdown',
        # mmlape only: configs and tools travel in mmlape/.mim, and no
        # top-level ``tools`` package lands in site-packages.
        packages=find_packages(include=('mmlape', 'mmlape.*')),
        include_package_data=True,
        python_requires='>=3.8',
        install_requires=read_requirements('openmmlab.txt') +
        read_requirements('runtime.txt'),
        extras_require=dict(tests=read_requirements('tests.txt')),
        license='Apache License 2.0',
        zip_safe=False,
    )
