"""mmpretrain's classification data preprocessor, with the labels of a
batch handled as one tensor.

mmpretrain's ``ClsDataPreprocessor`` makes the one-hot targets sample by
sample: it slices the batch's labels into one tensor per sample and sums
each one-hot slice, then slices again to give every sample its label. At
batch 256 that is 256 reductions and 512 slices on every training and
evaluation step (``benchmarks/bench_host_loop.py``, section
``labels``), each of them an operation the host dispatches and, on a GPU,
the reductions kernel launches. mmengine reads the losses every
iteration, so each step starts with the GPU idle and waits for this host
work.

:class:`LaPEClsDataPreprocessor` gives the same result where every sample
has exactly one label (ImageNet, CIFAR): one ``one_hot`` of the batch,
and the labels split in one call. The images go through mmpretrain's own
code, and the batch augmentations (Mixup, CutMix) get the same inputs in
the same order, so they draw the same random numbers. Any other batch
(several labels a sample, soft labels given by the dataset, multi-task
samples) goes through mmpretrain's code unchanged.

With ``non_blocking=True`` (the GPU classification configs, whose
loaders pin their batches, as the official DeiT, LaPE, CeiT and Swin
training loops copy theirs) the images are copied to the GPU without the
host waiting for the copy: the host goes on to the labels and the
model's first kernels while the images travel.

mmpretrain's Mixup and CutMix draw their permutation of the batch on the
host (``torch.randperm``) and index the batch on the GPU with it. PyTorch
moves such an index to the device with a copy that waits for the device:
every training step then waited, at its start, for the step before it.
The batch augmentations run under :class:`IndicesOnDevice`, which moves
a host index of a device tensor to the device without waiting (the same
index, drawn from the same generator: the same values).
"""
from numbers import Number
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from mmpretrain.models.utils import ClsDataPreprocessor
from mmpretrain.structures import DataSample
from torch.overrides import TorchFunctionMode

__all__ = ['IndicesOnDevice', 'LaPEClsDataPreprocessor', 'one_label_each']

_INDEXING = (torch.Tensor.__getitem__, torch.Tensor.__setitem__)


def _on_device(index, device: torch.device):
    """``index`` with its integer tensors on the host moved to ``device``
    without waiting (a copy from pageable memory is staged before the
    call returns)."""
    if isinstance(index, torch.Tensor):
        if (index.device.type == 'cpu' and index.dtype != torch.bool
                and not index.dtype.is_floating_point
                and not index.dtype.is_complex):
            return index.to(device, non_blocking=True)
        return index
    if isinstance(index, tuple):
        return tuple(_on_device(i, device) for i in index)
    return index


class IndicesOnDevice(TorchFunctionMode):
    """Inside it, indexing a tensor that is not on the host with integer
    tensors that are moves them to its device first without waiting;
    PyTorch's own move waits for the device. Boolean masks and everything
    else are left as they are.

    Example:
        >>> x = torch.empty(4, 3, device='meta')
        >>> with IndicesOnDevice():
        ...     x[torch.tensor([2, 0])].device
        device(type='meta')
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if (func in _INDEXING and len(args) >= 2
                and isinstance(args[0], torch.Tensor)
                and args[0].device.type != 'cpu'):
            args = (args[0], _on_device(args[1], args[0].device)) + tuple(
                args[2:])
        return func(*args, **(kwargs or {}))


def one_label_each(samples: Optional[Sequence]) -> bool:
    """Whether ``samples`` are :class:`DataSample` that each hold exactly
    one label and no soft label (the batches this preprocessor handles
    itself).

    Example:
        >>> one_label_each([DataSample().set_gt_label(3)])
        True
        >>> one_label_each([DataSample().set_gt_label([1, 2])])
        False
    """
    if not samples:
        return False
    for sample in samples:
        if (not isinstance(sample, DataSample) or 'gt_label' not in sample
                or 'gt_score' in sample or sample.gt_label.numel() != 1):
            return False
    return True


# Registered (lazily, by name) in mmlape/hosts/__init__.py: importing this
# module imports mmpretrain.
class LaPEClsDataPreprocessor(ClsDataPreprocessor):
    """mmpretrain's ``ClsDataPreprocessor``, with a batch of one label per
    sample made into targets in one go (see the module's docstring).

    The values are mmpretrain's: the images, every sample's ``gt_label``
    and ``gt_score`` (dtype included) and the batch augmentations' random
    draws (``tests/hosts/test_cls_preprocessor.py``).

    Args:
        non_blocking (bool): Copy the batch to the device without waiting
            for the copy (mmengine's ``BaseDataPreprocessor`` option).
            Takes effect where the loader pins its batches
            (``pin_memory=True``); a copy from unpinned memory is
            synchronous either way. Defaults to False.
        **kwargs: mmpretrain's ``ClsDataPreprocessor`` arguments.

    Config::

        data_preprocessor = dict(
            type='LaPEClsDataPreprocessor', non_blocking=True,
            num_classes=1000, mean=[123.675, 116.28, 103.53],
            std=[58.395, 57.12, 57.375], to_rgb=True)
    """

    def __init__(self,
                 mean: Optional[Sequence[Number]] = None,
                 std: Optional[Sequence[Number]] = None,
                 pad_size_divisor: int = 1,
                 pad_value: Number = 0,
                 to_rgb: bool = False,
                 to_onehot: bool = False,
                 num_classes: Optional[int] = None,
                 batch_augments: Optional[dict] = None,
                 non_blocking: bool = False) -> None:
        super().__init__(
            mean=mean,
            std=std,
            pad_size_divisor=pad_size_divisor,
            pad_value=pad_value,
            to_rgb=to_rgb,
            to_onehot=to_onehot,
            num_classes=num_classes,
            batch_augments=batch_augments)
        if not isinstance(non_blocking, bool):
            raise TypeError(f'data_preprocessor.non_blocking must be True '
                            f'or False, not {non_blocking!r}')
        self._non_blocking = non_blocking

    def forward(self, data: dict, training: bool = False) -> dict:
        samples: Optional[List[DataSample]] = data.get('data_samples')
        if not one_label_each(samples):
            return super().forward(data, training)
        num_classes = self.num_classes or samples[0].get('num_classes')
        if self.to_onehot and num_classes is None:
            return super().forward(data, training)  # its message says why
        # the images by mmpretrain's code (their copy does not hold the
        # host with non_blocking), then the labels, in mmpretrain's order
        inputs = super().forward({'inputs': data['inputs']},
                                 training)['inputs']
        batch_label = torch.cat([s.gt_label for s in samples]).to(
            self.device, non_blocking=self._non_blocking)
        batch_score = None
        if self.to_onehot:
            # a sample's one-hot row, as mmpretrain's sum over its one label
            batch_score = F.one_hot(batch_label, num_classes)
        if (training and self.batch_augments is not None
                and batch_score is not None):
            # Mixup's and CutMix's host permutation: moved without waiting
            with IndicesOnDevice():
                inputs, batch_score = self.batch_augments(inputs, batch_score)
        # (1,)-shaped views, as mmpretrain's slices: a 0-d label would be
        # read back to the host by DataSample
        for sample, label in zip(samples, batch_label.split(1)):
            sample.set_gt_label(label)
        if batch_score is not None:
            for sample, score in zip(samples, batch_score):
                sample.set_gt_score(score)
        return {'inputs': inputs, 'data_samples': samples}
