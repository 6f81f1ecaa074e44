"""Write ``docs/model_zoo.md``: every public weight file that a provided
config fits, with the one line that loads it by URL.

Each entry names the file as its authors publish it, the config it fits,
the ``--cfg-options`` line that loads it (the checkpoint family converts
its layout as it loads: ``load_from`` for a whole model,
``model.backbone.init_cfg`` for a backbone) and the accuracy its source
publishes for it. mmlape has tested each conversion on the layout (a model
built with the same names and shapes, ``tests/configs/test_model_zoo.py``),
not on the released file, and reproduces none of these numbers.

Example:
    python tools/analysis/model_zoo.py            # rewrite the page
    python tools/analysis/model_zoo.py --check    # fail if it is stale
"""
import argparse
import os.path as osp
import sys
from dataclasses import dataclass
from typing import List, Optional

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
PAGE = osp.join(ROOT, 'docs', 'model_zoo.md')


@dataclass(frozen=True)
class ZooFile:
    """One public file and the config it fits.

    Attributes:
        model (str): What the file is, in the table.
        url (str): The file, as its authors publish it.
        config (str): The config it fits, from the repository root.
        metric (str): The accuracy its source publishes for it.
        source (str): Where that number is published.
        layout (str): How the test builds a model of the file's names and
            shapes (``tests/configs/test_model_zoo.py``).
        options (tuple[str]): More ``--cfg-options`` the fit needs.
        target (str): ``'load_from'`` (a whole model) or ``'backbone'``
            (``model.backbone.init_cfg``).
        note (str): What a user must know (a format step, a caveat).
    """
    model: str
    url: str
    config: str
    metric: str
    source: str
    layout: str
    options: tuple = ()
    target: str = 'load_from'
    note: str = ''

    def load_options(self) -> List[str]:
        """The ``--cfg-options`` entries that load the file."""
        if self.target == 'backbone':
            first = [
                'model.backbone.init_cfg.type=Pretrained',
                f'model.backbone.init_cfg.checkpoint={self.url}'
            ]
        else:
            first = [f'load_from={self.url}']
        return first + list(self.options)

    def command(self) -> str:
        """A training command that starts from the file."""
        return (f'python tools/train.py {self.config} --cfg-options ' +
                ' '.join(self.load_options()))


DEIT = 'https://dl.fbaipublicfiles.com/deit/'
DEIT_SRC = 'facebookresearch/deit, README_deit.md'
HF = 'https://huggingface.co/timm/{}/resolve/main/model.safetensors'
ROPE_SRC = 'timm README (2025-07-07); RoPE-ViT README: {}'
ADAPTER = 'https://github.com/czczup/ViT-Adapter/releases/download/'
CCT = 'https://shi-labs.com/projects/cct/checkpoints/pretrained/'


def _rope(size: str, variant: str, timm_top1: str, paper_top1: str):
    pe, ape = variant.split('-')[0], variant.endswith('ape')
    name = (f'vit_{size}_patch16_rope{"_mixed" if pe == "mixed" else ""}'
            f'{"_ape" if ape else ""}_224.naver_in1k')
    label = ('RoPE-Mixed' if pe == 'mixed' else 'RoPE-Axial') + \
        (' + APE' if ape else '')
    return ZooFile(
        model=f'RoPE-ViT-{size[0].upper()} {label} (timm)',
        url=HF.format(name),
        config=f'configs/deit/deit-{size}-rope-{variant}-ls_4xb256_in1k.py',
        metric=f'top-1 {timm_top1}',
        source=ROPE_SRC.format(paper_top1),
        layout=f'timm:{name.split(".")[0]}')


