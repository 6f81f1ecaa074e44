"""The ViT-Adapter Mask R-CNN learns to detect (issue 16).

Fast checks of the pyramid the adapter hands the FPN, and one short seeded
training run through tools/train.py and tools/test.py on generated COCO
data whose box AP50 must clear a floor that the official stride-4 fusion
(``level1_source='spm+up'``, about 0.00 at this schedule) cannot reach.
"""
import os.path as osp
import sys

import pytest
import torch

from mmlape.datasets import generate_coco_instances
from mmlape.models import LaPEViTAdapter

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
import bench_dense_learning as bench  # noqa: E402

#: Box AP50 the short run below must reach. Measured at this schedule
#: (seeds 0 and 1): 0.48 and 0.48 with ``level1_source='spm'``; the
#: official fusion ``'spm+up'`` scores about 0.01 after these 5 epochs and
#: learns later (bbox mAP 0.387 after 12 epochs, docs/recipes.md).
AP50_FLOOR = 0.25


def small(**kwargs):
    return LaPEViTAdapter(
        dict(bench.ARCH, deform_num_heads=3),
        img_size=128,
        conv_inplane=16,
        interaction_indexes=[[0, 0], [1, 1], [2, 2], [3, 3]],
        window_size=[2, 0, 2, 0],
        **kwargs)


def level1_input(model, img):
    """What the stride-4 output norm receives, and the spatial prior
    module's stride-4 feature, in one forward."""
    seen = {}
    hooks = [
        model.norm1.register_forward_pre_hook(
            lambda m, a: seen.__setitem__('level1', a[0])),
        model.spm.register_forward_hook(
            lambda m, a, o: seen.__setitem__('c1', o[0]))
    ]
    with torch.no_grad():
        model(img)
    for h in hooks:
        h.remove()
    return seen['level1'], seen['c1']


def test_level1_source_builds_the_stride4_level():
    img = torch.randn(2, 3, 64, 96)
    assert small().level1_source == 'spm+up'  # the official default
    spm = small(add_vit_feature=False, level1_source='spm').eval()
    assert spm.up is None
    assert not any(k.startswith('up.') for k in spm.state_dict())
    level1, c1 = level1_input(spm, img)
    torch.testing.assert_close(level1, c1)

    official = small(add_vit_feature=False, level1_source='spm+up').eval()
    assert isinstance(official.up, torch.nn.ConvTranspose2d)
    seen = {}
    official.up.register_forward_hook(
        lambda m, a, o: seen.__setitem__('up', o))
    level1, c1 = level1_input(official, img)
    torch.testing.assert_close(level1, seen['up'] + c1)
    assert seen['up'].abs().mean() > 0.1 * c1.abs().mean()

    with pytest.raises(ValueError, match="level1_source='up'.*'spm'"):
        small(level1_source='up')


def test_batch_of_one_gets_the_same_gradients():
    """In eval mode samples are independent: a batch of one must get the
    gradient that the same image gets inside a batch of two. (On CPU,
    torch's batch-norm backward mis-strides the gradient of a strided
    one-image map; the pyramid hands its norms contiguous maps.)"""
    model = small().eval()
    img = torch.randn(2, 3, 64, 96)
    weights = [torch.randn(2, 96, 64 // s, 96 // s) for s in (4, 8, 16, 32)]

    def grad(x, w):
        x = x.clone().requires_grad_(True)
        loss = sum((f * wi).sum() for f, wi in zip(model(x), w))
        return torch.autograd.grad(loss, x)[0]

    pair = grad(img, weights)
    single = grad(img[:1], [w[:1] for w in weights])
    torch.testing.assert_close(single, pair[:1], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_mask_rcnn_vit_adapter_learns_to_detect(tmp_path):
    """Five epochs of the small ViT-Adapter Mask R-CNN on 96 generated
    images (batch 4, AdamW 6e-4, seeded) through tools/train.py and
    tools/test.py: box AP50 on 16 validation images clears the floor.
    About two minutes of one CPU core (OMP_NUM_THREADS is inherited)."""
    data = str(tmp_path / 'coco') + '/'
    generate_coco_instances(data, num_train=96, num_val=16, seed=0)
    overrides = bench.det_overrides(
        data,
        # the spatial prior module's stride-4 level converges within this
        # short schedule; the official fusion needs about 12 epochs here
        bench.small_adapter(128, level1_source='spm'),
        [96] * 4,
        epochs=5,
        lr=6e-4,
        seed=0,
        milestone=4)
    config = bench.write_config(
        str(tmp_path / 'config.py'), bench.DET_BASE.format(''), overrides)
    metrics = bench.train_and_test(config, str(tmp_path / 'work'))
    assert metrics['coco/bbox_mAP_50'] >= AP50_FLOOR, metrics
