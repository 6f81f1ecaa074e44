"""Write the model index: one ``metafile.yml`` per config family.

Every config under ``configs/<family>/`` gets one entry (its file name
without ``.py``) in ``configs/<family>/metafile.yml``, and the root
``model-index.yml`` imports every metafile (the OpenMMLab model-index
format, as read by mim and the OpenMMLab model zoos).

Parameters are counted as the papers count them: every parameter plus the
fixed weights the official code stores as frozen parameters
(:func:`mmlape.analysis.count_parameters`; T2T-ViT-7's sinusoid and
Performer features). ``Parameters`` and ``FLOPs`` are those of the
config's BACKBONE (heads and necks depend on the task);
``Learnable Parameters`` is the backbone's ``model.parameters()`` alone;
a classifier's ``Model Parameters`` adds its head, the number the papers'
tables print (T2T-ViT-7: 4,310,222; CeiT-Ti PVG: 6,360,744, 6.361M).
All are counted by ``tools/analysis/complexity.py``'s
``measure_counts``: one image, at the backbone's ``img_size`` for
classification and at 512x512 for the dense tasks (detection and
segmentation), the same sizes as complexity.py's table. The bilinear
sampling inside ViT-Adapter's deformable attention is not counted (see
complexity.py).

``Position Embedding`` is the built backbone's PE setting
(``pe_setting``: a ``pe_type``, ``'{rotary}+{absolute}'`` for a rotary PE
with an absolute one beside it, ``'none'``), so that the index can be
searched by PE.

Results are the papers' PUBLISHED numbers, given only where a paper reports
a number for exactly that config; each result carries ``Published: true``
and the table it comes from. mmlape has not reproduced these numbers.

``Weights`` is null unless a checkpoint of the config has been published:
``tools/convert/publish.py`` prints the ``Weights: <URL>`` line to paste
into the config's entry, and this tool keeps the URL an entry has (in the
rewrite and in ``--check``); ``get_model('mmlape::<name>',
pretrained=True)`` then loads it. A ``Weights`` value that is not a URL
(``scheme://...``; publish.py's ``<URL-PREFIX>`` placeholder) is refused
in one line (exit status 2), as is a metafile that is no YAML, rather than
written over. The URL of an entry whose config is gone is dropped, and
said so.

References:
    OpenMMLab model-index format: mmpretrain's ``configs/*/metafile.yml``
    and ``model-index.yml`` (keys only).

Example:
    python tools/analysis/model_index.py            # rewrite the index
    python tools/analysis/model_index.py --check    # fail if it is stale
"""
import argparse
import glob
import os.path as osp
import re
import sys
from typing import Dict, List, Optional, Tuple

import yaml

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

from mmlape.analysis.params import ParamCount  # noqa: E402
from mmlape.analysis.params import count_parameters
from mmlape.models.layers import pe_join_classes  # noqa: E402
from tools.analysis.complexity import measure_counts  # noqa: E402

#: Input side for the dense tasks (detection, segmentation).
DENSE_SIZE = 512
CLASSIFIERS = ('ImageClassifier', )

MPVG = dict(Title='PVG and MPVG (Lee, Ham, Kim, AAAI 2025)')
LAPE = dict(Title='LaPE: Layer-adaptive Position Embedding for Vision '
            'Transformers with Independent Layer Normalization (Yu et al., '
            'ICCV 2023)')
IN1K = 'ImageNet-1k'
C100 = 'CIFAR-100'

#: family: (collection name, task, dataset, architecture, paper)
FAMILIES = {
    'deit': ('LaPE-DeiT', 'Image Classification', IN1K, 'DeiT', MPVG),
    'vit_adapter': ('LaPE-ViT-Adapter', 'Object Detection / Semantic '
                    'Segmentation', 'COCO / ADE20K', 'ViT-Adapter', MPVG),
    'segmenter':
    ('LaPE-Segmenter', 'Semantic Segmentation', 'ADE20K', 'Segmenter', LAPE),
    't2t_vit': ('LaPE-T2T-ViT', 'Image Classification', f'{IN1K} / {C100}',
                'T2T-ViT', MPVG),
    'ceit': ('LaPE-CeiT', 'Image Classification', IN1K, 'CeiT', MPVG),
    'vit_lite':
    ('LaPE-ViT-Lite', 'Image Classification', C100, 'ViT-Lite', MPVG),
    'cct': ('LaPE-CCT', 'Image Classification', C100, 'CCT', LAPE),
    'swin':
    ('LaPE-Swin', 'Image Classification', IN1K, 'Swin Transformer', MPVG),
    'demo': ('LaPE-demo', 'Image Classification', 'pos-shapes (generated)',
             'ViT', LAPE),
}
#: The joins of the MPVG paper's result columns, in order (the published
#: values below follow it; the config suffixes come from the join classes).
PAPER_JOINS = ('Default', 'LaPE', 'PVG', 'MPVG')