#: Every public file a provided config fits.
ZOO = [
    ZooFile(
        model='DeiT-Ti',
        url=DEIT + 'deit_tiny_patch16_224-a1311bcf.pth',
        config='configs/deit/deit-tiny_4xb256_in1k.py',
        metric='top-1 72.2',
        source=DEIT_SRC,
        layout='timm:deit_tiny_patch16_224'),
    ZooFile(
        model='DeiT-S',
        url=DEIT + 'deit_small_patch16_224-cd65a155.pth',
        config='configs/deit/deit-small_4xb256_in1k.py',
        metric='top-1 79.9',
        source=DEIT_SRC,
        layout='timm:deit_small_patch16_224'),
    ZooFile(
        model='DeiT-B',
        url=DEIT + 'deit_base_patch16_224-b5f2ef4d.pth',
        config='configs/deit/deit-base_4xb256_in1k.py',
        metric='top-1 81.8',
        source=DEIT_SRC,
        layout='timm:deit_base_patch16_224'),
    _rope('small', 'axial', '81.23', '80.9'),
    _rope('small', 'axial-ape', '81.00', '80.7'),
    _rope('small', 'mixed', '81.22', '80.9'),
    _rope('small', 'mixed-ape', '80.99', '80.9'),
    _rope('base', 'axial', '83.72', '83.6'),
    _rope('base', 'axial-ape', '83.78', '83.7'),
    _rope('base', 'mixed', '83.80', '83.8'),
    _rope('base', 'mixed-ape', '83.89', '83.8'),
    ZooFile(
        model='ViT-Adapter-Ti Mask R-CNN 3x+MS (COCO)',
        url=(ADAPTER +
             'v0.1.2/mask_rcnn_deit_adapter_tiny_fpn_3x_coco.pth.tar'),
        config='configs/vit_adapter/mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py',
        metric='box AP 46.0, mask AP 41.0',
        source='czczup/ViT-Adapter, detection/README.md',
        layout='adapter:det'),
    ZooFile(
        model='ViT-Adapter-Ti UperNet 160k (ADE20K)',
        url=ADAPTER +
        'v0.3.1/upernet_deit_adapter_tiny_512_160_ade20k.pth.tar',
        config=('configs/vit_adapter/'
                'upernet_vit-adapter-tiny_8xb2-160k_ade20k-512x512.py'),
        metric='mIoU 42.6 (single scale), 43.6 (multi-scale)',
        source='czczup/ViT-Adapter, segmentation/README.md',
        layout='adapter:seg'),
    ZooFile(
        model='Swin-T',
        url=('https://github.com/SwinTransformer/storage/releases/download/'
             'v1.0.0/swin_tiny_patch4_window7_224.pth'),
        config='configs/swin/swin-tiny_16xb64_in1k.py',
        metric='top-1 81.2',
        source='microsoft/Swin-Transformer, README.md',
        layout='swin:tiny',
        options=('model.backbone.use_abs_pos_embed=False', ),
        note='the official Swin-T has no absolute PE; the config\'s '
        'default Swin-Ti (MPVG\'s) has one at stage 1, so the line turns '
        'it off'),
    ZooFile(
        model='T2T-ViT-7',
        url=('https://github.com/yitu-opensource/T2T-ViT/releases/download/'
             'main/71.7_T2T_ViT_7.pth.tar'),
        config='configs/t2t_vit/t2t-vit-7_8xb64_in1k.py',
        metric='top-1 71.7',
        source='yitu-opensource/T2T-ViT, README.md',
        layout='t2t:7',
        note='its state_dict_ema is taken (the weights its README '
        'evaluates)'),
    ZooFile(
        model='CCT-7/3x1 (CIFAR-100, 300 epochs)',
        url=CCT + 'cct_7_3x1_32_cifar100_300epochs.pth',
        config='configs/cct/cct-7-3x1_1xb128-300e_cifar100.py',
        metric='top-1 80.92',
        source='SHI-Labs/Compact-Transformers, README.md',
        layout='compact:cct'),
    ZooFile(
        model='ViT-Lite-7/4 (CIFAR-100, 200 epochs)',
        url=('https://github.com/SHI-Labs/Compact-Transformers/files/'
             '6666088/vitlite7-4_cifar100.pth.zip'),
        config='configs/vit_lite/vit-lite-7-4_1xb128-310e_cifar100.py',
        metric='top-1 69.75',
        source='SHI-Labs/Compact-Transformers, examples/README.md',
        layout='compact:vit_lite',
        note='published as a zip: download and unzip it, then give the '
        '.pth inside as load_from=PATH (the repository\'s older examples; '
        'its current model zoo has no ViT-Lite file)'),
]

#: A join started from a default-join file (the DeiT-Ti row's file).
JOIN_FROM_DEFAULT = ZooFile(
    model='DeiT-Ti into LaPE',
    url=ZOO[0].url,
    config='configs/deit/deit-tiny-lape_4xb256_in1k.py',
    metric='',
    source='',
    layout='timm:deit_tiny_patch16_224',
    options=('model.backbone.init_cfg.join_from_default=True', ),
    target='backbone')


