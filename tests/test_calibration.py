"""GPU-hours from measured throughput: the estimate reads a calibration CSV (a fixture here, no GPU needed), uses a
measured row as is, scales the nearest row of the same method by FLOPs per token, and falls back to the FLOP
estimate with a message; benchmarks/calibrate_gpu.py writes such a CSV (run here on the CPU)."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dape_core import config as grid
from dape_core.config.__main__ import main as config_main
from dape_core.config.estimate import FLOPS, MEASURED, training_flops
from dape_core.errors import ConfigError
from dape_core.model import GPT, GPTConfig

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "gpu_calibration_fixture.csv"
STEPS, BATCH, TRAIN_LEN = 10, 4, 32
TOKENS = STEPS * BATCH * TRAIN_LEN  # of one training job (grad_accum 1)


def calibrated_config(calibration=str(FIXTURE), device="fixture-gpu-a") -> dict:
    """Three runs: DAPE1x3-Kerple tiny (measured in the fixture), DAPE1x3-Kerple small (its fixture row ran out of
    memory: scaled from tiny) and Kerple tiny (no row of the method: FLOP estimate)."""
    return {
        "datasets": {"code": {"source": "builtin-code", "vocab_size": 300}},
        "defaults": {"lm": {"size": "tiny", "train_len": TRAIN_LEN, "steps": STEPS, "batch_size": BATCH,
                            "attention_impl": "fast", "eval": {"eval_lens": [32, 64]}}},
        "families": {"runs": {"grids": [
            {"axes": {"size": ["tiny", "small"], "method": ["DAPE1x3-Kerple"]}},
            {"axes": {"method": ["Kerple"]}},
        ]}},
        "estimate": {"calibration": calibration, "calibration_device": device},
    }


def shapes(estimate: dict) -> dict:
    return {(s["size"], s["method"]): s for s in estimate["shapes"]}


def flops_per_token(size: str, **method) -> float:
    """The decoder's own count, from a model built on the CPU (not through the estimate's meta-device path)."""
    return GPT(GPTConfig(size=size, vocab_size=300, train_len=TRAIN_LEN, **method)).flops_per_token(TRAIN_LEN)


def test_a_measured_row_is_used_as_is_and_an_unmeasured_size_is_scaled_by_flops_per_token():
    plan = grid.build_plan(calibrated_config())
    e = grid.estimate(plan)
    by = shapes(e)
    dape = dict(processor="dape_v2", kernel_size=3)

    measured = by[("tiny", "DAPE1x3-Kerple")]
    assert measured["source"] == MEASURED
    assert measured["gpu_hours"] == pytest.approx(TOKENS / 2000.0 / 3600)  # fixture-gpu-a's fp32 row, not bf16's

    scaled = by[("small", "DAPE1x3-Kerple")]  # its own row is out_of_memory: not used
    assert scaled["source"].startswith("scaled from tiny T=32 B=4")
    rate = 2000.0 * flops_per_token("tiny", **dape) / flops_per_token("small", **dape)
    assert scaled["gpu_hours"] == pytest.approx(TOKENS / rate / 3600)
    assert rate < 2000.0  # more FLOPs per token, fewer tokens per second

    kerple = by[("tiny", "Kerple")]
    assert kerple["source"] == FLOPS
    settings = plan.lm_runs["code-T32-kerple-none"]["settings"]
    assert kerple["gpu_hours"] == pytest.approx(training_flops(settings, 300) / (312e12 * 0.3) / 3600)

    assert e["sources"] == {"measured": 1, "scaled": 1, "FLOP estimate": 1}
    assert e["gpu_hours"] == pytest.approx(sum(s["gpu_hours"] for s in e["shapes"]))


def test_the_device_picks_its_own_rows():
    by = shapes(grid.estimate(grid.build_plan(calibrated_config(device="fixture-gpu-b"))))
    assert by[("tiny", "DAPE1x3-Kerple")]["gpu_hours"] == pytest.approx(TOKENS / 8000.0 / 3600)
    with pytest.raises(ConfigError, match=r"^estimate\.calibration_device: null, .*allowed values: fixture-gpu-a, "
                                          r"fixture-gpu-b"):
        grid.estimate(grid.build_plan(calibrated_config(device=None)))
    with pytest.raises(ConfigError, match=r"^estimate\.calibration_device: 'h100' is not in .*allowed values: "
                                          r"fixture-gpu-a, fixture-gpu-b"):
        grid.estimate(grid.build_plan(calibrated_config(device="h100")))


def test_a_missing_csv_falls_back_to_the_flop_estimate_with_a_message(tmp_path):
    missing = tmp_path / "gpu_calibration.csv"
    with_csv = grid.estimate(grid.build_plan(calibrated_config()))
    plan = grid.build_plan(calibrated_config(calibration=str(missing)))
    e = grid.estimate(plan)
    assert e["sources"] == {"measured": 0, "scaled": 0, "FLOP estimate": 3} and not e["calibrated"]
    flops = sum(training_flops(plan.lm_runs[name]["settings"], 300) for name, _ in plan.lm_jobs())
    assert e["gpu_hours"] == pytest.approx(flops / (312e12 * 0.3) / 3600)
    assert e["gpu_hours"] != pytest.approx(with_csv["gpu_hours"])
    line = grid.estimate_line(plan, e)
    assert f"calibration {missing} not found" in line and "FLOP estimate" in line and "GPU-hours" in line


def test_a_csv_without_the_calibration_columns_is_refused_naming_the_field(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("device,tokens_per_s\nx,1\n")
    with pytest.raises(ConfigError, match=r"^estimate\.calibration: .* lacks the columns size, .*allowed values"):
        grid.estimate(grid.build_plan(calibrated_config(calibration=str(bad))))


def test_a_cut_or_empty_calibration_csv_stops_with_one_line_naming_it(tmp_path):
    """A calibration cut in its last row (no tokens/s, no status) or with no rows is refused, never read as a
    throughput."""
    text = FIXTURE.read_text()
    cut = tmp_path / "cut.csv"
    cut.write_text(text.rstrip("\n").rsplit(",", 2)[0] + "\n")  # the last row stops before its tokens/s
    with pytest.raises(ConfigError, match=r"^estimate\.calibration: .*cut\.csv data row \d+ is cut or damaged"):
        grid.estimate(grid.build_plan(calibrated_config(calibration=str(cut))))
    empty = tmp_path / "empty.csv"
    empty.write_text("\n".join(text.splitlines()[:2]) + "\n")  # the comment and the header, no row
    with pytest.raises(ConfigError, match=r"^estimate\.calibration: .*empty\.csv holds no rows"):
        grid.estimate(grid.build_plan(calibrated_config(calibration=str(empty))))


def test_the_printed_estimate_names_the_figure_of_every_training_shape(tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(calibrated_config()))
    assert config_main([str(path)]) == 0
    out = capsys.readouterr().out
    lines = {line.split(":")[0].strip(): line for line in out.splitlines() if line.startswith("  ")}
    assert lines["tiny DAPE1x3-Kerple D=32 T=32 B=4 fp32 fast/float32"].endswith("measured")
    assert "scaled from tiny T=32 B=4 (2000 tokens/s)" in lines["small DAPE1x3-Kerple D=32 T=32 B=4 fp32 fast/float32"]
    assert lines["tiny Kerple T=32 B=4 fp32 fast/float32"].endswith("FLOP estimate")
    assert "tokens/s measured for 1 jobs, scaled by FLOPs for 1" in out


def test_the_committed_calibration_measures_every_gpu_yaml_job_and_the_papers_125m_steps(capsys):
    """benchmarks/results/gpu_calibration.csv holds two devices: one H100 measured every shape of configs/gpu.yaml,
    one H200 configs/paper.yaml's 125M Kerple, DAPE-Kerple and DAPE1x3-Kerple steps at T 512 and 1024 (as their jobs
    run them: the memory model's pieces and recomputation) and small dispatch-bound steps; each configuration names
    its device, and the paper's other shapes are scaled from a measured row of their method or keep the FLOP
    estimate, with the H200's per-call host cost for the dispatch bound."""
    csv = REPO / "benchmarks" / "results" / "gpu_calibration.csv"
    rows = pd.read_csv(csv)
    assert set(rows["device"]) == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"} and (rows["status"] == "ok").all()
    h200 = rows[(rows["device"] == "NVIDIA H200") & (rows["size"] == "125M")]
    assert set(h200["method"]) == {"Kerple", "DAPE-Kerple", "DAPE1x3-Kerple"} and set(h200["train_len"]) == {512, 1024}
    assert set(h200["attention_path"]) == {"compiled"}
    for name, device in (("gpu.yaml", "NVIDIA H100 80GB HBM3"), ("paper.yaml", "NVIDIA H200")):
        estimate = grid.load_yaml(REPO / "configs" / name)["estimate"]
        assert (estimate["calibration"], estimate["calibration_device"]) == (str(csv.relative_to(REPO)), device)
    assert config_main([str(REPO / "configs" / "gpu.yaml")]) == 0
    out = capsys.readouterr().out
    train_jobs = int(out.split("plan: ")[1].split(" train_lm")[0].split(", ")[-1])
    assert f"tokens/s measured for {train_jobs} jobs, scaled by FLOPs for 0" in out
    assert config_main([str(REPO / "configs" / "paper.yaml")]) == 0
    out = capsys.readouterr().out
    lines = {line.split(":")[0].strip(): line for line in out.splitlines() if line.startswith("  125M")}
    assert lines["125M DAPE1x3-Kerple D=32 T=512 B=32 bf16 auto/float32"].endswith("measured")
    assert "scaled from 125M T=512 B=32" in lines["125M DAPE1x3-Kerple D=32 T=128 B=32 bf16 auto/float32"]
    assert "per call from the calibration on NVIDIA H200 (its medium kerple/none T=32 step)" in out


