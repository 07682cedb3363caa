"""configs/paper.yaml follows the paper's equal-token and timing protocol: §4.2 / Fig. 3 at 4096 tokens per
micro-batch sharing the Table-4 runs at length 128, and Table 7 timed in fp16 on the paper's materialised form and
on the default path over the named testing lengths."""

from __future__ import annotations

from pathlib import Path

import pytest

from dape_core import config as grid
from dape_core.methods import method_label

REPO = Path(__file__).resolve().parents[1]
PAIRS = [(128, 32), (256, 16), (512, 8), (1024, 4), (2048, 2), (4096, 1)]  # §4.2 and Fig. 3 (RoPE at 4096, batch 1)
TABLE7_LENGTHS = [512, 1024, 2048, 4096, 8192]
TABLE7_METHODS = ["RoPE", "T5", "ALiBi", "Kerple", "FIRE", "DAPE-Kerple", "DAPE1x3-Kerple"]


@pytest.fixture(scope="module")
def plan():
    return grid.build_plan(grid.load_yaml(REPO / "configs" / "paper.yaml"))


def _label(s: dict) -> str:
    return method_label(s["encoding"], s["processor"], s["kernel_size"])


def test_equal_tokens_runs_at_4096_tokens_per_micro_batch(plan):
    runs = [plan.lm_runs[name]["settings"] for name in plan.families["equal_tokens"]["runs"]]
    for dataset in ("arxiv", "books3"):
        for method in ("RoPE", "Kerple", "DAPE1x3-Kerple"):
            mine = [s for s in runs if s["dataset"] == dataset and _label(s) == method]
            assert sorted((s["train_len"], s["batch_size"]) for s in mine) == PAIRS, (dataset, method)
    assert {s["train_len"] * s["batch_size"] for s in runs} == {4096}
    steps = {s["train_len"] * s["batch_size"] * s["grad_accum"] for s in runs}
    assert steps == {4096 * 8}  # appendix I's 32 × 8 at length 128: the same tokens per step at every length


def test_the_length_128_point_is_the_table_4_run_trained_once(plan):
    table4 = set(plan.families["kernel_sizes"]["runs"])
    for name in plan.families["equal_tokens"]["runs"]:
        run = plan.lm_runs[name]
        if run["settings"]["train_len"] != 128:
            assert run["families"] == ["equal_tokens"], name
            continue
        assert "baselines" in run["families"], name  # the same name: one training job
        if _label(run["settings"]) != "RoPE":
            assert name in table4, name
    jobs = plan.lm_jobs()
    assert len(jobs) == len(set(jobs))


def test_table7_is_timed_on_both_paths_in_fp16_over_the_testing_lengths(plan):
    runs = [plan.timing_runs[name] for name in plan.families["forward_time"]["runs"]]
    assert len(runs) == 3 * 7 * 2
    for s in runs:
        assert s["seq_lens"] == TABLE7_LENGTHS and s["batch_size"] == 1 and s["mode"] == "forward"
        assert s["precision"] == "fp16" and s["dape_width"] == 32
    paths = {(s["size"], _label(s), s["attention_impl"]) for s in runs}
    default = plan.config["defaults"]["timing"]["attention_impl"]
    assert paths == {(size, method, impl) for size in ("350M", "2.7B", "6.7B") for method in TABLE7_METHODS
                     for impl in ("plain", default)}
    assert default != "plain"


def test_step_times_follow_section_4_2_on_both_paths(plan):
    runs = [plan.timing_runs[name] for name in plan.families["step_time"]["runs"]]
    assert {(_label(s), s["attention_impl"]) for s in runs} == {
        (m, impl) for m in ("Kerple", "DAPE1x3-Kerple") for impl in ("plain", plan.config["defaults"]["timing"][
            "attention_impl"])}
    for s in runs:
        assert s["equal_tokens"] == 4096 and s["seq_lens"] == [128, 256, 512, 1024, 2048]
        assert s["mode"] == "train_step" and s["precision"] == "fp16" and s["size"] == "125M"


def test_the_default_config_keeps_cpu_sized_timing(plan):
    default = grid.build_plan(grid.load_yaml(REPO / "config.yaml"))
    for name in default.families["forward_time"]["runs"]:
        s = default.timing_runs[name]
        assert s["precision"] == "fp32" and max(s["seq_lens"]) <= 1024 and s["size"] in ("small", "medium")
