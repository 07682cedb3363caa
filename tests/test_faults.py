"""The cases of benchmarks/faults.py: a damaged file of a finished smoke run stops the DAG with a line naming it,
the command the line gives redoes it, and the final reports equal the undamaged run's; kills are survived."""

from __future__ import annotations

import random
import re
import shutil
import sys

import pandas as pd
import pytest

from workflow_fixture import REPO, SMOKE_REPORTS, smoke_run  # noqa: F401

from benchmarks.faults import (FAULTS, HUGE, KINDS, OTHER_SETTINGS, compare_reports, damage, killed_run, orphan_seals,
                               run, run_snakemake, snakemake_command, with_duplicate_key, with_sizes)

CONFIG = REPO / "configs" / "smoke.yaml"


@pytest.mark.parametrize("fault", [f for f in FAULTS if f not in ("foreign", "settings")])
def test_each_fault_changes_the_file_and_only_a_cut_changes_its_size(tmp_path, fault):
    path = tmp_path / "eval.csv"
    path.write_text("eval_len,ppl\n32,9.25\n64,11.5\n")
    before = path.read_bytes()
    damage(path, fault, random.Random(0))
    after = path.read_bytes()
    assert after != before
    assert (len(after) < len(before)) if fault == "truncate" else (len(after) == len(before))


def test_the_foreign_fault_copies_another_file_with_its_seal(tmp_path):
    """``foreign``: another run's file and its seal over this run's; the reader names the copy."""
    from dape_core import artefacts, io
    from dape_core.errors import ArtefactError

    ours, theirs = tmp_path / "a" / "eval.csv", tmp_path / "b" / "eval.csv"
    io.write_text(ours, "eval_len,ppl\n32,9.25\n", seal=True)
    io.write_text(theirs, "eval_len,ppl\n32,9.5\n", seal=True)
    damage(ours, "foreign", random.Random(0), theirs)
    assert ours.read_bytes() == theirs.read_bytes()
    assert io.hash_path(ours).read_bytes() == io.hash_path(theirs).read_bytes()
    with pytest.raises(ArtefactError, match="its seal was written for .*b/eval.csv: a copy of another file"):
        artefacts.verify_hash(ours)


def test_the_settings_fault_seals_a_changed_file_as_a_job_of_other_settings_would(tmp_path):
    """``settings``: a digit changed and the file sealed again, consistently, by a job with another spec (another
    configuration's run of the same name, with its seal): the content matches its seal, the settings do not."""
    from dape_core import artefacts, io
    from dape_core.errors import ArtefactError

    path = tmp_path / "eval.csv"
    io.stamp_job("dape evaluate", "1111111111111111")
    try:
        io.write_text(path, "eval_len,ppl\n32,9.25\n", seal=True)
    finally:
        io.stamp_job(None, None)
    damage(path, "settings", random.Random(0))
    assert path.read_text() != "eval_len,ppl\n32,9.25\n" and artefacts.verify_hash(path)
    assert io.read_seal(io.hash_path(path)).spec == OTHER_SETTINGS
    with pytest.raises(ArtefactError, match="made with other settings"):
        artefacts.verify_hash(path, spec="1111111111111111")
    io.write_text(path, "eval_len,ppl\n32,9.25\n", seal=True)  # a seal without settings: not this fault's
    with pytest.raises(ValueError, match="its seal records no job's settings"):
        damage(path, "settings", random.Random(0))


def test_the_duplicate_key_fault_gives_a_key_twice_and_the_loader_names_it(tmp_path):
    from dape_core.config import load_yaml
    from dape_core.errors import ConfigError

    broken, key = with_duplicate_key(CONFIG, tmp_path / "smoke.yaml")
    assert broken.read_text().count("\n") == CONFIG.read_text().count("\n") + 1
    with pytest.raises(ConfigError, match=rf"the key {key!r} is given twice in one mapping"):
        load_yaml(broken)


@pytest.mark.parametrize("fault, field", [("huge eval", "families.baselines.eval.eval_lens: 200000 "),
                                          ("huge train", "families.baselines.train_len: 100000 needs at least")])
def test_the_size_faults_give_sizes_the_plan_refuses(tmp_path, fault, field):
    """``huge train`` is refused from the configuration alone; ``huge eval`` where the corpus is tokenized (the
    benchmark's faulted run), here a validation split of documents shorter than 200001 tokens."""
    import numpy as np

    from dape_core import config as grid, io
    from dape_core.errors import ConfigError

    plan = grid.build_plan(grid.load_yaml(with_sizes(CONFIG, tmp_path / "smoke.yaml", HUGE[fault])))
    data = tmp_path / "results" / "data" / "code"
    digest = io.write_npy(data / "val.docs.npy", np.array([0, 20001, 40002]))
    io.stamp_job("dape tokenize", io.spec_digest(grid.corpus_spec(plan.datasets["code"]).settings))
    try:
        io.write_json(data / "meta.json", {"splits": {"val": {"docs_sha256": digest}}}, seal=True)
    finally:
        io.stamp_job(None, None)
    with pytest.raises(ConfigError, match=re.escape(field)):
        grid.check_sizes(plan, tmp_path / "results")


