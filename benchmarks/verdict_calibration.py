"""How often the verdict rules call two identically distributed methods different, at every basis they meet.

Per-window losses of a grid are simulated as L[r, s, w] = β_s + u_rs + γ_w + e_rsw: a seed main effect β_s shared
by every method trained on the seed's batch stream (one setting), a method × seed interaction u_rs, a window
effect γ_w shared by every model (the same evaluation windows), and per-window noise e_rsw; R = 7 methods per
setting (the central comparison's size), W = 64 windows. Methods 0 and 1 are the pair compared; with ``effect``
method 1 is shifted by that many SDs of one seed's statistic (the power column).

Bases (those of :mod:`dape_core.report.intervals`, as the claims use them):

- ``paired``: both methods in one setting, n seeds each; σ from the setting's R × n table (interaction mean
  square) — for n = 1 the check's setting has one seed and σ is borrowed from another setting's 7 × 2 table;
- ``unpaired``: the methods in two settings (different batch streams), n seeds each; each side's σ from its own
  setting's R × n table (seed and interaction mean squares, Satterthwaite ν) — for n = 1 borrowed from a 7 × 2
  table; Welch's combination;
- ``one run``: one run's own statistic (an explosion, a ΔP) against its true value, n seeds, σ from its
  setting's R × n table as unpaired (borrowed from a 7 × 2 table for n = 1);
- ``own spread``: paired, n ≥ 2, no grid (σ from the pair's own per-seed differences, ν = n − 1);
- each with per-window data (units of W rows) and without (one row: the seed's mean);
- three regimes: seed noise dominating (interaction SD 2 × the windows' SE of a method's mean, seed main effect
  3 ×), the seed main effect dominating (4 × and 0.5 ×) and window noise dominating (0.5 × and 0.25 ×);
- ``timing``: the timing rule's ratio-of-medians rise between two sizes, from interleaved rounds of two identical
  methods (round effects shared by the methods of a round, log-normal noise with 5 % outliers ×3);
- ``sink``: the attention-sink rule as the claim runs it (:func:`dape_core.report.sink_check.sink_stronger` on a
  simulated sink.csv): DAPE1x3-X against DAPE-X for three encodings X, n seeds each, 8 sequences shared by every
  run and 2 layers; log sink mass = encoding × seed effect (shared by the pair) + method × seed interaction +
  sequence effect + per-run noise, layers around it; σ of the paired differences pooled over the encodings (the
  check's own estimator); the verdict of the first encoding's check at a ratio threshold of 1;
- ``CHE``: the CHE rule as the claim runs it (:func:`dape_core.report.che_check.che_beats_kerple` on a simulated
  che_results.csv): Kerple and DAPE1x3-Kerple on the 12 permutation-variant tasks, n seeds, one learning rate;
  a cell's best OOD accuracy = task level + seed effect (shared by the two methods of a seed) + method × seed
  interaction; σ of one cell pooled over the cells with several seeds (the check's own estimator, scaled by √2
  for a paired difference); the share of tasks decided (won or lost) at a zero margin;
- ``kernel size``: the informational kernel-size rule as the claim runs it
  (:func:`dape_core.report.lm_checks.kernel_not_largest` on a simulated lm_results.csv): DAPE-Kerple with kernels 1,
  3, 5 and 7 at ×1 … ×16 (15 comparisons of a smaller kernel against the largest, each at one length, Bonferroni
  over them), n seeds; a run's log perplexity at a length = level + seed effect (shared by the kernels of a seed) +
  run × seed effect + run × seed × length noise, in two regimes (either part 3 × the other); σ of each comparison
  from its pair's own per-seed differences (ν = n − 1; none with one seed, as the paired comparisons read it, with
  a 7 × 2 grid of another setting beside it, the default's case); power: kernel 3 better by 2 SDs of one run's
  statistic at every length;
- ``claim of 6 checks``: a claim read over its checks (:func:`dape_core.report.claims.evaluate_claims` with
  :func:`dape_core.report.claim_context.jointly`) — ``dape1x3_improves_additive``, DAPE1x3-X against X for ALiBi,
  Kerple and FIRE within and beyond, all identical, at zero margins, on a simulated lm_results.csv of the kernel
  rule's noise model (1, 2, 3 and 4 seeds; each pair's own spread, none with one seed): CONFIRMED needs all six,
  REFUTED any one at the Bonferroni level over six; power: every DAPE1x3-X better by 2 SDs of one seed's paired
  difference;
- ``claim: CHE``: the CHE claim's majority rule (:func:`dape_core.report.che_check.che_beats_kerple`) on 2 tasks
  (the default's and the decisive configurations' family) and on 12 (the paper's Table 6), each task read at
  :func:`dape_core.report.intervals.level_for`'s level.

- ``heterogeneous``: the paired comparison when methods differ in noise (one of the pair at 2× or 3× the others'
  interaction SD, or t-distributed interactions with 3 df; no per-window data): the pooled σ of the paired basis,
  the pair's own spread (n ≥ 2), the same pair's spread borrowed from a 7 × 2 or 7 × 4 grid (n = 1); the σ of
  another kind a leakage comparison used to borrow (a tril-only grid, twins whose no-tril side is 2.3× noisier),
  and the leakage claim through its own check (``leakage_collapse`` on simulated twins for two encodings, 1–4
  seeds, each pair's own spread, its two routes at 97.5 %).
- ``design stage``: the design stage itself (:mod:`dape_core.report.design`) on two identical methods paired by
  seed — a pilot of 2, 3 or 4 seeds sized for fresh seeds, chosen by the design's own function (at most 8), then
  the fresh seeds read alone with the pair's own spread —, under equal noise, one method at 2× and 3× the others'
  interaction SD, and t₃ interactions; the rate is among the trials the design ran.

A trial is *decided* when :func:`dape_core.report.intervals.decide` at a zero margin is not UNDECIDED. The CSV holds
each basis's false-decision rate (effect 0) and power (effect 2 seed-SDs; timing: a rise of 2 SDs of one cell's
ratio), each with its Monte-Carlo SE √(p(1 − p)/trials).

    python benchmarks/verdict_calibration.py [--trials 10000] [--jobs N] [--sink-trials 500] [--che-trials 100]
                                             [--kernel-trials 1000] [--kernel-power-trials 200]
                                             [--claim-trials 1000] [--claim-power-trials 200]
                                             [--only {bases,claims,design,heterogeneity,kernel,sink}]
                                             [--out benchmarks/results/verdict_calibration.csv]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dape_core.report.intervals import (UNDECIDED, SeedNoise, combine_noise, decide, difference, interval,  # noqa: E402
                                        median_ratio_draws, percentile)
from dape_core.report.seed_noise import table_variance  # noqa: E402

R, W, NOISE_SD = 7, 64, 0.9
WINDOW_SE = NOISE_SD / math.sqrt(W)  # SE of one method's mean over its windows
REGIMES = {  # (seed main effect SD, interaction SD)
    "seed noise dominates": (3 * WINDOW_SE, 2 * WINDOW_SE),
    "seed main effect dominates": (4 * WINDOW_SE, 0.5 * WINDOW_SE),
    "window noise dominates": (0.5 * WINDOW_SE, 0.25 * WINDOW_SE),
}
SEEDS = (1, 2, 3, 4, 5, 8)
OUT = ROOT / "benchmarks" / "results" / "verdict_calibration.csv"


def grid(rng: np.random.Generator, n_seeds: int, main_sd: float, inter_sd: float, gamma: np.ndarray,
         shift: float = 0.0, shifted: int = 1) -> np.ndarray:
    """Per-window losses [R, n_seeds, W] of one setting; run ``shifted`` moved by ``shift``."""
    beta = rng.normal(0.0, main_sd, n_seeds)
    u = rng.normal(0.0, inter_sd, (R, n_seeds))
    losses = beta[None, :, None] + u[:, :, None] + gamma[None, None, :] + rng.normal(0.0, NOISE_SD, (R, n_seeds, W))
    losses[shifted] += shift
    return losses


def _noise(table: np.ndarray, paired: bool, source: str) -> SeedNoise | None:
    found = table_variance(table, paired)
    return None if found is None else SeedNoise(math.sqrt(found[0]), found[1], source)


def _rows(x: np.ndarray, windows: bool) -> np.ndarray:
    """A unit [W, k] with per-window data, or its one row of means without."""
    return x if windows else x.mean(axis=0, keepdims=True)


def paired_trial(rng, n, main_sd, inter_sd, windows, shift, own_spread=False) -> bool:
    """Decided? Methods 0 and 1 of one setting, paired by seed."""
    gamma = rng.normal(0.0, NOISE_SD, W)
    losses = grid(rng, n, main_sd, inter_sd, gamma, shift)
    units = [_rows(np.column_stack([losses[0, s], losses[1, s]]), windows) for s in range(n)]
    if own_spread:
        noise = None
    else:
        source = losses if n >= 2 else grid(rng, 2, main_sd, inter_sd, gamma)
        one = _noise(source.mean(axis=2), True, "grid")
        noise = combine_noise([one, one])
    iv = interval(units, lambda m: m[:, 1] - m[:, 0], seed_noise=noise)
    return decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


def unpaired_trial(rng, n, main_sd, inter_sd, windows, shift) -> bool:
    """Decided? Method 0 of one setting against method 1 of another (its own seeds and batch stream)."""
    gamma = rng.normal(0.0, NOISE_SD, W)
    first, second = (grid(rng, n, main_sd, inter_sd, gamma, shift) for _ in range(2))
    units_a = [_rows(first[0, s][:, None], windows) for s in range(n)]
    units_b = [_rows(second[1, s][:, None], windows) for s in range(n)]
    if n >= 2:
        noise_a, noise_b = _noise(first.mean(axis=2), False, "a"), _noise(second.mean(axis=2), False, "b")
    else:
        noise_a = noise_b = _noise(grid(rng, 2, main_sd, inter_sd, gamma).mean(axis=2), False, "borrowed")
    iv = difference(units_b, units_a, lambda m: m[:, 0], noise_b=noise_b, noise_a=noise_a)
    return decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


def level_trial(rng, n, main_sd, inter_sd, windows, shift) -> bool:
    """Decided? One run's own statistic (an explosion, a ΔP) against its true value: n seeds of method 1, σ from
    its setting's R × n table (seed and interaction mean squares), or borrowed from a 7 × 2 table with one seed."""
    gamma = rng.normal(0.0, NOISE_SD, W)
    losses = grid(rng, n, main_sd, inter_sd, gamma, shift)
    units = [_rows((losses[1, s] - gamma)[:, None], windows) for s in range(n)]
    source = losses if n >= 2 else grid(rng, 2, main_sd, inter_sd, gamma)
    iv = interval(units, lambda m: m[:, 0], seed_noise=_noise(source.mean(axis=2), False, "grid"), kind="t")
    return decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


