"""The CHE rule (che_beats_kerple) on simulated permutation-variant task summaries, per task and as a majority."""

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
#: a third of the tasks (both methods) at this many times the others' interaction SD, the interaction dominating;
#: the rate is that of those tasks (a σ pooled over the cells would understate their noise)
CHE_HETEROGENEITY = {"a third of the tasks at 2× the others' interaction SD": 2.0,
                     "a third of the tasks at 3× the others' interaction SD": 3.0}
CHE_NOISY = len(CHE_TASKS) // 3


def che_table(rng, n: int, seed_sd: float, inter_sd: float, shift: float = 0.0, tasks=CHE_TASKS,
              factor: float = 1.0) -> pd.DataFrame:
    """Summary rows of che_results.csv: Kerple and DAPE1x3-Kerple (shifted by ``shift``) per task and seed; the
    first :data:`CHE_NOISY` tasks at ``factor`` × the interaction SD."""
    rows = []
    for t, task in enumerate(tasks):
        level = rng.uniform(0.55, 0.75)
        seed_effect = rng.normal(0.0, seed_sd, n)
        for method, moved in (("Kerple", 0.0), ("DAPE1x3-Kerple", shift)):
            for s in range(n):
                rows.append({"cell": f"{task}-{method}", "task": task, "method": method, "seed": s, "lr": 5e-4,
                             "accuracy": level + seed_effect[s] + moved
                                         + rng.normal(0.0, inter_sd * (factor if t < CHE_NOISY else 1.0)),
                             "n_samples": np.nan, "row_type": "summary", "length": np.nan})
    return pd.DataFrame(rows)


def che_trial(rng, n: int, seed_sd: float, inter_sd: float, shift: float, factor: float = 1.0) -> float:
    """The share of tasks the CHE rule decides (won or lost beyond the noise) at a zero margin; with ``factor`` ≠ 1
    the share of the noisier tasks (:data:`CHE_NOISY`)."""
    from dape_core.report.che_check import che_beats_kerple
    from dape_core.report.claim_context import Context

    [record] = che_beats_kerple(Context(che=che_table(rng, n, seed_sd, inter_sd, shift, factor=factor)),
                                {"margin": 0.0})
    if factor == 1.0:
        return (len(record["wins"]) + len(record["losses"])) / record["n_tasks"]
    noisy = CHE_TASKS[:CHE_NOISY]
    return sum(text.split(" ")[0] in noisy for text in record["wins"] + record["losses"]) / CHE_NOISY


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
    """The CHE rule's rows: equal noise in two regimes, and a third of the tasks noisier than the others
    (:data:`CHE_HETEROGENEITY`, null trials only, the rate over those tasks)."""
    rows = []
    regimes = [(regime, *sds, 1.0) for regime, sds in CHE_REGIMES.items()]
    regimes += [(regime, *CHE_REGIMES["interaction dominates"], factor) for regime, factor in CHE_HETEROGENEITY.items()]
    for regime, seed_sd, inter_sd, factor in regimes:
        unit = math.sqrt(2) * inter_sd  # SD of one seed's paired difference
        for n in seeds:
            shares = [che_trial(rng, n, seed_sd, inter_sd, 0.0, factor) for _ in range(trials)]
            rate = float(np.mean(shares))
            row = {"basis": "CHE (per task, each task's own spread)", "per_window_data": False,
                   "regime": regime, "seeds": n,
                   "sigma_from": "the task's own per-seed differences" if n >= 2 else "none (n = 1)",
                   "trials": trials * (len(CHE_TASKS) if factor == 1.0 else CHE_NOISY), "false_decisions": rate,
                   "false_decisions_se": float(np.std(shares) / math.sqrt(trials))}
            if power and factor == 1.0:
                gained = [che_trial(rng, n, seed_sd, inter_sd, 2 * unit) for _ in range(trials)]
                row["power_at_2_sd"] = float(np.mean(gained))
                row["power_se"] = float(np.std(gained) / math.sqrt(trials))
            rows.append(row)
    return rows
