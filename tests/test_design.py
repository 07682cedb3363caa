"""The design stage (dape_core/report/design.py): the pilot's claims sized for fresh seeds, priced by the work of
their jobs in reference seconds (the same on every machine), the cheapest kept within the budget, the plan extended by the fresh seeds, and the verdicts read
on the fresh seeds alone; then the DAG: the pilot and the checkpoint in a dry run, a real run through it."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

from dape_core.config import build_plan, load_yaml
from dape_core.errors import ConfigError
from dape_core.report import design, protocol
from dape_core.report.claims import CONFIRMED, NOT_RUN, REFUTED, UNDECIDED, evaluate_claims
from dape_core.report.intervals import Interval, seeds_to_decide
from test_claims import frame, runs
from workflow_fixture import CONFIGS, job_counts, snakemake

SETTINGS = design.DesignSettings(budget_minutes=10, fresh_seeds_from=100, max_seeds=8, cores=2)


def pilot(*rows):
    """A pilot's claims: (claim_id, verdict, fresh seeds, runs)."""
    return pd.DataFrame([{"claim_id": c, "verdict": v, "fresh_seeds": n, "fresh_text": f"{n} (towards CONFIRMED)",
                          "fresh_runs": r} for c, v, n, r in rows])


def test_fresh_seeds_are_sized_for_a_new_sample_decided_or_not():
    iv = Interval(estimate=0.05, low=0.01, high=0.09, n_seeds=6, n_rows=6, basis="paired t", unit_sd=0.03)
    rule = dict(side=1, confirm=0.005, refute=0.0)
    more, _ = seeds_to_decide(iv, **rule)
    fresh, text = seeds_to_decide(iv, **rule, fresh=True)
    assert more >= 7 and 3 <= fresh < more and "towards CONFIRMED" in text  # n from 3, not from the pilot's 6
    # a pilot σ near zero (one degree of freedom can give one) still asks for 3 fresh seeds: two would read their
    # spread on ν = 1 (t 12.7)
    tight = Interval(estimate=0.05, low=0.04, high=0.06, n_seeds=2, n_rows=2, basis="paired t", unit_sd=1e-4)
    assert seeds_to_decide(tight, **rule, fresh=True) == (3, "3 (towards CONFIRMED)")
    assert seeds_to_decide(tight, **rule, fresh=False)[0] == 3  # more seeds of the same runs: the next one


def test_a_decided_pilot_claim_still_gets_its_fresh_seeds():
    lm = frame(runs("central", "Kerple", {1: [10.0, 10.1, 9.9], 2: [10.5, 10.6, 10.4]}),
               runs("central", "DAPE1x3-Kerple", {1: [8.0, 8.1, 7.9], 2: [8.5, 8.6, 8.4]}))
    plain = evaluate_claims(lm, claim_ids=["dape1x3_best_within"]).iloc[0]
    sized = evaluate_claims(lm, claim_ids=["dape1x3_best_within"], fresh=True).iloc[0]
    assert plain["verdict"] == sized["verdict"] == CONFIRMED and "fresh_seeds" not in plain
    assert sized["fresh_seeds"] >= 3 and sorted(sized["fresh_runs"]) == sorted(set(lm["run"]))


def test_a_pilot_pairs_own_spread_sizes_its_fresh_seeds_no_lower_than_its_settings_pooled_spread():
    # DAPE1x3-Kerple against Kerple: two seeds whose differences agree (own σ 0, one degree of freedom), in a setting
    # whose other methods scatter widely; the σ that sizes the pair's fresh seeds is the setting's pooled one, the
    # pilot's interval and verdict stay the pair's own
    two = (0, 1)
    lm = frame(runs("central", "Kerple", {1: [10.0, 10.5], 2: [11.0, 11.5]}, seeds=two),
               runs("central", "DAPE1x3-Kerple", {1: [9.0, 9.45], 2: [9.9, 10.35]}, seeds=two),
               runs("central", "NoPE", {1: [12.0, 15.0], 2: [20.0, 31.0]}, seeds=two),
               runs("central", "RoPE", {1: [11.0, 9.0], 2: [16.0, 12.0]}, seeds=two))
    plain, sized = (list(evaluate_claims(lm, claim_ids=["dape1x3_best_within"], fresh=fresh).iloc[0]["numbers"]
                         .values()) for fresh in (False, True))
    own, floored = plain[0], sized[0]
    assert (own["a"], own["b"]) == (floored["a"], floored["b"]) == ("DAPE1x3-Kerple", "Kerple")
    assert own["unit_sd"] < 1e-9 and floored["unit_sd"] > 0.1  # the floor: the setting's interaction σ
    assert (floored["verdict"], floored["gain_low"], floored["gain_high"]) == (
        own["verdict"], own["gain_low"], own["gain_high"]) == (CONFIRMED, own["gain"], own["gain"])
    assert floored["seeds_needed"] > 3 == seeds_to_decide(
        Interval(own["gain"], own["gain"], own["gain"], "paired t", 2, 2, unit_sd=1e-4), side=1, confirm=0.005,
        refute=0.0, fresh=True)[0]
    # a pair noisier than its setting keeps its own σ
    assert sized[1]["unit_sd"] >= plain[1]["unit_sd"] and sized[2]["unit_sd"] == plain[2]["unit_sd"]


