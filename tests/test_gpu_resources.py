"""GPUs per training job: resources.train_lm.sizes gives a model size several GPUs, and its jobs start one torchrun
process per GPU (`--distributed` from the same block); a job with one GPU or none runs `dape train`."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from dape_core import settings
from dape_core.config import SCHEMA_PATH, build_plan, load_yaml
from dape_core.errors import ConfigError
from dape_core.model import SIZE_PRESETS
from dape_core.train import TrainSettings

from workflow_fixture import CONFIGS, REPO, job_counts, snakemake

SCHEMA = load_yaml(SCHEMA_PATH)["$defs"]
GPU_RULES = ("evaluate_lm", "attention_maps", "time_lm", "che")


def two_gpu_config(path, **resources) -> dict:
    """configs/smoke.yaml reduced to one Kerple run of the tiny size, which trains on 2 GPUs (2 torchrun processes;
    gloo processes on the CPU where there is no GPU); ``resources`` replaces rules' blocks. Written to ``path``."""
    config = yaml.safe_load(CONFIGS["smoke"].read_text())
    config["families"] = {"two_gpus": {"title": "Kerple trained by two processes", "axes": {"method": ["Kerple"]}}}
    config["resources"]["train_lm"] = {**config["resources"]["train_lm"], "sizes": {"tiny": {"gpu": 2}}}
    config["resources"].update(resources)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def only_run(config: dict) -> str:
    (run,) = build_plan(config).lm_runs
    return run


def train_jobs(output: str) -> dict[str, dict]:
    """run → {"resources": {name: value}, "command": shell command} of each train_lm job of a dry run with -p."""
    jobs = {}
    for block in output.split("rule train_lm:")[1:]:
        run = re.search(r"wildcards: run=([^,\s]+)", block).group(1)
        resources = dict(item.split("=", 1) for item in re.search(r"resources: (.*)", block).group(1).split(", "))
        jobs[run] = {"resources": resources, "command": re.search(r"Shell command: (.*)", block).group(1)}
    return jobs


# ------------------------------------------------------------------------------------------------ configuration
def test_paper_sizes_get_their_gpus_and_sharding():
    plan = build_plan(load_yaml(CONFIGS["paper"]))
    jobs = {size: plan.resources("train_lm", size) for size in ("125M", "350M", "2.7B", "6.7B")}
    assert {size: (job["gpu"], job["distributed"]) for size, job in jobs.items()} == {
        "125M": (1, "ddp"), "350M": (1, "ddp"), "2.7B": (4, "fsdp"), "6.7B": (8, "fsdp")}
    assert {job["threads"] for job in jobs.values()} == {8}  # per GPU, whatever the size
    assert all(plan.resources(rule)["gpu"] == 1 for rule in GPU_RULES)  # evaluation, maps, timing and CHE too
    sizes = {run["settings"]["size"] for run in plan.lm_runs.values()}
    assert "2.7B" in sizes  # Table 3 trains at 2.7B: the 4-GPU entry is used


def test_default_and_smoke_train_on_one_process():
    for name in ("default", "smoke"):
        resources = build_plan(load_yaml(CONFIGS[name])).config["resources"]["train_lm"]
        assert resources["gpu"] == 0 and resources["sizes"] == {}, name


def test_schema_distributed_modes_are_those_of_dape_train():
    modes = set(settings.choices(TrainSettings)["distributed"]) - {"none"}  # none: a job with one process
    assert set(SCHEMA["train_resources"]["properties"]["distributed"]["enum"]) == modes
    assert set(SCHEMA["size_resources"]["properties"]["distributed"]["enum"]) == modes
    assert SCHEMA["train_resources"]["properties"]["distributed"]["default"] == "ddp"


def test_size_keys_are_the_size_presets(tmp_path):
    config = two_gpu_config(tmp_path / "c.yaml")
    config["resources"]["train_lm"]["sizes"] = {"3B": {"gpu": 2}}
    with pytest.raises(ConfigError, match=r"resources\.train_lm\.sizes: .*allowed values: " +
                       re.escape(", ".join(SIZE_PRESETS))):
        build_plan(config)


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r["train_lm"]["sizes"]["tiny"].update(gpu=3),
     r"resources\.train_lm\.sizes\.tiny\.gpu: 3 processes do not divide batch_size 8 of run code-T32-kerple-none; "
     r"allowed values: a divisor"),
    (lambda r: r["train_lm"].update(gpu=3, sizes={}), r"resources\.train_lm\.gpu: 3 processes do not divide"),
    (lambda r: r["train_lm"]["sizes"]["tiny"].update(distributed="mpi"),
     r"resources\.train_lm\.sizes\.tiny\.distributed: .*allowed values: ddp, fsdp"),
    (lambda r: r["train_lm"].update(distributed="none"), r"resources\.train_lm\.distributed: .*allowed values: ddp, fsdp"),
    (lambda r: r["train_lm"]["sizes"].update(small={}), r"resources\.train_lm\.sizes\.small: .*at least 1 entries"),
    (lambda r: r["evaluate_lm"].update(gpu=2), r"resources\.evaluate_lm\.gpu: .*allowed values: ≤ 1"),
])
def test_bad_gpu_resources_name_the_field(tmp_path, change, message):
    config = two_gpu_config(tmp_path / "c.yaml")
    build_plan(config)  # valid before the change
    change(config["resources"])
    with pytest.raises(ConfigError, match=message):
        build_plan(config)


