"""Correlation of token embeddings with the PE per layer, and the token
embeddings before and after the last LayerNorm (the MPVG paper's Figs. 4, 2
and 6).

On a few images (any folder of images, e.g. an ImageNet split), it writes:

    OUT_DIR/token_pe_correlation.csv   layer, mean r, std r, images
    OUT_DIR/token_pe_correlation.png   r per layer
    OUT_DIR/last_norm_heatmaps.png     per image: ||x_L|| and ||LN(x_L)||
    OUT_DIR/heatmaps.npz               the heatmap arrays

Example:
    python tools/analysis/token_pe_correlation.py CONFIG CHECKPOINT \
        --data data/imagenet/val --num-images 32 --out-dir D
"""
import argparse
import csv
import glob
import os
import os.path as osp
import sys

import numpy as np

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from tools.common import UsageError, fail

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp', '.JPEG')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config')
    parser.add_argument('checkpoint')
    parser.add_argument(
        '--data',
        required=True,
        help='folder of images (searched recursively)')
    parser.add_argument('--out-dir', required=True)
    parser.add_argument('--num-images', type=int, default=16)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument(
        '--size',
        type=int,
        nargs=2,
        default=None,
        metavar=('H', 'W'),
        help="input size; default: the model's img_size")
    return parser.parse_args(argv)


def load_images(folder, count, size, cfg):
    import torch
    from PIL import Image
    if not osp.isdir(folder):
        raise UsageError(f'--data: folder "{folder}" does not exist')
    paths = sorted(
        p for p in glob.glob(osp.join(folder, '**', '*'), recursive=True)
        if p.endswith(IMAGE_EXTS))[:count]
    if not paths:
        raise UsageError(f'--data: no images under "{folder}"')
    pre = cfg.model.get('data_preprocessor') or cfg.get(
        'data_preprocessor') or {}
    mean = torch.tensor(pre.get('mean', [123.675, 116.28, 103.53]))
    std = torch.tensor(pre.get('std', [58.395, 57.12, 57.375]))
    images = []
    for p in paths:
        img = Image.open(p).convert('RGB').resize((size[1], size[0]),
                                                  Image.BICUBIC)
        t = torch.from_numpy(np.asarray(img, dtype=np.float32))
        images.append(((t - mean) / std).permute(2, 0, 1))
    return torch.stack(images), paths


def plot(corr, heat, out_dir):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    layers = np.arange(corr.shape[1])
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.errorbar(
        layers,
        np.nanmean(corr, 0),
        yerr=np.nanstd(corr, 0),
        marker='o',
        capsize=3)
    ax.axhline(0, color='grey', lw=0.5)
    ax.set_xlabel('layer')
    ax.set_ylabel('r(token, PE)')
    fig.savefig(
        osp.join(out_dir, 'token_pe_correlation.png'),
        dpi=110,
        bbox_inches='tight')
    plt.close(fig)
    n = min(4, heat['before'].shape[0])
    fig, axes = plt.subplots(2, n, figsize=(2.2 * n, 4.4), squeeze=False)
    for i in range(n):
        for r, key in enumerate(('before', 'after')):
            ax = axes[r][i]
            ax.imshow(heat[key][i], cmap='viridis')
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_ylabel(f'{key} last LN')
    fig.savefig(
        osp.join(out_dir, 'last_norm_heatmaps.png'),
        dpi=110,
        bbox_inches='tight')
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    import torch

    import mmlape.hosts
    from mmlape.analysis import load_backbone, token_pe_statistics
    mmlape.hosts.apply()
    with fail():
        _, backbone, cfg = load_backbone(args.config, args.checkpoint)
        if backbone.pe_part.kind == 'relative':
            raise UsageError('a relative PE has no per-token embedding to '
                             'correlate with')
        size = args.size or backbone.img_size
        images, _ = load_images(args.data, args.num_images, size, cfg)
    parts = [
        token_pe_statistics(backbone, batch)
        for batch in torch.split(images, args.batch_size)
    ]
    corr = np.concatenate([p['corr'] for p in parts])
    heat = {
        k: np.concatenate([p[k] for p in parts])
        for k in ('before', 'after')
    }
    os.makedirs(args.out_dir, exist_ok=True)
    with open(
            osp.join(args.out_dir, 'token_pe_correlation.csv'), 'w',
            newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['layer', 'mean_r', 'std_r', 'images'])
        for layer in range(corr.shape[1]):
            col = corr[:, layer]
            if np.isnan(col).all():
                writer.writerow([layer, '', '', 0])
            else:
                writer.writerow([
                    layer, f'{np.nanmean(col):.6f}', f'{np.nanstd(col):.6f}',
                    len(col)
                ])
    np.savez(osp.join(args.out_dir, 'heatmaps.npz'), **heat)
    plot(corr, heat, args.out_dir)
    print(f'wrote token_pe_correlation.{{csv,png}}, last_norm_heatmaps.png '
          f'and heatmaps.npz to {args.out_dir} ({len(images)} images)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
