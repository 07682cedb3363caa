"""The smoke DAG through snakemake-executor-plugin-slurm on a single-node slurm (profiles/slurm): every job is a
slurm job, and the same report artefacts as the local smoke run come out."""

import sys
from pathlib import Path

import pytest

from slurm_localhost import run_snakemake_on_slurm

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from test_workflow import check_report_artefacts  # noqa: E402
from workflow_fixture import SMOKE_REPORTS  # noqa: E402


@pytest.mark.cluster
def test_smoke_dag_on_slurm(localhost_slurm, tmp_path):
    workdir = tmp_path / "smoke"
    workdir.mkdir()
    config = ["--configfile", str(REPO / "configs" / "smoke.yaml")]
    result = run_snakemake_on_slurm(workdir, REPO / "Snakefile", config, env=localhost_slurm.env(), timeout=1500)
    submitted = result.stdout.count("has been submitted with SLURM jobid")
    assert submitted >= 10, result.stdout[-3000:]  # every non-local job ran as a slurm job
    report = run_snakemake_on_slurm(workdir, REPO / "Snakefile", [*config, "--report", str(workdir / SMOKE_REPORTS / "report.html")],
                                    env=localhost_slurm.env(), timeout=600)
    assert report.returncode == 0
    check_report_artefacts(workdir / SMOKE_REPORTS)