# ------------------------------------------------------------------------------------------------ the DAG
@pytest.mark.parametrize("profile", ["slurm", "slurm-gpu"])
def test_a_cluster_profile_without_cores_parses_the_workflow(tmp_path, profile):
    """A cluster run gives no --cores (only a dry run sets them): every rule must parse without `workflow.cores`
    (the robustness run's threads once read it and stopped every slurm run at the parse)."""
    result = snakemake(tmp_path, CONFIGS["smoke"], "--summary", "--profile", str(REPO / "profiles" / profile),
                       "--workflow-profile", "none")
    out = result.stdout + result.stderr
    assert result.returncode == 0 and "reports/smoke/claims.csv" in out, out[-3000:]


@pytest.mark.slow
def test_paper_dry_run_starts_torchrun_for_the_multi_gpu_sizes(tmp_path, monkeypatch):
    """Through profiles/slurm-gpu (dry run): one run per trained size, its GPUs, CPUs per GPU and command."""
    plan = build_plan(load_yaml(CONFIGS["paper"]))
    runs = {}
    for name, run in plan.lm_runs.items():
        runs.setdefault(run["settings"]["size"], name)
    assert set(runs) == {"125M", "350M", "2.7B"}
    monkeypatch.setenv("DAPE_SLURM_GPU_PARTITION", "gpu")
    monkeypatch.setenv("DAPE_SLURM_PARTITION", "cpu")
    targets = [f"results/lm/{name}/seed0/model.pt" for name in runs.values()]
    result = snakemake(tmp_path, CONFIGS["paper"], "-n", "--profile", str(REPO / "profiles" / "slurm-gpu"),
                       "--workflow-profile", "none", "--cores", "32", *targets, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    jobs = train_jobs(out)
    assert set(jobs) == set(runs.values()), out[-3000:]
    big = jobs[runs["2.7B"]]
    assert (big["resources"]["gpu"], big["resources"]["cpus_per_gpu"], big["resources"]["slurm_partition"]) == (
        "4", "8", "gpu")
    # 32 cores for the job: 8 threads for each of its 4 processes
    # each job gets resources.train_lm.gpu_mem_gb and picks the memory model's micro-batch when it starts
    gpu_mem_gb = plan.config["resources"]["train_lm"]["gpu_mem_gb"]
    assert big["command"].startswith("torchrun --standalone --nproc-per-node 4 -m dape_core.cli train "
                                     f"--distributed fsdp --threads 8 --gpu-mem-gb {gpu_mem_gb:g} --spec '"), big["command"]
    assert " --data-dir results/data/books3 " in big["command"]
    for size in ("125M", "350M"):
        job = jobs[runs[size]]
        assert (job["resources"]["gpu"], job["resources"]["cpus_per_gpu"]) == ("1", "8"), (size, job)
        assert job["command"].startswith(f"dape train --threads 8 --gpu-mem-gb {gpu_mem_gb:g} --spec '"), (
            size, job["command"])
        assert "torchrun" not in job["command"] and "--distributed" not in job["command"]
    assert "slurm_partition=cpu" in out.split("rule tokenize:")[1].split("\n\n")[0]  # the one CPU rule


@pytest.mark.slow
def test_two_gpu_job_runs_two_gloo_processes_and_its_gpus_rerun_nothing(tmp_path):
    """The CPU stand-in: 2 "GPUs" are 2 gloo processes splitting the global batch; changing the GPU count later
    schedules nothing (how a job is spread is not a setting of its result)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    run = only_run(two_gpu_config(tmp_path / "two.yaml"))
    target = f"results/lm/{run}/seed0/summary.json"
    result = snakemake(workdir, tmp_path / "two.yaml", "--cores", "2", "-p", target, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:] + (workdir / f"logs/lm/{run}/seed0/train.log").read_text()[-3000:]
    assert "torchrun --standalone --nproc-per-node 2 -m dape_core.cli train --distributed ddp --threads 1 " in out
    summary = json.loads((workdir / target).read_text())
    assert (summary["status"], summary["world_size"], summary["steps_done"]) == ("ok", 2, 20)

    one = two_gpu_config(tmp_path / "one.yaml")
    one["resources"]["train_lm"]["sizes"] = {}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(one, sort_keys=False))
    dry = snakemake(workdir, tmp_path / "one.yaml", "-n", "-p", "--cores", "2", target, timeout=300)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-4000:]
    assert job_counts(dry.stdout + dry.stderr) == {}, (dry.stdout + dry.stderr)[-3000:]
    forced = snakemake(workdir, tmp_path / "one.yaml", "-n", "-p", "--cores", "2", target, "--forcerun", target,
                       timeout=300)
    assert job_counts(forced.stdout) == {"train_lm": 1}, forced.stdout[-3000:]
    assert "dape train --threads 1 --spec '" in forced.stdout  # one process with the configured thread
