"""A job's price in reference CPU-seconds (dape_core/config/job_cost.py): counted from its settings alone, priced by
the committed table, fitted back by the same arithmetic; what the design stage spends its budget on."""

from __future__ import annotations

import json

import pytest

from dape_core.config import build_plan, job_cost, load_yaml
from dape_core.errors import ConfigError
from workflow_fixture import CONFIGS, REPO


def default_plan():
    return build_plan(load_yaml(REPO / "config.yaml"))


def test_every_run_and_cell_of_the_default_is_priced_and_the_work_orders_them():
    plan = default_plan()
    prices = job_cost.plan_prices(plan)
    assert set(prices) == set(plan.lm_runs) | set(plan.che_cells)
    assert all(v > 0 for p in prices.values() for v in p.values())
    with_maps = {name for name, run in plan.lm_runs.items() if run["attention_seeds"]}
    assert {name for name, p in prices.items() if "attention" in p} == with_maps

    def seed(name):
        return prices[name]["train"] + prices[name]["evaluate"]

    # more work costs more: a processor, a wider kernel, a longer training length, a larger batch, a larger model
    assert seed("code-T32-kerple-dape_v2-k3-w32") > seed("code-T32-kerple-none") > seed("code-T32-kerple-none-tiny")
    assert seed("code-T32-kerple-dape_v2-k5-w32") > seed("code-T32-kerple-dape_v2-k3-w32")
    assert seed("code-T64-kerple-dape_v2-k3-w32") > seed("code-T32-kerple-dape_v2-k3-w32")
    assert seed("code-T32-kerple-dape_v2-k3-w32-B32") > seed("code-T32-kerple-dape_v2-k3-w32")
    assert job_cost.plan_prices(default_plan()) == prices  # nothing measured, nothing random


def test_the_fit_recovers_the_prices_that_made_the_seconds_and_names_its_error():
    plan = default_plan()
    work = job_cost.seed_work(plan)
    table = job_cost.CostTable({"train": 3.0, "evaluate": 3.0, "attention": 3.0, "che": 30.0}, 2e-5, 12.0, "made up")
    measured = {u: {k: table.price(k, w) for k, w in kinds.items()} for u, kinds in work.items()}
    fitted = job_cost.fit_table(work, measured, "synthetic")
    assert fitted["start_s"] == pytest.approx(table.start_s, rel=1e-3)
    assert fitted["s_per_call"] == pytest.approx(2e-5, rel=1e-3) and fitted["s_per_tflop"] == pytest.approx(12.0, rel=1e-3)
    assert all(f["max_abs_rel_error"] < 1e-3 for f in fitted["fit"].values())
    # on a machine three times slower every fitted price is three times larger: the design's units stay the table's
    slower = job_cost.fit_table(work, {u: {k: 3 * v for k, v in p.items()} for u, p in measured.items()}, "slow")
    assert slower["s_per_tflop"] == pytest.approx(3 * 12.0, rel=1e-3)


def test_the_committed_table_fits_the_reference_pilot_and_is_read_checked():
    committed = job_cost.cost_table()
    assert committed.source and all(v > 0 for v in committed.start_s.values()) and committed.s_per_tflop > 0
    text = (REPO / "dape_core" / "config" / job_cost.TABLE).read_text()
    assert json.loads(text)["fit"]["train"]["median_abs_rel_error"] < 0.1
    for damaged in ("{", json.dumps({**json.loads(text), "s_per_call": -1.0}),
                    json.dumps({k: v for k, v in json.loads(text).items() if k != "start_s"})):
        with pytest.raises(ConfigError, match=r"job_cost.json: damaged .*rewrite it with `python benchmarks/job_cost_fit.py`"):
            job_cost.cost_table(damaged)


def test_a_method_without_an_operator_count_has_no_price(monkeypatch):
    from dape_core.config import dispatch

    plan = build_plan(load_yaml(CONFIGS["smoke"]))
    monkeypatch.setattr(dispatch, "method_calls", lambda settings, path=None: None)
    assert job_cost.plan_prices(plan) == {}  # the design then leaves their claims out, saying why (test_design)


def test_the_parse_line_states_the_pilots_and_the_budgets_reference_minutes():
    plan = default_plan()
    line = job_cost.design_line(plan)
    minutes = job_cost.pilot_reference_minutes(plan, 2)
    assert 5 < minutes < 60 and f"≈ {minutes:.0f} reference minutes" in line and "at most 33 more" in line
    assert job_cost.design_line(build_plan(load_yaml(CONFIGS["smoke"]))) == ""  # no design block


def test_the_committed_pilot_chooses_the_committed_claims_and_seeds_at_reference_prices():
    """The run in reports/ was designed on its pilot's measured seconds; priced by work, the same pilot results
    choose the same claims and the same fresh seeds, so its fresh jobs and verdicts stand as they are."""
    import pandas as pd

    from dape_core import artefacts
    from dape_core.report import design
    from dape_core.report.claims import evaluate_claims

    reports = REPO / "reports"
    committed = design.read_design(reports / "design.json")
    tables = {}
    for name in ("lm_results", "lm_windows", "che_results", "sink"):
        path = reports / f"{name}.csv"
        frame = artefacts.read_csv(path, artefacts.report_table(path))
        tables[name] = frame[pd.to_numeric(frame["seed"]) < committed["fresh_seeds_from"]].reset_index(drop=True)
    pilot = evaluate_claims(tables["lm_results"], che=tables["che_results"], sink=tables["sink"],
                            windows=tables["lm_windows"], fresh=True)
    settings = design.DesignSettings(committed["budget_minutes"], committed["fresh_seeds_from"],
                                     committed["max_seeds"], committed["cores"])
    again = design.choose(pilot, job_cost.plan_prices(default_plan()), settings)
    assert [c["claim_id"] for c in again["chosen"]] == [c["claim_id"] for c in committed["chosen"]]
    assert again["fresh"] == committed["fresh"] and again["fresh_maps"] == committed["fresh_maps"]
