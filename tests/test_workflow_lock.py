"""``python -m dape_core.workflow_lock`` (called by ``make reproduce``) clears the lock of a SIGKILLed Snakemake run
and leaves the lock of a running one alone, on a real Snakemake run of a one-rule workflow."""

import os
import signal
import subprocess
import sys
import time

import pytest

from dape_core.workflow_lock import directory_argument, lock_files, runs_snakemake, works_in

SNAKEFILE = """\
rule done:
    output: "done.txt"
    params: seconds=config.get("sleep", 60)
    shell: "sleep {params.seconds} && touch {output}"
"""


@pytest.mark.parametrize("argv, expected", [
    (["/work/.venv/bin/snakemake", "--cores", "1"], True),
    (["/usr/bin/python3", "/work/.venv/bin/snakemake", "--profile", "p"], True),
    (["python3.11", "-m", "snakemake", "-n"], True),
    (["python3", "-u", "-m", "snakemake"], True),
    (["/bin/sh", "-c", "snakemake --cores 1"], False),
    (["python3", "-m", "dape_core.workflow_lock", "--", "--snakefile", "Snakefile"], False),
    (["python3", "train.py", "snakemake"], False),
    ([], False),
])
def test_runs_snakemake(argv, expected):
    assert runs_snakemake(argv) is expected


def test_directory_argument():
    assert directory_argument(["--cores", "1", "--directory", "a/b"]) == "a/b"
    assert directory_argument(["-d", "x", "--cores", "1"]) == "x"
    assert directory_argument(["--directory=y"]) == "y"
    assert directory_argument(["--configfile", "c.yaml"]) is None


def test_works_in(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    assert works_in(("snakemake", "--cores", "1"), tmp_path, tmp_path)
    assert not works_in(("snakemake", "--cores", "1"), sub, tmp_path)
    assert works_in(("snakemake", "-d", str(sub)), tmp_path, sub)
    assert not works_in(("snakemake", "-d", str(sub)), tmp_path, tmp_path)  # started here, runs in sub
    assert works_in(("snakemake", "-d", "sub"), tmp_path, sub)  # before changing into sub
    assert works_in(("snakemake", "-d", "sub"), sub, sub)  # after


def _args(workdir, *extra):
    return ["--snakefile", str(workdir / "Snakefile"), "--directory", str(workdir), "--cores", "1", *extra]


def _start_locked_run(workdir):
    """A real Snakemake run in its own process group, returned once it holds the directory's lock."""
    (workdir / "Snakefile").write_text(SNAKEFILE)
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", *_args(workdir)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while not lock_files(workdir) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert lock_files(workdir), "Snakemake did not lock the directory"
    return proc


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _check_lock(workdir):
    return subprocess.run([sys.executable, "-m", "dape_core.workflow_lock", "--", *_args(workdir)],
                          capture_output=True, text=True, timeout=120)


def _snakemake(workdir, *extra):
    return subprocess.run([sys.executable, "-m", "snakemake", *_args(workdir, *extra)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_stale_lock_of_a_killed_run_is_cleared(tmp_path):
    proc = _start_locked_run(tmp_path)
    try:
        _kill_group(proc)
        locked = _snakemake(tmp_path, "--config", "sleep=0")
        assert locked.returncode != 0 and "LockException" in locked.stdout + locked.stderr  # the stale lock blocks
        done = _check_lock(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"cleared a stale Snakemake lock in {tmp_path.resolve()} (no Snakemake process alive)" in done.stdout
        assert lock_files(tmp_path) == []
        dry = _snakemake(tmp_path, "-n")
        assert dry.returncode == 0 and "LockException" not in dry.stdout + dry.stderr, dry.stdout + dry.stderr
        rerun = _snakemake(tmp_path, "--config", "sleep=0")
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert (tmp_path / "done.txt").exists()
        assert _check_lock(tmp_path).stdout == ""  # no lock: nothing to do
    finally:
        _kill_group(proc)


@pytest.mark.slow
def test_lock_of_a_running_snakemake_is_kept(tmp_path):
    proc = _start_locked_run(tmp_path)
    try:
        locks = lock_files(tmp_path)
        done = _check_lock(tmp_path)
        assert done.returncode != 0
        assert f"Snakemake process {proc.pid} is running in {tmp_path.resolve()}" in done.stderr, done.stderr
        assert "cleared" not in done.stdout
        assert lock_files(tmp_path) == locks
        assert proc.poll() is None
    finally:
        _kill_group(proc)
