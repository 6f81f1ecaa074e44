"""``LaPEAccuracy``: mmpretrain's ``Accuracy`` with a batch's results
copied to the host in one go. Its results equal mmpretrain's (keys and
their order, values, dtypes, shapes) and so do its metrics; it copies two
stacks, not two tensors a sample; each result has its own storage; and the
batches it does not handle go through mmpretrain's code."""
import copy
import os
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

from mmlape.hosts import cls_metric  # noqa: E402
from mmlape.hosts.cls_metric import LaPEAccuracy  # noqa: E402

DEIT = 'configs/deit/deit-tiny-lape_4xb256_in1k.py'


class Calls(TorchFunctionMode):
    """Counts the calls of ``func`` made inside it: ``Tensor.cpu`` (on a
    GPU, each is a copy that waits for the device) or ``Tensor.clone``
    (one a sample where the per-sample results are made)."""

    def __init__(self, func):
        super().__init__()
        self.func, self.calls = func, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is self.func:
            self.calls += 1
        return func(*args, **(kwargs or {}))


class _Seen:
    """Keeps the results that ``compute_metrics`` was given."""

    def compute_metrics(self, results):
        self.seen = list(results)
        return super().compute_metrics(results)


class SeenAccuracy(_Seen, Accuracy):
    pass


class SeenLaPEAccuracy(_Seen, LaPEAccuracy):
    pass


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


@pytest.mark.parametrize('scores', [True, False], ids=['scores', 'labels'])
@pytest.mark.parametrize('size', [13, 11, 1])
def test_evaluate_gathers_stacks_in_mmengines_order(scores, size):
    """``evaluate`` without the per-sample results ever read: the results
    that ``compute_metrics`` gets are mmengine's, in its order and cut to
    ``size`` (the sampler's padding), and no sample's result is made by
    itself (no clone a sample)."""
    batches = [
        _samples(n, classes=9, scores=scores, seed=s)
        for s, n in enumerate((5, 5, 3))
    ]
    host = _process(SeenAccuracy(topk=(1, 3)), batches)
    ours = SeenLaPEAccuracy(topk=(1, 3))
    with Calls(torch.Tensor.clone) as clones:
        _process(ours, batches)
        metrics = ours.evaluate(size)
    assert clones.calls == 0
    assert metrics == host.evaluate(size)
    assert len(ours.seen) == size
    _assert_same_results(host.seen, ours.seen)
    assert ours.results == [] and not ours._blocks and not ours._pending


def _parts(lengths, rows_in=(), dtypes=None, seed=0):
    """Processes' ``(rows, blocks)`` as ``LaPEAccuracy.evaluate`` sends
    them, and each process's per-sample results as mmpretrain makes
    them: ``lengths`` their batches' sizes, the processes in
    ``rows_in`` holding their first batch as per-sample results."""
    parts, lists = [], []
    for r, batches in enumerate(lengths):
        rows, blocks, samples = [], [], []
        for b, n in enumerate(batches):
            batch = _samples(n, seed=seed + 10 * r + b)
            if dtypes:
                for sample in batch:
                    sample['pred_score'] = sample['pred_score'].to(dtypes[r])
            host = _process(Accuracy(), [batch]).results
            samples += host
            if r in rows_in and b == 0:
                rows += host
            else:
                blocks.append(('pred_score',
                               torch.stack([h['pred_score'] for h in host]),
                               torch.stack([h['gt_label'] for h in host])))
        parts.append((rows, blocks))
        lists.append(samples)
    return parts, lists


@pytest.mark.parametrize(
    'lengths, rows_in, dtypes, size',
    [
        (((3, 2), (3, 2), (3, 2)), (), None, 14),  # stacks only
        (((3, 2), (3, 1), (3, 2)), (), None, 14),  # uneven
        (((3, 2), (), (4, )), (), None, 9),  # a process with none
        (((3, 2), (3, 2)), (1, ), None, 9),  # per-sample results in one
        (((3, 2), (1, ), (2, )), (0, ), None, 8),  # ... and uneven
        (((2, ), (2, ), (2, )), (), None, 2),  # size below the processes
        (((2, ), (2, )), (), (torch.float32, torch.float64), 4),  # dtypes
    ])