TOP1 = 'Top 1 Accuracy'
CLS = 'Image Classification'
MPVG_T = 'MPVG paper (Lee, Ham, Kim, AAAI 2025), {}'
DEIT, ADAPTER = MPVG_T.format('DeiT table'), MPVG_T.format('ViT-Adapter table')
TABLE1, TABLE2 = MPVG_T.format('Table 1'), MPVG_T.format('Table 2')
BOX_MASK = [(45.9, 41.0), (46.2, 41.2), (46.1, 41.2), (46.5, 41.4)]
#: (config name with {} for the join suffix, values of PAPER_JOINS, task,
#: dataset, metric, source)
PUBLISHED_ROWS = [
    ('deit-tiny{}_4xb256_in1k', [72.14, 72.94, 73.17,
                                 73.51], CLS, IN1K, TOP1, DEIT),
    ('deit-small{}_4xb256_in1k', [79.81, 80.39, 80.38,
                                  80.61], CLS, IN1K, TOP1, DEIT),
    ('deit-base{}_4xb256_in1k', [81.85, 82.15, 82.21,
                                 82.42], CLS, IN1K, TOP1, DEIT),
    ('mask-rcnn_vit-adapter-tiny{}_fpn_3x_coco', [{
        'box AP': b,
        'mask AP': m
    } for b, m in BOX_MASK], 'Instance Segmentation', 'COCO', None, ADAPTER),
    ('upernet_vit-adapter-tiny{}_8xb2-160k_ade20k-512x512',
     [40.55, 41.42, 41.07,
      41.69], 'Semantic Segmentation', 'ADE20K', 'mIoU', ADAPTER),
    ('swin-tiny{}_16xb64_in1k', [81.37, 81.48, 81.52,
                                 81.64], CLS, IN1K, TOP1, TABLE1),
    ('ceit-tiny{}_4xb256_in1k', [76.62, 76.89, 77.14,
                                 77.20], CLS, IN1K, TOP1, TABLE1),
    ('t2t-vit-7{}_8xb64_in1k', [71.76, 72.01, 71.91,
                                72.28], CLS, IN1K, TOP1, TABLE1),
    ('vit-lite-7-4{}_1xb128-310e_cifar100', [74.90, 75.52, 76.67,
                                             76.87], CLS, C100, TOP1, TABLE2),
    ('t2t-vit-7{}_in1k-pre_1xb128-60e_cifar100', [83.22, 83.41, 83.39, 83.51],
     CLS, C100, TOP1, TABLE2),
]


def published() -> Dict[str, List[dict]]:
    """Config name: its published results (only configs a paper reports)."""
    joins = pe_join_classes(with_configs=True)
    out = {}
    for fmt, values, task, dataset, metric, source in PUBLISHED_ROWS:
        for join, value in zip(PAPER_JOINS, values):
            metrics = value if metric is None else {metric: value}
            out[fmt.format(joins[join].config_suffix)] = [
                dict(
                    Task=task,
                    Dataset=dataset,
                    Metrics=metrics,
                    Published=True,
                    Source=source)
            ]
    return out


PUBLISHED = published()

HEADER = """\
# The {name} configs in the OpenMMLab model-index format. Generated by
# tools/analysis/model_index.py (do not edit by hand;
# tests/configs/test_model_index.py checks it against the built models).
# Parameters and FLOPs: the config's backbone only (no neck or head), one
# image at Metadata.Input Size, FLOPs as counted by
# tools/analysis/complexity.py (torch.utils.flop_counter, a multiply-add is
# 2 FLOPs). Parameters are counted as the papers count them: fixed weights
# that the official code stores as frozen parameters are included
# (Learnable Parameters leaves them out); a classifier's Model Parameters
# adds its head, as the papers' tables do. Position Embedding: the
# backbone's PE (pe_type; rotary+absolute for a rotary PE with an absolute
# one beside it). Default Scope: the host library that builds the config
# (mmpretrain's model hub lists those of mmpretrain).
# Results: the papers' PUBLISHED numbers (Published: true, Source names the
# table), given only where a paper reports that exact config. mmlape has not
# reproduced them. Weights: null, or the URL of a checkpoint published with
# tools/convert/publish.py (the one line to edit by hand: paste the line it
# prints; the generator keeps it).
"""


