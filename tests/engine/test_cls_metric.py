"""``LaPEAccuracy``: mmpretrain's ``Accuracy`` with a batch's results
copied to the host in one go. Its results equal mmpretrain's (keys and
their order, values, dtypes, shapes) and so do its metrics; it copies two
stacks, not two tensors a sample; each result has its own storage; and the
batches it does not handle go through mmpretrain's code."""
import copy
import os.path as osp
import pickle

import pytest
import torch
from conftest import ROOT
from mmengine.config import Config
from torch.overrides import TorchFunctionMode

pytest.importorskip('mmpretrain')
from mmpretrain.evaluation import Accuracy  # noqa: E402
from mmpretrain.structures import DataSample  # noqa: E402

from mmlape.engine import cls_metric  # noqa: E402
from mmlape.engine.cls_metric import LaPEAccuracy  # noqa: E402

DEIT = 'configs/deit/deit-tiny-lape_4xb256_in1k.py'


class CpuCalls(TorchFunctionMode):
    """Counts the ``Tensor.cpu`` calls made inside it (on a GPU, each is a
    copy that waits for the device)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.cpu:
            self.calls += 1
        return func(*args, **(kwargs or {}))


def _samples(batch, classes=7, scores=True, seed=0):
    """What mmengine's evaluator gives the metrics: the model's data
    samples as dicts, their tensors views of the batch's."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, classes, generator=gen)
    score = logits.softmax(1)
    pred = score.argmax(1, keepdim=True)
    labels = torch.randint(0, classes, (batch, ), generator=gen)
    out = []
    for i, label in enumerate(labels.split(1)):
        sample = DataSample().set_gt_label(label)
        if scores:
            sample.set_pred_score(score[i])
        sample.set_pred_label(pred[i])
        out.append(sample.to_dict())
    return out


def _process(metric, samples_list):
    for samples in samples_list:
        metric.process(None, copy.deepcopy(samples))
    return metric


