"""``LaPEClsDataPreprocessor``: mmpretrain's classification data
preprocessor with a batch's labels handled in one go. Its output equals
mmpretrain's (images, labels, one-hot and Mixup/CutMix targets, the random
draws), its operations do not grow with the batch, and the batches it does
not handle go through mmpretrain's code."""
import copy
import os.path as osp
from unittest import mock

import numpy as np
import pytest
import torch
from conftest import ROOT
from mmengine.config import Config
from mmengine.dataset import default_collate, pseudo_collate

pytest.importorskip('mmpretrain')
from mmpretrain.models.utils import ClsDataPreprocessor  # noqa: E402
from mmpretrain.models.utils.batch_augments import CutMix, Mixup  # noqa
from mmpretrain.structures import DataSample  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

import mmlape.hosts.cls_preprocessor as preprocessing  # noqa: E402
from mmlape.hosts.cls_preprocessor import (  # noqa: E402
    LaPEClsDataPreprocessor, one_label_each)

DEIT = 'configs/deit/deit-tiny-lape_4xb256_in1k.py'
MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]
MIX = dict(augments=[
    dict(type='Mixup', alpha=0.8),
    dict(type='CutMix', alpha=1.0),
])


def _pair(**kwargs):
    """mmpretrain's preprocessor and mmlape's, from the same arguments."""
    return (ClsDataPreprocessor(**copy.deepcopy(kwargs)),
            LaPEClsDataPreprocessor(**copy.deepcopy(kwargs)))


def _items(batch, labels=None, size=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    labels = labels or [i % 5 for i in range(batch)]
    return [
        dict(
            inputs=torch.randint(
                0, 256, (3, size, size), dtype=torch.uint8, generator=gen),
            data_samples=DataSample().set_gt_label(label)) for label in labels
    ]


def _run(prep, data, training, seed=7):
    """The preprocessor on ``data`` from a fixed random state, and the
    random states it leaves."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    out = prep(data, training)
    return out, torch.get_rng_state(), np.random.get_state()[1]


def _assert_same(a, b):
    """Two preprocessor outputs hold the same values, dtypes and shapes."""
    (out_a, torch_a, np_a), (out_b, torch_b, np_b) = a, b
    assert torch.equal(out_a['inputs'], out_b['inputs'])
    assert out_a['inputs'].dtype == out_b['inputs'].dtype
    # the same random draws, in the same order
    assert torch.equal(torch_a, torch_b) and np.array_equal(np_a, np_b)
    assert len(out_a['data_samples']) == len(out_b['data_samples'])
    for x, y in zip(out_a['data_samples'], out_b['data_samples']):
        assert set(x.keys()) == set(y.keys())
        assert x.metainfo == y.metainfo  # e.g. num_classes, set with a score
        for key in ('gt_label', 'gt_score'):
            if key in x:
                assert x.get(key).dtype == y.get(key).dtype, key
                assert x.get(key).shape == y.get(key).shape, key
                assert torch.equal(x.get(key), y.get(key)), key


@pytest.mark.parametrize('split', ['train', 'val'])
def test_deit_batches_from_the_loader_as_mmpretrain(imagenet, split):
    """DeiT's config through the real loader (its pipeline, sampler and
    stacked batch): the config's preprocessor gives mmpretrain's output,
    Mixup/CutMix's soft targets and random draws included."""
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    from mmpretrain.utils import register_all_modules
    register_all_modules(False)
    cfg = Config.fromfile(osp.join(ROOT, DEIT))
    assert cfg.data_preprocessor.type == 'LaPEClsDataPreprocessor'
    loader = copy.deepcopy(cfg[f'{split}_dataloader'])
    loader.update(batch_size=4, num_workers=0, persistent_workers=False)
    loader.dataset.update(
        data_root=imagenet, data_prefix=split, ann_file=f'meta/{split}.txt')
    loader.dataset.pop('split', None)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        batch = next(iter(Runner.build_dataloader(loader, seed=0)))
    assert isinstance(batch['inputs'], torch.Tensor)
    settings = {
        k: v
        for k, v in cfg.data_preprocessor.items()
        if k not in ('type', 'non_blocking')
    }
    host, ours = _pair(
        **settings, batch_augments=copy.deepcopy(cfg.model.train_cfg))
    training = split == 'train'
    _assert_same(
        _run(host, copy.deepcopy(batch), training),
        _run(ours, copy.deepcopy(batch), training))


