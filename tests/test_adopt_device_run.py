"""benchmarks/adopt_device_run.py: a device run becomes the options training runs with, the estimate's calibration
rows and the memory model's fit, each by its own script's rule, in a copy of the repository's files; a run measured
on no GPU, of several devices, without the layer's rows, a taken name or a moved constant stops it with one line
before it writes anything; it writes data (dape_core/config/measured/cuda_compiled_path.json), never source."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_benchmarks import DEVICE_ROWS, DEVICE_TIMES, write_device_run

from benchmarks import adopt_device_run, memory_fit

from dape_core import measured
from dape_core.settings.attention import COMPILED_OPTIONS_OFF, measured_compiled_options

ROOT = Path(__file__).resolve().parents[1]

DEVICE = "NVIDIA H200"
TRITON_C4_TF32 = "feature_map=triton causal_chunks=4 tf32_scores=True"


def repository(tmp_path: Path) -> Path:
    """The files the script edits and reads, copied: the compiled path's measured constants and the committed
    calibration rows."""
    root = tmp_path / "repo"
    for name in (adopt_device_run.COMPILED_PATH, adopt_device_run.RESULTS / "gpu_calibration.csv"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, root / name)
    return root


def device_run(tmp_path: Path, gpu: str | None = DEVICE) -> Path:
    """A run as it comes back: the documented layer rows (every option faster), training steps with their peaks at
    the tiny size, one calibration row of configs/paper.yaml's with the options, its log; read-only, as returned."""
    run = write_device_run(tmp_path / "out", dict(zip(DEVICE_ROWS, DEVICE_TIMES)))
    layer = pd.read_csv(run / "fused_layer.csv").assign(gpu=gpu)
    layer.to_csv(run / "fused_layer.csv", index=False)
    steps = [dict(gpu=gpu, size="tiny", vocab_size=512, method=method, mode="eager", train_len=n, micro_batch=4,
                  precision="bf16", status="ok", step_ms=ms, peak_gib=peak, path_options=options)
             for n in (512, 2048) for method, ms, peak, options in (
                 ("Kerple", 60.0, 1.0, ""), ("DAPE1x3-Kerple (compiled-keep)", 160.0, 1.6, ""),
                 ("DAPE1x3-Kerple (compiled-triton-keep-tf32-c4)", 90.0, 1.4, TRITON_C4_TF32))]
    pd.DataFrame(steps).to_csv(run / "gpu_step.csv", index=False)
    committed = pd.read_csv(ROOT / "benchmarks" / "results" / "gpu_calibration.csv")
    row = committed[(committed["device"] == DEVICE) & (committed["method"] == "DAPE1x3-Kerple")
                    & (committed["train_len"] == 512) & committed["gpu_mem_gb"].notna()].head(1)
    row.assign(device=gpu, tokens_per_s=123456.0, path_options=TRITON_C4_TF32,
               timestamp="2026-12-01T10:00:00+00:00").to_csv(run / "gpu_calibration.csv", index=False)
    (run / "cuda_options.txt").write_text("the rule's report\n")
    (run / "log.txt").write_text(f"name, clocks\n{DEVICE}, 345 MHz\nmeasured 2026-12-01T10:00:00Z\n"
                                 "torch 2.11.0+cu130 triton 3.6.0\n")
    for path in run.iterdir():
        path.chmod(0o444)
    return run


def test_a_run_sets_the_options_merges_its_calibration_and_refits_the_memory_model(tmp_path, capsys):
    root, run = repository(tmp_path), device_run(tmp_path)
    committed = pd.read_csv(root / "benchmarks" / "results" / "gpu_calibration.csv")
    assert adopt_device_run.adopt(run, "h200-options", root=root) == 0
    out = capsys.readouterr().out
    # 1. the run's files, writable, without its calibration rows, and a README naming the device and the date
    target = root / "benchmarks" / "results" / "h200-options"
    assert sorted(p.name for p in target.iterdir()) == ["README.md", "cuda_options.txt", "fused_layer.csv",
                                                         "gpu_step.csv", "log.txt"]
    (target / "gpu_step.csv").write_text((target / "gpu_step.csv").read_text())  # writable
    text = (target / "README.md").read_text()
    assert "NVIDIA H200 (2026-12-01T10:00:00Z; torch 2.11.0+cu130 triton 3.6.0)" in text
    assert f"`{TRITON_C4_TF32}` (before `feature_map=conv causal_chunks=1 tf32_scores=False`;" in text
    # 2. the options by cuda_options.py's rule, as data the package reads (checked as it reads them), the run named
    data = measured.read_compiled_path(root / adopt_device_run.COMPILED_PATH)
    assert measured_compiled_options(data, "test") == {"feature_map": "triton", "causal_chunks": 4, "tf32_scores": True}
    assert data["measured"] == f"benchmarks/results/h200-options ({DEVICE}, 2026-12-01T10:00:00Z)"
    assert not any(p.suffix == ".py" for p in root.rglob("*"))  # no source written
    assert "tf32_scores = True: set" in out
    # 3. the calibration row replaces the committed one of the same device and case; nothing else changes
    merged = pd.read_csv(root / "benchmarks" / "results" / "gpu_calibration.csv")
    assert len(merged) == len(committed)
    new = merged[merged["path_options"] == TRITON_C4_TF32]
    assert len(new) == 1 and new["tokens_per_s"].item() == 123456.0 and new["device"].item() == DEVICE
    others = committed[~((committed["device"] == DEVICE) & (committed["method"] == "DAPE1x3-Kerple")
                         & (committed["train_len"] == 512) & (committed["micro_batch"] == new["micro_batch"].item())
                         & (committed["precision"] == new["precision"].item()))]
    assert len(others) == len(committed) - 1
    # 4. the fit of every committed peak, the run's among them, and the scale it names
    fit = pd.read_csv(root / "benchmarks" / "results" / "memory_fit.csv")
    assert (fit["source"].str.contains("h200-options/gpu_step.csv")).sum() == 6
    assert (fit["path_options"] == TRITON_C4_TF32).sum() == 3  # two steps and the calibration row
    scale = memory_fit.needed_scale(fit.to_dict("records"))
    assert data["compiled_kept_scale"] == pytest.approx(scale)
    assert f"`COMPILED_KEPT_SCALE` 1.05 → {scale:g}" in text