@pytest.mark.slow
def test_calibrate_gpu_on_the_cpu_writes_rows_the_estimate_uses_as_measured(tmp_path):
    config = calibrated_config(calibration=str(tmp_path / "cpu.csv"), device="cpu")
    config["families"] = {"runs": {"axes": {"method": ["Kerple", "DAPE1x3-Kerple"]}}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    (tmp_path / "cpu.csv").write_text((FIXTURE.read_text()))  # another device's rows are kept beside the new ones
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "calibrate_gpu.py"), "--config", str(path),
                           "--device", "cpu", "--out", str(tmp_path / "cpu.csv"), "--steps", "2", "--warmup", "1",
                           "--threads", "1"], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_csv(tmp_path / "cpu.csv", comment="#")
    cpu = rows[rows["device"] == "cpu"]
    assert list(cpu["method"]) == ["Kerple", "DAPE1x3-Kerple"] and (cpu["status"] == "ok").all()
    assert (cpu["tokens_per_s"] > 0).all() and (cpu["median_step_ms"] > 0).all()
    expected = cpu["micro_batch"] * cpu["train_len"] * cpu["grad_accum"] / (cpu["median_step_ms"] / 1000)
    assert ((cpu["tokens_per_s"] - expected).abs() <= 1e-6 * expected).all()
    assert set(cpu["attention_path"]) == {"fast"} and set(cpu["vocab_size"]) == {300}
    assert (rows["device"] == "fixture-gpu-a").sum() == 3  # kept
    e = grid.estimate(grid.build_plan(config))
    assert e["sources"] == {"measured": 2, "scaled": 0, "FLOP estimate": 0}
    kerple = next(s for s in e["shapes"] if s["method"] == "Kerple")
    rate = cpu.loc[cpu["method"] == "Kerple", "tokens_per_s"].item()
    assert kerple["gpu_hours"] == pytest.approx(TOKENS / rate / 3600) and math.isfinite(kerple["gpu_hours"])


