import os

import pytest
import torch

# One torch thread per pytest-xdist worker (the suite runs with -n 2 on 2 cores), else two.
_default_threads = "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2"
torch.set_num_threads(int(os.environ.get("DAPE_TEST_THREADS", _default_threads)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
