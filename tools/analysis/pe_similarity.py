"""Per-layer cosine similarity of the position embedding a model receives.

For every layer: the PE that layer actually receives under the model's join
(the default join: the shared PE through the layer's ``norm1`` affine, as in
the LaPE paper), its token-by-token cosine similarity matrix, and the
similarity of one token to all others on the patch grid. Writes one PNG grid
for all layers and the raw arrays, so figures can be redrawn:

    OUT_DIR/pe_similarity.png   maps of the chosen token, one per layer
    OUT_DIR/similarity.npy      (L, N, N) cosine similarity per layer
    OUT_DIR/maps.npy            (L, H, W) the chosen token's row, on the grid
    OUT_DIR/pe.npy              (L, N, C) the PE each layer receives

Layers that receive no PE (beyond LaPE's eta) are NaN.

Example:
    python tools/analysis/pe_similarity.py CONFIG CHECKPOINT --out-dir D
"""
import os
import os.path as osp
import sys

import numpy as np

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from tools.common import ToolParser, fail, positive_int


def parse_args(argv=None):
    parser = ToolParser(description=__doc__.split('\n')[0])
    parser.add_argument('config')
    parser.add_argument('checkpoint')
    parser.add_argument('--out-dir', required=True)
    parser.add_argument(
        '--token',
        type=int,
        default=None,
        help='patch index (row-major); default: the centre')
    parser.add_argument(
        '--grid',
        type=positive_int,
        nargs=2,
        default=None,
        metavar=('H', 'W'),
        help='patch grid; default: the PE grid of the model')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import mmlape.hosts
    from mmlape.analysis import (load_backbone, plot_similarity_grid,
                                 token_similarity_maps)
    mmlape.hosts.apply()
    with fail():
        _, backbone, _ = load_backbone(args.config, args.checkpoint)
        result = token_similarity_maps(backbone, args.token, args.grid)
    os.makedirs(args.out_dir, exist_ok=True)
    for name in ('similarity', 'maps', 'pe'):
        np.save(osp.join(args.out_dir, f'{name}.npy'), result[name])
    hw, token = result['hw'], result['token']
    join = backbone.pe_join.name
    path = osp.join(args.out_dir, 'pe_similarity.png')
    plot_similarity_grid({join: result['maps']},
                         path,
                         token_hw=(token // hw[1], token % hw[1]),
                         title=f'{osp.basename(args.config)}: cosine '
                         f'similarity of patch {token} to all patches, '
                         f'per layer')
    print(f'wrote {path} and similarity/maps/pe .npy to {args.out_dir}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
