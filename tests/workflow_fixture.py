"""The smoke DAG (configs/smoke.yaml), run once per test session and shared by the tests that read its outputs.

Under pytest-xdist every worker asks for the fixture; a file lock in the session's shared temporary directory
lets the first one run Snakemake and the others wait for its result.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
CONFIGS = {"default": REPO / "config.yaml", "smoke": REPO / "configs" / "smoke.yaml",
           "paper": REPO / "configs" / "paper.yaml"}
SMOKE_TIMEOUT_S = 900
# configs/smoke.yaml reports into reports/smoke/ and keeps its report spec in results/plan.smoke.json
SMOKE_REPORTS = "reports/smoke"
SMOKE_PLAN = "results/plan.smoke.json"


def snakemake(workdir: Path, configfile: Path, *args: str, timeout: float = SMOKE_TIMEOUT_S):
    """Run Snakemake on this repository's Snakefile in ``workdir`` with one complete configuration."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
               "--configfile", str(configfile), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def job_counts(output: str) -> dict[str, int]:
    """The "Job stats" table of a Snakemake run or dry run: rule → number of jobs."""
    counts: dict[str, int] = {}
    lines = output.splitlines()
    if "Job stats:" not in lines:
        return counts
    for line in lines[lines.index("Job stats:") + 3:]:
        match = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if not match:
            break
        counts[match.group(1)] = int(match.group(2))
    counts.pop("total", None)
    return counts


def job_outputs(output: str, rule: str) -> list[str]:
    """Output files of every job of ``rule`` in a dry run's job listing."""
    outputs, current = [], None
    for line in output.splitlines():
        header = re.fullmatch(r"(?:local)?rule (\w+):", line.strip())
        if header:
            current = header.group(1)
        elif current == rule and line.strip().startswith("output:"):
            outputs += [p.strip() for p in line.split(":", 1)[1].split(",")]
    return outputs


@dataclass
class SmokeRun:
    workdir: Path
    returncode: int
    report_returncode: int
    wall_s: float
    log_tail: str

    def path(self, relative: str) -> Path:
        return self.workdir / relative

    def report(self, relative: str = "") -> Path:
        """A file of the smoke configuration's reports folder."""
        return self.workdir / SMOKE_REPORTS / relative


def _shared_root(tmp_path_factory) -> Path:
    """A directory shared by the xdist workers of this session (the session's own one without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> SmokeRun:
    root = _shared_root(tmp_path_factory)
    workdir, state = root / "smoke", root / "smoke.json"
    with open(root / "smoke.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not state.exists():
            workdir.mkdir(exist_ok=True)
            start = time.perf_counter()
            run = snakemake(workdir, CONFIGS["smoke"], "--cores", "2")
            wall = time.perf_counter() - start
            report = snakemake(workdir, CONFIGS["smoke"], "--report", str(workdir / SMOKE_REPORTS / "report.html"))
            tail = (run.stdout + run.stderr)[-6000:] + (report.stdout + report.stderr)[-2000:]
            state.write_text(json.dumps({"returncode": run.returncode, "report_returncode": report.returncode,
                                         "wall_s": wall, "log_tail": tail}))
    data = json.loads(state.read_text())
    return SmokeRun(workdir=workdir, **data)
