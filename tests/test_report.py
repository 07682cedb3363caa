"""dape_core.report: aggregation to tidy CSVs, paper-style tables, figures, and the smoke run's report files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from dape_core.report import aggregate, figures, tables
from dape_core.report.cli import write_tables
from dape_core.seal import seal_unsealed
from test_workflow import assert_valid_png
from workflow_fixture import REPO, SMOKE_PLAN, smoke_run  # noqa: F401


def lm_rows(rows: list[dict]) -> pd.DataFrame:
    """lm_results-like rows: defaults for every column the tables read."""
    base = {"run": "r", "seed": 0, "families": "fam", "method": "Kerple", "eval_len": 64, "status": "ok", "ppl": 5.0,
            "window": 32, "delta_p_window": 64, "ppl_dp": 5.0, "ppl_local": 5.0, "delta_p": 0.0, "dataset": "code",
            "train_len": 64, "size": "small", "dape_width": 32, "tag": "", "processor": "none", "kernel_size": 1,
            "batch_size": 32, "steps": 600, "lr": 0.002, "padding": "same", "dropout": 0.0}
    return pd.DataFrame([{**base, **row} for row in rows])


# ------------------------------------------------------------------------------------------------ tables
def test_cells_are_mean_and_std_over_seeds_and_diverged_runs_stay_visible():
    ok = pd.Series(["ok", "ok"])
    assert tables.summarise(pd.Series([4.0, 6.0]), ok) == (f"5.00 ± {np.std([4, 6], ddof=1):.2f}", 5.0)
    assert tables.summarise(pd.Series([4.0]), pd.Series(["ok"])) == ("4.00", 4.0)
    assert tables.summarise(pd.Series([np.nan, np.nan]), pd.Series(["diverged"] * 2)) == ("diverged", np.inf)
    text, value = tables.summarise(pd.Series([4.0, np.nan]), pd.Series(["ok", "diverged"]))
    assert text == "4.00 (1/2 diverged)" and value == 4.0


def test_ppl_table_layout_methods_as_columns_lengths_as_rows():
    df = lm_rows([
        {"run": "b", "method": "DAPE1x3-Kerple", "eval_len": 64, "ppl": 4.0},
        {"run": "b", "method": "DAPE1x3-Kerple", "eval_len": 128, "ppl": 4.5},
        {"run": "a", "method": "Kerple", "eval_len": 64, "ppl": 5.0},
        {"run": "a", "method": "Kerple", "eval_len": 128, "ppl": 6.0},
        {"run": "a", "seed": 1, "method": "Kerple", "eval_len": 64, "ppl": 7.0},
        {"run": "a", "seed": 1, "method": "Kerple", "eval_len": 128, "ppl": 8.0},
        {"run": "c", "method": "NoPE", "eval_len": 64, "status": "diverged", "ppl": np.nan},
        {"run": "c", "method": "NoPE", "eval_len": 128, "status": "diverged", "ppl": np.nan},
        {"run": "d", "families": "other", "method": "RoPE", "eval_len": 64, "ppl": 1.0},
    ])
    (table,) = tables.ppl_tables(df, "fam", runs=["a", "b", "c"])
    assert table.columns == ["Kerple", "DAPE1x3-Kerple", "NoPE"]  # grid order; RoPE is another family's
    assert table.rows == [64, 128]
    assert table.cells[0] == [f"6.00 ± {np.std([5, 7], ddof=1):.2f}", "4.00", "diverged"]
    assert table.best[0] == [False, True, False]
    markdown = tables.to_markdown([table], "fam")
    assert "| eval_len | Kerple | DAPE1x3-Kerple | NoPE |" in markdown and "**4.00**" in markdown
    latex = tables.to_latex([table], "fam_x")
    assert r"\textbf{4.00}" in latex and r"$\pm$" in latex and r"fam\_x" in latex and "diverged" in latex


def test_labels_add_the_settings_that_tell_runs_apart_and_panels_split_datasets():
    df = lm_rows([
        {"run": "w10", "method": "DAPE1x3-Kerple", "dape_width": 10},
        {"run": "w64", "method": "DAPE1x3-Kerple", "dape_width": 64},
        {"run": "k", "method": "Kerple"},
        {"run": "p", "method": "Kerple", "dataset": "prose", "steps": 300},
    ])
    out = tables.ppl_tables(df, "fam", runs=["k", "w10", "w64", "p"])
    assert [t.title for t in out] == ["data code", "data prose"]
    assert out[0].columns == ["Kerple", "DAPE1x3-Kerple D=10", "DAPE1x3-Kerple D=64"]
    assert out[1].columns == ["Kerple"]  # steps differ between panels, not within one


def test_delta_p_table_follows_table_1():
    df = lm_rows([{"eval_len": 128, "ppl_local": 6.0, "ppl_dp": 5.0, "delta_p": 1.0}])
    (table,) = tables.delta_p_tables(df, "fam")
    assert table.rows == ["128: P(M(x[-64:]), 64)", "128: P(M(x), 64)", "128: ΔP"]
    assert [row[0] for row in table.cells] == ["6.000", "5.000", "1.000"]


def test_timing_table_gives_ratios_to_dape1x3():
    timing = pd.DataFrame([
        {"families": "t", "method": m, "mode": "forward", "size": "small", "seq_len": 512, "batch_size": 1,
         "median_ms": ms, "device": "cpu", "threads": 2} for m, ms in (("Kerple", 3.0), ("DAPE1x3-Kerple", 4.0))])
    (table,) = tables.timing_tables(timing, "t")
    assert table.rows == ["Kerple", "DAPE1x3-Kerple"]
    assert table.cells == [["3.00", "0.7500"], ["4.00", "1.0000"]]


def test_che_table_aggregates_over_seeds_and_learning_rates():
    rows = [{"families": "che", "task": "even_pairs", "encoding": "kerple", "processor": p, "kernel_size": k,
             "dape_width": 32, "method": m, "seed": seed, "lr": lr, "steps": 10, "length": None, "accuracy": acc,
             "n_samples": 8, "row_type": "summary"}
            for (p, k, m) in (("none", 1, "Kerple"), ("dape_v2", 3, "DAPE1x3-Kerple"))
            for seed, lr, acc in ((0, 1e-3, 0.5), (1, 1e-3, 0.7), (0, 3e-4, 0.6))]
    che = pd.DataFrame(rows)
    (best,) = tables.che_tables(che, "che", "max")
    (mean,) = tables.che_tables(che, "che", "mean")
    assert best.rows == ["R even_pairs"] and best.cells == [["70.00", "70.00"]]
    assert mean.cells == [["60.00", "60.00"]]


# ------------------------------------------------------------------------------------------------ aggregation
def write_run(root, run, seed, rows, status="ok"):
    directory = root / "results" / "lm" / run / f"seed{seed}"
    directory.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(directory / "eval.csv", index=False)
    (directory / "summary.json").write_text(json.dumps({"status": status, "final_loss": 3.0, "wall_s": 1.0,
                                                        "git_commit": "abc", "versions": {"torch": "2"}}))
    seal_unsealed(directory)  # as the jobs seal what they write
    return str(directory / "eval.csv"), str(directory / "summary.json")


def synthetic_plan():
    settings = {key: None for key in aggregate.LM_SETTING_COLUMNS} | {"dataset": "code", "encoding": "kerple",
                                                                       "train_len": 64, "tag": ""}
    return {
        "families": {"a": {"stage": "lm", "role": "central", "runs": ["r1"]},
                     "b": {"stage": "lm", "role": "leakage", "runs": ["r1", "r2"]},
                     "c": {"stage": "lm", "role": None, "runs": ["r2"]}},
        "lm_runs": {"r1": {"settings": settings}, "r2": {"settings": dict(settings, tril=False)}},
        "lm_members": [{"family": "a", "run": "r1", "seed": 0, "eval_lens": [64]},
                       {"family": "b", "run": "r1", "seed": 0, "eval_lens": [64, 128]},
                       {"family": "b", "run": "r2", "seed": 0, "eval_lens": [64, 128]},
                       {"family": "c", "run": "r2", "seed": 0, "eval_lens": [64]}],
        "leakage_pairs": {"b": [{"run": "r2", "twin": "r1"}]},
        "timing_members": [], "che_members": [],
    }


def test_lm_results_one_row_per_run_length_seed_with_families_roles_and_provenance(tmp_path):
    plan = synthetic_plan()
    e1, s1 = write_run(tmp_path, "r1", 0, [{"eval_len": n, "ppl": 5.0 + n / 64, "status": "ok", "method": "Kerple"}
                                           for n in (64, 128)])
    e2, s2 = write_run(tmp_path, "r2", 0, [{"eval_len": n, "ppl": np.nan, "status": "diverged", "method": "X"}
                                           for n in (64, 128)], status="diverged")
    df = aggregate.lm_results(plan, [e1, e2], [s1, s2])
    assert len(df) == 4 and not df.duplicated(["run", "eval_len", "seed"]).any()
    families = df.set_index(["run", "eval_len"])["families"]
    assert families[("r1", 64)] == "a;b" and families[("r1", 128)] == "b" and families[("r2", 64)] == "b;c"
    roles = df.set_index(["run", "eval_len"])["roles"]
    assert roles[("r1", 64)] == "central;leakage" and roles[("r1", 128)] == "leakage"
    assert roles[("r2", 64)] == "leakage"  # family c declares no role
    assert list(aggregate.in_role(df, "central")["run"]) == ["r1"]
    assert list(df.columns[:5]) == ["run", "seed", "families", "roles", "method"]
    assert (df[df["run"] == "r2"]["status"] == "diverged").all()
    assert {"train_git_commit", "torch_version", "report_git_commit", "dataset", "train_status"} <= set(df.columns)
    leakage = aggregate.leakage_results(plan, [e1, e2])
    assert list(leakage["status"]) == ["diverged", "diverged"] and leakage["ratio"].isna().all()
    assert set(leakage["role"]) == {"leakage"}


def test_in_family_and_in_role_match_whole_names():
    df = pd.DataFrame({"families": ["base;base_x", "x_base", None], "roles": ["central;leakage", "central_x", ""]})
    assert list(aggregate.in_family(df, "base").index) == [0]
    assert list(aggregate.in_family(df, "x_base").index) == [1]
    assert list(aggregate.in_role(df, "central").index) == [0]
    assert aggregate.in_role(df, "width_sweep").empty
    assert aggregate.in_role(df.drop(columns="roles"), "central").empty


def test_timing_and_che_aggregation_carry_roles(tmp_path):
    plan = {"families": {"t1": {"role": "forward_time"}, "t2": {"role": "step_time"}, "t3": {},
                         "c1": {"role": "che"}},
            "timing_members": [{"family": "t1", "run": "fast"}, {"family": "t3", "run": "fast"},
                               {"family": "t2", "run": "slow"}],
            "che_members": [{"family": "c1", "cell": "cell", "seed": 0}]}
    (tmp_path / "che" / "cell").mkdir(parents=True)
    for name in ("fast", "slow"):
        pd.DataFrame([{"method": "Kerple", "median_ms": 1.0}]).to_csv(tmp_path / f"{name}.csv", index=False)
    pd.DataFrame([{"task": "even_pairs", "accuracy": 0.5}]).to_csv(tmp_path / "che" / "cell" / "seed0.csv",
                                                                   index=False)
    seal_unsealed(tmp_path)
    timing = aggregate.timing_results(plan, [str(tmp_path / "fast.csv"), str(tmp_path / "slow.csv")])
    assert list(timing["families"]) == ["t1;t3", "t2"] and list(timing["roles"]) == ["forward_time", "step_time"]
    che = aggregate.che_results(plan, [str(tmp_path / "che" / "cell" / "seed0.csv")])
    assert list(che[["cell", "families", "roles"]].iloc[0]) == ["cell", "c1", "che"]


def test_report_roles_are_the_schemas():
    schema = yaml.safe_load((REPO / "dape_core" / "config" / "config.schema.yaml").read_text())
    enum = schema["$defs"]["family"]["properties"]["role"]["enum"]
    assert set(aggregate.ROLES) == {role for role in enum if role is not None}


# ------------------------------------------------------------------------------------------------ figures
def test_ppl_figure_marks_diverged_runs(tmp_path, monkeypatch):
    df = lm_rows([
        {"run": "a", "method": "Kerple", "eval_len": 64, "ppl": 5.0},
        {"run": "a", "method": "Kerple", "eval_len": 128, "ppl": 30.0},
        {"run": "c", "method": "NoPE", "eval_len": 64, "status": "diverged", "ppl": np.nan},
        {"run": "c", "method": "NoPE", "eval_len": 128, "status": "diverged", "ppl": np.nan},
    ])
    marked = []
    original = figures._mark_diverged
    monkeypatch.setattr(figures, "_mark_diverged", lambda ax, g, x: marked.extend(original(ax, g, x)) or marked)
    figures.ppl_figure(df, "fam", None, "title", tmp_path / "ppl.png", runs=["a", "c"])
    assert marked == ["NoPE"]
    assert_valid_png((tmp_path / "ppl.png").read_bytes())


def test_write_tables_writes_every_family_table(tmp_path):
    plan = synthetic_plan()
    plan["families"]["a"]["delta_p"] = True
    lm = lm_rows([{"run": "r1", "families": "a;b"}, {"run": "r2", "families": "b", "method": "DAPE1x3-Kerple"}])
    written = write_tables(plan, lm, None, None, None, tmp_path)
    assert sorted(p.name for p in written) == ["a_delta_p.md", "a_delta_p.tex", "a_ppl.md", "a_ppl.tex",
                                               "b_ppl.md", "b_ppl.tex", "c_ppl.md", "c_ppl.tex"]
    assert "DAPE1x3-Kerple" in (tmp_path / "b_ppl.md").read_text()


# ------------------------------------------------------------------------------------------------ the smoke run
@pytest.mark.slow
def test_smoke_lm_results_are_tidy(smoke_run):
    assert smoke_run.returncode == 0, smoke_run.log_tail
    lm = pd.read_csv(smoke_run.report("lm_results.csv"))
    assert not lm.duplicated(["run", "eval_len", "seed"]).any()
    plan = json.loads(smoke_run.path(SMOKE_PLAN).read_text())
    expected = {(m["run"], m["seed"], n) for m in plan["lm_members"] for n in m["eval_lens"]}
    assert set(zip(lm["run"], lm["seed"], lm["eval_len"])) == expected
    for family in plan["families"]:
        if plan["families"][family]["stage"] in ("lm", "leakage"):
            assert len(aggregate.in_family(lm, family)), family
    assert lm["git_commit"].notna().all() and lm["config_hash"].notna().all()
    shared = lm[lm["families"].str.contains(";")]
    assert len(shared)  # a run listed by several families appears once, with all of them
    roles = aggregate.family_roles(plan)
    assert list(lm["roles"].fillna("")) == [aggregate.roles_of(f, roles) for f in lm["families"]]
    for role in ("central", "kernel_sweep", "leakage", "attention_maps"):
        assert len(aggregate.in_role(lm, role)), role


@pytest.mark.slow
def test_smoke_che_timing_sink_results(smoke_run):
    assert smoke_run.returncode == 0, smoke_run.log_tail
    che = pd.read_csv(smoke_run.report("che_results.csv"))
    assert set(che["row_type"]) == {"length", "summary"} and (che["families"] == "che").all()
    assert (che["roles"] == "che").all()
    timing = pd.read_csv(smoke_run.report("timing.csv"))
    assert (timing["median_ms"] > 0).all() and set(timing["families"]) == {"forward_time"}
    assert set(timing["roles"]) == {"forward_time"}
    sink = pd.read_csv(smoke_run.report("sink.csv"))
    assert sink["sink_mass"].between(0, 1).all() and (sink["families"] == "attention_maps").all()
    assert (sink["roles"] == "attention_maps").all()
