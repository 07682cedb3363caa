"""Claim-level rules: a claim of six checks through evaluate_claims (jointly), and the CHE claim on 2 and 12 tasks."""

from __future__ import annotations

import math

import pandas as pd

from dape_core.report.intervals import UNDECIDED
from .che import CHE_REGIMES, che_claim_cell
from .common import cell_rng, each_cell, rule_row
from .kernel import KERNEL_REGIMES, sweep_table


CLAIM_ENCODINGS = ("ALiBi", "Kerple", "FIRE")

CLAIM_MULTIPLES = (1, 2, 4, 8)


def claim_table(rng, n: int, run_sd: float, length_sd: float, shift: float = 0.0) -> pd.DataFrame:
    """The runs of ``dape1x3_improves_additive``: X and DAPE1x3-X for ALiBi, Kerple and FIRE (role every_encoding) at
    ×1 … ×8 (:func:`sweep_table`), every DAPE1x3-X moved by ``shift``."""
    runs = {f"{prefix}{encoding}": 3 if prefix else 1 for encoding in CLAIM_ENCODINGS for prefix in ("", "DAPE1x3-")}
    return sweep_table(rng, "every_encoding", runs, n, run_sd, length_sd,
                       lambda method: method.startswith("DAPE1x3-"), shift, CLAIM_MULTIPLES)


def claim_trial(rng, n: int, run_sd: float, length_sd: float, shift: float) -> bool:
    """Decided? ``dape1x3_improves_additive`` (six checks: three encodings × within and beyond) as the claims run it
    (:func:`dape_core.report.claims.evaluate_claims`, its checks read together), at zero margins."""
    from dataclasses import replace

    from dape_core.report.claims import CLAIMS, evaluate_claims

    [claim] = [c for c in CLAIMS if c.claim_id == "dape1x3_improves_additive"]
    zero = replace(claim, thresholds={name: 0.0 for name in claim.thresholds})
    verdict = evaluate_claims(claim_table(rng, n, run_sd, length_sd, shift), claims=(zero,))["verdict"].iloc[0]
    return verdict != UNDECIDED


def claim_cell(task: tuple) -> dict:
    """One row of the claim-level rule: a regime × seed count, ``trials`` null trials (and power trials)."""
    regime, n, trials, power_trials, seed = task
    rng = cell_rng(seed, "claim", regime, n)
    run_sd, length_sd = KERNEL_REGIMES[regime]
    checks = 2 * len(CLAIM_ENCODINGS)
    return rule_row(lambda shift: claim_trial(rng, n, run_sd, length_sd, shift), trials, power_trials,
                    math.sqrt(2 * run_sd ** 2 + 2 * length_sd ** 2),  # SD of one seed's paired difference at ×1
                    basis=f"claim of {checks} checks (CONFIRMED when all are at 95 %, REFUTED when any is at the "
                          f"Bonferroni level over {checks})", regime=regime, seeds=n,
                    sigma_from="none (1 seed: no pair's own spread)" if n == 1 else "each pair's own spread")


CHE_CLAIM_TASKS = (2, 12)  # the default's and the grid's CHE family, and the paper's Table 6


def claim_rows(trials: int, seed: int, seeds=(1, 2, 3, 4), power_trials: int = 0, jobs: int = 1) -> list[dict]:
    """The claim-level rules' rows: a claim of six LM checks, and the CHE claim on 2 and 12 tasks."""
    lm = [(regime, n, trials, power_trials, seed) for regime in KERNEL_REGIMES for n in seeds]
    che = [(regime, tasks, n, trials, power_trials, seed) for regime in CHE_REGIMES for tasks in CHE_CLAIM_TASKS
           for n in seeds]
    return each_cell(claim_cell, lm, jobs) + each_cell(che_claim_cell, che, jobs)