@pytest.mark.parametrize('training', [True, False])
@pytest.mark.parametrize(
    'kwargs', [
        dict(
            num_classes=5, mean=MEAN, std=STD, to_rgb=True,
            batch_augments=MIX),
        dict(num_classes=5, to_onehot=True),
        dict(mean=MEAN, std=STD),
        dict(num_classes=5, pad_size_divisor=16, pad_value=3),
    ],
    ids=['mixup-cutmix', 'onehot', 'labels-only', 'padded'])
def test_same_as_mmpretrain(kwargs, training):
    host, ours = _pair(**kwargs)
    items = _items(6)
    for collate in (default_collate, pseudo_collate):
        _assert_same(
            _run(host, collate(copy.deepcopy(items)), training),
            _run(ours, collate(copy.deepcopy(items)), training))


@pytest.mark.parametrize('to_onehot', [True, False])
def test_label_dtypes_and_classes_from_the_samples(to_onehot):
    """Labels of another integer dtype keep it (one-hot needs int64, in
    both); ``num_classes`` comes from the samples' metainfo when the
    preprocessor has none."""
    items = _items(4)
    for item in items:
        item['data_samples'].set_metainfo(dict(num_classes=5))
    host, ours = _pair(to_onehot=to_onehot)
    _assert_same(
        _run(host, default_collate(copy.deepcopy(items)), True),
        _run(ours, default_collate(copy.deepcopy(items)), True))
    for item in items:
        label = item['data_samples'].gt_label
        item['data_samples'].set_gt_label(label.to(torch.int32))
    if to_onehot:
        for prep in (host, ours):
            with pytest.raises(RuntimeError, match='LongTensor'):
                prep(default_collate(copy.deepcopy(items)), True)
    else:
        out = _run(ours, default_collate(copy.deepcopy(items)), True)
        assert out[0]['data_samples'][0].gt_label.dtype == torch.int32
        _assert_same(
            _run(host, default_collate(copy.deepcopy(items)), True), out)


@pytest.mark.parametrize('label', [5, -1])
def test_bad_label_values_fail_as_in_mmpretrain(label):
    items = _items(3, labels=[0, label, 1])
    errors = []
    for prep in _pair(num_classes=5, to_onehot=True):
        with pytest.raises(RuntimeError) as err:
            prep(default_collate(copy.deepcopy(items)), True)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and 'Class values' in errors[0], errors


def test_operations_do_not_grow_with_the_batch():
    """mmpretrain's preprocessor dispatches a reduction and two slices per
    image; this one a fixed number of operations per batch."""
    import sys
    sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
    from bench_host_loop import OpCount
    host, ours = _pair(num_classes=5, mean=MEAN, std=STD, batch_augments=MIX)
    ops = {}
    for name, prep in (('host', host), ('ours', ours)):
        for batch in (3, 12):
            data = default_collate(_items(batch))
            with OpCount() as count:
                _run(prep, data, True)
            ops[name, batch] = count.ops
    assert ops['ours', 3] == ops['ours', 12], ops
    assert ops['host', 12] - ops['host', 3] >= 3 * 9, ops
    assert ops['ours', 12] < ops['host', 3], ops


@pytest.mark.parametrize(
    'case', ['multi-label', 'soft-label', 'one-soft-label', 'no-label'])
def test_other_batches_take_mmpretrains_code(case):
    """Several labels a sample, soft labels from the dataset (for every
    sample or one), samples without labels (inference): mmpretrain's code
    runs, with its result."""
    items = _items(4)
    if case == 'multi-label':
        items[1]['data_samples'].set_gt_label([1, 3])
    elif case == 'soft-label':
        for item in items:
            item['data_samples'].set_gt_score(torch.rand(5))
    elif case == 'one-soft-label':
        items[2]['data_samples'].set_gt_score(torch.rand(5))
    else:
        for item in items:
            item['data_samples'] = DataSample()
    samples = [item['data_samples'] for item in items]
    assert not one_label_each(samples)
    host, ours = _pair(num_classes=5, to_onehot=(case != 'no-label'))
    with mock.patch.object(
            ClsDataPreprocessor,
            'forward',
            side_effect=ClsDataPreprocessor.forward,
            autospec=True) as host_forward:
        got = _run(ours, default_collate(copy.deepcopy(items)), True)
    # once, on the whole batch (the labelled path calls it on the images)
    host_forward.assert_called_once()
    assert 'data_samples' in host_forward.call_args.args[1]
    _assert_same(_run(host, default_collate(copy.deepcopy(items)), True), got)


