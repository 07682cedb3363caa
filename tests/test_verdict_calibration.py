"""The verdict rules are calibrated: two identically distributed methods are decided at most 7 % of the time
(nominal 5 %) at every basis the claims use — 1 seed with a borrowed σ, 2, 3, 4, 5 and 8 seeds, paired, unpaired and
one run's own statistic, the seeds' own spread, with and without per-window data, in three noise regimes — and the
timing rule on interleaved rounds (dape_core.report.calibration, the shipped simulation)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dape_core.report import calibration as vc
from dape_core.report import intervals

ROOT = Path(__file__).resolve().parents[1]

TRIALS = 500  # per window variant: 1000 per basis × seeds × regime (Monte-Carlo SE 0.7 %)


@pytest.fixture(scope="module")
def rates():
    return vc.calibration(TRIALS, seed=3, power=False)


def test_no_basis_decides_two_identical_methods_more_than_7_percent(rates):
    pooled = rates.groupby(["basis", "regime", "seeds"])["false_decisions"].mean()
    seeds = vc.SEEDS + vc.MANY_SEEDS
    counts = len(seeds) * 3 + sum(n >= 2 for n in seeds)  # paired, unpaired, one run; own spread from 2
    assert len(pooled) == 3 * counts  # every basis × regime × seed count
    assert (pooled <= 0.07).all(), pooled[pooled > 0.07]


def test_the_calibration_has_teeth():
    """Normal quantiles instead of Student's t on the seeds' own spread (what an interval that ignores how few
    seeds it has does) decide two identical methods far more often than 7 % with two seeds."""
    rng = np.random.default_rng(0)
    main_sd, inter_sd = vc.REGIMES["seed noise dominates"]
    normal = pytest.MonkeyPatch()
    normal.setattr(intervals, "t_quantile", lambda df, q=0.975: intervals.stats.norm.ppf(q))
    try:
        hits = sum(vc.paired_trial(rng, 2, main_sd, inter_sd, True, 0.0, own_spread=True) for _ in range(400))
    finally:
        normal.undo()
    assert hits / 400 > 0.15


def test_the_shipped_results_cover_every_basis_within_5_percent_and_2_se():
    """benchmarks/results/verdict_calibration.csv (20,000 trials a cell for the interval bases, at every seed count a
    configuration uses: 1, 2, 3, 4, 5 and 8, and 16 and 32 that a design's fresh seeds reach; the sink, CHE,
    kernel-size and claim-level rules through their own checks): no cell above 5 % + 2 Monte-Carlo SE, and power at
    2 seed-SDs beside each but the sink and CHE rows of unequal noise (null trials only)."""
    import pandas as pd

    shipped = pd.read_csv(ROOT / "benchmarks" / "results" / "verdict_calibration.csv")
    shipped = shipped[~shipped["basis"].str.startswith(("heterogeneous", "design", "Holm", "timing", "Welch"))]  # below
    assert set(shipped["basis"]) >= {"paired", "unpaired", "one run", "own spread"}
    rules = shipped["basis"].str.startswith(("sink", "CHE", "kernel", "claim"))
    bases = shipped[~rules]
    assert set(bases["seeds"]) >= {1, 2, 3, 4, 5, 8, 16, 32} and bases["trials"].min() >= 10000
    for rule in ("sink", "CHE"):
        assert set(shipped.loc[shipped["basis"].str.startswith(rule), "seeds"]) >= {1, 2, 3}, rule
    kernel = shipped[shipped["basis"].str.startswith("kernel")]
    assert set(kernel["regime"]) == set(vc.KERNEL_REGIMES) and kernel["trials"].min() >= 1000
    assert all(set(g["seeds"]) >= set(vc.SEEDS) for _, g in kernel.groupby("regime"))
    claims = shipped[shipped["basis"].str.startswith("claim")]
    lm_claim, che_claim = (claims[claims["basis"].str.startswith(p)] for p in ("claim of", "claim: CHE"))
    assert set(lm_claim["regime"]) == set(vc.KERNEL_REGIMES) and set(che_claim["regime"]) == set(vc.CHE_REGIMES)
    assert all(set(g["seeds"]) >= {1, 2, 3, 4} for g in (lm_claim, che_claim)) and claims["trials"].min() >= 1000
    assert {f"claim: CHE on {n} tasks" for n in vc.CHE_CLAIM_TASKS} == set(che_claim["basis"].str.split(" [(]").str[0])
    within_2_se(shipped)
    unequal = shipped["regime"].isin(list(vc.SINK_HETEROGENEITY) + list(vc.CHE_HETEROGENEITY))  # null trials only
    assert shipped.loc[~unequal, "power_at_2_sd"].notna().all()


#: the bases whose t-test is exact under the simulation's model (normal per-seed statistics, one noise level): the
#: pair's own spread (ν = n − 1) and the paired interaction mean square (ν = (R − 1)(n − 1)); each of their cells
#: lands beyond 5 % + 2 Monte-Carlo SE with probability 2.3 % by chance alone
EXACT = ("paired", "own spread")


def within_2_se(shipped) -> None:
    """Every cell at most 5 % + 2 SE, but a cell of an exact test (:data:`EXACT`), which crosses that bound by chance
    2.3 % of the time: those crossing are no more than a binomial 99 % bound over their cells allows, none beyond
    5 % + 3.5 SE, and each exact basis's rate pooled over its regimes and window variants at a seed count is at most
    5 % + 2 SE of the pooled trials."""
    from scipy import stats

    se = shipped["false_decisions_se"]
    crossed = shipped[shipped["false_decisions"] > 0.05 + 2 * se]
    exact = shipped[shipped["basis"].isin(EXACT)]
    assert crossed["basis"].isin(EXACT).all(), crossed
    assert len(crossed) <= stats.binom.ppf(0.99, len(exact), stats.norm.sf(2)), crossed
    assert (exact["false_decisions"] <= 0.05 + 3.5 * exact["false_decisions_se"]).all()
    for (basis, n), g in exact.groupby(["basis", "seeds"]):
        pooled = (g["false_decisions"] * g["trials"]).sum() / g["trials"].sum()
        assert pooled <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / g["trials"].sum()), (basis, n, pooled)


def test_the_sink_rule_decides_two_identical_methods_at_most_7_percent():
    """The attention-sink check itself (each pair's own per-seed differences), on simulated sink tables of two
    identical methods with 2 and 3 seeds; with 1 seed it has no spread and decides nothing; with 5 it decides a
    real gap (ν 4: with 3 seeds, ν 2, its interval is too wide for that)."""
    rng = np.random.default_rng(5)
    inter_sd = vc.SINK_REGIMES["interaction dominates"]
    decided = [vc.sink_trial(rng, n, inter_sd, 0.0) for n in (2, 3) for _ in range(150)]
    assert np.mean(decided) <= 0.07, np.mean(decided)
    assert not any(vc.sink_trial(rng, 1, inter_sd, 0.0) for _ in range(20))
    assert np.mean([vc.sink_trial(rng, 5, inter_sd, 1.0) for _ in range(40)]) > 0.8  # it does decide a real gap


def test_the_che_rule_decides_two_identical_methods_at_most_7_percent_of_tasks():
    """The CHE check itself (each task's own per-seed differences), on simulated summaries of two identical methods
    on the 12 permutation-variant tasks with 2 seeds; a real gap is decided with 5 seeds."""
    rng = np.random.default_rng(7)
    seed_sd, inter_sd = vc.CHE_REGIMES["interaction dominates"]
    assert np.mean([vc.che_trial(rng, 2, seed_sd, inter_sd, 0.0) for _ in range(40)]) <= 0.07  # 480 tasks
    assert np.mean([vc.che_trial(rng, 5, seed_sd, inter_sd, 4 * inter_sd) for _ in range(3)]) > 0.5


def test_the_kernel_size_rule_decides_identical_kernels_at_most_7_percent():
    """The kernel-size check itself (15 comparisons of a smaller kernel against the largest, Bonferroni over them)
    on simulated sweeps of four identical kernels: with one seed (the default's case: no pair's own spread, never
    decided) and with 4 seeds where the per-length noise dominates (the case that decided 14 % before each length
    took its own σ); a real gap is decided with 8 seeds (each pair's own spread on ν 7, Bonferroni over 15)."""
    regime = vc.KERNEL_REGIMES["per-length noise dominates"]
    rng = np.random.default_rng(11)
    decided = [vc.kernel_trial(rng, n, *regime, 0.0) for n in (1, 4) for _ in range(120)]
    assert np.mean(decided) <= 0.07, np.mean(decided)
    unit = float(np.hypot(*regime))
    assert np.mean([vc.kernel_trial(rng, 8, *regime, 4 * unit) for _ in range(10)]) >= 0.8  # a real gap is decided


def test_the_kernel_size_rule_needs_its_correction():
    """Without the Bonferroni widening (each of the 15 comparisons at 95 %), the same check decides identical
    kernels far more often than 7 %: the correction is what calibrates it."""
    from dape_core.report import lm_checks

    regime = vc.KERNEL_REGIMES["per-length noise dominates"]
    rng = np.random.default_rng(13)
    uncorrected = pytest.MonkeyPatch()
    uncorrected.setattr(lm_checks, "simultaneous", lambda iv, comparisons: iv)
    try:
        decided = [vc.kernel_trial(rng, 4, *regime, 0.0) for _ in range(60)]
    finally:
        uncorrected.undo()
    assert np.mean(decided) > 0.15, np.mean(decided)


def test_a_partial_rerun_keeps_the_other_rows_and_refuses_a_missing_or_cut_file(tmp_path):
    """--only GROUP keeps the rows of the earlier file it does not recompute; a missing, cut or foreign file stops
    with one line naming it instead of being merged."""
    import pandas as pd

    shipped = ROOT / "benchmarks" / "results" / "verdict_calibration.csv"
    first = {group: set(vc.kept_rows(str(shipped), group)["basis"].str.split().str[0]) for group in vc.GROUPS}
    assert first["bases"] == {"sink", "CHE", "kernel", "claim", "claim:", "heterogeneous:", "design", "Holm's",
                              "timing", "Welch", "Welch–Satterthwaite"}
    assert not first["welch"] & {"Welch", "Welch–Satterthwaite"} and first["welch"] >= {"paired", "timing", "sink"}
    assert "timing" not in first["timing"] and first["timing"] >= {"paired", "one", "own", "sink", "design"}
    assert "Holm's" not in first["holm"] and first["holm"] >= {"paired", "sink", "heterogeneous:", "design"}
    assert "design" not in first["design"] and first["design"] >= {"paired", "sink", "heterogeneous:"}
    assert "heterogeneous:" not in first["heterogeneity"] and first["heterogeneity"] >= {"paired", "sink"}
    assert first["sink"] >= {"paired", "one", "own", "kernel", "claim"} and not first["sink"] & {"sink", "CHE"}
    assert first["kernel"] >= {"paired", "sink", "CHE", "claim"} and "kernel" not in first["kernel"]
    assert first["claims"] >= {"paired", "sink", "CHE", "kernel"} and not first["claims"] & {"claim", "claim:"}
    whole = len(pd.read_csv(shipped))
    assert sum(whole - len(vc.kept_rows(str(shipped), group)) for group in vc.GROUPS) == whole  # a partition
    cut = tmp_path / "cut.csv"
    cut.write_text(shipped.read_text()[:300])
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("a,b\n1,2\n")
    for path in (tmp_path / "missing.csv", cut, foreign):
        with pytest.raises(SystemExit) as stop:
            vc.kept_rows(str(path), "sink")
        assert str(path) in str(stop.value) and "\n" not in str(stop.value)


@pytest.mark.parametrize("option, value", [("--jobs", "0"), ("--trials", "-3"), ("--trials", "many"),
                                           ("--kernel-trials", "0"), ("--sink-trials", "-1"),
                                           ("--claim-trials", "0"), ("--claim-power-trials", "x")])
def test_a_bad_count_is_refused_with_the_option_and_the_allowed_values(option, value, capsys):
    with pytest.raises(SystemExit) as stop:
        vc.main([option, value])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and "allowed values: a whole number ≥ 1" in err


def test_an_unknown_group_to_recompute_is_refused_with_the_groups(capsys):
    with pytest.raises(SystemExit) as stop:
        vc.main(["--only", "everything"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "argument --only" in err and all(group in err for group in vc.GROUPS)


def test_a_claim_of_six_checks_decides_identical_methods_at_most_7_percent():
    """``dape1x3_improves_additive`` through evaluate_claims (six checks read together) on simulated grids of
    identical methods, with 1 seed and a borrowed σ and with 2 seeds; a real gain on every pair is decided."""
    regime = vc.KERNEL_REGIMES["per-length noise dominates"]
    rng = np.random.default_rng(17)
    decided = [vc.claim_trial(rng, n, *regime, 0.0) for n in (1, 2) for _ in range(150)]
    assert np.mean(decided) <= 0.07, np.mean(decided)
    unit = float(np.hypot(*regime)) * np.sqrt(2)
    assert np.mean([vc.claim_trial(rng, 3, *regime, 5 * unit) for _ in range(10)]) >= 0.8


def test_a_claim_of_six_checks_needs_its_correction():
    """Without reading the checks together (each REFUTED at 95 % refutes the claim), the same claim decides
    identical methods far more often than 7 %: the correction is what calibrates it."""
    from dape_core.report import claims

    regime = vc.KERNEL_REGIMES["per-length noise dominates"]
    rng = np.random.default_rng(19)
    uncorrected = pytest.MonkeyPatch()
    uncorrected.setattr(claims, "jointly", lambda checks, at_least=0: checks)
    try:
        decided = [vc.claim_trial(rng, n, *regime, 0.0) for n in (3, 4) for _ in range(150)]
    finally:
        uncorrected.undo()
    assert np.mean(decided) > 0.09, np.mean(decided)


def test_the_che_claim_on_two_tasks_decides_identical_methods_at_most_7_percent():
    """The CHE claim's majority (the default's two tasks, where one loss refutes) with 2 and 3 seeds; a real gap
    is decided with 5."""
    rng = np.random.default_rng(23)
    seed_sd, inter_sd = vc.CHE_REGIMES["interaction dominates"]
    decided = [vc.che_claim_trial(rng, n, seed_sd, inter_sd, 0.0, 2) for n in (2, 3) for _ in range(200)]
    assert np.mean(decided) <= 0.07, np.mean(decided)
    assert np.mean([vc.che_claim_trial(rng, 5, seed_sd, inter_sd, 4 * inter_sd, 2) for _ in range(20)]) >= 0.8


def test_under_unequal_method_noise_only_the_pairs_own_spread_holds():
    """The shipped rows of a paired comparison whose methods differ in noise (one at 2× and 3× the others'
    interaction SD) or whose interactions are heavy-tailed (t, 3 df), 10,000 trials a cell: the σ pooled over the
    setting's methods decides two identical methods 11–18 % of the time at every seed count (the paired basis's
    known limit under unequal noise), the pair's own per-seed spread stays within 5 % + 2 SE in every cell."""
    import pandas as pd

    shipped = pd.read_csv(ROOT / "benchmarks" / "results" / "verdict_calibration.csv")
    rows = shipped[shipped["basis"].str.startswith("heterogeneous")]
    leak_regime = f"no-tril runs at {vc.LEAK_FACTOR}× the tril runs' interaction SD"
    assert set(rows["regime"]) == set(vc.HETEROGENEITY) | {leak_regime}
    assert rows.loc[rows["regime"] != leak_regime, "trials"].min() >= 10000
    bound = rows["false_decisions"] <= 0.05 + 2 * rows["false_decisions_se"]
    own = rows["basis"] == "heterogeneous: own spread"
    assert set(rows.loc[own, "seeds"]) == set(vc.HETERO_RULES["own spread"]) and bound[own].all()
    pooled = (rows["basis"] == "heterogeneous: pooled σ") & rows["regime"].str.startswith("one method")
    assert (rows.loc[pooled, "false_decisions"] > 0.10).all()
    # a leakage comparison: the tril-only σ it used to borrow with one seed decides identical twins far too often;
    # the leakage claim itself (mixed σ only, two routes at 97.5 %) holds at 1–4 seeds
    another = rows[rows["basis"].str.startswith("heterogeneous: σ of another kind")]
    assert len(another) == 1 and (another["false_decisions"] > 0.10).all()
    leakage = rows[rows["basis"].str.startswith("heterogeneous: the leakage claim")]
    assert set(leakage["seeds"]) == set(vc.LEAK_SEEDS) and leakage["trials"].min() >= 1000
    assert bound[leakage.index].all()


def test_the_pairs_own_spread_holds_under_unequal_noise_in_the_suite():
    rows = vc.hetero_rows(400, seed=4, leakage_trials=0)
    own = [r for r in rows if r["basis"] == "heterogeneous: own spread"]
    assert len(own) == len(vc.HETEROGENEITY) * len(vc.HETERO_RULES["own spread"])
    assert all(r["false_decisions"] <= 0.07 for r in own), own
    pooled = [r for r in rows if r["basis"] == "heterogeneous: pooled σ" and r["regime"].startswith("one method at 3")]
    assert all(r["false_decisions"] > 0.10 for r in pooled), pooled  # the test has teeth


def test_the_leakage_claim_decides_identical_twins_rarely_in_the_suite():
    rng = np.random.default_rng(6)
    decided = [vc.leakage_trial(rng, 2, 0.0) for _ in range(100)]
    assert sum(decided) <= 10


def test_the_design_stage_decides_identical_methods_within_5_percent_in_every_shipped_cell():
    """The shipped design-stage rows (a pilot of 2, 3 or 4 seeds chooses the fresh seeds through the design's own
    function, the fresh seeds alone decide; 10,000 trials a cell, the rate among those the design ran): equal
    noise, one method at 2× and 3× the others' interaction SD, t₃ interactions — each ≤ 5 % + 2 SE; and the same for
    a claim of two checks whose fresh seeds reach only the check its route chose (REFUTED read at the pilot's
    Bonferroni level)."""
    import pandas as pd

    shipped = pd.read_csv(ROOT / "benchmarks" / "results" / "verdict_calibration.csv")
    rows = shipped[shipped["basis"].str.startswith("design stage")]
    partial = rows["basis"].str.startswith("design stage, a claim of 2 checks")
    for kind in (rows[~partial], rows[partial]):
        assert set(kind["regime"]) == {"equal noise", *vc.HETEROGENEITY}
        assert set(kind["seeds"]) == set(vc.DESIGN_PILOT_SEEDS) and len(kind) == 12
        assert kind["trials"].min() >= 600  # of 10,000: those whose pilot sized at most 8 fresh seeds
    assert (rows["false_decisions"] <= 0.05 + 2 * rows["false_decisions_se"]).all()


def test_the_design_stage_holds_in_the_suite():
    """Two identical methods, one 3× noisier: among the trials the design ran it decides them about 5 % of the
    time; over all trials (most pilots size more than 8 fresh seeds, and the design runs nothing) less."""
    row = vc.design_cell(("one method at 3× the interaction SD", 2, 2000, 5))
    assert row["trials"] >= 400 and row["false_decisions"] <= 0.08, row
    rng = vc.cell_rng(5, "pilot decides")
    hits = 0
    for _ in range(600):
        ran, decided = vc.design_trial(rng, 2, 1.0, "normal")
        hits += ran and decided
    assert hits / 600 <= 0.05  # unconditionally the design stage decides still less often
    partial = vc.design_cell(("one method at 3× the interaction SD", 2, 1000, 5, True))  # a claim of two checks
    assert partial["basis"].startswith("design stage, a claim of 2 checks") and partial["false_decisions"] <= 0.06


def test_every_seed_count_a_shipped_design_can_choose_is_simulated():
    """A design gives a check up to ``design.max_seeds`` fresh seeds, read on their own spread: the shipped rows of
    the bases and of unequal noise reach that many seeds (the rates between simulated counts move smoothly: the
    t-intervals are exact under the normal model, and Welch's ν only grows)."""
    import dataclasses

    import pandas as pd
    import yaml

    from dape_core.report.design import DesignSettings

    default = {f.name: f.default for f in dataclasses.fields(DesignSettings)}["max_seeds"]
    shipped = pd.read_csv(ROOT / "benchmarks" / "results" / "verdict_calibration.csv")
    own = shipped[shipped["basis"].isin(["own spread", "heterogeneous: own spread",
                                         "heterogeneous: unpaired, own spread", "heterogeneous: one run, own spread"])]
    for path in [ROOT / "config.yaml", *sorted((ROOT / "configs").glob("*.yaml"))]:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(config, dict) and config.get("design"):
            cap = int(config["design"].get("max_seeds", default))
            for basis, g in own.groupby("basis"):
                assert g["seeds"].max() >= cap, (path.name, basis)


def test_unpaired_and_one_run_statistics_hold_under_unequal_noise_only_with_their_own_spread():
    """The shipped rows of an unpaired comparison (Welch) and of one run's own statistic when methods differ in noise
    (10,000 trials a cell, 2–32 seeds): each side's own seeds' spread stays within 5 % + 2 SE in every cell; the σ
    pooled over the setting's methods — the rule before — decides a 3× noisier method's comparisons 7–14 % of the
    time at 8 seeds, beyond 5 % by more than 4 SE."""
    import pandas as pd

    shipped = pd.read_csv(ROOT / "benchmarks" / "results" / "verdict_calibration.csv")
    for kind in ("unpaired", "one run"):
        own = shipped[shipped["basis"] == f"heterogeneous: {kind}, own spread"]
        pooled = shipped[shipped["basis"] == f"heterogeneous: {kind}, pooled σ"]
        assert set(own["seeds"]) == {2, 3, 4, 8, 16, 32} and own["trials"].min() >= 10000 and len(own) == 18
        assert (own["false_decisions"] <= 0.05 + 2 * own["false_decisions_se"]).all()
        worst = pooled[(pooled["regime"] == "one method at 3× the interaction SD") & (pooled["seeds"] == 8)]
        assert (worst["false_decisions"] > 0.05 + 4 * worst["false_decisions_se"]).all()  # the test has teeth


def test_with_one_seed_a_borrowed_sigma_decides_nothing_under_unequal_noise():
    """The claims' rule for a run or an unpaired side (own spread; with one seed its setting's σ borrowed as a plan
    only), shipped at 1–4 seeds under unequal method noise and t₃ tails, 10,000 trials a cell: within 5 % + 2 SE
    everywhere, and no decision at all with one seed, whatever the noise."""
    import pandas as pd

    shipped = pd.read_csv(ROOT / "benchmarks" / "results" / "verdict_calibration.csv")
    for kind in ("unpaired", "one run"):
        rule = shipped[shipped["basis"] == f"heterogeneous: {kind}, the rule"]
        assert set(rule["seeds"]) == {1, 2, 3, 4} and len(rule) == 12 and rule["trials"].min() >= 10000
        assert (rule["false_decisions"] <= 0.05 + 2 * rule["false_decisions_se"]).all()
        assert (rule.loc[rule["seeds"] == 1, "false_decisions"] == 0).all()


def test_holms_step_down_keeps_the_familys_false_decisions_within_5_percent():
    """Shipped: null families of 12 and 18 paired claims (2–8 seeds, equal noise or one method of each pair 3×
    noisier), 4,000 families a cell: Holm's step-down decides any claim of the family within 5 % + 2 SE in every
    cell, where reading each claim at its own 95 % decides some claim of the family 40–65 % of the time."""
    import pandas as pd

    shipped = pd.read_csv(ROOT / "benchmarks" / "results" / "verdict_calibration.csv")
    rows = shipped[shipped["basis"].str.startswith("Holm")]
    assert len(rows) == len(vc.HOLM_CLAIMS) * len(vc.HOLM_SEEDS) * len(vc.HOLM_REGIMES)
    assert rows["trials"].min() >= 4000 and set(rows["seeds"]) == set(vc.HOLM_SEEDS)
    assert (rows["false_decisions"] <= 0.05 + 2 * rows["false_decisions_se"]).all()
    unadjusted = rows["sigma_from"].str.extract(r"own 95 %: ([0-9.]+)")[0].astype(float)
    assert (unadjusted > 0.3).all()  # the family needs the correction


def test_holms_step_down_holds_in_the_suite():
    from dape_core.report.calibration.holm import holm_cell

    row = holm_cell((12, 3, "equal noise", 300, 5))
    assert row["false_decisions"] <= 0.09 and float(row["sigma_from"].rsplit(": ", 1)[1].split()[0]) > 0.3


def test_the_timing_rule_is_calibrated_with_a_job_effect_at_every_design_a_shipped_configuration_uses():
    """Every forward-time family of a shipped configuration times its blocks in (replicate jobs, blocks) the shipped
    simulation holds the rule at — within 5 % + 2 SE at 95 % and within 0.05/18 + 2 SE at Holm's strictest level,
    on ≥ 20,000 trials a cell —, in every regime, a job effect among them; and the design before (each size in a job
    of its own, Welch over its blocks) decides identical methods beyond both levels once jobs differ."""
    import pandas as pd
    import yaml

    from dape_core.config import families

    shipped = pd.read_csv(ROOT / "benchmarks" / "results" / "verdict_calibration.csv")
    timing = shipped[shipped["basis"].str.startswith("timing")]
    new = timing[timing["basis"].str.contains("replicate jobs")]
    holm = new["basis"].str.contains(f"1 − 0.05/{vc.FAMILY_CLAIMS}")
    assert set(new["regime"]) == set(vc.TIMING_REGIMES) and (new["trials"] >= 20000).all()
    assert (new.loc[~holm, "false_decisions"] <= 0.05 + 2 * new.loc[~holm, "false_decisions_se"]).all()
    assert holm.sum() == (~holm).sum() and (
        new.loc[holm, "false_decisions"] <= 0.05 / vc.FAMILY_CLAIMS + 2 * new.loc[holm, "false_decisions_se"]).all()
    assert any("job effect SD 0.1" in r for r in new["regime"])
    assert any("as measured across" in r for r in new["regime"])
    used = set()
    for path in [ROOT / "config.yaml", *sorted((ROOT / "configs").glob("*.yaml"))]:
        plan = families.build_plan(yaml.safe_load(path.read_text()))
        timed = {m["run"] for m in plan.timing_members
                 if plan.config["families"][m["family"]].get("role") == "forward_time"}
        used |= {(int(job["settings"]["replicates"]), int(job["settings"]["blocks"]))
                 for job in plan.timing_jobs.values() if timed & set(job["runs"])}
    assert (8, 2) in used and used <= set(vc.TIMING_DESIGNS), used  # config.yaml's, and every other's
    for jobs, blocks in used:
        cell = new[(new["seeds"] == jobs) & new["sigma_from"].str.contains(f"({blocks} block", regex=False)]
        assert set(cell["regime"]) == set(vc.TIMING_REGIMES) and len(cell) == 2 * len(vc.TIMING_REGIMES), (jobs,
                                                                                                          blocks)
    before = timing[timing["basis"].str.contains("the design before")]
    with_job = before[before["regime"].str.contains("job effect SD") & (before["seeds"] == 16)]
    assert len(with_job) == 4  # two job effects × two levels
    level = np.where(with_job["basis"].str.contains(f"0.05/{vc.FAMILY_CLAIMS}"), 0.05 / vc.FAMILY_CLAIMS, 0.05)
    assert (with_job["false_decisions"] > level + 2 * with_job["false_decisions_se"]).all()


def test_the_timing_simulation_reads_its_trials_as_the_claim_does():
    """The simulation's fast per-job rises are the claim's own (job_ratios, job_rises on timing_repeats.csv rows),
    its intervals the claim's (rise_interval); with a large job effect, the blocks of one job read as independent
    units (Welch over all blocks of both sizes) decide identical methods far beyond 5 %, the jobs as units do not."""
    from dape_core.report.intervals import UNDECIDED, decide, difference
    from dape_core.report.timing_check import rise_interval

    rng = np.random.default_rng(11)
    regime = next(r for r in vc.TIMING_REGIMES if "job effect SD 0.1" in r)
    process, job_sd, tails = vc.TIMING_REGIMES[regime]
    ms = vc.simulate(rng, 3, 4, 2, 2, 0.0, process, job_sd, tails)
    for trial, rises in zip(ms, vc.replicate_rises(ms)):
        iv = vc.replicate_rise(trial)  # through timing_repeats.csv rows and the claim's functions
        assert iv.n_seeds == 4 and iv.seed_noise.df == 3
        assert iv.estimate == pytest.approx(rises.mean()) and iv.unit_sd == pytest.approx(np.std(rises, ddof=1))

    def decided(iv) -> bool:
        return decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED

    ms = vc.simulate(rng, 300, 4, 8, 2, 0.0, process, job_sd, tails)
    ratios = np.median(ms[..., 0, :], axis=-1) / np.median(ms[..., 1, :], axis=-1)  # [trial, job, block, size]
    blocks_as_units = np.mean([decided(difference([np.array([v]) for v in r[..., 1].ravel()],
                                                  [np.array([v]) for v in r[..., 0].ravel()], lambda m: m[:, 0]))
                               for r in ratios])
    jobs_as_units = np.mean([decided(rise_interval(rises, "t")) for rises in vc.replicate_rises(ms)])
    assert blocks_as_units > 0.12 and jobs_as_units < 0.08  # against 5 %: Monte-Carlo SE 1.3 %


# ------------------------------------------------------------------ Welch at unequal seed counts, Holm's level
def test_welchs_exact_rate_matches_its_own_interval_by_monte_carlo():
    """The exact rate (quadrature over the two sample variances) is what intervals.difference decides: 3 seeds at
    2× the SD against 8, by 20,000 draws through difference(), with the rule's ν and with Welch–Satterthwaite's."""
    rng = np.random.default_rng(11)
    draws = 20000
    few, many = rng.normal(0.0, 2.0, (draws, 3)), rng.normal(0.0, 1.0, (draws, 8))

    def rate():
        hits = 0
        for a, b in zip(few, many):
            iv = intervals.difference([np.array([[v]]) for v in a], [np.array([[v]]) for v in b], lambda m: m[:, 0])
            hits += intervals.decide(iv, side=1, confirm=0.0, refute=0.0) != intervals.UNDECIDED
        return hits / draws

    exact = vc.welch_rate(3, 8, 2.0)
    assert abs(rate() - exact) < 3.5 * math.sqrt(exact * (1 - exact) / draws)
    before = pytest.MonkeyPatch()
    before.setattr(intervals, "welch", lambda nb, n_b, na, n_a: (math.sqrt(nb.sd ** 2 / n_b + na.sd ** 2 / n_a),
                                                                  intervals.satterthwaite(nb, n_b, na, n_a)))
    try:
        exact_before = vc.welch_rate(3, 8, 2.0, rule=None)
        assert abs(rate() - exact_before) < 3.5 * math.sqrt(exact_before * (1 - exact_before) / draws)
    finally:
        before.undo()
    assert exact_before > 0.06 > 0.05 > exact  # the rule before decided identical methods beyond 5 % here
    assert abs(vc.welch_rate(3, 8, 2.0, nodes=400) - exact) < 1e-7  # the quadrature has converged
    pooled = vc.welch_rate(5, 5, 1.0, rule=lambda *_: (None, 8))  # equal n and SD, pooled ν: Student's t, exact
    assert pooled == pytest.approx(0.05, abs=1e-7)


def test_welch_with_a_small_side_holds_at_5_percent_and_at_holms_strictest_level():
    """3 seeds against 22 (a design's fewest fresh seeds against a pilot's many) at 1–3× the SD: the rule's ν
    (min of the sides') stays within 5 % and 0.05/18 exactly; Welch–Satterthwaite's did not."""
    for ratio in (1.0, 2.0, 3.0):
        for divisor in (1, vc.HOLM_DIVISOR):
            assert vc.welch_rate(3, 22, ratio, divisor) <= 0.05 / divisor
        assert vc.welch_rate(3, 22, ratio, vc.HOLM_DIVISOR, rule=None) > 2 * 0.05 / vc.HOLM_DIVISOR


def _crossing_allowed(cells: int, p: float) -> int:
    """The most cells of an exact test (rate p) that cross 5 % + 2 SE by chance, at a binomial 99 % bound."""
    from scipy import stats

    return int(stats.binom.ppf(0.99, cells, stats.norm.sf(2.0)))


def test_claims_md_states_what_the_shipped_calibration_shows():
    """claims.md's calibration sentence (claims_markdown.CALIBRATION) against benchmarks/results/
    verdict_calibration.csv: every rule in use within 5 % (cells over 2 SE no more than chance allows an exact
    test, none beyond 3.5 SE); CHE and sink rows at 2× and 3× heterogeneity; at 1 − 0.05/18 the interval bases and
    the timing rule on ≥ 20,000 trials a cell within 0.28 % likewise, and Welch's rule exactly."""
    import pandas as pd

    from dape_core.report.claims_markdown import CALIBRATION, HOW_TO_READ

    assert CALIBRATION in HOW_TO_READ and "0.05/18" in CALIBRATION and "2× or 3×" in CALIBRATION
    shipped = pd.read_csv(ROOT / "benchmarks" / "results" / "verdict_calibration.csv")
    before = ("heterogeneous: pooled σ", "heterogeneous: unpaired, pooled σ", "heterogeneous: one run, pooled σ",
              "heterogeneous: σ of another kind", "heterogeneous: same pair", "Welch–Satterthwaite",
              "timing (the design before")
    holm_level = f"at Holm's strictest level 1 − 0.05/{vc.HOLM_DIVISOR}"
    in_use = shipped[~shipped["basis"].str.startswith(before)]
    timing_tail = in_use[in_use["basis"].str.startswith("timing") & in_use["basis"].str.endswith(holm_level)]
    in_use = in_use.drop(timing_tail.index)  # the timing rule writes its 1 − 0.05/18 reading as a row of its own
    over = in_use["false_decisions"] - 0.05
    assert (over <= 3.5 * in_use["false_decisions_se"] + 1e-9).all(), in_use[over > 3.5 * in_use["false_decisions_se"]]
    assert (over > 2 * in_use["false_decisions_se"] + 1e-9).sum() <= _crossing_allowed(len(in_use), 0.05)
    for prefix, regimes in (("sink", vc.SINK_HETEROGENEITY), ("CHE (per task", vc.CHE_HETEROGENEITY)):
        rows = in_use[in_use["basis"].str.startswith(prefix)]
        assert set(regimes) <= set(rows["regime"]) and "pooled" not in " ".join(rows["basis"])
    welch = in_use[in_use["basis"].str.startswith("Welch (")]
    assert len(welch) == len(vc.WELCH_SEEDS) * len(vc.WELCH_RATIOS)
    assert (welch["false_decisions"] <= 0.05 + 1e-9).all()
    assert (welch["false_decisions_at_18"] <= 0.05 / vc.HOLM_DIVISOR + 1e-9).all()
    bases = in_use[in_use["basis"].isin(["paired", "unpaired", "one run", "own spread"])]
    assert bases["false_decisions_at_18"].notna().all() and len(timing_tail) == len(
        in_use[in_use["basis"].str.startswith("timing")]) > 0
    tail = pd.concat([bases[["trials", "false_decisions_at_18", "false_decisions_at_18_se"]].set_axis(
        ["trials", "rate", "se"], axis=1), timing_tail[["trials", "false_decisions", "false_decisions_se"]].set_axis(
        ["trials", "rate", "se"], axis=1)])
    assert (tail["trials"] >= vc.TAIL_TRIALS).all()
    over = tail["rate"] - 0.05 / vc.HOLM_DIVISOR
    assert (over <= 3.5 * tail["se"] + 1e-9).all(), tail[over > 3.5 * tail["se"]]
    assert (over > 2 * tail["se"] + 1e-9).sum() <= _crossing_allowed(len(tail), 0.05 / vc.HOLM_DIVISOR)


def test_the_sink_and_che_checks_read_each_comparison_on_its_own_spread():
    """The sink pair's and each CHE task's interval is Student's t on that comparison's own per-seed differences
    (ν = n − 1), as intervals.interval gives it — so their rate at any level is that of the own-spread basis, also
    when the pair or task read is 3× noisier than the others (whose σ a pool would have lent it)."""
    from dape_core.report import che_check
    from dape_core.report.claim_context import Context
    from dape_core.report.sink_check import sink_stronger

    rng = np.random.default_rng(13)
    table = vc.sink_table(rng, 4, vc.SINK_REGIMES["interaction dominates"], 0.0, factor=3.0)
    [first] = [c for c in sink_stronger(Context(sink=table), {"ratio": 1.0}) if c["text"].startswith("DAPE1x3-ALiBi ")]
    [(ratio, _)] = first["_judged"]
    layer_mean = table.groupby(["method", "seed", "sequence"])["sink_mass"].mean()
    log_seq = np.log(layer_mean).groupby(["method", "seed"]).mean()
    diffs = log_seq["DAPE1x3-ALiBi"] - log_seq["DAPE-ALiBi"]
    own = intervals.interval([np.array([[d]]) for d in diffs], lambda m: m[:, 0])
    assert own.seed_noise.df == 3 and first["seed_df"] == 3
    for divisor in (1, vc.HOLM_DIVISOR):
        mine, theirs = intervals.simultaneous(own, divisor), intervals.simultaneous(ratio, divisor)
        assert (np.exp(mine.low), np.exp(mine.high)) == pytest.approx((theirs.low, theirs.high), rel=1e-9)

    che = vc.che_table(rng, 4, 0.01, 0.04, factor=3.0)
    seen = []
    original = che_check.simultaneous
    patch = pytest.MonkeyPatch()
    patch.setattr(che_check, "simultaneous", lambda iv, m: seen.append(iv) or original(iv, m))
    try:
        che_check.che_beats_kerple(Context(che=che), {"margin": 0.0})
    finally:
        patch.undo()
    task = sorted(vc.CHE_TASKS)[0]
    rows = che[che["task"] == task].pivot_table(index="seed", columns="method", values="accuracy")
    own = intervals.interval([np.array([[d]]) for d in rows["DAPE1x3-Kerple"] - rows["Kerple"]], lambda m: m[:, 0])
    assert (seen[0].low, seen[0].high, seen[0].seed_noise.df) == pytest.approx((own.low, own.high, 3))
