"""Cluster tests: the ``cluster`` marker and a module-scoped localhost slurm."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_localhost import PreconditionError, SlurmLocalhost, host_unsuitable_reason  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "cluster: starts a single-node slurm on localhost (root, apt-get); runs only when selected with -m cluster",
    )


def pytest_collection_modifyitems(config, items):
    """Skip cluster tests unless the marker expression selects them or DAPE_REQUIRE_SLURM=1."""
    if "cluster" in (config.option.markexpr or "") or os.environ.get("DAPE_REQUIRE_SLURM") == "1":
        return
    skip = pytest.mark.skip(reason="cluster test: select with -m cluster (or set DAPE_REQUIRE_SLURM=1)")
    for item in items:
        if "cluster" in item.keywords:
            item.add_marker(skip)


def slurm_required() -> bool:
    """True when a failed precondition on a root host with apt-get must fail the run (CI, DAPE_REQUIRE_SLURM=1)."""
    ci = os.environ.get("CI", "").strip().lower()
    return ci not in ("", "0", "false", "no") or os.environ.get("DAPE_REQUIRE_SLURM") == "1"


def running_cluster(state_dir, **options):
    """A running SlurmLocalhost (``options``: its fields, e.g. ``gpu_files``) until the generator closes; then its
    daemons are stopped by PID. Skips (or fails under CI / DAPE_REQUIRE_SLURM=1) where the host cannot run one."""
    reason = host_unsuitable_reason()
    if reason:
        pytest.skip(f"no slurm on localhost: {reason}")
    cluster = SlurmLocalhost(state_dir, **options)
    unmet = None
    try:
        if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
            raise PreconditionError("snakemake-executor-plugin-slurm is not installed in this environment")
        cluster.up()
    except PreconditionError as exc:
        cluster.down()
        unmet = str(exc)
    if unmet is not None:
        if slurm_required():
            pytest.fail(f"slurm on localhost required (CI / DAPE_REQUIRE_SLURM=1) but: {unmet}", pytrace=False)
        pytest.skip(f"no slurm on localhost: {unmet}")
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def localhost_slurm(tmp_path_factory):
    """A running SlurmLocalhost (GPUs: the machine's /dev/nvidia*); stopped when the module's tests end."""
    yield from running_cluster(tmp_path_factory.mktemp("slurm"))


@pytest.fixture(scope="module")
def fake_gpu_slurm(tmp_path_factory):
    """A running SlurmLocalhost whose node offers 2 GPUs as GRES, backed by placeholder files: slurm schedules and
    counts them like real devices (no device cgroup here), and torch, finding no CUDA, runs on the CPU."""
    state = tmp_path_factory.mktemp("slurm")
    devices = [state / f"fakegpu{i}" for i in range(2)]
    for device in devices:
        device.touch()
    yield from running_cluster(state, gpu_files=[str(d) for d in devices])
