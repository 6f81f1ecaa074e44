"""mmpretrain's top-k ``Accuracy``, with a batch's results brought to the
host in one copy that the host does not wait for.

mmpretrain's ``Accuracy.process`` keeps each sample's prediction and label
on the host and copies them there sample by sample: two ``.cpu()`` calls a
sample. On a GPU each is a device-to-host copy that waits for the device:
an evaluation batch of 384 (DeiT's) makes 768 of them, the first waits
for the batch's forward to end, and the host launches nothing while it
waits (``benchmarks/bench_host_overheads.py``, section ``metric``).

:class:`LaPEAccuracy` stacks the batch's predictions (scores, or labels
where the model gives no scores) and its labels on their device and copies
each stack to pinned host memory without waiting (CUDA; from another
device the copy waits, once). The host goes on to the next batch while
the GPU computes and copies.

The samples' results are made from the copies that have arrived, at each
call (so the host holds only the copies in flight), and from all of them
when the results are read (``results``; mmengine reads them after the last
batch). Each sample gets its own tensor, with its own storage: a view of
the batch would take the whole batch with it where mmengine pickles the
results to gather them from every process. Otherwise the results are
mmpretrain's: the same keys in the same order, values, dtypes and shapes
(``tests/engine/test_cls_metric.py``), and ``compute_metrics`` is
mmpretrain's; the tensors are contiguous and are not the inputs
themselves, as mmpretrain's ``.cpu()`` of a tensor already on the host
returns it. A batch whose samples differ in what they hold, in shape,
dtype or device, or that carries autograd history, goes through
mmpretrain's code unchanged.
"""
from typing import List, Sequence, Tuple

import torch
from mmpretrain.evaluation import Accuracy

__all__ = ['HostBatch', 'LaPEAccuracy', 'stackable']


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
    return all(t.shape == first.shape and t.dtype == first.dtype
               and t.device == first.device for t in tensors)


class HostBatch:
    """``tensors`` (:func:`stackable`) stacked on their device and copied
    to the host, from CUDA without waiting for the copy; :meth:`rows` waits
    for it and gives each tensor's values as its own tensor.

    Example:
        >>> batch = HostBatch([torch.tensor([1]), torch.tensor([2])])
        >>> rows = batch.rows()
        >>> [r.tolist() for r in rows]
        [[1], [2]]
        >>> rows[0].untyped_storage().nbytes()  # not the batch's
        8
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
        """Whether the copy has ended (:meth:`rows` would not wait)."""
        return self._event is None or self._event.query()

    def rows(self) -> List[torch.Tensor]:
        if self._event is not None:
            self._event.synchronize()
        return [row.clone() for row in self._host.unbind()]


def _holds(sample: dict, pred_key: str) -> bool:
    """Whether mmpretrain would read ``pred_key`` and ``gt_label`` of
    ``sample``, and both are there."""
    if pred_key == 'pred_label' and 'pred_score' in sample:
        return False
    return pred_key in sample and 'gt_label' in sample


# Registered (lazily, by name) in mmlape/engine/__init__.py: importing this
# module imports mmpretrain.
class LaPEAccuracy(Accuracy):
    """mmpretrain's ``Accuracy``, each batch's results copied to the host
    in one go, without waiting (see the module's docstring). Takes
    mmpretrain's arguments.

    Config::

        val_evaluator = dict(type='LaPEAccuracy', topk=(1, 5))
    """

    def __init__(self, *args, **kwargs) -> None:
        self._pending: List[Tuple[str, HostBatch, HostBatch]] = []
        super().__init__(*args, **kwargs)

    @property
    def results(self) -> list:
        """mmpretrain's per-sample results, those of the batches still on
        their way to the host made first (this waits for their copies)."""
        self._take(wait=True)
        return self._results

    @results.setter
    def results(self, value: list) -> None:
        # mmengine's BaseMetric starts (and may reset) the list
        self._pending = []
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
        # the host memory held stays that of the copies in flight
        self._take(wait=False)

    def __getstate__(self) -> dict:
        # a copy or a pickle holds results, not copies in flight
        self._take(wait=True)
        return self.__dict__.copy()

    def _take(self, wait: bool) -> None:
        """Make the results of the pending batches, in order: all of them
        (``wait``) or those whose copies have ended."""
        while self._pending:
            pred_key, preds, labels = self._pending[0]
            if not (wait or (preds.ready() and labels.ready())):
                return
            self._pending.pop(0)
            self._results.extend({
                pred_key: pred,
                'gt_label': label
            } for pred, label in zip(preds.rows(), labels.rows()))
