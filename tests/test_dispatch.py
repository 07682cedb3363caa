"""The dispatch bound of the GPU-hour estimate (dape_core.config.dispatch): operator calls per training step as
arithmetic on a run's settings, checked against a fresh torch.profiler count; the larger bound decides and is
named; a calibration row overrides; a damaged CSV is refused in one line naming it."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from dape_core import config as grid
from dape_core.config import dispatch
from dape_core.config.__main__ import main as config_main
from dape_core.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 0.02  # relative: the fitted arithmetic against a fresh count (dispatch.FIT_TOLERANCE)

METHODS = [  # (method settings, n_layer, micro-batches): a depth the fit never saw, and grad_accum > 1
    (dict(encoding="kerple", processor="none", kernel_size=1), 4, 1),
    (dict(encoding="kerple", processor="dape_v2", kernel_size=3), 3, 2),
    (dict(encoding="rope", processor="dape_v1", kernel_size=1), 4, 1),
]
BASE = dict(tril=True, padding="same", encoding_shared=None, precision="fp32")


@pytest.mark.parametrize("method,n_layer,micro", METHODS)
def test_the_arithmetic_matches_a_fresh_profiler_count(method, n_layer, micro):
    """calls = micro × (micro_constant + micro_per_layer·L) + optimizer_constant + optimizer_per_layer·L, with the
    committed CSV's coefficients, equals what torch.profiler counts now, at another depth and a small shape."""
    from benchmarks.op_counts import training_step_counts

    settings = {**BASE, **method}
    fresh = training_step_counts(settings, n_layer=n_layer, size="tiny", length=8, batch=2, grad_accum=micro)
    counted = micro * fresh["micro_batch_calls"] + fresh["optimizer_calls"]
    modelled = dispatch.step_calls({**settings, "n_layer": n_layer, "grad_accum": micro})
    assert modelled is not None
    assert abs(modelled - counted) <= TOLERANCE * counted, (modelled, counted)


def test_the_committed_counts_fit_their_held_out_depth_and_cover_the_configs():
    table = dispatch.load_step_counts(dispatch.STEP_COUNTS)  # refuses a CSV whose n_layer 3 rows miss the fit
    for path in ("config.yaml", "configs/gpu.yaml"):
        plan = grid.build_plan(grid.load_yaml(REPO / path))
        for run in plan.lm_runs.values():
            assert dispatch.method_calls(run["settings"]) is not None, run["settings"]["encoding"]
    assert all(c.micro_per_layer > 0 and c.optimizer_per_layer > 0 for c in table.values())


def test_the_larger_bound_decides_and_is_named():
    settings = {**BASE, "encoding": "kerple", "processor": "none", "kernel_size": 1, "n_layer": 2, "steps": 100,
                "batch_size": 8, "grad_accum": 1, "train_len": 32}
    cost = dispatch.PerCallCost(1e-5, "test")
    calls = dispatch.step_calls(settings)
    dispatch_hours = 100 * calls * 1e-5 / 3600
    small = dispatch.job_gpu_hours(settings, flops_per_token=1e3, gpu_tflops=100, utilisation=0.5, cost=cost)
    assert small == (pytest.approx(dispatch_hours), dispatch.DISPATCH)
    huge_per_token = 1e13  # FLOP time 100·8·32·1e13 / 5e13 s ≫ the dispatch time
    big = dispatch.job_gpu_hours(settings, flops_per_token=huge_per_token, gpu_tflops=100, utilisation=0.5, cost=cost)
    assert big == (pytest.approx(100 * 8 * 32 * huge_per_token / 5e13 / 3600), dispatch.FLOPS)
    measured = dispatch.job_gpu_hours(settings, flops_per_token=1e3, gpu_tflops=100, utilisation=0.5, cost=cost,
                                      tokens_per_s=1000.0)
    assert measured == (pytest.approx(100 * 8 * 32 / 1000 / 3600), dispatch.MEASURED)
    two_gpus = dispatch.job_gpu_hours(settings, flops_per_token=1e3, gpu_tflops=100, utilisation=0.5, cost=cost,
                                      gpus=2)
    assert two_gpus[0] == pytest.approx(2 * dispatch_hours)


def test_a_lm_results_row_gives_hours_and_bound():
    """What the claims' cost code calls: a row of reports/lm_results.csv as it is (no attention_impl column)."""
    path = REPO / "reports" / "lm_results.csv"
    if not path.is_file():
        pytest.skip("no reports/lm_results.csv")
    row = pd.read_csv(path).iloc[0].to_dict()
    hours, bound = dispatch.row_gpu_hours(row, gpu_tflops=312, utilisation=0.3)
    assert bound == dispatch.DISPATCH and hours > 0
    flop_hours = row["flops_per_token"] * row["steps"] * row["batch_size"] * row["grad_accum"] * row["train_len"] / (
        312e12 * 0.3) / 3600
    assert hours > flop_hours
    assert dispatch.row_gpu_hours({**row, "n_layer": math.nan}, 312, 0.3) == (pytest.approx(math.nan, nan_ok=True),
                                                                              dispatch.FLOPS)


