"""The CHE rule through che_beats_kerple on simulated summaries of the permutation-variant tasks, per task and as the claim's majority."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dape_core.report.intervals import UNDECIDED
from .common import cell_rng, rule_row


CHE_TASKS = ("even_pairs", "modular_arithmetic", "stack_manipulation", "reverse_string",
             "modular_arithmetic_brackets", "solve_equation", "duplicate_string", "missing_duplicate", "odds_first",
             "binary_addition", "binary_multiplication", "compute_sqrt")


CHE_REGIMES = {"interaction dominates": (0.01, 0.04), "seed effect dominates": (0.04, 0.01)}  # (seed SD, inter SD)


def che_table(rng, n: int, seed_sd: float, inter_sd: float, shift: float = 0.0, tasks=CHE_TASKS) -> pd.DataFrame:
    """Summary rows of che_results.csv: Kerple and DAPE1x3-Kerple (shifted by ``shift``) per task and seed."""
    rows = []
    for task in tasks:
        level = rng.uniform(0.55, 0.75)
        seed_effect = rng.normal(0.0, seed_sd, n)
        for method, moved in (("Kerple", 0.0), ("DAPE1x3-Kerple", shift)):
            for s in range(n):
                rows.append({"cell": f"{task}-{method}", "task": task, "method": method, "seed": s, "lr": 5e-4,
                             "accuracy": level + seed_effect[s] + rng.normal(0.0, inter_sd) + moved,
                             "n_samples": np.nan, "row_type": "summary", "length": np.nan})
    return pd.DataFrame(rows)


def che_trial(rng, n: int, seed_sd: float, inter_sd: float, shift: float) -> float:
    """The share of tasks the CHE rule decides (won or lost beyond the noise) at a zero margin."""
    from dape_core.report.che_check import che_beats_kerple
    from dape_core.report.claim_context import Context

    [record] = che_beats_kerple(Context(che=che_table(rng, n, seed_sd, inter_sd, shift)), {"margin": 0.0})
    return (len(record["wins"]) + len(record["losses"])) / record["n_tasks"]


def che_claim_trial(rng, n: int, seed_sd: float, inter_sd: float, shift: float, tasks: int) -> bool:
    """Decided? The CHE claim (more than half of ``tasks`` tasks won, or at least half lost; each task read at
    :func:`dape_core.report.intervals.level_for`'s level) at a zero margin."""
    from dape_core.report.che_check import che_beats_kerple
    from dape_core.report.claim_context import Context

    table = che_table(rng, n, seed_sd, inter_sd, shift, CHE_TASKS[:tasks])
    [record] = che_beats_kerple(Context(che=table), {"margin": 0.0})
    return record["verdict"] != UNDECIDED


def che_claim_cell(task: tuple) -> dict:
    """One row of the CHE claim's rule: a regime × task count × seed count."""
    regime, tasks, n, trials, power_trials, seed = task
    rng = cell_rng(seed, "CHE claim", regime, tasks, n)
    seed_sd, inter_sd = CHE_REGIMES[regime]
    return rule_row(lambda shift: che_claim_trial(rng, n, seed_sd, inter_sd, shift, tasks), trials, power_trials,
                    math.sqrt(2) * inter_sd,  # SD of one seed's paired difference
                    basis=f"claim: CHE on {tasks} tasks (CONFIRMED when more than half are won, REFUTED when at "
                          "least half are lost; each task at 1 − 0.05·j/n)", regime=regime, seeds=n,
                    sigma_from=f"{2 * tasks} cells' seeds" if n >= 2 else "none (n = 1)")


def che_rows(trials: int, rng, seeds=(1, 2, 3), power: bool = True) -> list[dict]:
    rows = []
    for regime, (seed_sd, inter_sd) in CHE_REGIMES.items():
        unit = math.sqrt(2) * inter_sd  # SD of one seed's paired difference
        for n in seeds:
            shares = [che_trial(rng, n, seed_sd, inter_sd, 0.0) for _ in range(trials)]
            rate = float(np.mean(shares))
            row = {"basis": "CHE (per task, σ pooled over the cells with several seeds)", "per_window_data": False,
                   "regime": regime, "seeds": n,
                   "sigma_from": f"{2 * len(CHE_TASKS)} cells' seeds" if n >= 2 else "none (n = 1)",
                   "trials": trials * len(CHE_TASKS), "false_decisions": rate,
                   "false_decisions_se": float(np.std(shares) / math.sqrt(trials))}
            if power:
                gained = [che_trial(rng, n, seed_sd, inter_sd, 2 * unit) for _ in range(trials)]
                row["power_at_2_sd"] = float(np.mean(gained))
                row["power_se"] = float(np.std(gained) / math.sqrt(trials))
            rows.append(row)
    return rows