def seed_sd(main_sd: float, inter_sd: float, paired: bool) -> float:
    """SD of one seed's statistic of one method as the basis sees it (the unit of the power column)."""
    return math.sqrt(inter_sd ** 2 + WINDOW_SE ** 2 + (0.0 if paired else main_sd ** 2))


ROUND_SD, TIME_SD, OUTLIERS = 0.05, 0.04, 0.05


def timing_cell(rng, rounds: int, ratio: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """ms of two methods over interleaved rounds: a shared round effect, log-normal noise, 5 % outliers × 3."""
    shared = rng.normal(0.0, ROUND_SD, rounds)
    a = np.exp(shared + rng.normal(0.0, TIME_SD, rounds)) * ratio * np.where(rng.random(rounds) < OUTLIERS, 3, 1)
    b = np.exp(shared + rng.normal(0.0, TIME_SD, rounds)) * np.where(rng.random(rounds) < OUTLIERS, 3, 1)
    return 10.0 * a, 10.0 * b


def timing_trial(rng, rounds: int, rise: float) -> bool:
    """Decided? The rise of ms(A)/ms(B) between two sizes (independent cells), as the timing claim computes it."""
    (a0, b0), (a1, b1) = timing_cell(rng, rounds), timing_cell(rng, rounds, 1.0 + rise)
    d0, d1 = median_ratio_draws(a0, b0, rng, 1000), median_ratio_draws(a1, b1, rng, 1000)
    r0, r1 = np.median(a0) / np.median(b0), np.median(a1) / np.median(b1)
    iv = percentile(r1 - r0, d1 - d0, "timing", rounds)
    return decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


SINK_ENCODINGS, SINK_SEQUENCES, SINK_LAYERS, SINK_NOISE = ("ALiBi", "Kerple", "FIRE"), 8, 2, 0.3
SINK_SE = SINK_NOISE / math.sqrt(SINK_SEQUENCES)  # SE of one run's mean log mass over its sequences
SINK_REGIMES = {"interaction dominates": 2 * SINK_SE, "sequence noise dominates": 0.5 * SINK_SE}


def sink_table(rng, n: int, inter_sd: float, shift: float = 0.0) -> pd.DataFrame:
    """A sink.csv of the attention-map runs: DAPE1x3-X (shifted by ``shift`` in log mass) and DAPE-X per encoding."""
    rows = []
    sequence = rng.normal(0.0, 0.5, SINK_SEQUENCES)
    for e, encoding in enumerate(SINK_ENCODINGS):
        seed_effect = rng.normal(0.0, 0.4, n)
        for method, moved in ((f"DAPE1x3-{encoding}", shift), (f"DAPE-{encoding}", 0.0)):
            for s in range(n):
                base = -2.0 + seed_effect[s] + rng.normal(0.0, inter_sd) + moved
                for q in range(SINK_SEQUENCES):
                    value = base + sequence[q] + rng.normal(0.0, SINK_NOISE)
                    for layer in range(SINK_LAYERS):
                        rows.append((method, f"{method}-run", s, 64, q, layer, math.exp(value + rng.normal(0, 0.1))))
    return pd.DataFrame(rows, columns=["method", "run", "seed", "eval_len", "sequence", "layer", "sink_mass"])


def sink_trial(rng, n: int, inter_sd: float, shift: float) -> bool:
    """Decided? The sink rule's check of the first encoding's pair, at a ratio threshold of 1 (zero margin)."""
    from dape_core.report.claim_context import Context
    from dape_core.report.sink_check import sink_stronger

    checks = sink_stronger(Context(sink=sink_table(rng, n, inter_sd, shift)), {"ratio": 1.0})
    first = next(c for c in checks if c["text"].startswith(f"DAPE1x3-{SINK_ENCODINGS[0]} "))
    return first["verdict"] != UNDECIDED


def sink_rows(trials: int, rng, seeds=(1, 2, 3, 5), power: bool = True) -> list[dict]:
    rows = []
    for regime, inter_sd in SINK_REGIMES.items():
        unit = math.sqrt(2 * inter_sd ** 2 + 2 * SINK_SE ** 2)  # SD of one seed's paired difference
        for n in seeds:
            rate, se = _rate(sum(sink_trial(rng, n, inter_sd, 0.0) for _ in range(trials)), trials)
            row = {"basis": "sink (paired differences, σ pooled over encodings)", "per_window_data": True,
                   "regime": regime, "seeds": n,
                   "sigma_from": f"{len(SINK_ENCODINGS)} encodings' paired differences" if n >= 2 else "none (n = 1)",
                   "trials": trials, "false_decisions": rate, "false_decisions_se": se}
            if power:
                row["power_at_2_sd"], row["power_se"] = _rate(
                    sum(sink_trial(rng, n, inter_sd, 2 * unit) for _ in range(trials)), trials)
            rows.append(row)
    return rows


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


KERNELS, KERNEL_MULTIPLES, KERNEL_TRAIN_LEN = (1, 3, 5, 7), (1, 2, 4, 8, 16), 32
KERNEL_REGIMES = {  # (run × seed SD, run × seed × length SD) of a run's log perplexity at one length
    "run noise dominates": (0.03, 0.01),
    "per-length noise dominates": (0.01, 0.03),
}
KERNEL_METHODS = {k: "DAPE-Kerple" if k == 1 else f"DAPE1x{k}-Kerple" for k in KERNELS}


def sweep_table(rng, role: str, runs: dict, n: int, run_sd: float, length_sd: float, moved, shift: float,
                multiples) -> pd.DataFrame:
    """Rows of lm_results.csv of one simulated setting (role ``role``, 600 steps, T 32) with the runs ``runs``
    (method → kernel size) at the ``multiples``, n seeds: a run's log perplexity at a length = level + seed effect
    (shared by the runs of a seed: one batch stream) + run × seed effect + run × seed × length noise, the methods
    ``moved(method)`` better by ``shift``; with one seed also the grid its seed noise is borrowed from (7 runs × 2
    seeds at 1200 steps, role central, the same noise)."""
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
    """The kernel sweep (DAPE-Kerple with kernels 1, 3, 5, 7; role kernel_sweep) at ×1 … ×16 (:func:`sweep_table`),
    kernel 3 moved by ``shift``."""
    return sweep_table(rng, "kernel_sweep", {method: k for k, method in KERNEL_METHODS.items()}, n, run_sd,
                       length_sd, lambda method: method == KERNEL_METHODS[3], shift, KERNEL_MULTIPLES)


def kernel_trial(rng, n: int, run_sd: float, length_sd: float, shift: float) -> bool:
    """Decided? The kernel-size rule as the claim runs it (:func:`dape_core.report.lm_checks.kernel_not_largest`
    on a simulated lm_results.csv) at a zero margin."""
    from dape_core.report.claim_context import Context
    from dape_core.report.lm_checks import kernel_not_largest

    [check] = kernel_not_largest(Context(kernel_table(rng, n, run_sd, length_sd, shift)), {"margin": 0.0})
    return check["verdict"] != UNDECIDED


def rule_row(decided, trials: int, power_trials: int, unit: float, **cell) -> dict:
    """A row of a rule simulated through its own check: ``decided(shift)`` one trial; the false-decision rate over
    ``trials`` null trials and the power at 2 ``unit`` over ``power_trials``, with their Monte-Carlo SEs."""
    rate, se = _rate(sum(decided(0.0) for _ in range(trials)), trials)
    row = {"basis": cell["basis"], "per_window_data": False, "regime": cell["regime"], "seeds": cell["seeds"],
           "sigma_from": cell["sigma_from"], "trials": trials, "false_decisions": rate, "false_decisions_se": se}
    if power_trials:
        row["power_at_2_sd"], row["power_se"] = _rate(sum(decided(2 * unit) for _ in range(power_trials)),
                                                      power_trials)
    return row


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


CHE_CLAIM_TASKS = (2, 12)  # the default's and decisive configurations' CHE family, and the paper's Table 6


def claim_rows(trials: int, seed: int, seeds=(1, 2, 3, 4), power_trials: int = 0, jobs: int = 1) -> list[dict]:
    """The claim-level rules' rows: a claim of six LM checks, and the CHE claim on 2 and 12 tasks."""
    lm = [(regime, n, trials, power_trials, seed) for regime in KERNEL_REGIMES for n in seeds]
    che = [(regime, tasks, n, trials, power_trials, seed) for regime in CHE_REGIMES for tasks in CHE_CLAIM_TASKS
           for n in seeds]
    return each_cell(claim_cell, lm, jobs) + each_cell(che_claim_cell, che, jobs)


def each_cell(row_of, cells: list, jobs: int) -> list[dict]:
    """``row_of`` of every cell, ``jobs`` cells at a time in worker processes (each cell draws from its own stream,
    so the rows do not depend on ``jobs``)."""
    if jobs <= 1:
        return [row_of(cell) for cell in cells]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(row_of, cells))


