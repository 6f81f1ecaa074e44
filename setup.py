"""Install mmlape (`pip install --no-build-isolation -e .` or `pip install .`).

The OpenMMLab stack is installed by ``scripts/install.sh`` (it has to build
mmcv with ops against the torch that is already there, so it installs
mmlape with ``--no-deps``). ``setup.py`` declares what mmlape needs at run
time (``requirements/openmmlab.txt`` and ``runtime.txt``) and, as the extra
``tests``, the test, lint and docs tools (``tests.txt``), read from
``requirements/*.txt``, the one place the versions are written.

Python 3.10 to 3.12: torch 2.13.0 (the pin) has wheels for 3.10 and newer,
torch 2.6.0 (the CUDA 12 pair) for 3.9 to 3.13; CI runs 3.11, the GPU
machines 3.12.

Like mmpretrain, mmdet and mmseg, the package carries its configs and tools
in ``mmlape/.mim/``, so that ``_base_ = 'mmlape::deit/...'`` resolves in any
directory (mmengine looks ``pkg::`` bases up in the installed package's
``.mim/configs``). Building (a wheel, ``pip install .``, a wheel from the
sdist, which holds ``configs/`` and ``tools/``) copies them into the
build's ``mmlape/.mim/``, leaving the checkout as it is; an editable
install links them in the checkout's ``mmlape/.mim/`` instead, so that
edits show at once.
"""
import os
import os.path as osp
import shutil
import sys
from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

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


#: The files of configs/ and tools/ that ship (MANIFEST.in says the same
#: for the sdist).
SHIPPED = ('.py', '.yml', '.md', '.sh')


def _not_shipped(folder: str, names: list) -> list:
    return [
        n for n in names if n == '__pycache__' or (
            not osp.isdir(osp.join(folder, n)) and not n.endswith(SHIPPED))
    ]


def fill_mim(mim_dir: str, link: bool = False) -> None:
    """Put the configs, tools and model index into ``mim_dir``: copies, or
    relative symbolic links with ``link``; whatever was there is
    replaced."""
    os.makedirs(mim_dir, exist_ok=True)
    for name in MIM_FILES:
        src = osp.join(ROOT, name)
        dst = osp.join(mim_dir, name)
        if not osp.exists(src):
            continue
        if osp.islink(dst) or osp.isfile(dst):
            os.remove(dst)
        elif osp.isdir(dst):
            shutil.rmtree(dst)
        if link:
            os.symlink(osp.relpath(src, mim_dir), dst)
        elif osp.isdir(src):
            shutil.copytree(src, dst, ignore=_not_shipped)
        else:
            shutil.copyfile(src, dst)


def add_mim_extension() -> None:
    """For an editable install (``develop``, ``editable_wheel``), link the
    configs and tools into the checkout's ``mmlape/.mim/``; other commands
    leave the checkout as it is (:class:`BuildPyWithMim` copies them into
    the build)."""
    if set(sys.argv[1:]) & {'develop', 'editable_wheel'}:
        fill_mim(osp.join(ROOT, 'mmlape', '.mim'), link=True)


class BuildPyWithMim(build_py):
    """``build_py``, and the configs, tools and model index copied into
    the build's ``mmlape/.mim/`` (what a wheel and ``pip install .``
    carry); an editable build links them in the checkout instead."""

    def run(self):
        super().run()
        if not getattr(self, 'editable_mode', False):
            fill_mim(osp.join(self.build_lib, 'mmlape', '.mim'))


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
        # the checkout's mmlape/.mim (the editable install's links) stays
        # out of builds: BuildPyWithMim copies the sources themselves
        exclude_package_data={'mmlape': ['.mim/*']},
        cmdclass=dict(build_py=BuildPyWithMim),
        python_requires='>=3.10',
        install_requires=read_requirements('openmmlab.txt') +
        read_requirements('runtime.txt'),
        extras_require=dict(tests=read_requirements('tests.txt')),
        license='Apache-2.0',
        keywords='vision transformer, position embedding, LaPE, MPVG, '
        'OpenMMLab',
        classifiers=[
            'Development Status :: 3 - Alpha',
            'Intended Audience :: Science/Research',
            'Operating System :: POSIX :: Linux',
            'Programming Language :: Python :: 3',
            'Programming Language :: Python :: 3 :: Only',
            'Programming Language :: Python :: 3.10',
            'Programming Language :: Python :: 3.11',
            'Programming Language :: Python :: 3.12',
            'Topic :: Scientific/Engineering :: Artificial Intelligence',
            'Topic :: Scientific/Engineering :: Image Recognition',
        ],
        zip_safe=False,
    )
