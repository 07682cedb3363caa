"""Reports read families by role: renaming every family of the smoke configuration changes no verdict."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dape_core.cli import main
from dape_core.config import build_plan, load_yaml, write_report_spec
from dape_core.report.claims import NOT_RUN, evaluate_claims
from dape_core.report.compare import ordering

from workflow_fixture import CONFIGS, SMOKE_PLAN, smoke_run  # noqa: F401

REPORTS = {"lm": "lm_results.csv", "timing": "timing.csv", "che": "che_results.csv", "sink": "sink.csv"}
WINDOWS = "lm_windows.csv"  # per-window losses, written by `dape report lm` beside lm_results.csv


def read_reports(directory) -> dict[str, pd.DataFrame]:
    return {key: pd.read_csv(directory / name) for key, name in {**REPORTS, "windows": WINDOWS}.items()}


def verdicts(reports: dict[str, pd.DataFrame]) -> dict[str, str]:
    table = evaluate_claims(reports["lm"], timing=reports["timing"], che=reports["che"], sink=reports["sink"],
                            windows=reports["windows"])
    return dict(zip(table["claim_id"], table["verdict"]))


def aggregate_under(plan, spec_path, workdir, out_dir) -> None:
    """`dape report lm/timing/che/sink` over the smoke run's per-job files, with ``spec_path`` as the plan."""
    results = workdir / "results"
    lm = [results / f"lm/{run}/seed{seed}" for run, seed in plan.lm_jobs()]
    commands = {
        "lm": ["--evals", *[str(d / "eval.csv") for d in lm], "--summaries", *[str(d / "summary.json") for d in lm],
               "--windows", *[str(d / "windows.csv") for d in lm], "--windows-out", str(out_dir / WINDOWS)],
        "timing": ["--timings", *[str(results / f"timing/{name}.csv") for name in plan.timing_jobs]],
        "che": ["--cells", *[str(results / f"che/{cell}/seed{seed}.csv") for cell, seed in plan.che_jobs()]],
        "sink": ["--sinks", *[str(results / f"lm/{run}/seed{seed}/attention/L{length}/sink.csv")
                              for run, seed, length in plan.attention_jobs()]],
    }
    for command, files in commands.items():
        out = out_dir / REPORTS[command]
        assert main(["report", command, "--plan", str(spec_path), *files, "--out", str(out)]) == 0, command


@pytest.mark.slow
def test_renaming_every_family_changes_no_verdict(smoke_run, tmp_path):
    assert smoke_run.returncode == 0, smoke_run.log_tail
    config = load_yaml(CONFIGS["smoke"])
    config["families"] = {f"x_{name}": spec for name, spec in config["families"].items()}
    plan = build_plan(config)
    original = json.loads(smoke_run.path(SMOKE_PLAN).read_text())
    assert sorted(plan.lm_runs) == sorted(original["lm_runs"])  # run names do not depend on family names
    spec_path = tmp_path / "plan.json"
    write_report_spec(spec_path, plan.report_spec())
    aggregate_under(plan, spec_path, smoke_run.workdir, tmp_path)

    before, after = read_reports(smoke_run.report()), read_reports(tmp_path)
    renamed = set(after["lm"]["families"].dropna().str.split(";").explode())
    assert renamed and all(name.startswith("x_") for name in renamed)
    for key in REPORTS:
        assert list(after[key]["roles"].fillna("")) == list(before[key]["roles"].fillna("")), key
    assert after["lm"]["roles"].str.contains("central").any()

    expected = verdicts(before)
    assert verdicts(after) == expected
    written = pd.read_csv(smoke_run.report("claims.csv"))
    assert dict(zip(written["claim_id"], written["verdict"])) == expected  # the DAG's own claims.csv
    assert any(v != NOT_RUN for v in expected.values()), expected
    pd.testing.assert_frame_equal(after["windows"], before["windows"])
    assert len(after["windows"]) and after["windows"]["loss"].notna().all()
    written_md = smoke_run.report("claims.md").read_text()
    assert all(f"**{v}**" in written_md for v in expected.values())  # CONFIRMED / REFUTED / UNDECIDED / NOT-RUN
    assert "paired t on the seeds' own spread" in written_md  # the central comparison's two seeds, paired
    pd.testing.assert_frame_equal(ordering(after["lm"]), ordering(before["lm"]))
    assert len(ordering(after["lm"]))