def _row(entry: ZooFile) -> str:
    name = osp.basename(entry.url)
    if entry.url.startswith('https://huggingface.co/'):  # the repo's name
        name = entry.url.split('/')[4]
    link = f'[{name}]({entry.url})'
    line = ' '.join(f'`{o}`' for o in entry.load_options())
    note = f' {entry.note[0].upper()}{entry.note[1:]}.' if entry.note \
        else ''
    return (f'| {entry.model} | {link} | `{osp.basename(entry.config)}` | '
            f'{line} | {entry.metric} ({entry.source}) |{note} |')


HEADER = """# Model zoo: public weights, one line away

mmlape releases no weights of its own, and no LaPE, PVG or MPVG weights
are public: the LaPE authors (Ingrid725/LaPE) and the MPVG authors publish
none. What is public are the weights of the models these methods start
from or compare with. Every file below fits a provided config (its default
join or its PE type) and loads by URL in one line: the file is downloaded
once to the torch hub cache and read with weights only
([errors.md](errors.md)), and the checkpoint family converts its layout as
it loads.

**What mmlape tested.** Each conversion is tested on the layout: a model
built with the same key names and shapes as the released file
(`tests/configs/test_model_zoo.py`; for DeiT and RoPE-ViT, timm's own model
of that name, whose logits the converted mmlape model equals), not on the
released file itself, which the tests do not download. The accuracy is the
one the file's source publishes; mmlape has reproduced none of them. A
released file that holds pickled objects other than tensors and training
state is refused in one line naming them.

To evaluate a file, give its URL to `tools/test.py`, e.g.
`python tools/test.py configs/deit/deit-tiny_4xb256_in1k.py {deit_ti}`.
To start training from it, add its line to `--cfg-options` of
`tools/train.py` or `tools/dist_train.sh`.

| model | file | config | load it with (`--cfg-options`) | \
published by its source | notes |
|---|---|---|---|---|---|
"""

FOOTER = """
Not listed, because no public file fits a provided config: LaPE and MPVG
weights (none published), CeiT (the official repository shares one
unlabelled Google Drive file), the ViT-Adapter-S/B files (no -S/-B
configs yet), CCT's sine-PE files (the configs learn their PE).

A file that does not fit a config is refused in one line that names the
setting to change: layer scale (`model.backbone.layer_scale_init_value`),
another patch size (`model.backbone.patch_size`), another width or depth
(`model.backbone.arch`), register tokens (mmlape's ViT has none).

## A join from default-join weights

The papers train LaPE, PVG and MPVG from scratch. Starting one from a
default-join file (public DeiT weights) is another protocol, and explicit:

```bash
{join_command}
```

`join_from_default=True` loads every tensor the file has and logs one line
listing what loaded and what starts fresh (the per-layer PE norms, and
MPVG's last-norm PE); without it such a file is refused, naming the
option. A PVG or MPVG model has no class token: the file's class token and
its PE row are dropped, as the log says.

## Share what you train

`python tools/convert/publish.py WORK_DIR/epoch_300.pth OUT_DIR` writes
`.pth` and `.safetensors` files named with their sha256 prefix, without
optimizer and runtime state (`--ema` keeps the EMA weights), and prints the
`Weights:` line to paste into the config's entry of
`configs/<family>/metafile.yml`; `mmpretrain.get_model(name,
pretrained=True)` then loads that URL. `python tools/convert/to_timm.py`
writes a timm state dict of a classifier whose join and PE type timm has
(the default join with a learnable or sin-cos PE, RoPE-Axial/Mixed) and
prints the `timm.create_model` call that loads it strictly.
"""


def render() -> str:
    """The page's text."""
    rows = '\n'.join(_row(entry) for entry in ZOO)
    return (HEADER.format(deit_ti=ZOO[0].url) + rows + '\n' +
            FOOTER.replace('{join_command}', JOIN_FROM_DEFAULT.command()))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--check',
        action='store_true',
        help='fail (exit 1) when the page is not what this writes')
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        with open(PAGE, encoding='utf-8') as f:
            if f.read() != text:
                print(f'{PAGE} is stale: run python tools/analysis/'
                      f'model_zoo.py')
                return 1
        return 0
    with open(PAGE, 'w', encoding='utf-8') as f:
        f.write(text)
    print(f'wrote {PAGE}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