def test_an_unpaired_pilot_comparison_is_sized_no_lower_than_its_settings_pooled_within_run_spread():
    # RoPE trained at 32 against at 256, evaluated at 32: three seeds a side that scatter little, in settings whose
    # NoPE runs scatter widely; the σ that sizes the fresh seeds is floored at the settings' pooled within-run σ,
    # the pilot's Welch interval and verdict stay the sides' own
    from test_claims import T

    three = (0, 1, 2)
    lm = frame(runs(T, "RoPE", {1: [6.0, 6.06, 6.03]}, train_len=32, seeds=three),
               runs(T, "RoPE", {0.125: [6.6, 6.666, 6.633], 1: [5.0, 5.05, 5.025]}, train_len=256, seeds=three),
               runs(T, "NoPE", {1: [6.0, 9.0, 7.5]}, train_len=32, seeds=three),
               runs(T, "NoPE", {0.125: [12.0, 16.0, 14.0], 1: [5.0, 8.0, 6.5]}, train_len=256, seeds=three))
    plain, sized = ({key.split(": ", 1)[1]: c for key, c in evaluate_claims(
        lm, claim_ids=["long_training_hurts_short"], fresh=fresh).iloc[0]["numbers"].items()}
        for fresh in (False, True))
    rope = next(k for k in plain if "RoPE" in k)
    own, floored = plain[rope], sized[rope]
    assert floored["unit_sd"] > 10 * own["unit_sd"] > 0
    assert (floored["verdict"], floored["gain_low"], floored["gain_high"]) == (
        own["verdict"], own["gain_low"], own["gain_high"]) and own["verdict"] == CONFIRMED


def test_the_cheapest_claims_are_kept_while_the_budget_holds_and_shared_runs_are_paid_once():
    prices = {"a": {"train": 50.0, "evaluate": 10.0}, "b": {"train": 60.0}, "c": {"train": 600.0}}  # CPU-s a seed
    claims = pilot(("first", UNDECIDED, 4, ["a", "b"]), ("second", CONFIRMED, 3, ["a"]),
                   ("dear", UNDECIDED, 4, ["a", "c"]), ("never", UNDECIDED, None, []))
    out = design.choose(claims, prices, SETTINGS)  # budget 10 min × 2 cores = 1200 CPU-s
    assert [c["claim_id"] for c in out["chosen"]] == ["second", "first"]  # 180 s, then 2 × 60 + 60 more
    assert out["fresh"] == {"a": [100, 101, 102, 103], "b": [100, 101, 102, 103]}
    assert out["minutes"] == pytest.approx(480 / 2 / 60)
    left = {c["claim_id"]: c["why"] for c in out["left"]}
    assert left["dear"].startswith("over the budget: would need 4 fresh seeds") and "20.0 min" in left["dear"]
    assert left["never"].startswith("no number of fresh seeds decides it")
    assert design.choose(claims, prices, SETTINGS) == out  # the same pilot gives the same design


def test_claims_beyond_max_seeds_unpriced_or_of_timing_are_left_with_why():
    claims = pilot(("many", UNDECIDED, 9, ["a"]), ("unpriced", UNDECIDED, 2, ["z"]),
                   ("timing_overhead_shrinks", UNDECIDED, None, []), ("absent", NOT_RUN, None, []))
    out = design.choose(claims, {"a": {"train": 1.0}}, SETTINGS)
    why = {c["claim_id"]: c["why"] for c in out["left"]}
    assert not out["chosen"] and "more than design.max_seeds = 8" in why["many"]
    assert why["unpriced"].startswith("no price for z (its method has no operator count")
    assert why["absent"] == "the pilot has no rows for it"
    # the timing claim is decided on its own run (a pilot family), not left undecided by the design
    assert "timing_overhead_shrinks" not in why
    assert [c["claim_id"] for c in out["own_run"]] == ["timing_overhead_shrinks"]
    lines = "\n".join(design.design_lines(out))
    assert "- decided on its own run: `timing_overhead_shrinks`: read on its own run's interleaved rounds" in lines
    assert "left undecided: `timing_overhead_shrinks`" not in lines and "decides no claim of seeds" in lines


