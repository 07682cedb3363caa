"""The design stage itself (dape_core.report.design): a pilot chooses the fresh seeds, the fresh seeds alone decide."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dape_core.report.intervals import REFUTED, UNDECIDED, decide, interval, simultaneous
from .common import _rate, cell_rng, each_cell
from .heterogeneity import HETEROGENEITY, hetero_grid


DESIGN_PILOT_SEEDS = (2, 3, 4)

DESIGN_MAX_SEEDS = 8  # design.max_seeds's default


def _pair_interval(rng, n: int, factor: float, law: str):
    """Method 1 − method 0 paired by seed over ``n`` seeds of :func:`hetero_grid`, on the pair's own spread."""
    table = hetero_grid(rng, n, factor, law)
    return interval([np.array([[table[0, s], table[1, s]]]) for s in range(n)], lambda m: m[:, 1] - m[:, 0])


def design_trial(rng, pilot_n: int, factor: float, law: str) -> tuple[bool, bool]:
    """(run, decided) of the design stage on two identical methods paired by seed (method 1 ``factor`` × noisier,
    interactions of ``law``): a pilot of ``pilot_n`` seeds sizes fresh seeds (``seeds_to_decide(…, fresh=True)``),
    :func:`dape_core.report.design.choose` takes them (at most :data:`DESIGN_MAX_SEEDS`), and a fresh sample of that
    many is read alone on the pair's own spread: the claims' functions, not copies."""
    from dape_core.report import design
    from dape_core.report.intervals import seeds_to_decide

    rule = dict(side=1, confirm=0.0, refute=0.0)
    pilot = _pair_interval(rng, pilot_n, factor, law)
    n, text = seeds_to_decide(pilot, **rule, fresh=True)
    claims = pd.DataFrame([{"claim_id": "c", "verdict": decide(pilot, **rule), "fresh_seeds": n, "fresh_text": text,
                            "fresh_runs": ["a", "b"]}])
    chosen = design.choose(claims, {"a": {"train": 1.0}, "b": {"train": 1.0}},
                           design.DesignSettings(budget_minutes=1e6, max_seeds=DESIGN_MAX_SEEDS))["chosen"]
    if not chosen:
        return False, False
    fresh = _pair_interval(rng, chosen[0]["seeds"], factor, law)
    return True, decide(fresh, **rule) != UNDECIDED


PARTIAL_CHECKS = 2  # a claim of two checks, each its own pair of runs (the data-adaptive claim: XL and CoPE)


def design_partial_trial(rng, pilot_n: int, factor: float, law: str) -> tuple[bool, bool]:
    """(run, decided) of the design stage on a claim of :data:`PARTIAL_CHECKS` checks, each two identical methods of its
    own runs: the pilot's checks read jointly (:func:`~dape_core.report.claim_context.jointly`'s sizing, REFUTED at
    1 − 0.05/m); the route of :func:`~dape_core.report.claim_costs.decide_route` (REFUTED: fresh seeds on the runs of
    the cheapest check heading there; CONFIRMED when every check heads there: on all, each check sized at the claim's
    power, :func:`~dape_core.report.claim_costs.claim_power`, its runs at its own n); the design's choice; then the
    fresh seeds read as `dape report claims` reads a design's (:func:`~dape_core.report.design.annotate`): REFUTED on
    the checks reached at the pilot's level (``min_comparisons``), CONFIRMED only with every check reached and
    CONFIRMED."""
    from dape_core.report import design
    from dape_core.report.claim_costs import decide_route
    from dape_core.report.intervals import seeds_to_decide

    m, rule = PARTIAL_CHECKS, dict(side=1, confirm=0.0, refute=0.0)
    checks = []
    for k in range(m):
        pilot = _pair_interval(rng, pilot_n, factor, law)
        n, text = seeds_to_decide(pilot, **rule, fresh=True)
        if "towards " + REFUTED in text:
            n, text = seeds_to_decide(pilot, **rule, comparisons=m, fresh=True)
        checks.append({"verdict": decide(pilot, **rule), "seeds_needed": n, "seeds_needed_text": text,
                       "runs": [f"a{k}", f"b{k}"],  # resized at the claim's power when all head to CONFIRMED
                       "_size": lambda power, pilot=pilot: seeds_to_decide(pilot, **rule, fresh=True, power=power)})
    n, text, runs = decide_route(checks, every=True)
    claims = pd.DataFrame([{"claim_id": "c", "verdict": UNDECIDED, "fresh_seeds": n, "fresh_text": text,
                            "fresh_runs": sorted(runs), "fresh_run_seeds": runs}])
    prices = {run: {"train": 1.0} for c in checks for run in c["runs"]}
    chosen = design.choose(claims, prices, design.DesignSettings(budget_minutes=1e6,
                                                                 max_seeds=DESIGN_MAX_SEEDS))["chosen"]
    if not chosen:
        return False, False
    reached = [k for k in range(m) if set(checks[k]["runs"]) <= set(chosen[0]["runs"])]
    fresh = [_pair_interval(rng, chosen[0]["run_seeds"][checks[k]["runs"][0]], factor, law)
             for k in reached]  # each check its own runs' n
    if any(decide(simultaneous(iv, m), **rule) == REFUTED for iv in fresh):
        return True, True
    confirmed = len(reached) == m and all(decide(iv, **rule) == "CONFIRMED" for iv in fresh)
    return True, confirmed


def design_cell(task: tuple) -> dict:
    """One row of the design stage's rows: a noise law × pilot seeds, ``trials`` null trials; the rate is of the
    trials the design ran (those whose pilot sized at most :data:`DESIGN_MAX_SEEDS` fresh seeds)."""
    label, pilot_n, trials, seed, partial = (*task, False)[:5]
    factor, law = HETEROGENEITY[label] if label in HETEROGENEITY else (1.0, "normal")
    rng = cell_rng(seed, "design partial" if partial else "design", label, pilot_n)
    trial = design_partial_trial if partial else design_trial
    results = [trial(rng, pilot_n, factor, law) for _ in range(trials)]
    ran = sum(r for r, _ in results)
    rate, se = _rate(sum(d for _, d in results), max(1, ran))
    basis = (f"design stage, a claim of {PARTIAL_CHECKS} checks: fresh seeds on the route's checks, REFUTED at the "
             "pilot's level" if partial else "design stage: pilot chooses, fresh seeds decide (own spread)")
    return {"basis": basis, "per_window_data": False,
            "regime": label, "seeds": pilot_n, "sigma_from": f"the fresh seeds' own spread ({ran} of {trials} "
            f"trials sized ≤ {DESIGN_MAX_SEEDS} fresh seeds)", "trials": ran, "false_decisions": rate,
            "false_decisions_se": se}


def design_rows(trials: int, seed: int, jobs: int = 1) -> list[dict]:
    """The design stage under equal noise, one method at 2× and 3×, and t₃ tails, for pilots of 2, 3 and 4 seeds."""
    labels = ("equal noise", *HETEROGENEITY)
    return each_cell(design_cell, [(label, n, trials, seed, partial) for partial in (False, True) for label in labels
                                   for n in DESIGN_PILOT_SEEDS], jobs)
