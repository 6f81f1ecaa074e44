import os

import pytest
import torch

os.environ.setdefault('OMP_NUM_THREADS', '2')
torch.set_num_threads(2)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