def test_measured_prices_are_the_median_job_seconds_times_threads_and_a_damaged_benchmark_is_named(tmp_path, capsys):
    paths = []
    for seed, (train, evaluate) in enumerate([(10.0, 2.0), (14.0, 4.0), (12.0, 3.0)]):
        for job, seconds in (("train", train), ("evaluate", evaluate)):
            path = tmp_path / f"logs/lm/run-a/seed{seed}/{job}.benchmark.tsv"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:10\t100\n")
            paths.append(str(path))
    cell = tmp_path / "logs/che/task-x/seed0.benchmark.tsv"
    cell.parent.mkdir(parents=True)
    cell.write_text("s\th:m:s\n")  # cut: no row
    prices = design.measured_prices(paths + [str(cell)], {"train": 2, "evaluate": 1, "che": 1})
    assert prices == {"run-a": {"train": pytest.approx(2 * 12.0), "evaluate": pytest.approx(3.0)}}
    assert f"{cell}: not a job's benchmark" in capsys.readouterr().out
    # this machine's speed against the reference prices estimates the wall time, nothing else
    wall = design.wall_estimate({"prices_cpu_s": {"run-a": {"train": 12.0, "evaluate": 3.0}}, "minutes": 10.0},
                                prices, "a CPU")
    assert wall == {"machine": "a CPU", "speed": pytest.approx(27 / 15, abs=1e-3), "wall_minutes": 18.0}


def test_the_plan_gets_the_fresh_seeds_in_every_family_of_a_run():
    plan = build_plan(load_yaml(CONFIGS["smoke"]))
    run = next(r for r, spec in plan.lm_runs.items() if spec["attention_seeds"])
    cell = next(iter(plan.che_cells))
    designed = plan.with_design({run: [100, 101], cell: [100]}, {run: [100]})
    assert designed.lm_runs[run]["seeds"] == sorted({*plan.lm_runs[run]["seeds"], 100, 101})
    maps = {(r, s) for r, s, _ in designed.attention_jobs()}
    assert (run, 100) in maps and (run, 101) not in maps  # maps only at the seeds of a claim that reads them
    assert not {s for r, s, _ in plan.with_design({run: [100]}, {}).attention_jobs() if r == run} & {100}
    families = {m["family"] for m in plan.lm_members if m["run"] == run}
    assert {m["family"] for m in designed.lm_members if m["run"] == run and m["seed"] == 100} == families
    assert (cell, 100) in designed.che_jobs() and plan.lm_runs[run]["seeds"] != designed.lm_runs[run]["seeds"]
    with pytest.raises(ConfigError, match="design: 'nope' is neither"):
        plan.with_design({"nope": [100]}, {})


def test_fresh_seeds_must_lie_above_the_pilots():
    config = load_yaml(CONFIGS["smoke"])
    config["families"].pop("hf_finetune")
    config["design"] = {"budget_minutes": 5, "fresh_seeds_from": 1}
    with pytest.raises(ConfigError, match=r"design.fresh_seeds_from: 1 is not allowed; allowed values: an integer "
                                          r"above every seed"):
        build_plan(config)


def test_verdicts_read_the_fresh_seeds_only_and_say_the_design():
    chosen = {"fresh_seeds_from": 100, "chosen": [{"claim_id": "dape1x3_best_within"}],
              "left": [{"claim_id": "leakage_collapse", "why": "over the budget"}],
              "pilot": {"dape1x3_best_within": UNDECIDED, "leakage_collapse": UNDECIDED}, "pilot_checks": {}}
    pilot_rows = frame(runs("central", "Kerple", {1: 10.0}, seeds=(0, 1)),
                       runs("central", "DAPE1x3-Kerple", {1: 12.0}, seeds=(0, 1)))  # the pilot: the other way
    fresh_rows = frame(runs("central", "Kerple", {1: [10.0, 10.1, 9.9]}, seeds=(100, 101, 102)),
                       runs("central", "DAPE1x3-Kerple", {1: [8.0, 8.1, 7.9]}, seeds=(100, 101, 102)))
    lm = design.fresh_only(frame(pilot_rows, fresh_rows), chosen)
    assert sorted(set(lm["seed"])) == [100, 101, 102]
    verdicts = design.annotate(evaluate_claims(lm, claim_ids=["dape1x3_best_within", "leakage_collapse"]), chosen)
    by_claim = verdicts.set_index("claim_id")
    assert by_claim.loc["dape1x3_best_within", "verdict"] == CONFIRMED
    assert by_claim.loc["leakage_collapse", "verdict"] == UNDECIDED  # run by the pilot, not decided by it
    assert by_claim.loc["leakage_collapse", "design"] == "left undecided: over the budget"


