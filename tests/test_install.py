"""A non-editable install (how a cluster image or another project takes the package): the wheel carries everything
dape_core reads at run time, and it runs from another directory with no checkout on its path."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from workflow_fixture import REPO

COMMANDS = ("tokenize", "train", "finetune", "evaluate", "time", "che", "report", "verify", "seal")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from this checkout, unpacked into a folder of its own (its dependencies: this venv's)."""
    root = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(root / "dist"), str(REPO)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((root / "dist").glob("dape_core-*.whl"))
    site = root / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                           str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return site


def run(site, *args, cwd):
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}  # never the Hub
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def test_the_wheel_runs_every_shipped_configuration_and_command_from_another_directory(installed, tmp_path):
    where = run(installed, "-c", "import dape_core; print(dape_core.__file__)", cwd=tmp_path)
    assert where.stdout.startswith(str(installed)), where.stdout + where.stderr  # the wheel, not the checkout
    for config in [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml"))]:
        done = run(installed, "-m", "dape_core.config", str(config), cwd=tmp_path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (config.name, done.stderr[-1500:])
    for command in COMMANDS:
        done = run(installed, "-m", "dape_core.cli", command, "--help", cwd=tmp_path)
        assert done.returncode == 0, (command, done.stderr[-1500:])


def dape(site, *args, cwd):
    done = run(site, "-m", "dape_core.cli", *args, cwd=cwd)
    assert done.returncode == 0, (args[0], done.stderr[-2000:])
    return done


def test_every_stage_computes_from_the_wheel(installed, tmp_path):
    """tokenize → train → evaluate → finetune → time → che → seal → verify → report, each a `dape` command of the
    wheel run from a folder outside the checkout; the report regenerates the committed tables byte for byte."""
    data, run_dir = tmp_path / "data", tmp_path / "results" / "run"
    dape(installed, "tokenize", "--source", "builtin-code", "--max-docs", "40", "--vocab-size", "300",
         "--val-fraction", "0.2", "--seed", "0", "--out-dir", str(data), cwd=tmp_path)
    assert (data / "meta.json").exists() and (data / "train.bin").stat().st_size > 0
    tiny = ["--size", "tiny", "--train-len", "16", "--batch-size", "2", "--threads", "1", "--no-progress"]
    dape(installed, "train", "--data-dir", str(data), "--out-dir", str(run_dir), *tiny, "--encoding", "kerple",
         "--processor", "dape_v2", "--kernel-size", "3", "--steps", "2", cwd=tmp_path)
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "ok"
    dape(installed, "evaluate", "--checkpoint", str(run_dir / "model.pt"), "--data-dir", str(data), "--eval-lens",
         "16", "32", "--max-windows", "2", "--min-scored-tokens", "1", "--threads", "1", "--out",
         str(run_dir / "eval.csv"), cwd=tmp_path)
    assert list(pd.read_csv(run_dir / "eval.csv").eval_len) == [16, 32]
    if importlib.util.find_spec("transformers") is not None:  # the `hf` extra
        tuned = tmp_path / "results" / "finetune"
        base = {"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 16}
        dape(installed, "finetune", "--data-dir", str(data), "--out-dir", str(tuned), "--base-config",
             json.dumps(base), "--train-len", "16", "--batch-size", "2", "--steps", "2", "--threads", "1",
             "--no-progress", cwd=tmp_path)
        assert json.loads((tuned / "summary.json").read_text())["status"] == "ok"
    timing = tmp_path / "timing.csv"
    dape(installed, "time", "--size", "tiny", "--seq-lens", "16", "--mode", "forward", "--repeats", "1",
         "--warmup", "0", "--threads", "1", "--out", str(timing), cwd=tmp_path)
    assert (pd.read_csv(timing).median_ms > 0).all()
    cell = tmp_path / "results" / "cell.csv"
    dape(installed, "che", "--out", str(cell), "--task", "even_pairs", "--steps", "2", "--batch-size", "4",
         "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--d-ff", "32", "--train-max-len", "4",
         "--eval-min-len", "5", "--eval-max-len", "6", "--eval-samples", "4", cwd=tmp_path)
    assert "summary" in cell.read_text()
    dape(installed, "seal", str(tmp_path / "results"), cwd=tmp_path)
    assert (run_dir / "eval.csv.sha256").exists()
    (run_dir / "eval.csv").write_text((run_dir / "eval.csv").read_text().replace(",", ";", 1))  # damaged
    verify = dape(installed, "verify", "--results", str(tmp_path / "results"), cwd=tmp_path)
    assert "eval.csv" in verify.stdout + verify.stderr and not (run_dir / "eval.csv").exists()  # set aside
    plan = tmp_path / "plan.json"
    written = run(installed, "-c", "import sys; from dape_core import config as grid; grid.write_report_spec("
                  "sys.argv[2], grid.build_plan(grid.load_yaml(sys.argv[1])).report_spec())",
                  str(REPO / "config.yaml"), str(plan), cwd=tmp_path)
    assert written.returncode == 0, written.stderr[-2000:]
    reports = REPO / "reports"
    sources = []
    for key, name in (("lm", "lm_results"), ("timing", "timing"), ("timing_repeats", "timing_repeats"),
                      ("che", "che_results"), ("sink", "sink"), ("leakage", "leakage")):
        sources += [f"--{key}", str(reports / f"{name}.csv")]
    dape(installed, "report", "tables", "--plan", str(plan), *sources, "--out-dir", str(tmp_path / "tables"),
         cwd=tmp_path)
    committed = sorted(p.name for p in (reports / "tables").iterdir())
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == committed
    for name in committed:
        assert (tmp_path / "tables" / name).read_bytes() == (reports / "tables" / name).read_bytes(), name