def _rate(hits: int, trials: int) -> tuple[float, float]:
    p = hits / trials
    return p, math.sqrt(max(p * (1 - p), 1.0 / trials) / trials)


def cell_rng(seed: int, *key) -> np.random.Generator:
    """A cell's own random stream, from ``seed`` and the cell's name: a cell draws the same trials whichever other
    cells run beside it (adding a seed count leaves every other row as it was)."""
    name = "|".join(map(str, key)).encode()
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(name)]))


def basis_cell(task: tuple) -> dict:
    """One row: a basis × window variant × regime × seed count; ``trials`` null trials (as many at 2 seed-SDs)."""
    kind, windows, regime, n, trials, seed, power = task
    rng = cell_rng(seed, kind, windows, regime, n)
    main_sd, inter_sd = REGIMES[regime]
    unit = seed_sd(main_sd, inter_sd, kind in ("paired", "own spread"))

    def once(shift):
        if kind == "unpaired":
            return unpaired_trial(rng, n, main_sd, inter_sd, windows, shift)
        if kind == "one run":
            return level_trial(rng, n, main_sd, inter_sd, windows, shift)
        return paired_trial(rng, n, main_sd, inter_sd, windows, shift, own_spread=kind != "paired")

    rate, se = _rate(sum(once(0.0) for _ in range(trials)), trials)
    row = {"basis": kind, "per_window_data": windows, "regime": regime, "seeds": n,
           "sigma_from": ("the pair's own seeds" if kind == "own spread" else
                          "a borrowed 7 × 2 grid" if n == 1 else f"its setting's 7 × {n} grid"),
           "trials": trials, "false_decisions": rate, "false_decisions_se": se}
    if power:
        row["power_at_2_sd"], row["power_se"] = _rate(sum(once(2 * unit) for _ in range(trials)), trials)
    return row