def test_a_claim_whose_fresh_seeds_miss_a_setting_of_the_pilot_is_not_decided():
    """The model-size claim's pilot had the tiny and the small model; fresh seeds only for the small one (chosen for
    another claim) would confirm it on the small model alone: UNDECIDED, saying which checks were not reached."""
    def sized(size, method, ppl, seeds):
        return runs("model_size", method, {1: ppl, 2: ppl}, seeds=seeds).assign(size=size)

    pilot_rows = frame(*(sized(size, m, 10.0, (0,)) for size in ("tiny", "small")
                         for m in ("DAPE-Kerple", "DAPE1x3-Kerple")))
    pilot_verdicts = evaluate_claims(pilot_rows, claim_ids=["dape1x3_beats_dape_larger_models"], fresh=True)
    checks = design.check_descriptions(pilot_verdicts.iloc[0]["numbers"])
    assert len(checks) == 4 and sum("size=tiny" in c for c in checks) == 2
    chosen = {"fresh_seeds_from": 100, "chosen": [], "left": [],
              "pilot": {"dape1x3_beats_dape_larger_models": UNDECIDED},
              "pilot_checks": {"dape1x3_beats_dape_larger_models": checks}}
    fresh_rows = frame(sized("small", "DAPE-Kerple", [10.0, 10.1, 9.9], (100, 101, 102)),
                       sized("small", "DAPE1x3-Kerple", [8.0, 8.1, 7.9], (100, 101, 102)))
    reached = evaluate_claims(fresh_rows, claim_ids=["dape1x3_beats_dape_larger_models"])
    assert reached.iloc[0]["verdict"] == CONFIRMED  # on the small model alone
    verdict = design.annotate(reached, chosen).iloc[0]
    assert verdict["verdict"] == UNDECIDED
    assert verdict["summary"].startswith("UNDECIDED: the fresh seeds reach 2 of the pilot's 4 checks (none at ")
    assert "size=tiny: DAPE1x3-Kerple vs DAPE-Kerple (within)" in verdict["summary"]
    assert "it would be CONFIRMED" in verdict["summary"]
    assert design.annotate(reached, {**chosen, "pilot_checks": {}}).iloc[0]["verdict"] == CONFIRMED


def test_a_claim_refuted_on_the_checks_reached_stays_refuted_only_at_the_pilots_level():
    """The model-size claim again, with the fresh seeds of the small model heading the other way: DAPE1x3-Kerple
    clearly worse. REFUTED needs one check, so it stands on the checks reached — when they were read at the
    Bonferroni level over the pilot's intervals (``min_comparisons``, the design's ``pilot_intervals``), never at
    the fewer reached."""
    def sized(size, method, ppl, seeds):
        return runs("model_size", method, {1: ppl, 2: ppl}, seeds=seeds).assign(size=size)

    claim = "dape1x3_beats_dape_larger_models"
    pilot_rows = frame(*(sized(size, m, 10.0, (0, 1)) for size in ("tiny", "small")
                         for m in ("DAPE-Kerple", "DAPE1x3-Kerple")))
    pilot_verdicts = evaluate_claims(pilot_rows, claim_ids=[claim], fresh=True)
    pilot_m = int(pilot_verdicts.iloc[0]["judged_intervals"])
    assert pilot_m == 4
    chosen = {"fresh_seeds_from": 100, "chosen": [], "left": [], "pilot": {claim: UNDECIDED},
              "pilot_checks": {claim: design.check_descriptions(pilot_verdicts.iloc[0]["numbers"])},
              "pilot_intervals": {claim: pilot_m}}
    assert design.pilot_intervals(chosen) == {claim: 4}
    fresh_rows = frame(sized("small", "DAPE-Kerple", [8.0, 8.1, 7.9], (100, 101, 102)),
                       sized("small", "DAPE1x3-Kerple", [10.0, 10.1, 9.9], (100, 101, 102)))
    at_pilot = evaluate_claims(fresh_rows, claim_ids=[claim], min_comparisons=design.pilot_intervals(chosen))
    assert at_pilot.iloc[0]["verdict"] == REFUTED and "also at 1 − 0.05/4" in at_pilot.iloc[0]["summary"]
    verdict = design.annotate(at_pilot, chosen).iloc[0]
    assert verdict["verdict"] == REFUTED
    assert verdict["summary"].startswith("REFUTED on 2 of the pilot's 4 checks (none at ")
    assert "each interval read at 1 − 0.05/4 over the pilot's 4 intervals" in verdict["summary"]
    # read over the two reached intervals only, the same refutation would not stand for the pilot's four
    at_reached = evaluate_claims(fresh_rows, claim_ids=[claim])
    assert at_reached.iloc[0]["verdict"] == REFUTED and "1 − 0.05/2" in at_reached.iloc[0]["summary"]
    assert design.annotate(at_reached, chosen).iloc[0]["verdict"] == UNDECIDED
    # a design written before the pilot's intervals were recorded keeps the stricter reading: UNDECIDED
    assert design.annotate(at_pilot, {**chosen, "pilot_intervals": {}}).iloc[0]["verdict"] == UNDECIDED


