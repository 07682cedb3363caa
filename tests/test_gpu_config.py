"""configs/gpu.yaml: configs/grid.yaml's families on one GPU for at most an hour, with seeds that decide claims."""

from __future__ import annotations

from pathlib import Path

from dape_core.config import build_plan, estimate, load_yaml

REPO = Path(__file__).resolve().parents[1]
COMPARED_ROLES = ("central", "every_encoding", "kernel_sweep", "width_sweep", "equal_tokens", "model_size",
                  "leakage", "attention_maps", "che")


def test_the_gpu_configuration_builds_keeps_the_families_and_fits_one_gpu_hour():
    gpu, default = build_plan(load_yaml(REPO / "configs/gpu.yaml")), build_plan(load_yaml(REPO / "configs/grid.yaml"))
    assert {f: s.get("role") for f, s in gpu.families.items()} == {f: s.get("role") for f, s in
                                                                    default.families.items()}
    for family, spec in gpu.families.items():  # every claim comparing trained models sees ≥ 3 seeds per run
        if spec.get("role") in COMPARED_ROLES:
            runs = [m for m in gpu.lm_members if m["family"] == family]
            seeds = {}
            for m in runs:
                seeds.setdefault(m["run"], set()).add(m["seed"])
            for cell, cell_spec in gpu.che_cells.items():
                if spec["stage"] == "che":
                    seeds[cell] = set(cell_spec["seeds"])
            assert seeds and min(len(s) for s in seeds.values()) >= 3, family
    central = {m["run"] for m in gpu.lm_members if m["family"] == "baselines"}
    for run in central:  # the DAPE1x3 vs DAPE and vs XL gaps get eight seeds
        label = gpu.lm_runs[run]["settings"]
        if label["processor"] != "none" or label["encoding"] == "xl":
            assert len(gpu.lm_runs[run]["seeds"]) >= 8, run
    figures = estimate(gpu)
    # every training job takes the tokens/s that benchmarks/calibrate_gpu.py measured for its shape on one H100
    # (benchmarks/results/gpu_calibration.csv); such small jobs share the GPU: `--cores 16` runs 16 / threads of them
    # at once, so the machine's hour holds gpu_hours / that many (each job's GPU-hours are its time with the GPU to
    # itself)
    assert figures["calibrated"] and figures["bounds"]["measured"] == figures["jobs"]["train_lm"]
    at_once = 16 // gpu.resources("train_lm")["threads"]
    assert 0 < figures["flop_gpu_hours"] < figures["gpu_hours"] and figures["gpu_hours"] / at_once <= 1.0