HETEROGENEITY = {  # the interaction SD of method 1 (one of the pair) over the others', and the interactions' law
    "one method at 2× the interaction SD": (2.0, "normal"),
    "one method at 3× the interaction SD": (3.0, "normal"),
    "interactions t with 3 df": (1.0, "t3"),
}
HETERO_RULES = {  # rule → seed counts it meets
    "pooled σ": (1, 2, 3, 4, 8),  # the setting's interaction mean square (a borrowed 7 × 2 grid's with 1 seed)
    "own spread": (2, 3, 4, 8),  # the pair's own per-seed differences, ν = n − 1
    "same pair, borrowed from 7 × 2": (1,),  # with 1 seed: the same two methods' differences in a 7 × S grid
    "same pair, borrowed from 7 × 4": (1,),
}


def hetero_grid(rng, n_seeds: int, factor: float, law: str) -> np.ndarray:
    """Per-seed statistics [R, n_seeds] of one setting (no per-window data; the windows' SE as noise): a seed main
    effect, a method × seed interaction whose SD is ``factor`` × the others' for method 1 (law normal, or t with 3
    df scaled to the same SD), and the mean's window noise."""
    main_sd, inter_sd = REGIMES["seed noise dominates"]
    draws = rng.standard_t(3, (R, n_seeds)) / math.sqrt(3) if law == "t3" else rng.normal(0.0, 1.0, (R, n_seeds))
    scale = np.full(R, inter_sd)
    scale[1] *= factor
    return (rng.normal(0.0, main_sd, n_seeds)[None, :] + scale[:, None] * draws
            + rng.normal(0.0, WINDOW_SE, (R, n_seeds)))