def _assert_same_results(host, ours):
    assert len(host) == len(ours)
    for a, b in zip(host, ours):
        assert list(a) == list(b)  # the keys, in mmpretrain's order
        for key in a:
            if isinstance(a[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype, key
                assert a[key].shape == b[key].shape, key
                assert torch.equal(a[key], b[key]), key
            else:
                assert a[key] == b[key], key


@pytest.mark.parametrize('scores', [True, False], ids=['scores', 'labels'])
@pytest.mark.parametrize('topk', [(1, ), (1, 5)])
def test_results_and_metrics_as_mmpretrain(scores, topk):
    batches = [_samples(6, scores=scores, seed=s) for s in range(3)]
    host = _process(Accuracy(topk=topk), batches)
    ours = _process(LaPEAccuracy(topk=topk), batches)
    _assert_same_results(host.results, ours.results)
    assert ours.compute_metrics(ours.results) == \
        host.compute_metrics(host.results)
    assert ours.evaluate(18) == host.evaluate(18)


def test_two_copies_a_batch_not_two_a_sample():
    samples = _samples(16)
    with CpuCalls() as host:
        Accuracy().process(None, copy.deepcopy(samples))
    with CpuCalls() as ours:
        LaPEAccuracy().process(None, copy.deepcopy(samples))
    assert host.calls == 2 * 16
    assert ours.calls == 2


def test_each_result_has_its_own_storage():
    """A result that were a view of the batch would pickle the whole
    batch (as mmengine gathers results across processes); mmpretrain's
    own results on the host are such views."""
    batch, classes = 32, 100
    samples = _samples(batch, classes=classes)
    host = _process(Accuracy(), [samples]).results
    ours = _process(LaPEAccuracy(), [samples]).results
    for result in ours:
        score = result['pred_score']
        assert score.untyped_storage().nbytes() == classes * 4
        assert result['gt_label'].untyped_storage().nbytes() == 8
    # a batch's scores: about batch * classes * 4 bytes, not batch times
    # as much
    assert len(pickle.dumps(ours, protocol=2)) < 2 * batch * classes * 4 + \
        batch * 1000
    assert len(pickle.dumps(host, protocol=2)) > batch * batch * classes * 4


@pytest.mark.parametrize(
    'case', ['later-without-score', 'first-without-score', 'shapes', 'dtypes'])
def test_other_batches_take_mmpretrain_path(case):
    samples = _samples(4)
    if case == 'later-without-score':
        del samples[2]['pred_score']
    elif case == 'first-without-score':
        del samples[0]['pred_score']
    elif case == 'shapes':
        samples[1]['gt_label'] = torch.tensor([1, 2])
    else:
        samples[3]['pred_score'] = samples[3]['pred_score'].double()
    host = _process(Accuracy(), [samples])
    with CpuCalls() as ours_calls:
        ours = _process(LaPEAccuracy(), [samples])
    _assert_same_results(host.results, ours.results)
    assert ours_calls.calls == 2 * 4  # mmpretrain's copies


def test_autograd_history_takes_mmpretrain_path():
    """Scores that carry autograd history (outside mmengine's loops,
    which evaluate without it): mmpretrain's copies, each row's history
    its own."""
    samples = _samples(3)
    samples[0]['pred_score'] = samples[0]['pred_score'].clone().requires_grad_(
    )
    host, ours = Accuracy(), LaPEAccuracy()
    host.process(None, samples)
    with CpuCalls() as calls:
        ours.process(None, samples)
    assert calls.calls == 2 * 3
    assert [(r['pred_score'].requires_grad, r['pred_score'].is_leaf)
            for r in ours.results] == [(True, True), (False, True),
                                       (False, True)]
    _assert_same_results(host.results, ours.results)


def test_copies_and_pickles_hold_the_results():
    """A copy or a pickle of the metric holds the results of the batches
    it has been given, not copies in flight."""
    ours = LaPEAccuracy(topk=(1, 5))
    ours.process(None, _samples(4))
    for other in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert not other._pending
        _assert_same_results(ours.results, other.results)
        assert other.evaluate(4) == copy.deepcopy(ours).evaluate(4)


@pytest.mark.parametrize('missing', ['gt_label', 'pred_label'])
def test_missing_keys_fail_as_mmpretrain(missing):
    samples = _samples(3, scores=False)
    del samples[1][missing]
    with pytest.raises(KeyError, match=missing):
        Accuracy().process(None, copy.deepcopy(samples))
    with pytest.raises(KeyError, match=missing):
        LaPEAccuracy().process(None, copy.deepcopy(samples))


def test_empty_batch_adds_nothing():
    metric = LaPEAccuracy()
    metric.process(None, [])
    assert metric.results == []


def test_stackable_and_host_batch():
    assert not cls_metric.stackable([])
    assert not cls_metric.stackable([torch.zeros(2), 3])
    assert not cls_metric.stackable(
        [torch.zeros(2), torch.zeros(2, dtype=torch.int64)])
    assert not cls_metric.stackable([torch.zeros(2), torch.zeros(3)])
    assert cls_metric.stackable([torch.zeros(2), torch.ones(2)])
    batch = cls_metric.HostBatch([torch.arange(3), torch.arange(3) + 3])
    assert batch.ready()  # from the host: copied at once
    rows = batch.rows()
    assert [r.tolist() for r in rows] == [[0, 1, 2], [3, 4, 5]]
    assert rows[1].untyped_storage().nbytes() == 3 * 8


def test_results_read_in_between_and_reset():
    """Reading the results between batches, mmpretrain's code taking a
    batch in between, and mmengine's reset of the list keep mmpretrain's
    order and contents."""
    batches = [_samples(3, seed=s) for s in range(4)]
    # mmpretrain's code takes this one
    batches[2][1]['gt_label'] = batches[2][1]['gt_label'].int()
    host, ours = Accuracy(), LaPEAccuracy()
    for i, samples in enumerate(batches):
        host.process(None, copy.deepcopy(samples))
        ours.process(None, copy.deepcopy(samples))
        if i == 1:
            _assert_same_results(host.results, ours.results)
    _assert_same_results(host.results, ours.results)
    assert ours.evaluate(12) == host.evaluate(12)
    assert ours.results == [] and not ours._pending
    ours.process(None, copy.deepcopy(batches[0]))
    ours.results = []  # as mmengine's BaseMetric starts the list
    assert ours.results == []


def test_deit_model_outputs_through_the_configs_evaluator(imagenet):
    """The DeiT config's evaluator, built as the runner builds it, on a
    tiny DeiT's outputs for the real val loader: mmpretrain's results and
    metrics."""
    from mmengine.evaluator import Evaluator
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    from mmpretrain.registry import MODELS
    from mmpretrain.utils import register_all_modules
    register_all_modules(False)
    cfg = Config.fromfile(osp.join(ROOT, DEIT))
    assert cfg.val_evaluator.type == 'LaPEAccuracy'
    assert cfg.test_evaluator.type == 'LaPEAccuracy'
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.data_preprocessor = cfg.data_preprocessor
    model_cfg.backbone.arch = dict(
        embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=32)
    model_cfg.head.in_channels = 32
    loader = copy.deepcopy(cfg.val_dataloader)
    loader.update(batch_size=4, num_workers=0, persistent_workers=False)
    loader.dataset.update(
        data_root=imagenet, data_prefix='val', ann_file='meta/val.txt')
    loader.dataset.pop('split', None)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(model_cfg).eval()
        batch = next(iter(Runner.build_dataloader(loader, seed=0)))
        evaluators = [
            Evaluator(copy.deepcopy(cfg.val_evaluator)),
            Evaluator(dict(cfg.val_evaluator, type='Accuracy'))
        ]
    assert type(evaluators[0].metrics[0]) is LaPEAccuracy
    assert type(evaluators[1].metrics[0]) is Accuracy
    with torch.no_grad():
        outputs = model.val_step(copy.deepcopy(batch))
    for evaluator in evaluators:
        evaluator.process(copy.deepcopy(outputs), batch)
    ours, host = (e.metrics[0] for e in evaluators)
    _assert_same_results(host.results, ours.results)
    assert [e.evaluate(4) for e in evaluators[:1]] == \
        [evaluators[1].evaluate(4)]


def _gather_rank(rank, world, port, samples, out):
    """One process of :func:`test_two_processes_gather_as_mmpretrain`."""
    import torch.distributed as dist
    dist.init_process_group(
        'gloo',
        init_method=f'tcp://127.0.0.1:{port}',
        rank=rank,
        world_size=world)
    try:
        metrics = []
        for metric in (Accuracy(topk=(1, 5)), LaPEAccuracy(topk=(1, 5))):
            # the rank's share of the batches, as mmengine's sampler deals
            # them out
            for i in range(rank, len(samples), world):
                metric.process(None, copy.deepcopy(samples[i]))
            metrics.append(metric.evaluate(sum(map(len, samples)) - 1))
        if rank == 0:
            out.put(metrics)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_gather_as_mmpretrain():
    """Two processes (gloo): mmengine gathers the ranks' results through
    pickled files and cuts the padding; the metrics equal mmpretrain's."""
    import socket

    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    samples = [_samples(5, seed=s) for s in range(4)]
    ctx = mp.get_context('spawn')
    out = ctx.Queue()
    mp.start_processes(
        _gather_rank,
        args=(2, port, samples, out),
        nprocs=2,
        join=True,
        start_method='spawn')
    host, ours = out.get(timeout=60)
    assert ours == host and set(host) == {'accuracy/top1', 'accuracy/top5'}
