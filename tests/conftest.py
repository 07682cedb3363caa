import os

import pytest
import torch

# The fused kernels run in Triton's CPU interpreter without a GPU (tests/test_fused_path.py). The variable must be
# set before anything imports triton (torch.compile's tests do): Triton decorates its own library functions
# (tl.cdiv, tl.sum, …) at import, as interpreted or as compiled functions, and the kernels call them.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

# One torch thread per pytest-xdist worker (the suite runs with -n 2 on 2 cores), else two.
_default_threads = "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2"
torch.set_num_threads(int(os.environ.get("DAPE_TEST_THREADS", _default_threads)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """A small token directory from the built-in code corpus (real text), shared by the LM-stage tests."""
    from dape_core.cli import main

    out = tmp_path_factory.mktemp("tiny_corpus")
    assert main(["tokenize", "--source", "builtin-code", "--max-docs", "150", "--vocab-size", "512",
                 "--val-fraction", "0.1", "--seed", "0", "--out-dir", str(out)]) == 0
    return out


@pytest.fixture(scope="session", autouse=True)
def _job_server(tmp_path_factory):
    """The tests' `dape train|evaluate|che|report` commands and DAG runs run as `make reproduce` runs them: in forks
    of a warm server (dape_core.job_server; tests/test_job_server.py checks that this changes no output)."""
    import subprocess
    import sys
    import time

    from dape_core.job_server import ENV

    socket = tmp_path_factory.mktemp("job_server") / "jobs.sock"
    server = subprocess.Popen([sys.executable, "-m", "dape_core.command", "serve", "--socket", str(socket),
                               "--idle-exit", "3600"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not socket.exists() and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.environ[ENV] = str(socket)
    yield socket
    os.environ.pop(ENV, None)
    server.terminate()
    server.wait(timeout=60)