def hetero_trial(rng, rule: str, n: int, factor: float, law: str) -> bool:
    """Decided? Methods 0 and 1 (identical in mean, 1 noisier or heavy-tailed) paired by seed at n seeds, with the
    σ of ``rule`` (:data:`HETERO_RULES`), through :func:`dape_core.report.intervals.interval`."""
    table = hetero_grid(rng, n, factor, law)
    units = [np.array([[table[0, s], table[1, s]]]) for s in range(n)]
    if rule == "own spread":
        noise = None
    elif rule == "pooled σ":
        source = table if n >= 2 else hetero_grid(rng, 2, factor, law)
        one = _noise(source, True, "grid")
        noise = combine_noise([one, one])
    else:
        seeds = int(rule.rsplit("× ", 1)[1])
        source = hetero_grid(rng, seeds, factor, law)
        noise = SeedNoise(float(np.std(source[1] - source[0], ddof=1)), seeds - 1, "the same pair")
    iv = interval(units, lambda m: m[:, 1] - m[:, 0], seed_noise=noise)
    return decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


def hetero_cell(task: tuple) -> dict:
    """One row of the unequal-noise rows: a rule × noise × seed count, ``trials`` null trials."""
    rule, label, n, trials, seed = task
    factor, law = HETEROGENEITY[label]
    rng = cell_rng(seed, "heterogeneous", rule, label, n)
    rate, se = _rate(sum(hetero_trial(rng, rule, n, factor, law) for _ in range(trials)), trials)
    return {"basis": f"heterogeneous: {rule}", "per_window_data": False, "regime": label, "seeds": n,
            "sigma_from": rule, "trials": trials, "false_decisions": rate, "false_decisions_se": se}


LEAK_FACTOR = 2.3  # a no-tril run's method × seed SD over a tril run's, as the decisive grid measured (0.0581 / 0.0248)
LEAK_SEEDS = (1, 2, 3, 4)


