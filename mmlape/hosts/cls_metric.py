"""mmpretrain's top-k ``Accuracy``, with a batch's results brought to the
host in one copy that the host does not wait for.

mmpretrain's ``Accuracy.process`` keeps each sample's prediction and label
on the host and copies them there sample by sample: two ``.cpu()`` calls a
sample. On a GPU each is a device-to-host copy that waits for the device:
an evaluation batch of 384 (DeiT's) makes 768 of them, the first waits
for the batch's forward to end, and the host launches nothing while it
waits (``benchmarks/bench_host_loop.py``, section ``metric``).

:class:`LaPEAccuracy` stacks the batch's predictions (scores, or labels
where the model gives no scores) and its labels on their device and copies
each stack to pinned host memory without waiting (CUDA; from another
device the copy waits, once). The host goes on to the next batch while
the GPU computes and copies.

The batches whose copies have arrived are kept as the batch's stacks, at
each call (so the host holds only the copies in flight in pinned memory).
``evaluate`` gathers the stacks of every process (as mmengine gathers
results: pickled, through files or the GPU) and orders their rows as
mmengine orders the per-sample results (:func:`gathered_results`), then
computes mmpretrain's metrics (``compute_metrics``) from views of them: no
sample's result is copied by itself, and what a process sends is about
its predictions' bytes. mmpretrain's per-sample results on the host are views
of the batch, and mmengine pickles the whole batch with each of them.

Where the per-sample results are read (``results``) they are made, each
tensor with its own storage, as mmpretrain's: the same keys in the same
order, values, dtypes and shapes (``tests/hosts/test_cls_metric.py``);
the tensors are contiguous and are not the inputs themselves, as
mmpretrain's ``.cpu()`` of a tensor already on the host returns it. A
batch whose samples differ in what they hold, in shape, dtype or device,
or that carries autograd history, goes through mmpretrain's code
unchanged; where any process had one, ``evaluate`` gathers and orders
per-sample results, as mmengine does.
"""
import logging
from itertools import zip_longest
from typing import List, Sequence, Tuple

import torch
from mmengine.dist import (broadcast_object_list, collect_results,
                           get_world_size, is_main_process)
from mmengine.logging import print_log
from mmpretrain.evaluation import Accuracy

__all__ = [
    'HostBatch', 'LaPEAccuracy', 'gathered_results', 'stackable', 'turn_order'
]


def stackable(tensors: Sequence) -> bool:
    """Whether ``tensors`` are tensors of one shape, dtype and device (at
    least one).

    Example:
        >>> stackable([torch.tensor([1]), torch.tensor([2])])
        True
        >>> stackable([torch.tensor([1]), torch.tensor([1, 2])])
        False
    """
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    first = tensors[0]
    shape, dtype, device = first.shape, first.dtype, first.device
    return all(t.dtype == dtype and t.shape == shape and t.device == device
               for t in tensors)


