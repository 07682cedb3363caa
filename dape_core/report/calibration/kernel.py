"""The informational kernel-size rule, its own check (kernel_not_largest), on simulated sweeps of identical kernels."""

from __future__ import annotations

import math

import pandas as pd

from dape_core.report.intervals import UNDECIDED
from .common import R, SEEDS, cell_rng, each_cell, rule_row


KERNELS, KERNEL_MULTIPLES, KERNEL_TRAIN_LEN = (1, 3, 5, 7), (1, 2, 4, 8, 16), 32

KERNEL_REGIMES = {  # (run × seed SD, run × seed × length SD) of a run's log perplexity at one length
    "run noise dominates": (0.03, 0.01),
    "per-length noise dominates": (0.01, 0.03),
}

KERNEL_METHODS = {k: "DAPE-Kerple" if k == 1 else f"DAPE1x{k}-Kerple" for k in KERNELS}


def sweep_table(rng, role: str, runs: dict, n: int, run_sd: float, length_sd: float, moved, shift: float,
                multiples) -> pd.DataFrame:
    """Rows of lm_results.csv of one simulated setting (role ``role``, 600 steps, T 32): the runs ``runs`` (method →
    kernel size) at the ``multiples``, n seeds; log perplexity = level + seed effect (shared by a seed's runs: one batch
    stream) + run × seed effect + run × seed × length noise, methods ``moved(method)`` better by ``shift``; with one
    seed also the grid its seed noise is borrowed from (7 runs × 2 seeds, 1200 steps, role central, same noise)."""
    level = {m: math.log(10.0) + 0.2 * math.log2(m) for m in multiples}
    rows = []

    def add(role: str, steps: int, runs: dict, seeds: int, moved):
        seed_effect = rng.normal(0.0, 0.05, seeds)
        for method, kernel in runs.items():
            for s in range(seeds):
                run_effect = seed_effect[s] + rng.normal(0.0, run_sd) - (shift if moved(method) else 0.0)
                for m in multiples:
                    rows.append((f"{method}-S{steps}", role, kernel, steps, s, method, m * KERNEL_TRAIN_LEN,
                                 math.exp(level[m] + run_effect + rng.normal(0.0, length_sd))))

    add(role, 600, runs, n, moved)
    if n == 1:
        add("central", 1200, {f"M{i}": 1 for i in range(R)}, 2, lambda method: False)
    df = pd.DataFrame(rows, columns=["run", "roles", "kernel_size", "steps", "seed", "method", "eval_len", "ppl"])
    return df.assign(families="f", dataset="code", encoding="kerple", processor="dape_v2", dape_width=32, tril=True,
                     size="small", train_len=KERNEL_TRAIN_LEN, batch_size=16, status="ok")


def kernel_table(rng, n: int, run_sd: float, length_sd: float, shift: float = 0.0) -> pd.DataFrame:
    """The kernel sweep (DAPE-Kerple kernels 1, 3, 5, 7; role kernel_sweep) at ×1 … ×16, kernel 3 moved by ``shift``."""
    return sweep_table(rng, "kernel_sweep", {method: k for k, method in KERNEL_METHODS.items()}, n, run_sd,
                       length_sd, lambda method: method == KERNEL_METHODS[3], shift, KERNEL_MULTIPLES)


def kernel_trial(rng, n: int, run_sd: float, length_sd: float, shift: float) -> bool:
    """Decided? The kernel-size rule as the claim runs it (:func:`dape_core.report.lm_checks.kernel_not_largest`
    on a simulated lm_results.csv) at a zero margin."""
    from dape_core.report.claim_context import Context
    from dape_core.report.lm_checks import kernel_not_largest

    [check] = kernel_not_largest(Context(kernel_table(rng, n, run_sd, length_sd, shift)), {"margin": 0.0})
    return check["verdict"] != UNDECIDED


def kernel_cell(task: tuple) -> dict:
    """One row of the kernel-size rule: a regime × seed count, ``trials`` null trials (and power trials)."""
    regime, n, trials, power_trials, seed = task
    rng = cell_rng(seed, "kernel", regime, n)
    run_sd, length_sd = KERNEL_REGIMES[regime]
    comparisons = (len(KERNELS) - 1) * len(KERNEL_MULTIPLES)
    return rule_row(lambda shift: kernel_trial(rng, n, run_sd, length_sd, shift), trials, power_trials,
                    math.hypot(run_sd, length_sd),  # SD of one run × seed's statistic at one length
                    basis=f"kernel size (a smaller kernel against the largest at each length, Bonferroni over "
                          f"{comparisons})", regime=regime, seeds=n,
                    sigma_from="none (1 seed: no pair's own spread)" if n == 1 else "each pair's own spread")


def kernel_rows(trials: int, seed: int, seeds=SEEDS, power_trials: int = 0, jobs: int = 1) -> list[dict]:
    return each_cell(kernel_cell, [(regime, n, trials, power_trials, seed) for regime in KERNEL_REGIMES
                                   for n in seeds], jobs)