def test_the_printed_estimate_names_the_bound_per_family_and_in_all(capsys):
    assert config_main([str(REPO / "config.yaml")]) == 0
    out = capsys.readouterr().out
    assert "bound: dispatch for" in out and "each job the larger of its FLOP and dispatch time" in out
    family_lines = [line for line in out.splitlines() if line.startswith("baselines")]
    assert family_lines and "GPU-hours (bound: " in family_lines[0]
    assert "µs per call measured on" in out


def tiny_config(calibration: str) -> dict:
    return {"datasets": {"code": {"source": "builtin-code", "vocab_size": 300}},
            "defaults": {"lm": {"size": "tiny", "train_len": 32, "steps": 10, "batch_size": 4,
                                "eval": {"eval_lens": [32, 64]}}},
            "families": {"runs": {"axes": {"method": ["Kerple", "DAPE1x3-Kerple"]}}},
            "estimate": {"calibration": calibration, "calibration_device": "fixture-gpu"}}


def test_a_calibration_row_overrides_and_gives_the_per_call_cost(tmp_path):
    """The measured shape's tokens/s decides its jobs (bound measured); the other method takes the calibration's
    per-call cost (its step time over its counted calls), not the CPU's."""
    from dape_core.config.estimate import CALIBRATION_KEY, calibration_key, run_vocab

    plan = grid.build_plan(tiny_config(str(tmp_path / "none.csv")))
    kerple = next(r["settings"] for r in plan.lm_runs.values() if r["settings"]["processor"] == "none")
    key = calibration_key(kerple, run_vocab(plan, kerple))
    step_ms = 50.0
    row = {"device": "fixture-gpu", **key, "tokens_per_s": 4 * 32 / (step_ms / 1000), "status": "ok",
           "median_step_ms": step_ms, "grad_accum": 1, "tril": True, "padding": "same", "encoding_shared": None}
    csv = tmp_path / "calibration.csv"
    pd.DataFrame([row])[[*CALIBRATION_KEY, "device", "tokens_per_s", "status", "median_step_ms", "grad_accum",
                         "tril", "padding", "encoding_shared"]].to_csv(csv, index=False)
    plan = grid.build_plan(tiny_config(str(csv)))
    e = grid.estimate(plan)
    by = {s["method"]: s for s in e["shapes"]}
    assert by["Kerple"]["bound"] == dispatch.MEASURED
    assert by["Kerple"]["gpu_hours"] == pytest.approx(by["Kerple"]["jobs"] * 10 * step_ms / 1000 / 3600)
    per_call = step_ms / 1000 / dispatch.step_calls({**kerple, "n_layer": key["n_layer"]})
    assert e["per_call"].seconds == pytest.approx(per_call) and "fixture-gpu" in e["per_call"].source
    dape = by["DAPE1x3-Kerple"]
    dape_settings = next(r["settings"] for r in plan.lm_runs.values() if r["settings"]["processor"] != "none")
    calls = dispatch.step_calls({**dape_settings, "n_layer": key["n_layer"]})
    assert dape["bound"] == dispatch.DISPATCH
    assert dape["gpu_hours"] == pytest.approx(dape["jobs"] * 10 * calls * per_call / 3600)
    line = grid.estimate_line(plan, e)
    assert "measured for 1 job" in line and "dispatch for 1 job" in line


@pytest.mark.parametrize("text", ["", "cpu,cores\nAMD,2\n", "cpu,cores,torch,case,median_us_per_call\n"
                                                             "AMD,2,2.13,tiny_step,-1\n"])
def test_a_damaged_cost_csv_is_one_line_naming_it(tmp_path, text):
    bad = tmp_path / "dispatch_cost.csv"
    bad.write_text(text)
    with pytest.raises(ConfigError) as err:
        dispatch.measured_per_call_cost(bad)
    assert str(bad) in str(err.value) and "\n" not in str(err.value) and "dispatch_cost.py" in str(err.value)


def test_a_damaged_count_csv_is_one_line_naming_it_and_stops_the_printout(tmp_path, monkeypatch, capsys):
    good = pd.read_csv(dispatch.STEP_COUNTS)
    bad = tmp_path / "step_op_counts.csv"
    good.assign(micro_batch_calls=good["micro_batch_calls"] + 50 * good["n_layer"] ** 2).to_csv(bad, index=False)
    with pytest.raises(ConfigError, match="n_layer 3 counts"):  # the held-out depth no longer fits
        dispatch.load_step_counts(bad)
    bad.write_text("encoding,processor\nkerple,none\n")
    monkeypatch.setattr(dispatch, "STEP_COUNTS", bad)
    assert config_main([str(REPO / "config.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and "op_counts.py --training-step" in err