def test_a_seal_without_its_file_is_an_orphan(tmp_path):
    from dape_core import io

    kept, lost = tmp_path / "results" / "a.csv", tmp_path / "results" / "b.csv"
    for path in (kept, lost):
        io.write_text(path, "x\n1\n", seal=True)
    lost.unlink()
    (tmp_path / "results" / ".damaged").mkdir()
    io.hash_path(tmp_path / "results" / ".damaged" / "c.csv").write_text("set aside\n")
    assert orphan_seals(tmp_path) == [io.hash_path(lost)]


def test_every_kind_of_file_of_the_smoke_run_is_found(smoke_run):  # noqa: F811
    assert smoke_run.returncode == 0, smoke_run.log_tail
    for kind, pattern in KINDS.items():
        assert list(smoke_run.workdir.glob(pattern.format(reports=SMOKE_REPORTS))), kind


def test_compare_reports_sees_a_changed_number_and_a_changed_verdict(smoke_run, tmp_path):  # noqa: F811
    reports = smoke_run.report()
    copy = tmp_path / "reports"
    shutil.copytree(reports, copy)
    assert compare_reports(reports, copy) == []
    lm = pd.read_csv(copy / "lm_results.csv")
    lm.loc[0, "ppl"] *= 1.0001
    lm.to_csv(copy / "lm_results.csv", index=False)
    claims = pd.read_csv(copy / "claims.csv")
    claims.loc[claims["claim_id"] == "leakage_collapse", "verdict"] = "REFUTED"
    claims.to_csv(copy / "claims.csv", index=False)
    differences = compare_reports(reports, copy)
    assert any(d.startswith("lm_results.csv") for d in differences)
    assert any(d.startswith("claims.csv: leakage_collapse") for d in differences), differences


@pytest.mark.slow
def test_a_cut_windows_file_is_named_redone_by_its_command_and_the_reports_come_back(smoke_run, tmp_path):  # noqa: F811
    """The issue's case: a half-cut windows.csv once gave 136 windows instead of 144 and moved a verdict. Now the DAG
    stops naming it, its `snakemake --forcerun` line redoes it, and the reports equal the undamaged run's."""
    assert smoke_run.returncode == 0, smoke_run.log_tail
    workdir = tmp_path / "smoke"
    shutil.copytree(smoke_run.workdir, workdir, symlinks=True)
    path = sorted(workdir.glob(KINDS["windows.csv"]))[0]
    damage(path, "truncate", random.Random(0))
    stopped = run_snakemake(workdir, CONFIG)  # Snakemake alone, without dape verify first
    logs = "".join(p.read_text(errors="replace") for p in (workdir / "logs" / "report").rglob("*.log"))
    assert stopped.returncode != 0
    # the failed aggregation's outputs were deleted by Snakemake, their seals by the workflow's onerror
    orphans = [seal for seal in workdir.rglob("*.sha256") if ".damaged" not in seal.parts
               and not seal.with_name(seal.name.removesuffix(".sha256")).exists()]
    assert orphans == [] and "the seal of an output deleted after its job failed" in stopped.stdout + stopped.stderr
    line = next(line for line in logs.splitlines() if str(path.relative_to(workdir)) in line)
    assert "does not match the sha256 its job recorded" in line
    command = re.search(r"redo it: snakemake --forcerun (\S+)", line).group(1)
    redone = run_snakemake(workdir, CONFIG, "--forcerun", command)
    assert redone.returncode == 0, (redone.stdout + redone.stderr)[-3000:]
    assert compare_reports(smoke_run.report(), workdir / SMOKE_REPORTS) == []