def config_files() -> Dict[str, List[str]]:
    """Every config, relative to the repo root, by family (no ``_base_``)."""
    out = {}
    for family in sorted(FAMILIES):
        files = sorted(glob.glob(osp.join(ROOT, 'configs', family, '*.py')))
        out[family] = [osp.relpath(f, ROOT) for f in files]
    return out


def backbone_spec(config: str) -> Tuple[str, dict, int]:
    """The backbone's type, its keyword arguments and the input side."""
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(ROOT, config))
    backbone = cfg.model['backbone'].to_dict()
    builder = backbone.pop('type').split('.')[-1]
    backbone.pop('init_cfg', None)
    if cfg.model['type'] in CLASSIFIERS:
        size = backbone.get('img_size', 224)
    else:
        size = DENSE_SIZE
    return builder, backbone, size


def count_all(
        config: str,
        flops: bool = True,
        cache: Optional[dict] = None) -> Tuple[ParamCount, Optional[int], int]:
    """Backbone parameters (:class:`~mmlape.analysis.ParamCount`), FLOPs
    (None unless ``flops``) and input side.

    Configs with the same backbone and input side share one count (through
    ``cache``).
    """
    builder, kwargs, size = backbone_spec(config)
    key = (builder, repr(sorted(kwargs.items())), size, flops)
    if cache is not None and key in cache:
        return cache[key]
    params, n_flops = measure_counts(builder, kwargs, size, flops=flops)
    result = (params, n_flops, size)
    if cache is not None:
        cache[key] = result
    return result


def count(config: str,
          flops: bool = True,
          cache: Optional[dict] = None) -> Tuple[int, Optional[int], int]:
    """Backbone parameters as the papers count them, FLOPs (None unless
    ``flops``) and input side (see :func:`count_all`)."""
    params, n_flops, size = count_all(config, flops, cache)
    return params.paper, n_flops, size


def pe_setting(config: str, cache: Optional[dict] = None) -> str:
    """The PE setting of the config's built backbone (its ``pe_setting``,
    e.g. ``'learnable'``, ``'rope_mixed+learnable'``)."""
    import mmlape.models as models
    builder, kwargs, _ = backbone_spec(config)
    key = ('pe', builder, repr(sorted(kwargs.items())))
    if cache is None or key not in cache:
        value = getattr(models, builder)(**kwargs).pe_setting
        if cache is None:
            return value
        cache[key] = value
    return cache[key]


def default_scope(config: str) -> str:
    """The host library that builds the config (its ``default_scope``):
    ``Metadata.Default Scope``, which tells mmpretrain's model hub which
    entries are its own (``mmlape.hosts.hub``)."""
    from mmengine.config import Config
    return Config.fromfile(osp.join(ROOT, config)).get('default_scope')


def head_parameters(config: str) -> Optional[int]:
    """Parameters of a classifier's head (None for other models), built
    from the config in mmpretrain's scope."""
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(ROOT, config))
    if cfg.model['type'] not in CLASSIFIERS:
        return None
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        head = MODELS.build(cfg.model['head'])
    return count_parameters(head).paper


def method_joins() -> List[str]:
    """The joins a collection lists beside its architecture: those with
    configs that are not a baseline (LaPE, PVG, MPVG), from the registry."""
    return [
        name for name, cls in pe_join_classes(with_configs=True).items()
        if not cls.baseline
    ]


#: What a ``Weights`` value must look like: a URL (``scheme://...``).
URL = re.compile(r'^[A-Za-z][\w+.-]*://\S+$')


class WeightsError(ValueError):
    """A metafile whose ``Weights`` cannot be kept (one line)."""


def is_weights_url(value) -> bool:
    """Whether ``value`` is a ``Weights`` URL (``scheme://...``)."""
    return isinstance(value, str) and URL.match(value) is not None