def leakage_table(rng, n: int, shift: float = 0.0) -> pd.DataFrame:
    """lm_results.csv rows of the leakage ablation (role leakage, ×1): DAPE1x3-Kerple and DAPE1x3-ALiBi with tril and
    without, n seeds; a run's log perplexity = level + seed effect (shared by a seed's runs) + run × seed effect
    (``LEAK_FACTOR`` × larger without tril), the no-tril runs moved by ``shift``; with one seed also a tril-only
    grid of 7 runs × 2 seeds (the default's case, whose σ is of another kind)."""
    rows = []
    inter = KERNEL_REGIMES["run noise dominates"][0]

    def add(role, steps, runs, seeds):
        seed_effect = rng.normal(0.0, 0.05, seeds)
        for method, tril in runs:
            for s in range(seeds):
                effect = seed_effect[s] + rng.normal(0.0, inter * (1.0 if tril else LEAK_FACTOR))
                rows.append((f"{method}-S{steps}", role, 3, steps, s, method, tril, KERNEL_TRAIN_LEN,
                             math.exp(math.log(10.0) + effect - (0.0 if tril else shift))))

    add("leakage", 600, [(f"DAPE1x3-{e}{'' if tril else ' (no tril)'}", tril) for e in ("Kerple", "ALiBi")
                         for tril in (True, False)], n)
    if n == 1:
        add("central", 1200, [(f"M{i}", True) for i in range(R)], 2)
    df = pd.DataFrame(rows, columns=["run", "roles", "kernel_size", "steps", "seed", "method", "tril", "eval_len",
                                     "ppl"])
    encoding = df["method"].str.extract(r"DAPE1x3-(\w+)")[0].str.lower().fillna("kerple")
    return df.assign(families="f", dataset="code", encoding=encoding, processor="dape_v2", dape_width=32,
                     size="small", train_len=KERNEL_TRAIN_LEN, batch_size=16, status="ok")


def leakage_trial(rng, n: int, shift: float) -> bool:
    """Decided? ``leakage_collapse`` as the claims run it (its two routes, each pair's own spread), at a ratio
    threshold of 1 and an absolute one that never confirms (0): identical twins with and without tril."""
    from dataclasses import replace

    from dape_core.report.claims import CLAIMS, evaluate_claims

    [claim] = [c for c in CLAIMS if c.claim_id == "leakage_collapse"]
    zero = replace(claim, thresholds={"ratio": 1.0, "absolute": 0.0})
    verdict = evaluate_claims(leakage_table(rng, n, shift), claims=(zero,))["verdict"].iloc[0]
    return verdict != UNDECIDED


def leakage_cell(task: tuple) -> dict:
    n, trials, seed = task
    rng = cell_rng(seed, "heterogeneous", "leakage", n)
    rate, se = _rate(sum(leakage_trial(rng, n, 0.0) for _ in range(trials)), trials)
    return {"basis": "heterogeneous: the leakage claim (each twin pair's own spread)", "per_window_data": False,
            "regime": f"no-tril runs at {LEAK_FACTOR}× the tril runs' interaction SD", "seeds": n,
            "sigma_from": "each twin pair's own spread" if n >= 2 else "none (1 seed: no pair's own spread)",
            "trials": trials, "false_decisions": rate, "false_decisions_se": se}


def another_kind_cell(task: tuple) -> dict:
    """The rule a leakage comparison had with one seed: σ borrowed from a tril-only 7 × 2 grid, for twins whose
    no-tril side has ``LEAK_FACTOR`` × the interaction SD (through :func:`dape_core.report.intervals.interval`)."""
    trials, seed = task
    rng = cell_rng(seed, "heterogeneous", "another kind")
    main_sd, inter_sd = REGIMES["seed noise dominates"]
    hits = 0
    for _ in range(trials):
        grid_noise = _noise(hetero_grid(rng, 2, 1.0, "normal"), True, "tril-only grid")
        twins = rng.normal(0.0, main_sd) + rng.normal(0.0, inter_sd, 2) * np.array([1.0, LEAK_FACTOR])
        iv = interval([np.array([twins])], lambda m: m[:, 1] - m[:, 0], seed_noise=combine_noise([grid_noise] * 2))
        hits += decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED
    rate, se = _rate(hits, trials)
    return {"basis": "heterogeneous: σ of another kind (tril-only grid, the rule before)", "per_window_data": False,
            "regime": f"no-tril runs at {LEAK_FACTOR}× the tril runs' interaction SD", "seeds": 1,
            "sigma_from": "a tril-only 7 × 2 grid", "trials": trials, "false_decisions": rate,
            "false_decisions_se": se}


def hetero_rows(trials: int, seed: int, jobs: int = 1, leakage_trials: int = 1000) -> list[dict]:
    """The paired comparison under unequal method noise and heavy tails: the pooled σ the paired basis uses, the
    pair's own spread, and the same pair's spread borrowed from a grid (for one seed); the leakage claim through
    its own check, and the σ of another kind it used to borrow."""
    cells = [(rule, label, n, trials, seed) for rule, counts in HETERO_RULES.items() for label in HETEROGENEITY
             for n in counts]
    leak = [(n, leakage_trials, seed) for n in LEAK_SEEDS] if leakage_trials else []
    return (each_cell(hetero_cell, cells, jobs) + each_cell(another_kind_cell, [(trials, seed)], jobs)
            + each_cell(leakage_cell, leak, jobs))


DESIGN_PILOT_SEEDS = (2, 3, 4)
DESIGN_MAX_SEEDS = 8  # design.max_seeds's default