def test_gathered_results_order(lengths, rows_in, dtypes, size):
    """mmengine's ``collect_results`` order (``zip_longest`` over the
    processes): the first result of each process in turn, then the
    second of each that has one, and so on; the first ``size``. From
    stacks or per-sample results alike."""
    parts, lists = _parts(lengths, rows_in, dtypes)
    longest = max(map(len, lists))
    expected = [
        each[i] for i in range(longest) for each in lists if i < len(each)
    ][:size]
    assert len(expected) == min(size, sum(map(len, lists)))
    _assert_same_results(expected, cls_metric.gathered_results(parts, size))


def test_turn_order():
    assert cls_metric.turn_order([2, 2]).tolist() == [0, 2, 1, 3]
    assert cls_metric.turn_order([3, 0, 1]).tolist() == [0, 3, 1, 2]
    assert cls_metric.turn_order([0, 2]).tolist() == [0, 1]


def test_two_copies_a_batch_not_two_a_sample():
    samples = _samples(16)
    with Calls(torch.Tensor.cpu) as host:
        Accuracy().process(None, copy.deepcopy(samples))
    with Calls(torch.Tensor.cpu) as ours:
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
    with Calls(torch.Tensor.cpu) as ours_calls:
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
    with Calls(torch.Tensor.cpu) as calls:
        ours.process(None, samples)
    assert calls.calls == 2 * 3
    assert [(r['pred_score'].requires_grad, r['pred_score'].is_leaf)
            for r in ours.results] == [(True, True), (False, True),
                                       (False, True)]
    _assert_same_results(host.results, ours.results)


def test_a_batch_on_mmpretrains_path_keeps_its_place_in_the_order():
    """Stacked batches before and after one that takes mmpretrain's path:
    each process's results stay in batch order, so the turns of two
    processes and the cut of the padding fall as mmengine's."""
    parts = []
    for rank in range(2):
        metric = LaPEAccuracy()
        for i in range(3):
            samples = [
                dict(
                    pred_score=torch.full((4, ), float(k)),
                    gt_label=torch.tensor([rank * 100 + i * 10 + k]))
                for k in range(2)
            ]
            if i == 1:  # autograd history: mmpretrain's path
                samples[0]['pred_score'].requires_grad_()
            metric.process(None, samples)
        metric._take(wait=True)
        parts.append((metric._results, metric._blocks))
    order = [
        int(r['gt_label']) for r in cls_metric.gathered_results(parts, 11)
    ]
    assert order == [0, 100, 1, 101, 10, 110, 11, 111, 20, 120, 21]


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
    rows = [
        r['pred_label'] for r in cls_metric._rows(
            'pred_label', batch.tensor(), batch.tensor(), clone=True)
    ]
    assert [r.tolist() for r in rows] == [[0, 1, 2], [3, 4, 5]]
    assert rows[1].untyped_storage().nbytes() == 3 * 8


class _Event:
    """A CUDA event's calls, on the host: ``query`` says ``done``."""

    def __init__(self, done):
        self.done, self.synchronized = done, 0

    def query(self):
        return self.done

    def synchronize(self):
        self.synchronized += 1
        self.done = True


def test_host_batch_waits_for_its_copy_once():
    """A copy from CUDA (its event stood in for): ``ready`` asks the
    event, ``tensor`` waits for it once and keeps the values in memory of
    their own, not in the pinned copy (which goes back to the pool)."""
    batch = cls_metric.HostBatch([torch.arange(3), torch.arange(3) + 3])
    pinned = batch._host
    batch._event = event = _Event(done=False)
    assert not batch.ready()
    host = batch.tensor()
    assert event.synchronized == 1 and batch.ready()
    assert torch.equal(host, pinned)
    assert host.untyped_storage().data_ptr() != \
        pinned.untyped_storage().data_ptr()
    assert batch.tensor() is host and event.synchronized == 1


