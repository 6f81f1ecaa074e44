"""Install mmlape (`pip install --no-build-isolation -e .`).

The OpenMMLab stack is installed by ``scripts/install.sh`` (it has to build
mmcv with ops against the torch that is already there), so ``setup.py`` only
declares the lightweight runtime requirements.
"""
import os.path as osp
from setuptools import find_packages, setup


def read_version() -> str:
    namespace = {}
    with open(osp.join('mmlape', 'version.py'), encoding='utf-8') as f:
        exec(f.read(), namespace)
    return namespace['__version__']


def read_requirements(name: str) -> list:
    path = osp.join('requirements', name)
    reqs = []
    with open(path, encoding='utf-8') as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if line:
                reqs.append(line)
    return reqs


setup(
    name='mmlape',
    version=read_version(),
    description='Layer-adaptive position embeddings (LaPE, PVG, MPVG) for '
    'Vision Transformers on the OpenMMLab stack',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(
        exclude=('configs', 'tools', 'tests', 'benchmarks')),
    python_requires='>=3.8',
    install_requires=read_requirements('openmmlab.txt') +
    read_requirements('runtime.txt'),
    extras_require=dict(tests=read_requirements('tests.txt')),
    license='Apache License 2.0',
    zip_safe=False,
)