@pytest.mark.parametrize('case', ['later-unlabelled', 'empty'])
def test_broken_batches_fail_as_in_mmpretrain(case):
    items = _items(3)
    if case == 'later-unlabelled':
        items[2]['data_samples'] = DataSample()
        data = default_collate(items)
    else:
        data = dict(inputs=torch.zeros(0, 3, 8, 8), data_samples=[])
    errors = []
    for prep in _pair(num_classes=5, to_onehot=True):
        with pytest.raises(Exception) as err:
            prep(copy.deepcopy(data), True)
        errors.append((type(err.value), str(err.value)))
    assert errors[0] == errors[1], errors


def test_missing_num_classes_fails_as_in_mmpretrain():
    host, ours = _pair(to_onehot=True)
    for prep in (host, ours):
        with pytest.raises(AssertionError, match='num_classes'):
            prep(default_collate(_items(2)), True)


def test_non_blocking_copies():
    """``non_blocking=True`` reaches every copy to the device: the images'
    (mmengine's cast) and the labels'."""
    prep = LaPEClsDataPreprocessor(num_classes=5, non_blocking=True)
    seen = []
    to = torch.Tensor.to

    def record(self, *args, **kwargs):
        seen.append(kwargs.get('non_blocking'))
        return to(self, *args, **kwargs)

    with mock.patch.object(torch.Tensor, 'to', record):
        prep(default_collate(_items(3)), False)
    assert len(seen) >= 2 and all(seen), seen
    assert LaPEClsDataPreprocessor()._non_blocking is False
    with pytest.raises(TypeError, match='non_blocking must be True or False'):
        LaPEClsDataPreprocessor(non_blocking='yes')


def test_one_label_each():
    one = DataSample().set_gt_label(2)
    assert one_label_each([one, copy.deepcopy(one)])
    assert not one_label_each([])
    assert not one_label_each(None)
    assert not one_label_each([one, DataSample().set_gt_label([0, 1])])
    assert not one_label_each([copy.deepcopy(one).set_gt_score(torch.rand(3))])
    assert not one_label_each([dict(gt_label=torch.tensor([1]))])


class IndexDevices(TorchFunctionMode):
    """The devices of the tensor indices each indexing call gets."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__):
            index = args[1] if isinstance(args[1], tuple) else (args[1], )
            self.seen += [
                i.device.type for i in index if isinstance(i, torch.Tensor)
            ]
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize('augment', [Mixup(alpha=0.8), CutMix(alpha=1.0)])
def test_batch_augments_index_on_the_device(augment):
    """Mixup's and CutMix's permutation is drawn on the host; on a device
    PyTorch would move it with a copy that waits for the device. Under
    ``IndicesOnDevice`` the index reaches the indexing on the device (the
    meta device here stands for a GPU)."""
    inputs = torch.empty(4, 3, 8, 8, device='meta')
    scores = torch.empty(4, 10, device='meta')
    plain = IndexDevices()
    with plain:
        augment.mix(inputs, scores)
    moved = IndexDevices()
    with moved, preprocessing.IndicesOnDevice():
        augment.mix(inputs, scores)
    assert plain.seen and set(plain.seen) == {'cpu'}
    assert moved.seen == ['meta'] * len(plain.seen)
    # the host's own tensors and boolean masks are left alone
    host = torch.arange(6.)
    with preprocessing.IndicesOnDevice():
        assert torch.equal(host[torch.tensor([4, 1])], torch.tensor([4., 1.]))
        assert torch.equal(host[host > 3], torch.tensor([4., 5.]))


def test_the_preprocessor_augments_under_indices_on_device():
    active = []

    def augments(inputs, scores):
        active.append(
            any(
                isinstance(mode, preprocessing.IndicesOnDevice) for mode in
                torch.overrides._get_current_function_mode_stack()))
        return inputs, scores

    prep = LaPEClsDataPreprocessor(num_classes=5, batch_augments=MIX)
    prep.batch_augments = augments
    prep(pseudo_collate(_items(4)), True)
    assert active == [True]