def design_trial(rng, pilot_n: int, factor: float, law: str) -> tuple[bool, bool]:
    """(run, decided) of the design stage on two identical methods paired by seed (method 1 ``factor`` × noisier,
    interactions of ``law``): a pilot of ``pilot_n`` seeds sized for fresh seeds
    (:func:`dape_core.report.intervals.seeds_to_decide` with ``fresh``), chosen by
    :func:`dape_core.report.design.choose` (at most :data:`DESIGN_MAX_SEEDS`), then a fresh sample of that many
    seeds read alone with the pair's own spread — the claims' functions, not copies."""
    from dape_core.report import design
    from dape_core.report.intervals import seeds_to_decide

    def pair(table):
        return [np.array([[table[0, s], table[1, s]]]) for s in range(table.shape[1])]

    rule = dict(side=1, confirm=0.0, refute=0.0)
    pilot = interval(pair(hetero_grid(rng, pilot_n, factor, law)), lambda m: m[:, 1] - m[:, 0])
    n, text = seeds_to_decide(pilot, **rule, fresh=True)
    claims = pd.DataFrame([{"claim_id": "c", "verdict": decide(pilot, **rule), "fresh_seeds": n, "fresh_text": text,
                            "fresh_runs": ["a", "b"]}])
    chosen = design.choose(claims, {"a": 1.0, "b": 1.0},
                           design.DesignSettings(budget_minutes=1e6, max_seeds=DESIGN_MAX_SEEDS))["chosen"]
    if not chosen:
        return False, False
    fresh = interval(pair(hetero_grid(rng, chosen[0]["seeds"], factor, law)), lambda m: m[:, 1] - m[:, 0])
    return True, decide(fresh, **rule) != UNDECIDED


def design_cell(task: tuple) -> dict:
    """One row of the design stage's rows: a noise law × pilot seeds, ``trials`` null trials; the rate is of the
    trials the design ran (those whose pilot sized at most :data:`DESIGN_MAX_SEEDS` fresh seeds)."""
    label, pilot_n, trials, seed = task
    factor, law = HETEROGENEITY[label] if label in HETEROGENEITY else (1.0, "normal")
    rng = cell_rng(seed, "design", label, pilot_n)
    results = [design_trial(rng, pilot_n, factor, law) for _ in range(trials)]
    ran = sum(r for r, _ in results)
    rate, se = _rate(sum(d for _, d in results), max(1, ran))
    return {"basis": "design stage: pilot chooses, fresh seeds decide (own spread)", "per_window_data": False,
            "regime": label, "seeds": pilot_n, "sigma_from": f"the fresh seeds' own spread ({ran} of {trials} "
            f"trials sized ≤ {DESIGN_MAX_SEEDS} fresh seeds)", "trials": ran, "false_decisions": rate,
            "false_decisions_se": se}


def design_rows(trials: int, seed: int, jobs: int = 1) -> list[dict]:
    """The design stage under equal noise, one method at 2× and 3× the others' interaction SD, and t₃ tails, for
    pilots of 2, 3 and 4 seeds."""
    labels = ("equal noise", *HETEROGENEITY)
    return each_cell(design_cell, [(label, n, trials, seed) for label in labels for n in DESIGN_PILOT_SEEDS], jobs)


def timing_row(task: tuple) -> dict:
    """The timing rule's row at ``rounds`` interleaved rounds per cell."""
    rounds, trials, seed, power = task
    rng = cell_rng(seed, "timing", rounds)
    rate, se = _rate(sum(timing_trial(rng, rounds, 0.0) for _ in range(trials)), trials)
    row = {"basis": "timing (ratio of medians, rounds resampled)", "per_window_data": False,
           "regime": "interleaved rounds, 5 % outliers", "seeds": rounds, "sigma_from": "bootstrap of rounds",
           "trials": trials, "false_decisions": rate, "false_decisions_se": se}
    if power:
        spread = np.std([np.median(a) / np.median(b) for a, b in (timing_cell(rng, rounds) for _ in range(400))])
        row["power_at_2_sd"], row["power_se"] = _rate(
            sum(timing_trial(rng, rounds, 2 * spread) for _ in range(trials)), trials)
    return row