def test_copies_in_flight_wait_their_turn():
    """A batch whose copy has not ended stays pending, and the batches
    after it wait behind it, until its copy ends or the results are
    read; the results keep mmpretrain's order."""
    batches = [_samples(3, seed=s) for s in range(3)]
    host, ours = Accuracy(), LaPEAccuracy()
    _process(host, batches)
    events = []
    real = cls_metric.HostBatch.__init__

    def in_flight(self, tensors):
        real(self, tensors)
        self._event = _Event(done=False)
        events.append(self._event)

    cls_metric.HostBatch.__init__ = in_flight
    try:
        _process(ours, batches[:2])  # two batches, four copies in flight
    finally:
        cls_metric.HostBatch.__init__ = real
    assert len(ours._pending) == 2 and not ours._blocks
    events[0].done = events[1].done = True  # the first batch's copies end
    _process(ours, batches[2:])  # this one's copies end at once (host)
    # the first batch kept; the last waits behind the second
    assert len(ours._blocks) == 1 and len(ours._pending) == 2
    _assert_same_results(host.results, ours.results)  # waits for the rest
    # each copy waited for once (at once, where it had ended)
    assert [e.synchronized for e in events] == [1] * 4
    assert not ours._pending


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


#: the two-process cases: (name, collect_device, each rank's batches,
#: the batches of rank 1 that mmpretrain's code takes, results cut)
GATHER_CASES = (
    ('stacks', 'cpu', ((0, 2), (1, 3)), (), 1),
    ('rank 1 per sample', 'cpu', ((0, 2), (1, 3)), (1, ), 1),
    ('uneven', 'cpu', ((0, 1, 2), (3, )), (), 0),
    ('rank 1 without any', 'cpu', ((0, 1), ()), (), 0),
    ('rank 0 without any, one result', 'cpu', ((), (0, )), (), 4),
    ('uneven, gathered by the device', 'gpu', ((0, 1, 2), (3, )), (), 2),
)


def _gather_rank(rank, world, port, samples, out):
    """One process of :func:`test_two_processes_gather_as_mmpretrain`, in
    the folder of ``out`` (mmengine gathers through files in the working
    folder's ``.dist_test``)."""
    import torch.distributed as dist
    os.chdir(osp.dirname(out))
    dist.init_process_group(
        'gloo',
        init_method=f'tcp://127.0.0.1:{port}',
        rank=rank,
        world_size=world)
    try:
        metrics, seen = [], []
        for _, device, dealt, by_mmpretrain, cut in GATHER_CASES:
            size = sum(len(samples[i]) for mine in dealt for i in mine) - cut
            for metric in (SeenAccuracy(topk=(1, 5), collect_device=device),
                           SeenLaPEAccuracy(
                               topk=(1, 5), collect_device=device)):
                # the rank's share of the batches
                for i in dealt[rank]:
                    batch = copy.deepcopy(samples[i])
                    if rank == 1 and i in by_mmpretrain:
                        batch[0]['gt_label'] = batch[0]['gt_label'].int()
                    metric.process(None, batch)
                metrics.append(metric.evaluate(size))
                seen.append((size, getattr(metric, 'seen', None)))
        if rank == 0:
            # (a file: a queue's put of this much waits for its reader,
            # and the parent reads after the processes have ended)
            with open(out, 'wb') as f:
                pickle.dump((metrics, seen), f)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_gather_as_mmpretrain(tmp_path):
    """Two processes (gloo): mmengine gathers the ranks' results (through
    pickled files, or the device's collectives) and cuts the padding; the
    results rank 0 computes from, in their order, and the metrics equal
    mmpretrain's: with stacks on both ranks, a batch of rank 1 taken by
    mmpretrain's code, ranks with unequal shares (a sampler that does not
    round up), a rank without any, and fewer results than ranks."""
    import socket

    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    samples = [_samples(5, seed=s) for s in range(4)]
    out = str(tmp_path / 'rank0.pkl')
    mp.start_processes(
        _gather_rank,
        args=(2, port, samples, out),
        nprocs=2,
        join=True,
        start_method='spawn')
    with open(out, 'rb') as f:
        metrics, seen = pickle.load(f)
    assert len(metrics) == 2 * len(GATHER_CASES)
    for host, ours in zip(metrics[::2], metrics[1::2]):
        assert ours == host and set(host) == {'accuracy/top1', 'accuracy/top5'}
    # the results gathered on rank 0: mmengine's, in its order
    for (size, host), (_, ours) in zip(seen[::2], seen[1::2]):
        assert len(host) == size
        _assert_same_results(host, ours)
