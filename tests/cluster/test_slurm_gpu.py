"""Several GPUs per job through profiles/slurm-gpu, on a localhost slurm whose node offers 2 GPUs (GRES backed by
placeholder files): a training job of a size with `gpu: 2` asks sbatch for 2 GPUs and runs 2 torchrun processes
(gloo on this CPU), an evaluation job asks for 1, tokenize for none."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_localhost import _which, run_snakemake_on_slurm

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from test_gpu_resources import only_run, two_gpu_config  # noqa: E402

pytestmark = pytest.mark.cluster

SUBMITTED = re.compile(r"has been submitted with SLURM jobid (\d+) \(log: (\S+)\)")


def submitted_jobs(output: str) -> dict[str, tuple[str, Path]]:
    """rule → (slurm job id, slurm log) of each job of a run (one job per rule here)."""
    jobs = {}
    for job_id, log in SUBMITTED.findall(output):
        rule = next(part[len("rule_"):] for part in Path(log).parts if part.startswith("rule_"))
        assert rule not in jobs, (rule, output[-3000:])
        jobs[rule] = (job_id, Path(log.rstrip(").")))
    return jobs


def job_record(cluster, job_id: str) -> dict[str, str]:
    """``scontrol show job`` as key → value (finished jobs stay known for MinJobAge)."""
    res = subprocess.run([_which("scontrol"), "show", "job", job_id], env=cluster.client_env(), text=True,
                         capture_output=True, timeout=30, check=True)
    return dict(re.findall(r"(\S+?)=(\S*)", res.stdout))


def test_two_gpu_training_job_on_slurm(fake_gpu_slurm, tmp_path):
    gpu_eval = {"threads": 1, "mem_mb": 1000, "runtime": 5, "gpu": 1}
    config = two_gpu_config(tmp_path / "config.yaml", evaluate_lm=gpu_eval)
    assert config["resources"]["train_lm"]["sizes"]["tiny"]["gpu"] == len(fake_gpu_slurm.gpu_files) == 2
    run = only_run(config)
    workdir = tmp_path / "work"
    workdir.mkdir()
    target = f"results/lm/{run}/seed0/eval.csv"
    args = [target, "--configfile", str(tmp_path / "config.yaml"), "--slurm-keep-successful-logs"]
    result = run_snakemake_on_slurm(workdir, REPO / "Snakefile", args, env=fake_gpu_slurm.env(),
                                    profile=REPO / "profiles" / "slurm-gpu", timeout=1200)

    jobs = submitted_jobs(result.stdout)
    assert set(jobs) == {"tokenize", "train_lm", "evaluate_lm"}, result.stdout[-3000:]
    records = {rule: job_record(fake_gpu_slurm, job_id) for rule, (job_id, _) in jobs.items()}
    assert {rule: r["JobState"] for rule, r in records.items()} == dict.fromkeys(jobs, "COMPLETED")
    # sbatch --gpus=2 --cpus-per-gpu=1 for training, --gpus=1 for evaluation, no GPU for tokenize
    train, evaluate, tokenize = records["train_lm"], records["evaluate_lm"], records["tokenize"]
    assert (train.get("TresPerJob"), train.get("CpusPerTres"), train["NumCPUs"]) == ("gres:gpu:2", "gres:gpu:1", "2")
    assert (evaluate.get("TresPerJob"), evaluate["NumCPUs"]) == ("gres:gpu:1", "1")
    assert "gpu" not in tokenize.get("TresPerJob", "")

    summary = json.loads((workdir / f"results/lm/{run}/seed0/summary.json").read_text())
    assert (summary["status"], summary["world_size"]) == ("ok", 2)
    assert len((workdir / target).read_text().splitlines()) >= 2  # header and rows: the evaluation ran
    train_log = (workdir / jobs["train_lm"][1]).read_text()
    assert "torchrun --standalone --nproc-per-node 2 -m dape_core.cli train --distributed ddp --threads 1 " in train_log
