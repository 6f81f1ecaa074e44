"""A tiny CIFAR-100 in the exact python pickle layout of the real one.

``cifar-100-python/{train,test,meta}``: pickled dicts with ``data``
(``uint8`` ``(N, 3072)``, the 1024 red, then green, then blue values of
each 32x32 image, row-major), ``fine_labels``, ``coarse_labels``,
``filenames``, ``batch_label``; ``meta`` holds ``fine_label_names`` and
``coarse_label_names``. mmpretrain's ``CIFAR100`` reads it as it reads the
real files.

mmpretrain also checks the real files' MD5 sums, which generated files
cannot have: :func:`accept_generated_files` clears the expected sums (the
test process; ``cifar_checksums_off`` does it on import, for the tools run
in a subprocess via ``custom_imports``).
"""
import os
import os.path as osp
import pickle

import numpy as np


def make_cifar100(root, num_train=16, num_test=8, seed=0):
    """Write the tiny set under ``root/cifar-100-python``.

    Images carry their label as a coloured square's position, so a model
    can learn something in a few steps.
    """
    rng = np.random.RandomState(seed)
    folder = osp.join(root, 'cifar-100-python')
    os.makedirs(folder, exist_ok=True)
    for split, n in (('train', num_train), ('test', num_test)):
        labels = rng.randint(0, 100, n)
        imgs = rng.randint(0, 60, (n, 32, 32, 3)).astype(np.uint8)
        for i, label in enumerate(labels):
            y, x = divmod(int(label) % 16, 4)
            imgs[i, y * 8:y * 8 + 8, x * 8:x * 8 + 8] = 255
        entry = {
            'filenames': [f'img_{split}_{i}.png' for i in range(n)],
            'batch_label': f'{split} batch',
            'fine_labels': [int(v) for v in labels],
            'coarse_labels': [int(v) // 5 for v in labels],
            'data': imgs.transpose(0, 3, 1, 2).reshape(n, 3072),
        }
        with open(osp.join(folder, split), 'wb') as f:
            pickle.dump(entry, f, protocol=2)
    meta = {
        'fine_label_names': [f'class_{i}' for i in range(100)],
        'coarse_label_names': [f'super_{i}' for i in range(20)],
    }
    with open(osp.join(folder, 'meta'), 'wb') as f:
        pickle.dump(meta, f, protocol=2)
    return root


def accept_generated_files():
    """Clear the MD5 sums mmpretrain expects of the real CIFAR-100 files."""
    from mmpretrain.datasets import CIFAR100
    CIFAR100.train_list = [[name, None] for name, _ in CIFAR100.train_list]
    CIFAR100.test_list = [[name, None] for name, _ in CIFAR100.test_list]
    CIFAR100.meta = dict(CIFAR100.meta, md5=None)