def test_a_larger_bonferroni_m_widens_a_refutation_and_the_record_counts_its_intervals():
    """``min_comparisons`` raises the m of a claim's REFUTED (never lowers it); ``judged_intervals`` is the
    claim's own count."""
    rows = frame(runs("central", "Kerple", {1: [8.0, 8.2, 7.9]}, seeds=(0, 1, 2)),
                 runs("central", "DAPE1x3-Kerple", {1: [8.3, 8.4, 8.1]}, seeds=(0, 1, 2)))
    alone = evaluate_claims(rows, claim_ids=["dape1x3_best_within"]).iloc[0]
    assert alone["judged_intervals"] == 1
    assert evaluate_claims(rows, claim_ids=["dape1x3_best_within"],
                           min_comparisons={"dape1x3_best_within": 1}).iloc[0]["verdict"] == alone["verdict"]
    wide = evaluate_claims(rows, claim_ids=["dape1x3_best_within"],
                           min_comparisons={"dape1x3_best_within": 10**6}).iloc[0]
    assert alone["verdict"] == REFUTED and wide["verdict"] == UNDECIDED
    assert "not at 1 − 0.05/1000000" in wide["summary"]


# ------------------------------------------------------------------------------------------------ the DAG
def design_config(tmp_path, budget=3.0):
    """The smoke configuration as a design's pilot: two seeds of the central comparison, the leakage and CHE."""
    config = yaml.safe_load(CONFIGS["smoke"].read_text())
    for family in ("divergence", "hf_finetune", "forward_time"):
        config["families"].pop(family)
    config["defaults"].pop("finetune")
    for family in ("baselines", "leakage", "che"):
        config["families"][family]["seeds"] = [0, 1]
    config["design"] = {"budget_minutes": budget, "max_seeds": 4}
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_a_dry_run_shows_the_pilot_and_the_design_checkpoint_and_no_fresh_job(tmp_path):
    result = snakemake(tmp_path, design_config(tmp_path), "-n", "--cores", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    plan = build_plan(load_yaml(design_config(tmp_path)))
    assert counts["design"] == 1 and counts["train_lm"] == len(plan.train_jobs())
    assert "checkpoint jobs" in result.stdout and "seed100" not in result.stdout


def test_a_design_run_trains_the_fresh_seeds_it_chose_and_decides_on_them_alone(tmp_path):
    config = design_config(tmp_path)
    result = snakemake(tmp_path, config, "--cores", "2")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    reports = tmp_path / "reports" / "design"
    chosen = design.read_design(reports / "design.json")
    assert "Design:" in result.stdout and "# Design" in (reports / "design.md").read_text()
    plan = build_plan(load_yaml(config))
    trained = {(p.parent.parent.name, int(p.parent.name.removeprefix("seed")))
               for p in (tmp_path / "results" / "lm").glob("*/seed*/model.pt")}
    fresh = {(run, seed) for run, seeds in chosen["fresh"].items() if run in plan.lm_runs for seed in seeds}
    assert trained == set(plan.train_jobs()) | fresh  # the pilot's jobs and exactly the fresh seeds chosen
    claims = pd.read_csv(reports / "claims.csv").set_index("claim_id")
    assert "## Design" in (reports / "claims.md").read_text()
    # the protocol was sealed with the design, before any fresh seed ran, and the verdicts were read under it
    sealed = protocol.read_protocol(reports / "protocol.json")
    assert sealed["fresh"] == chosen["fresh"] and sealed["fresh_results_present"] == []
    assert "Protocol: **confirmatory**" in (reports / "claims.md").read_text()
    assert set(claims["protocol"]) == {"confirmatory"}
    for claim in chosen["chosen"]:
        numbers = json.loads(claims.loc[claim["claim_id"], "numbers"])
        seeds = {check.get("n_seeds") for check in numbers.values()} - {None}
        assert seeds and max(seeds) <= claim["seeds"]  # read on the fresh seeds (at most the chosen number)
    again = snakemake(tmp_path, config, "-n", "--cores", "2")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    # the same pilot on a machine twice as fast or three times slower: the same claims and seeds, only the wall
    # time it prints moves
    assert chosen["chosen"] and chosen["wall"]["speed"] > 0
    choice = ("chosen", "left", "own_run", "fresh", "fresh_maps", "minutes", "prices_cpu_s")
    speeds = {}
    for scale in (0.5, 3.0):
        again = redesign(tmp_path, plan, chosen, scale)
        assert {k: again[k] for k in choice} == {k: chosen[k] for k in choice}
        speeds[scale] = again["wall"]["speed"]
        # a design redone on a finished block seals its protocol after the data: not a confirmatory look
        state, reasons = protocol.status(protocol.read_protocol(tmp_path / f"protocol{scale}.json"), again)
        assert state == "exploratory" and "sealed after" in reasons[0]
    assert speeds[3.0] == pytest.approx(6 * speeds[0.5], rel=0.01)  # the same jobs' seconds, ×3 against ×0.5


def redesign(tmp_path, plan, chosen, scale):
    """`dape report design` again on a finished design run's pilot, its jobs' benchmark seconds × ``scale``."""
    from dape_core.cli import main
    from dape_core.config import configuration_name, job_cost, plan_path

    def pilot(pattern, jobs):
        return [str(tmp_path / pattern.format(*job)) for job in jobs]

    benchmarks = []
    for path in sorted((tmp_path / "logs").rglob("*.benchmark.tsv")):
        seed = re.search(r"seed(\d+)", str(path.relative_to(tmp_path)))
        if seed and int(seed.group(1)) >= chosen["fresh_seeds_from"]:
            continue  # the pilot's jobs only, as the design read them
        frame = pd.read_csv(path, sep="\t")
        copy = tmp_path / f"scaled{scale}" / path.relative_to(tmp_path)
        copy.parent.mkdir(parents=True, exist_ok=True)
        frame.assign(s=frame["s"] * scale).to_csv(copy, sep="\t", index=False)
        benchmarks.append(str(copy))
    lm, maps, cells = plan.train_jobs(), plan.attention_jobs(), plan.che_jobs()
    out = tmp_path / f"design{scale}.json"
    main(["report", "design", "--plan", str(tmp_path / plan_path(configuration_name([tmp_path / "design.yaml"]))),
          "--evals", *pilot("results/lm/{}/seed{}/eval.csv", lm),
          "--summaries", *pilot("results/lm/{}/seed{}/summary.json", lm),
          "--windows", *pilot("results/lm/{}/seed{}/windows.csv", lm),
          "--sinks", *pilot("results/lm/{}/seed{}/attention/L{}/sink.csv", maps),
          "--cells", *pilot("results/che/{}/seed{}.csv", cells),
          "--prices", json.dumps(job_cost.plan_prices(plan)), "--benchmarks", *benchmarks,
          "--threads", *(f"{kind}={plan.resources(rule)['threads']}" for kind, rule in
                         (("train", "train_lm"), ("evaluate", "evaluate_lm"), ("attention", "attention_maps"),
                          ("che", "che"))),
          "--budget-minutes", str(chosen["budget_minutes"]), "--fresh-seeds-from", str(chosen["fresh_seeds_from"]),
          "--max-seeds", str(chosen["max_seeds"]), "--cores", str(chosen["cores"]),
          "--out", str(out), "--out-md", str(tmp_path / f"design{scale}.md"),
          "--out-protocol", str(tmp_path / f"protocol{scale}.json"), "--results", str(tmp_path / "results")])
    return design.read_design(out)


def test_the_shifted_configuration_draws_fresh_seeds_the_original_never_used():
    from dape_core.config.shift import shifted_config

    config = load_yaml(CONFIGS["smoke"])
    config["families"].pop("hf_finetune")
    config["design"] = {"budget_minutes": 5}
    shifted = shifted_config(config)
    original, moved = build_plan(config).config["design"], shifted["design"]
    assert moved["fresh_seeds_from"] >= original["fresh_seeds_from"] + original["max_seeds"]
    build_plan(shifted)  # above the shifted pilot's seeds too


@pytest.mark.parametrize("option, value, field", [("--budget-minutes", "0", "design.budget_minutes"),
                                                  ("--max-seeds", "1.5", "design.max_seeds"),
                                                  ("--threads", "gpu=2", "threads"),
                                                  ("--prices", '{"run": {"gpu": 1}}', "prices")])
def test_the_design_command_refuses_a_bad_value_naming_the_field(option, value, field, capsys):
    from dape_core.cli import main

    options = {"--plan": "p.json", "--budget-minutes": "5", "--fresh-seeds-from": "100", "--max-seeds": "8",
               "--cores": "2", "--out": "d.json", "--out-md": "d.md", option: value}
    with pytest.raises(SystemExit):
        main(["report", "design", *[item for pair in options.items() for item in pair]])
    assert f"{field}: '{value}' is not allowed; allowed values:" in capsys.readouterr().err


def test_a_claim_of_several_checks_is_sized_for_80_percent_power_as_a_claim():
    """The fresh seeds decide a claim of k checks heading to CONFIRMED only when all k are decided: each check is
    sized at power 0.8^(1/k), so that the claim is decided with ≥ 80 % power (simulated: k independent paired
    t-intervals of n fresh seeds at the pilot's effect and σ), where each check at 80 % gives the claim about
    0.8^k; a claim of one check, and a REFUTED route (one check decides it), keep 80 %."""
    import numpy as np

    from dape_core.report.claim_context import record
    from dape_core.report.claim_costs import decide_route
    from dape_core.report.intervals import _t_interval, decide, sizing_fresh_seeds, t_quantile

    sd, effect, rule = 0.02, 0.03, dict(side=1, confirm=0.005, refute=0.0)

    def check(estimate):
        iv = Interval(estimate, *_t_interval(estimate, sd / np.sqrt(2), 1.0), "paired t", 2, 1, sd)
        return record(decide(iv, **rule), "gain", iv, rule, ["run-a", "run-b"])

    with sizing_fresh_seeds():
        one = check(effect)
        alone, _, _ = decide_route([one], every=True)
        assert alone == seeds_to_decide(one["_judged"][0][0], **rule)[0]
        four = [check(effect) for _ in range(4)]
        n, text, runs = decide_route(four, every=True)
        assert n > alone and "towards CONFIRMED" in text and runs == {"run-a": n, "run-b": n}
        against = [check(-effect), check(effect)]
        assert decide_route(against, every=True)[0] == seeds_to_decide(against[0]["_judged"][0][0], **rule)[0]

    rng = np.random.default_rng(0)

    def claim_power(seeds, k=4, trials=20_000):
        draws = rng.normal(effect, sd, size=(trials, k, seeds))
        low = draws.mean(axis=2) - t_quantile(seeds - 1) * draws.std(axis=2, ddof=1) / np.sqrt(seeds)
        return float((low >= rule["confirm"]).all(axis=1).mean())

    assert claim_power(n) >= 0.8 - 0.01  # 4 checks, each at 0.8^(1/4): the claim at ≥ 80 %
    assert claim_power(alone) < 0.6  # 4 checks each at 80 %: the claim at ≈ 0.8^4


def test_each_check_sizes_its_own_runs_and_the_design_prices_those_seeds():
    """A claim of checks on different runs heading to CONFIRMED: each check's runs get the fresh seeds that check
    needs at the claim's power, a run shared by checks the largest — one hard check does not size the runs of the
    others —; the design prices and runs those seeds per run (``run_seeds``), and says the range."""
    import numpy as np

    from dape_core.report.claim_context import record
    from dape_core.report.claim_costs import claim_power, decide_route
    from dape_core.report.intervals import _t_interval, decide, sizing_fresh_seeds

    rule = dict(side=1, confirm=0.005, refute=0.0)

    def check(estimate, sd, runs):
        iv = Interval(estimate, *_t_interval(estimate, sd / np.sqrt(2), 1.0), "paired t", 2, 1, sd)
        return record(decide(iv, **rule), "gain", iv, rule, runs)

    with sizing_fresh_seeds():
        checks = [check(0.05, 0.01, ["easy", "shared"]), check(0.012, 0.01, ["hard", "shared"])]
        n, text, runs = decide_route(checks, every=True)
        easy, hard = (c["seeds_needed"] for c in claim_power(checks))
    assert easy < hard == n and text == f"{n} (towards CONFIRMED)"
    assert runs == {"easy": easy, "hard": hard, "shared": hard}
    claims = pd.DataFrame([{"claim_id": "dape_ordering_beyond", "verdict": UNDECIDED, "fresh_seeds": n,
                            "fresh_text": text, "fresh_runs": sorted(runs), "fresh_run_seeds": runs}])
    prices = {u: {"train": 60.0} for u in runs}
    out = design.choose(claims, prices, design.DesignSettings(budget_minutes=100, max_seeds=64))
    assert out["fresh"] == {u: list(range(100, 100 + k)) for u, k in runs.items()}
    assert out["chosen"][0]["extra_minutes"] == pytest.approx((easy + 2 * hard) * 60 / 2 / 60, abs=0.01)
    assert f"`dape_ordering_beyond` {easy}–{hard} per method on 3 runs" in "\n".join(design.design_lines(out))


def test_attention_maps_are_priced_and_run_only_for_a_claim_that_reads_them():
    """One more seed of a run costs its training and evaluation; its attention maps only for the claim read on them
    (the sink claim): the design prices and records them (``fresh_maps``) for that claim's seeds alone."""
    prices = {"dape": {"train": 60.0, "evaluate": 20.0, "attention": 40.0}, "base": {"train": 60.0, "evaluate": 20.0}}
    claims = pd.DataFrame([
        {"claim_id": "dape1x3_best_within", "verdict": UNDECIDED, "fresh_seeds": 3, "fresh_text": "3",
         "fresh_runs": ["base", "dape"]},
        {"claim_id": "sink_stronger_with_dape1x3", "verdict": UNDECIDED, "fresh_seeds": 4, "fresh_text": "4",
         "fresh_runs": ["dape"]}])
    out = design.choose(claims, prices, design.DesignSettings(budget_minutes=100))
    assert [c["claim_id"] for c in out["chosen"]] == ["dape1x3_best_within", "sink_stronger_with_dape1x3"]
    assert out["chosen"][0]["extra_minutes"] == pytest.approx(3 * 160 / 2 / 60)  # no maps
    assert out["chosen"][1]["extra_minutes"] == pytest.approx((1 * 80 + 4 * 40) / 2 / 60)  # one more seed, 4 maps
    assert out["fresh"] == {"base": [100, 101, 102], "dape": [100, 101, 102, 103]}
    assert out["fresh_maps"] == {"dape": [100, 101, 102, 103]}
    alone = design.choose(claims.iloc[:1], prices, design.DesignSettings(budget_minutes=100))
    assert alone["fresh_maps"] == {}


def test_a_design_of_the_previous_version_reads_as_it_ran(tmp_path):
    """A version-2 design.json (no ``fresh_maps``: every fresh seed drew its run's maps) is read with the maps it ran,
    and a version-3 one (priced in measured seconds, the timing claim among those left) with the timing claim
    decided on its own run, so a finished run of a previous version needs no manual step; another version is
    refused naming the rule."""
    from dape_core import io

    timing = {"claim_id": "timing_overhead_shrinks", "pilot_verdict": CONFIRMED, "why": "not a claim of seeds"}
    old = {"version": 2, "fresh_seeds_from": 100, "chosen": [], "left": [timing], "fresh": {"run-a": [100, 101]},
           "pilot": {}, "pilot_checks": {}}
    io.write_json(tmp_path / "design.json", old, seal=True)
    read = design.read_design(tmp_path / "design.json")
    assert read["fresh_maps"] == {"run-a": [100, 101]} and read["version"] == design.VERSION
    assert read["left"] == [] and [c["claim_id"] for c in read["own_run"]] == ["timing_overhead_shrinks"]
    io.write_json(tmp_path / "v3.json", {**old, "version": 3, "fresh_maps": {}}, seal=True)
    assert design.read_design(tmp_path / "v3.json")["own_run"][0]["why"] == design.OWN_RUN
    io.write_json(tmp_path / "other.json", {**old, "version": 1}, seal=True)
    with pytest.raises(ConfigError, match=f"design version 1; allowed values: {design.VERSION}"):
        design.read_design(tmp_path / "other.json")


def test_the_sizing_sigma_moderates_a_checks_own_spread_by_its_degrees_of_freedom():
    """One seed: the pool; a two-seed pilot's own spread (ν = 1) counts little, so a pair that happened to agree is
    sized near its setting's pooled σ; a pair measured on 40 seeds is sized near its own, however noisy the pool;
    a pair noisier than its pool keeps its own σ."""
    from dape_core.report.claim_context import PRIOR_DF, sizing_sd

    pooled = 0.03
    assert sizing_sd(0.001, pooled, 1) == pooled
    assert 0.94 * pooled < sizing_sd(0.001, pooled, 2) < pooled
    many = sizing_sd(0.01, pooled, 41)
    assert many == pytest.approx(((PRIOR_DF * pooled ** 2 + 40 * 0.01 ** 2) / (PRIOR_DF + 40)) ** 0.5)
    assert 0.01 < many < 0.55 * pooled
    assert sizing_sd(0.06, pooled, 3) == 0.06
    assert sizing_sd(0.02, float("nan"), 3) == 0.02