def test_a_run_that_measures_no_option_faster_leaves_them_off(tmp_path, capsys):
    root, run = repository(tmp_path), device_run(tmp_path)
    layer = pd.read_csv(run / "fused_layer.csv")
    layer.loc[layer["row"] == "compiled-triton-keep", "ms"] = 99.0  # the Triton feature map slower: nothing set
    (run / "fused_layer.csv").chmod(0o644)
    layer.to_csv(run / "fused_layer.csv", index=False)
    assert adopt_device_run.adopt(run, "h200-none", root=root) == 0
    data = measured.read_compiled_path(root / adopt_device_run.COMPILED_PATH)
    assert measured_compiled_options(data, "test") == dict(COMPILED_OPTIONS_OFF)
    assert data["measured"].startswith("benchmarks/results/h200-none (NVIDIA H200")


@pytest.mark.parametrize("case,message", [
    ("smoke", "fused_layer.csv has rows measured on no GPU (column gpu)"),
    ("two devices", "names several devices"),
    ("no layer", "has no fused_layer.csv"),
    ("damaged", "gpu_step.csv is damaged"),
    ("taken", "h200-options exists"),
    ("damaged constants", "cuda_compiled_path.json: damaged (ValueError"),
    ("foreign option", "cuda_compiled_options: options ['causal_chunks', 'feature_map', 'warp_size'] are not allowed"),
    ("name", "NAME '../x' is not allowed"),
    ("foreign calibration row", "row DAPE1x3-Kerple T512 names configs/elsewhere.yaml"),
])
def test_a_run_it_cannot_adopt_stops_in_one_line_before_anything_is_written(tmp_path, case, message):
    root = repository(tmp_path)
    run = device_run(tmp_path, gpu=None if case == "smoke" else DEVICE)
    for path in run.iterdir():
        path.chmod(0o644)
    name = "../x" if case == "name" else "h200-options"
    if case == "two devices":
        pd.read_csv(run / "gpu_step.csv").assign(gpu="NVIDIA H100 80GB HBM3").to_csv(run / "gpu_step.csv",
                                                                                  index=False)
    elif case == "no layer":
        (run / "fused_layer.csv").unlink()
        pd.read_csv(run / "gpu_step.csv").to_csv(run / "gpu_step.csv", index=False)
    elif case == "damaged":
        (run / "gpu_step.csv").write_text("")
    elif case == "taken":
        (root / "benchmarks" / "results" / "h200-options").mkdir()
    elif case == "foreign calibration row":
        pd.read_csv(run / "gpu_calibration.csv").assign(config="configs/elsewhere.yaml").to_csv(
            run / "gpu_calibration.csv", index=False)
    elif case in ("damaged constants", "foreign option"):
        path = root / adopt_device_run.COMPILED_PATH
        data = json.loads(path.read_text())
        if case == "foreign option":
            data["cuda_compiled_options"]["warp_size"] = data["cuda_compiled_options"].pop("tf32_scores")
        else:
            data["compiled_kept_scale"] = -1
        path.write_text(json.dumps(data))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as stopped:
        adopt_device_run.adopt(run, name, root=root)
    assert message in str(stopped.value) and "\n" not in str(stopped.value)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_damaged_layer_csv_is_named_in_one_line(tmp_path):
    root, run = repository(tmp_path), device_run(tmp_path)
    layer = run / "fused_layer.csv"
    layer.chmod(0o644)
    layer.write_text(layer.read_text().replace("error_grad_k", "other"))
    with pytest.raises(SystemExit) as stopped:
        adopt_device_run.adopt(run, "h200-options", root=root)
    assert str(stopped.value).startswith(f"adopt_device_run: {layer} lacks the columns error_grad_k")
    assert "\n" not in str(stopped.value) and not (root / "benchmarks" / "results" / "h200-options").exists()