class HostBatch:
    """``tensors`` (:func:`stackable`) stacked on their device and copied
    to the host, from CUDA without waiting for the copy. :meth:`tensor`
    waits for it and gives the stack in pageable host memory.

    Example:
        >>> batch = HostBatch([torch.tensor([1]), torch.tensor([2])])
        >>> batch.tensor()
        tensor([[1],
                [2]])
    """

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        stacked = torch.stack(list(tensors))
        self._event = None
        if stacked.device.type == 'cuda':
            # into pinned memory, ordered after the batch's kernels
            self._host = stacked.to('cpu', non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(stacked.device))
        else:
            self._host = stacked.cpu()

    def ready(self) -> bool:
        """Whether the copy has ended (:meth:`tensor` would not wait)."""
        return self._event is None or self._event.query()

    def tensor(self) -> torch.Tensor:
        """The stack on the host, in memory of its own: from CUDA, out of
        the pinned copy, which goes back to PyTorch's pool of pinned
        memory for the next batch's copy."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
            pinned = self._host
            self._host = torch.empty(pinned.shape, dtype=pinned.dtype)
            self._host.copy_(pinned)
        return self._host


def _holds(sample: dict, pred_key: str) -> bool:
    """Whether mmpretrain would read ``pred_key`` and ``gt_label`` of
    ``sample``, and both are there."""
    if pred_key == 'pred_label' and 'pred_score' in sample:
        return False
    return pred_key in sample and 'gt_label' in sample


def _uniform(blocks: Sequence[tuple]) -> bool:
    """Whether ``blocks`` ((pred_key, preds, labels), at least one) hold
    the same key and rows of one shape and dtype, as one stack would."""
    key, preds, labels = blocks[0]
    return all(
        k == key and p.shape[1:] == preds.shape[1:] and p.dtype == preds.dtype
        and g.shape[1:] == labels.shape[1:] and g.dtype == labels.dtype
        for k, p, g in blocks)


def _rows(pred_key: str, preds: torch.Tensor, labels: torch.Tensor,
          clone: bool) -> List[dict]:
    """mmpretrain's per-sample results of a batch's stacks: views of them,
    or (``clone``) tensors with their own storage.

    Example:
        >>> rows = _rows('pred_label', torch.tensor([[1], [2]]),
        ...              torch.tensor([[0], [2]]), clone=True)
        >>> [r['pred_label'].tolist() for r in rows]
        [[1], [2]]
        >>> rows[0]['gt_label'].untyped_storage().nbytes()  # not the batch's
        8
    """
    own = torch.Tensor.clone if clone else (lambda t: t)
    return [{
        pred_key: own(p),
        'gt_label': own(g)
    } for p, g in zip(preds.unbind(), labels.unbind())]


def turn_order(counts: Sequence[int]) -> torch.Tensor:
    """The order in which mmengine's ``collect_results`` takes the
    processes' results: the first of each process in turn, then the
    second of each that has one, and so on (``zip_longest``), as indices
    into the processes' results one after another.

    Example:
        >>> turn_order([3, 1, 2]).tolist()
        [0, 3, 4, 1, 5, 2]
    """
    counts = torch.tensor(list(counts), dtype=torch.long)
    starts = counts.cumsum(0) - counts
    turn = torch.arange(int(counts.max()) if len(counts) else 0)[:, None]
    return (starts + turn)[turn < counts]


def gathered_results(parts: Sequence[tuple], size: int) -> List[dict]:
    """The results of every process, in the order mmengine's
    ``collect_results`` gives them (:func:`turn_order`; mmengine's
    samplers deal the samples out so), the first ``size`` of them (the
    rest pad the last batches).

    ``parts``: each process's ``(rows, blocks)``, its per-sample results
    then its batches' stacks, ``(pred_key, preds, labels)``. Where no
    process holds per-sample results and the stacks are of one kind, the
    results are views of one stack in that order; otherwise each is made
    and ordered as mmengine does.
    """
    blocks = [b for _, bs in parts for b in bs]
    if blocks and not any(rows for rows, _ in parts) and _uniform(blocks):
        order = turn_order(sum(len(b[1]) for b in bs)
                           for _, bs in parts)[:size]
        pred = torch.cat([b[1] for b in blocks])[order]
        label = torch.cat([b[2] for b in blocks])[order]
        return _rows(blocks[0][0], pred, label, clone=False)
    lists = [
        rows + [r for block in bs for r in _rows(*block, clone=False)]
        for rows, bs in parts
    ]
    ordered = [r for turn in zip_longest(*lists) for r in turn]
    return [r for r in ordered if r is not None][:size]


# Registered (lazily, by name) in mmlape/hosts/__init__.py: importing this
# module imports mmpretrain.
class LaPEAccuracy(Accuracy):
    """mmpretrain's ``Accuracy``, each batch's results copied to the host
    in one go, without waiting, and gathered as stacks (see the module's
    docstring). Takes mmpretrain's arguments.

    Config::

        val_evaluator = dict(type='LaPEAccuracy', topk=(1, 5))
    """

    def __init__(self, *args, **kwargs) -> None:
        # the batches on their way to the host, and those there, as stacks
        self._pending: List[Tuple[str, HostBatch, HostBatch]] = []
        self._blocks: List[Tuple[str, torch.Tensor, torch.Tensor]] = []
        super().__init__(*args, **kwargs)

    @property
    def results(self) -> list:
        """mmpretrain's per-sample results: those of the batches held as
        stacks (and of those still on their way to the host, which this
        waits for) are made here, each tensor with its own storage."""
        self._take(wait=True)
        for block in self._blocks:
            self._results.extend(_rows(*block, clone=True))
        self._blocks = []
        return self._results

    @results.setter
    def results(self, value: list) -> None:
        # mmengine's BaseMetric starts (and may reset) the list
        self._pending, self._blocks = [], []
        self._results = value

    def process(self, data_batch, data_samples: Sequence[dict]) -> None:
        if not data_samples:
            return
        # mmpretrain's keys: the score where the sample has one, else the
        # predicted label; then the label
        pred_key = ('pred_score'
                    if 'pred_score' in data_samples[0] else 'pred_label')
        if not all(_holds(s, pred_key) for s in data_samples):
            return super().process(data_batch, data_samples)
        preds = [s[pred_key] for s in data_samples]
        labels = [s['gt_label'] for s in data_samples]
        if not (stackable(preds) and stackable(labels)) or any(
                t.requires_grad for t in preds + labels):
            # (a stack would give every row the autograd history that
            # mmpretrain's copies give only the rows that have one)
            return super().process(data_batch, data_samples)
        self._pending.append((pred_key, HostBatch(preds), HostBatch(labels)))
        # the batches whose copies have ended (on the host, this one):
        # the pinned memory held stays that of the copies in flight
        self._take(wait=False)

    def evaluate(self, size: int) -> dict:
        """mmengine's ``BaseMetric.evaluate``: the metrics of the first
        ``size`` results of every process, as mmengine gathers and orders
        them, and mmpretrain's ``compute_metrics``; the processes send
        their batches' stacks, not a result per sample
        (:func:`gathered_results`)."""
        self._take(wait=True)
        if not (self._results or self._blocks):
            print_log(
                f'{type(self).__name__} got no results: no batch reached '
                '`process`.',
                logger='current',
                level=logging.WARNING)
        # every process's part: the list is not cut to ``size`` here
        # (that would drop the parts of the processes past ``size``), the
        # results are, in their order
        part, world = (self._results, self._blocks), get_world_size()
        if self.collect_device == 'cpu':
            parts = collect_results([part],
                                    world,
                                    'cpu',
                                    tmpdir=self.collect_dir)
        else:
            parts = collect_results([part], world, self.collect_device)
        if is_main_process():
            metrics = self.compute_metrics(gathered_results(parts, size))
            if self.prefix:
                metrics = {
                    '/'.join((self.prefix, k)): v
                    for k, v in metrics.items()
                }
            shared = [metrics]
        else:
            shared = [None]
        broadcast_object_list(shared)
        # mmengine's reset: the same list, emptied
        self._pending, self._blocks = [], []
        self._results.clear()
        return shared[0]

    def __getstate__(self) -> dict:
        # a copy or a pickle holds the host's stacks, not copies in flight
        self._take(wait=True)
        return self.__dict__.copy()

    def _take(self, wait: bool) -> None:
        """Keep the stacks of the pending batches on the host, in order:
        all of them (``wait``) or those whose copies have ended."""
        while self._pending:
            pred_key, preds, labels = self._pending[0]
            if not (wait or (preds.ready() and labels.ready())):
                return
            self._blocks.append((pred_key, preds.tensor(), labels.tensor()))
            self._pending.pop(0)
