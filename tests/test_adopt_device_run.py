"""benchmarks/adopt_device_run.py: a device run becomes the options training runs with, the estimate's calibration
rows and the memory model's fit, each by its own script's rule, in a copy of the repository's files; a run measured
on no GPU, of several devices, without the layer's rows, a taken name or a moved constant stops it with one line
before it writes anything."""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
import adopt_device_run  # noqa: E402
import memory_fit  # noqa: E402
from test_benchmarks import DEVICE_ROWS, DEVICE_TIMES, write_device_run  # noqa: E402

DEVICE = "NVIDIA H200"
TRITON_C4_TF32 = "feature_map=triton causal_chunks=4 tf32_scores=True"


def repository(tmp_path: Path) -> Path:
    """The files the script edits and reads, copied: attention.py, memory.py and the committed calibration rows."""
    root = tmp_path / "repo"
    for name in (adopt_device_run.ATTENTION, adopt_device_run.MEMORY, adopt_device_run.RESULTS / "gpu_calibration.csv"):
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
    # 2. the options by cuda_options.py's rule, as Python the module reads, the run named above them
    source = (root / "dape_core" / "settings" / "attention.py").read_text()
    line = next(line for line in source.splitlines() if line.startswith("CUDA_COMPILED_OPTIONS = "))
    assert ast.literal_eval(line.split("MappingProxyType(", 1)[1][:-1]) == {
        "feature_map": "triton", "causal_chunks": 4, "tf32_scores": True}
    assert f"# measured: benchmarks/results/h200-options ({DEVICE}, 2026-12-01T10:00:00Z)\n{line}" in source
    compile(source, "attention.py", "exec")
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
    assert f"COMPILED_KEPT_SCALE = {scale:g}\n" in (root / "dape_core" / "memory.py").read_text()
    assert f"`COMPILED_KEPT_SCALE` 1.05 → {scale:g}" in text


def test_a_run_that_measures_no_option_faster_leaves_them_off(tmp_path, capsys):
    root, run = repository(tmp_path), device_run(tmp_path)
    layer = pd.read_csv(run / "fused_layer.csv")
    layer.loc[layer["row"] == "compiled-triton-keep", "ms"] = 99.0  # the Triton feature map slower: nothing set
    (run / "fused_layer.csv").chmod(0o644)
    layer.to_csv(run / "fused_layer.csv", index=False)
    assert adopt_device_run.adopt(run, "h200-none", root=root) == 0
    source = (root / "dape_core" / "settings" / "attention.py").read_text()
    assert "CUDA_COMPILED_OPTIONS = types.MappingProxyType(dict(COMPILED_OPTIONS_OFF))" in source
    assert "# measured: benchmarks/results/h200-none (NVIDIA H200" in source


@pytest.mark.parametrize("case,message", [
    ("smoke", "fused_layer.csv has rows measured on no GPU (column gpu)"),
    ("two devices", "names several devices"),
    ("no layer", "has no fused_layer.csv"),
    ("damaged", "gpu_step.csv is damaged"),
    ("taken", "h200-options exists"),
    ("moved constant", "memory.py does not hold the line COMPILED_KEPT_SCALE"),
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
    elif case == "moved constant":
        memory = root / "dape_core" / "memory.py"
        memory.write_text(memory.read_text().replace("COMPILED_KEPT_SCALE = ", "COMPILED_KEPT_SCALE: float = "))
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
