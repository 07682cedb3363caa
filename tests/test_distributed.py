"""torchrun data parallelism: 2 CPU processes (gloo) follow the single-process loss curve at the same global batch."""

import json
import os
import subprocess
import sys

import pytest

from dape_core.cli import main

ARGS = ["--size", "tiny", "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3", "--train-len", "32",
        "--batch-size", "8", "--steps", "8", "--lr", "3e-3", "--log-every", "1", "--threads", "1", "--no-progress"]


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tiny_corpus, tmp_path):
    assert main(["train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path / "single"), *ARGS]) == 0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
           "dape_core.cli", "train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path / "ddp"),
           "--distributed", "ddp", *ARGS]
    subprocess.run(cmd, check=True, env=env, timeout=300, capture_output=True)
    curve = lambda p: [json.loads(x)["loss"] for x in (tmp_path / p / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    single, ddp = curve("single"), curve("ddp")
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["world_size"] == 2 and len(single) == len(ddp) == 8
    assert summary["distributed"] == "ddp" and summary["parameters_per_rank"] == [summary["parameters"]] * 2  # replicas
    # Same batches and the same averaged gradient; only the order of floating-point reductions differs.
    for a, b in zip(single, ddp):
        assert abs(a - b) <= 1e-4 * abs(a), (single, ddp)