def test_a_case_with_its_gpu_memory_runs_as_its_job_would(tmp_path):
    """resources.train_lm.gpu_mem_gb: the timed step takes the memory model's pieces and recompute_scores."""
    from benchmarks import calibrate_gpu
    from dape_core.memory import training_memory

    config = calibrated_config()
    config["defaults"]["lm"]["attention_impl"] = "materialized"
    config["families"] = {"runs": {"axes": {"method": ["DAPE1x3-Kerple"]}}}
    config["resources"] = {"train_lm": {"gpu_mem_gb": 1000}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    [case] = calibrate_gpu.cases(path)
    assert case["gpu_mem_gb"] == 1000 and case["micro_batch"] == BATCH
    roomy = calibrate_gpu.measure(case, "cpu", steps=1, warmup=0, threads=1)
    assert roomy["status"] == "ok" and roomy["recompute_scores"] is False and roomy["pieces"] == BATCH
    assert roomy["path_options"] == "feature_map=conv causal_chunks=1 tf32_scores=False"  # the CPU's: all off
    recomputed = dataclasses.replace(calibrate_gpu.case_model(case), recompute_scores=True)
    half = (training_memory(recomputed, BATCH // 2).peak + training_memory(recomputed, BATCH).peak) / 2 / 1e9
    tight = calibrate_gpu.measure({**case, "gpu_mem_gb": half}, "cpu", steps=1, warmup=0, threads=1)
    assert tight["status"] == "ok" and tight["recompute_scores"] is True and tight["pieces"] == BATCH // 2


def test_calibrate_gpu_refuses_cuda_without_a_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU visible, on any machine
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "calibrate_gpu.py"), "--device", "cuda"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert done.returncode == 2 and "no CUDA device here" in done.stderr


def test_dape_rows_measured_on_an_older_path_of_auto_are_named_upper_bounds(tmp_path):
    """The committed H100 calibration timed DAPE with `attention_impl: auto` when auto trained on the materialized
    path; the estimate says so (auto trains with the compiled path on CUDA now), and not for rows of that path."""
    from dape_core.settings.attention import CUDA_TRAINING_PATH

    committed = REPO / "benchmarks" / "results" / "gpu_calibration.csv"
    line = grid.estimate_line(grid.build_plan(grid.load_yaml(REPO / "configs" / "gpu.yaml")))
    frame = pd.read_csv(committed)
    older = ((frame["processor"] != "none") & (frame["attention_impl"] == "auto")
             & (frame["attention_path"] == "materialized") & (frame["status"] == "ok")).sum()
    assert older and f"({older} DAPE rows measured on the materialized path" in line
    assert f"trains with {CUDA_TRAINING_PATH} on CUDA" in line and "upper bounds" in line
    current = frame.assign(attention_path=frame["attention_path"].replace("materialized", CUDA_TRAINING_PATH))
    current.to_csv(tmp_path / "calibration.csv", index=False)
    config = grid.load_yaml(REPO / "configs" / "gpu.yaml")
    config["estimate"]["calibration"] = str(tmp_path / "calibration.csv")
    assert "upper bounds" not in grid.estimate_line(grid.build_plan(config))


def test_dape_rows_measured_with_other_compiled_path_options_are_named_upper_bounds(tmp_path, monkeypatch):
    """The committed H200 rows timed the compiled path before its options existed (no ``path_options`` column: all
    off). With today's options (off) the estimate says nothing of them; once an option is set on CUDA it names them
    upper bounds, and a row that records today's options is not named."""
    from dape_core.config import calibration  # where the estimate reads the options
    from dape_core.settings.attention import compiled_options_text

    config = grid.load_yaml(REPO / "configs" / "paper.yaml")
    assert "path's options" not in grid.estimate_line(grid.build_plan(config))
    monkeypatch.setattr(calibration, "CUDA_COMPILED_OPTIONS", {"feature_map": "triton", "causal_chunks": 4,
                                                               "tf32_scores": False})
    frame = pd.read_csv(REPO / "benchmarks" / "results" / "gpu_calibration.csv")
    dape = ((frame["device"] == "NVIDIA H200") & (frame["processor"] != "none") & (frame["status"] == "ok")).sum()
    line = grid.estimate_line(grid.build_plan(config))
    assert dape and (f"({dape} DAPE rows measured with the compiled path's options feature_map=conv causal_chunks=1 "
                     "tf32_scores=False, not today's feature_map=triton causal_chunks=4 tf32_scores=False") in line
    assert "upper bounds until benchmarks/calibrate_gpu.py is rerun" in line
    now = compiled_options_text(calibration.CUDA_COMPILED_OPTIONS)
    frame.assign(path_options=now).to_csv(tmp_path / "calibration.csv", index=False)
    config["estimate"]["calibration"] = str(tmp_path / "calibration.csv")
    assert "path's options" not in grid.estimate_line(grid.build_plan(config))
    frame.assign(path_options="feature_map=cudnn").to_csv(tmp_path / "calibration.csv", index=False)
    with pytest.raises(ConfigError, match="estimate.calibration's path_options: feature_map=cudnn is not allowed; "
                                         "allowed values: conv, triton"):
        grid.estimate_line(grid.build_plan(config))