def kept_weights(path: str) -> Dict[str, str]:
    """The ``Weights`` URLs the entries of an existing metafile have, by
    name (pasted from ``tools/convert/publish.py``'s output).

    Args:
        path (str): A ``metafile.yml``; one that does not exist has none.

    Returns:
        dict: Each entry's name and its URL (entries with ``Weights: null``
        are left out).

    Raises:
        WeightsError: The file is no YAML, or an entry's ``Weights`` is not
            a URL (e.g. publish.py's ``<URL-PREFIX>`` placeholder).
    """
    if not osp.exists(path):
        return {}
    where = osp.relpath(path, ROOT)
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as err:
        reason = ' '.join(str(err).split())
        raise WeightsError(f'{where} is no YAML ({reason}); fix it (its '
                           f'Weights: URLs would be lost) or delete '
                           f'it') from None
    models = data.get('Models') if isinstance(data, dict) else None
    out = {}
    for entry in models if isinstance(models, list) else []:
        if not isinstance(entry, dict) or entry.get('Weights') is None:
            continue
        name, weights = entry.get('Name'), entry['Weights']
        if not is_weights_url(weights):
            raise WeightsError(
                f'{where}: the Weights of "{name}" is not a URL: '
                f'{weights!r}; give the URL the published .pth is served '
                f'at (scheme://...) or null')
        out[name] = weights
    return out


def metafile(family: str,
             configs: List[str],
             cache: dict,
             weights: Optional[Dict[str, str]] = None) -> dict:
    """The metafile of a family's configs.

    Args:
        family (str): A key of :data:`FAMILIES`.
        configs (list[str]): Its configs, relative to the repo root.
        cache (dict): Counts shared between configs (:func:`count_all`).
        weights (dict, optional): Entry name: the ``Weights`` URL to keep
            (:func:`kept_weights`). Defaults to None (every ``Weights``
            null).

    Returns:
        dict: ``Collections`` and ``Models``.
    """
    weights = weights or {}
    name, task, dataset, arch, paper = FAMILIES[family]
    collection = dict(
        Name=name,
        Metadata={
            'Training Data': dataset,
            'Architecture': [arch] + method_joins()
        },
        Paper=dict(paper))
    if osp.exists(osp.join(ROOT, 'configs', family, 'README.md')):
        collection['README'] = f'configs/{family}/README.md'
    models = []
    for config in configs:
        stem = osp.splitext(osp.basename(config))[0]
        params, flops, size = count_all(config, cache=cache)
        meta = {
            'FLOPs': flops,
            'Parameters': params.paper,
            'Learnable Parameters': params.learnable
        }
        head = head_parameters(config)
        if head is not None:
            meta['Model Parameters'] = params.paper + head
        meta['Input Size'] = size
        meta['Position Embedding'] = pe_setting(config, cache)
        meta['Default Scope'] = default_scope(config)
        entry = {
            'Name': stem,
            'In Collection': name,
            'Config': config,
            'Metadata': meta,
        }
        if stem in PUBLISHED:
            entry['Results'] = PUBLISHED[stem]
        entry['Weights'] = weights.get(stem)
        models.append(entry)
    return dict(Collections=[collection], Models=models)


def render(family: str, data: dict) -> str:
    header = HEADER.format(name=FAMILIES[family][0])
    return header + yaml.safe_dump(data, sort_keys=False, width=79)


def root_index(families: List[str]) -> str:
    with open(osp.join(ROOT, 'model-index.yml')) as f:
        comment = ''.join(line for line in f if line.startswith('#'))
    imports = [f'configs/{family}/metafile.yml' for family in families]
    return comment + yaml.safe_dump(dict(Import=imports), sort_keys=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--check',
        action='store_true',
        help='compare instead of writing; exit 1 if a file is stale')
    args = parser.parse_args(argv)
    cache: dict = {}
    stale = []
    files = {}
    for family, configs in config_files().items():
        path = osp.join(ROOT, 'configs', family, 'metafile.yml')
        try:
            weights = kept_weights(path)
        except WeightsError as err:
            sys.stderr.write(f'error: {err}\n')
            return 2
        names = {osp.splitext(osp.basename(c))[0] for c in configs}
        for name in sorted(set(weights) - names):
            sys.stderr.write(f'{osp.relpath(path, ROOT)}: no config is named '
                             f'"{name}" any more; its Weights '
                             f'{weights[name]} is dropped\n')
        files[path] = render(family, metafile(family, configs, cache, weights))
    files[osp.join(ROOT, 'model-index.yml')] = root_index(list(FAMILIES))
    for path, text in files.items():
        old = open(path).read() if osp.exists(path) else None
        if old != text:
            stale.append(osp.relpath(path, ROOT))
            if not args.check:
                with open(path, 'w') as f:
                    f.write(text)
    if args.check and stale:
        sys.stderr.write(f'stale model index: {stale}\n')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