@pytest.mark.slow
def test_dape_verify_sets_a_cut_file_aside_and_make_reproduces_sequence_recovers_with_no_manual_step(
        smoke_run, tmp_path):  # noqa: F811
    """make reproduce's sequence: `dape verify` names the cut windows.csv in one console line and moves it under
    results/.damaged/; Snakemake with `dape verify --pending` redoes its evaluation and the jobs after it, and the
    reports equal the undamaged run's; afterwards nothing is pending."""
    import subprocess

    assert smoke_run.returncode == 0, smoke_run.log_tail
    workdir = tmp_path / "smoke"
    shutil.copytree(smoke_run.workdir, workdir, symlinks=True)
    path = sorted(workdir.glob(KINDS["windows.csv"]))[0]
    damage(path, "truncate", random.Random(0))

    def verify(*extra):
        return subprocess.run([sys.executable, "-m", "dape_core.cli", "verify", *extra], cwd=workdir,
                              capture_output=True, text=True, timeout=300)

    checked = verify()
    assert checked.returncode == 0, checked.stderr[-2000:]
    relative = str(path.relative_to(workdir))
    named = [line for line in checked.stdout.splitlines() if relative in line]
    assert len(named) == 1 and "does not match the sha256 its job recorded" in named[0]
    assert checked.stdout.splitlines()[-1].endswith("1 set aside")
    assert not path.exists() and list((workdir / "results" / ".damaged").rglob(path.name))
    pending = verify("--pending").stdout.split()
    assert pending == ["--forcerun", relative]
    redone = run_snakemake(workdir, CONFIG, *pending)
    assert redone.returncode == 0, (redone.stdout + redone.stderr)[-3000:]
    assert "rule train_lm" not in redone.stdout + redone.stderr  # only the evaluation and what follows
    assert compare_reports(smoke_run.report(), workdir / SMOKE_REPORTS) == []
    assert verify("--pending").stdout.strip() == "" and verify().stdout.splitlines()[-1].endswith("0 set aside")


@pytest.mark.slow
@pytest.mark.parametrize("fault, named", [("garble", "its content does not match"),
                                          ("settings", "made with other settings")])
def test_the_benchmarks_run_is_make_reproduces_sequence_and_recovers_in_one_command(smoke_run, tmp_path, fault,
                                                                                    named):  # noqa: F811
    """faults.run: lock, `dape verify`, Snakemake with the pending files: a garbled eval.csv — or one replaced by
    another configuration's run of the same name, sealed by its job (content and seal agree, the settings do not;
    no Snakemake metadata says so) — is named on the console and the one command finishes with the undamaged run's
    reports."""
    assert smoke_run.returncode == 0, smoke_run.log_tail
    workdir = tmp_path / "smoke"
    shutil.copytree(smoke_run.workdir, workdir, symlinks=True)
    path = sorted(workdir.glob(KINDS["eval.csv"]))[0]
    damage(path, fault, random.Random(0))
    done = run(workdir, CONFIG)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert f"dape verify: {path.relative_to(workdir)}: {named}" in done.stdout
    assert compare_reports(smoke_run.report(), workdir / SMOKE_REPORTS) == [] and orphan_seals(workdir) == []


@pytest.mark.slow
def test_a_killed_run_goes_on_without_a_manual_step(smoke_run, tmp_path):  # noqa: F811
    """SIGKILL of Snakemake and its jobs after the aggregation started: the next run clears the stale lock, redoes
    only what is missing, and its reports equal the uninterrupted run's."""
    assert smoke_run.returncode == 0, smoke_run.log_tail
    workdir = tmp_path / "smoke"
    shutil.copytree(smoke_run.workdir, workdir, symlinks=True)
    for table in ("lm_results.csv", "claims.csv", "claims.md"):
        (workdir / SMOKE_REPORTS / table).unlink()
    killed_run(workdir, CONFIG, after_s=6.0)
    import subprocess

    verified = subprocess.run([sys.executable, "-m", "dape_core.cli", "verify"], cwd=workdir, capture_output=True,
                              text=True, timeout=300)  # make reproduce's first step: a kill is not damage
    set_aside = [line for line in verified.stdout.splitlines() if "set aside under" in line]
    assert verified.returncode == 0 and all("a seal whose file is gone" in line for line in set_aside), set_aside
    finished = run(workdir, CONFIG)
    assert finished.returncode == 0, (finished.stdout + finished.stderr)[-3000:]
    assert "rule train_lm" not in finished.stdout + finished.stderr
    assert compare_reports(smoke_run.report(), workdir / SMOKE_REPORTS) == []
    assert snakemake_command(workdir, CONFIG)[-2:] == ["--cores", "2"]


def test_a_removed_seal_and_bit_rot_are_named_by_the_reader(tmp_path):
    """``unsealed``: the seal removed and a digit changed; ``rot``: a digit changed, size and modification time
    kept. The reader names both (a missing seal is damage; the content is hashed, not its size or time)."""
    from dape_core import artefacts, io
    from dape_core.errors import ArtefactError

    for fault, message in (("unsealed", "has no seal"), ("rot", "does not match the sha256")):
        path = tmp_path / fault / "eval.csv"
        io.write_text(path, "eval_len,ppl\n32,9.25\n", seal=True)
        mtime = path.stat().st_mtime_ns
        damage(path, fault, random.Random(0))
        assert (path.stat().st_mtime_ns == mtime) == (fault == "rot")
        with pytest.raises(ArtefactError, match=message):
            artefacts.verify_hash(path)
