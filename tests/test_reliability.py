"""A training job killed with SIGKILL inside a running DAG resumes from its checkpoint when the same Snakemake
command is started again, and ends with the same loss and weights as an uninterrupted run (bitwise on CPU: the
data order is a function of (seed, step), dropout is 0 and the thread count is the same)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from dape_core.config import build_plan
from workflow_fixture import CONFIGS, SNAKEFILE

STEPS, EVERY = 60, 10


def _config():
    config = yaml.safe_load(CONFIGS["smoke"].read_text())
    config["defaults"]["lm"].update(steps=STEPS, checkpoint_every=EVERY, log_every=5)
    config["families"] = {"baselines": {"title": "DAPE1x3-Kerple", "paper": "Fig. 2", "seeds": [0],
                                        "axes": {"method": ["DAPE1x3-Kerple"]}}}
    return config


def _snakemake(workdir, configfile, target):
    return [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
            "--configfile", str(configfile), "--cores", "1", target]


def _train_pid(run, workdir):
    """The training process of this test's DAG: other tests running side by side may train a run of the same name,
    so only a process working in `workdir` counts, and the python process rather than the shell that started it."""
    out = subprocess.run(["pgrep", "-f", f"dape train .*{run}/seed0"], capture_output=True, text=True)
    pids = []
    for pid in (int(p) for p in out.stdout.split()):
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd")).resolve()
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:  # the process ended meanwhile
            continue
        if cwd == Path(workdir).resolve() and not argv0.endswith(b"sh"):  # sh, bash
            pids.append(pid)
    return max(pids) if pids else None


@pytest.mark.slow
def test_sigkilled_training_job_resumes_to_the_uninterrupted_result(tmp_path):
    config = _config()
    run = next(iter(build_plan(config).lm_runs))
    results = {}
    for name in ("killed", "uninterrupted"):
        workdir = tmp_path / name
        workdir.mkdir()
        configfile = workdir / "config.yaml"
        configfile.write_text(yaml.safe_dump(config))
        target = f"results/lm/{run}/seed0/summary.json"
        if name == "killed":
            ckpt = workdir / "results" / "checkpoints" / run / "seed0" / "last.pt"
            proc = subprocess.Popen(_snakemake(workdir, configfile, target), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            deadline = time.time() + 600
            while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
                time.sleep(0.2)
            assert ckpt.exists(), "no checkpoint was written"
            pid = _train_pid(run, workdir)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            log = proc.communicate(timeout=300)[0]
            assert proc.returncode != 0, log  # the DAG saw the job fail
            assert not (workdir / target).exists()  # no finished-looking output
            # a checkpoint survives Snakemake's clean-up of the failed job: last.pt, or previous.pt where the kill
            # fell between a save's move of last.pt to previous.pt and the new last.pt
            kept = [p for p in (ckpt, ckpt.with_name("previous.pt")) if p.exists()]
            assert kept, "no checkpoint survived the kill"
            killed_at = torch.load(kept[0], weights_only=False)["step"]
            assert 0 < killed_at < STEPS
        done = subprocess.run(_snakemake(workdir, configfile, target), capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        train_log = (workdir / "logs" / "lm" / run / "seed0" / "train.log").read_text()
        assert ("resumed from" in train_log) == (name == "killed")
        results[name] = torch.load(workdir / "results" / "lm" / run / "seed0" / "model.pt", weights_only=False)
        metrics = (workdir / "results" / "lm" / run / "seed0" / "metrics.jsonl").read_text().splitlines()
        results[name + "_losses"] = [json.loads(line)["loss"] for line in metrics]  # timings excepted
    a, b = results["killed"]["model"], results["uninterrupted"]["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert results["killed_losses"] == results["uninterrupted_losses"]
