"""A two-rule Snakemake workflow runs through profiles/slurm on a single-node localhost slurm."""

from __future__ import annotations

import re

import pytest

from slurm_localhost import DAEMONS, GLOBAL_SLURM_CONF, MARKER, process_alive, run_snakemake_on_slurm

pytestmark = pytest.mark.cluster

SNAKEFILE = """\
rule all:
    input: "second.txt"

rule first:
    output: "first.txt"
    shell: "echo slurm_job_id=$SLURM_JOB_ID > {output}"

rule second:
    input: "first.txt"
    output: "second.txt"
    shell: "cat {input} > {output}; echo slurm_job_id=$SLURM_JOB_ID >> {output}"
"""

JOB_ID = re.compile(r"^slurm_job_id=(\d+)$")


def _job_ids(path):
    lines = path.read_text().splitlines()
    ids = [m.group(1) for m in map(JOB_ID.match, lines) if m]
    assert len(ids) == len(lines), f"{path} holds a line without a slurm job id: {lines}"
    return ids


def test_two_rule_workflow_runs_under_slurm(localhost_slurm, tmp_path):
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    run_snakemake_on_slurm(tmp_path, tmp_path / "Snakefile", [], localhost_slurm.env(), timeout=600)

    (first,) = _job_ids(tmp_path / "first.txt")
    copied, second = _job_ids(tmp_path / "second.txt")
    assert copied == first
    assert first != second, "each rule must run as its own slurm job"
    assert [localhost_slurm.job_state(j) for j in (first, second)] == ["COMPLETED", "COMPLETED"]


def test_down_stops_the_daemons(localhost_slurm):
    pids = {d: localhost_slurm.read_pid(d) for d in DAEMONS}
    assert all(pids.values()) and all(map(process_alive, pids.values())), pids
    localhost_slurm.down()
    assert not [d for d, pid in pids.items() if process_alive(pid)], "daemons survived down"
    assert not [d for d in DAEMONS if localhost_slurm.pid_file(d).exists()]
    assert not (GLOBAL_SLURM_CONF.exists() and GLOBAL_SLURM_CONF.read_text().startswith(MARKER))
