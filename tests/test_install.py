"""A non-editable install (how a cluster image or another project takes the package): the wheel carries everything
dape_core reads at run time, and it runs from another directory with no checkout on its path."""

from __future__ import annotations

import os
import subprocess
import sys

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
    env = {**os.environ, "PYTHONPATH": str(site)}
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


def test_a_stage_computes_from_the_wheel(installed, tmp_path):
    out = tmp_path / "cell.csv"
    done = run(installed, "-m", "dape_core.cli", "che", "--out", str(out), "--task", "even_pairs", "--steps", "2",
               "--batch-size", "4", "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--d-ff", "32",
               "--train-max-len", "4", "--eval-min-len", "5", "--eval-max-len", "6", "--eval-samples", "4",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "summary" in out.read_text()