def calibration(trials: int, seed: int = 0, seeds=SEEDS, regimes=tuple(REGIMES), power: bool = True,
                timing_rounds=(10, 20), sink_trials: int = 0, che_trials: int = 0, kernel_trials: int = 0,
                kernel_power_trials: int = 0, claim_trials: int = 0, claim_power_trials: int = 0,
                hetero_trials: int = 0, jobs: int = 1) -> pd.DataFrame:
    """One row per basis × regime × seed count: false-decision rate and power with their Monte-Carlo SEs; each
    cell on its own random stream (:func:`cell_rng`), ``jobs`` cells at a time in worker processes. The rules that
    run the claims' own checks join with ``sink_trials`` (sink and CHE), ``kernel_trials`` and ``claim_trials``
    (claims of several checks), ``hetero_trials`` (the paired comparison under unequal method noise)."""
    cells = [(kind, windows, regime, n, trials, seed, power) for regime in regimes for n in seeds
             for kind in ("paired", "unpaired", "one run", "own spread") if not (kind == "own spread" and n < 2)
             for windows in (True, False)]
    timings = [(rounds, trials, seed, power) for rounds in timing_rounds]
    rows = each_cell(basis_cell, cells, jobs) + each_cell(timing_row, timings, jobs)
    if sink_trials:
        rows += sink_che_rows(sink_trials, che_trials or max(1, sink_trials // 5), seed, power=power)
    if kernel_trials:
        rows += kernel_rows(kernel_trials, seed, power_trials=kernel_power_trials if power else 0, jobs=jobs)
    if claim_trials:
        rows += claim_rows(claim_trials, seed, power_trials=claim_power_trials if power else 0, jobs=jobs)
    if hetero_trials:
        rows += hetero_rows(hetero_trials, seed, jobs=jobs)
        rows += design_rows(hetero_trials, seed, jobs=jobs)
    return pd.DataFrame(rows)


def sink_che_rows(sink_trials: int, che_trials: int, seed: int, power: bool = True) -> list[dict]:
    """The sink and CHE rules' rows, on one random stream."""
    rng = cell_rng(seed, "sink and CHE")
    return sink_rows(sink_trials, rng, power=power) + che_rows(che_trials, rng, power=power)


#: the groups of rows a partial rerun recomputes (``--only``): each a test of a row's basis
GROUPS = {
    "bases": lambda basis: not basis.startswith(("sink", "CHE", "kernel", "claim", "heterogeneous", "design")),
    "heterogeneity": lambda basis: basis.startswith("heterogeneous"),
    "sink": lambda basis: basis.startswith(("sink", "CHE")),
    "kernel": lambda basis: basis.startswith("kernel"),
    "claims": lambda basis: basis.startswith("claim"),
    "design": lambda basis: basis.startswith("design"),
}


def positive_int(text: str) -> int:
    """An argument that must be a whole number ≥ 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed values: a whole number ≥ 1")
    return value


def kept_rows(path: str, recomputed: str) -> pd.DataFrame:
    """The rows of an earlier results file that a partial rerun of the group ``recomputed`` (of ``GROUPS``) keeps:
    those of the other groups. A missing, cut or foreign file stops with one line naming it."""
    columns = {"basis", "per_window_data", "regime", "seeds", "trials", "false_decisions", "false_decisions_se"}
    try:
        earlier = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise SystemExit(f"{path}: cannot read the earlier results this partial rerun keeps rows of ({err})")
    if not columns <= set(earlier.columns) or earlier[sorted(columns - {"basis"})].isna().any().any():
        raise SystemExit(f"{path}: not a complete verdict_calibration results file (it needs the columns "
                         f"{', '.join(sorted(columns))}, filled in every row)")
    return earlier[~earlier["basis"].astype(str).map(GROUPS[recomputed])]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=positive_int, default=10000, help="trials per cell of the interval bases")
    p.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1,
                   help="cells computed at a time (processes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sink-trials", type=positive_int, default=500, help="trials per cell of the sink rule "
                   "(slower: it runs the claim's own check on simulated tables)")
    p.add_argument("--che-trials", type=positive_int, default=100, help="trials per cell of the CHE rule (12 tasks "
                   "each)")
    p.add_argument("--kernel-trials", type=positive_int, default=1000, help="null trials per cell of the "
                   "kernel-size rule (its own check on simulated tables, about 0.2 s a trial)")
    p.add_argument("--kernel-power-trials", type=positive_int, default=200, help="trials per cell of the "
                   "kernel-size rule's power")
    p.add_argument("--claim-trials", type=positive_int, default=1000, help="null trials per cell of the claim-level "
                   "rules (a claim of six checks through evaluate_claims; the CHE claim on 2 and 12 tasks)")
    p.add_argument("--claim-power-trials", type=positive_int, default=200, help="trials per cell of the "
                   "claim-level rules' power")
    p.add_argument("--only", choices=sorted(GROUPS), help="recompute one group of rows (bases: the interval bases "
                   "and the timing rule; sink: the sink and CHE rules; kernel: the kernel-size rule; claims: the "
                   "claim-level rules; heterogeneity: the paired comparison under unequal method noise; design: the "
                   "design stage, pilot → fresh seeds) and keep the "
                   "others from --out")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    if args.only is None:
        df = calibration(args.trials, args.seed, sink_trials=args.sink_trials, che_trials=args.che_trials,
                         kernel_trials=args.kernel_trials, kernel_power_trials=args.kernel_power_trials,
                         claim_trials=args.claim_trials, claim_power_trials=args.claim_power_trials,
                         hetero_trials=args.trials, jobs=args.jobs)
    else:
        kept = kept_rows(args.out, args.only)
        fresh = {"bases": lambda: calibration(args.trials, args.seed, jobs=args.jobs).to_dict("records"),
                 "sink": lambda: sink_che_rows(args.sink_trials, args.che_trials, args.seed),
                 "kernel": lambda: kernel_rows(args.kernel_trials, args.seed,
                                               power_trials=args.kernel_power_trials, jobs=args.jobs),
                 "claims": lambda: claim_rows(args.claim_trials, args.seed, power_trials=args.claim_power_trials,
                                              jobs=args.jobs),
                 "heterogeneity": lambda: hetero_rows(args.trials, args.seed, jobs=args.jobs),
                 "design": lambda: design_rows(args.trials, args.seed, jobs=args.jobs)}[args.only]()
        df = pd.concat([kept, pd.DataFrame(fresh)], ignore_index=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False, float_format="%.4f")
    worst = df.loc[df["false_decisions"].idxmax()]
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"largest false-decision rate: {worst['false_decisions']:.3f} ± {worst['false_decisions_se']:.3f} "
          f"({worst['basis']}, {worst['seeds']} seeds, {worst['regime']}); nominal 0.05")
    return 0


if __name__ == "__main__":
    sys.exit(main())
