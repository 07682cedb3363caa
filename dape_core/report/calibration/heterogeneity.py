"""Comparisons when methods differ in noise (2×, 3×, t₃ interactions), and the leakage claim through its own check
beside the σ of another kind it borrowed before."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dape_core.report.intervals import SeedNoise, UNDECIDED, combine_noise, decide, difference, interval
from .common import R, REGIMES, WINDOW_SE, _noise, _rate, cell_rng, decided, each_cell, null_columns
from .kernel import KERNEL_REGIMES, KERNEL_TRAIN_LEN


HETEROGENEITY = {  # the interaction SD of method 1 (one of the pair) over the others', and the interactions' law
    "one method at 2× the interaction SD": (2.0, "normal"),
    "one method at 3× the interaction SD": (3.0, "normal"),
    "interactions t with 3 df": (1.0, "t3"),
}

HETERO_RULES = {  # rule → seed counts it meets
    "pooled σ": (1, 2, 3, 4, 8),  # the setting's interaction mean square (a borrowed 7 × 2 grid's with 1 seed)
    "own spread": (2, 3, 4, 8, 16, 32),  # the pair's own per-seed differences, ν = n − 1
    "same pair, borrowed from 7 × 2": (1,),  # with 1 seed: the same two methods' differences in a 7 × S grid
    "same pair, borrowed from 7 × 4": (1,),
    # unpaired (two settings, independent seed effects; Welch) and one run's own statistic against its true value
    "unpaired, pooled σ": (1, 2, 3, 4, 8),  # each side its setting's within-run σ (the rule before)
    "unpaired, own spread": (2, 3, 4, 8, 16, 32),  # each side its own seeds' spread, Welch–Satterthwaite ν
    "unpaired, the rule": (1, 2, 3, 4),  # own spread, or with one seed a borrowed σ as a plan only (own_or_borrowed)
    "one run, pooled σ": (1, 2, 3, 4, 8),
    "one run, own spread": (2, 3, 4, 8, 16, 32),  # the run's own seeds, ν = n − 1
    "one run, the rule": (1, 2, 3, 4),
}


def hetero_grid(rng, n_seeds: int, factor: float, law: str) -> np.ndarray:
    """Per-seed statistics [R, n_seeds] of one setting (no per-window data): seed main effect + method × seed
    interaction (method 1's SD ``factor`` × the others'; normal, or t₃ scaled to the same SD) + window noise."""
    main_sd, inter_sd = REGIMES["seed noise dominates"]
    draws = rng.standard_t(3, (R, n_seeds)) / math.sqrt(3) if law == "t3" else rng.normal(0.0, 1.0, (R, n_seeds))
    scale = np.full(R, inter_sd)
    scale[1] *= factor
    return (rng.normal(0.0, main_sd, n_seeds)[None, :] + scale[:, None] * draws
            + rng.normal(0.0, WINDOW_SE, (R, n_seeds)))


def side_noise(rule: str, grid: np.ndarray, n: int, rng, factor: float, law: str, name: str):
    """The σ a run or unpaired side of ``grid`` (n seeds) reads under ``rule``: own spread (None), its setting's pooled
    within-run σ (one seed: a same-noise 7 × 2 grid's), or the claims' rule (``own_or_borrowed``)."""
    from dape_core.report.claim_context import own_or_borrowed

    if rule.endswith("own spread"):
        return None
    pooled = _noise(grid if n >= 2 else hetero_grid(rng, 2, factor, law), False, name)
    return own_or_borrowed(pooled, n) if rule.endswith("the rule") else pooled


def hetero_trial(rng, rule: str, n: int, factor: float, law: str, tail: bool = False):
    """Decided? Methods 0 and 1 (equal means; 1 noisier or heavy-tailed) at n seeds with the σ of ``rule``
    (:data:`HETERO_RULES`); ``tail``: (at 95 %, at 1 − 0.05/18)."""
    iv = _hetero_interval(rng, rule, n, factor, law)
    return decided(iv) if tail else decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


def _hetero_interval(rng, rule: str, n: int, factor: float, law: str):
    """The interval of :func:`hetero_trial`'s comparison."""
    table = hetero_grid(rng, n, factor, law)
    if rule.startswith("unpaired"):  # method 0 of one setting against the noisier method 1 of another
        other = hetero_grid(rng, n, factor, law)
        noise_b, noise_a = (side_noise(rule, grid, n, rng, factor, law, name)
                            for grid, name in ((other, "setting B"), (table, "setting A")))
        return difference([np.array([[v]]) for v in other[1]], [np.array([[v]]) for v in table[0]],
                          lambda m: m[:, 0], noise_b=noise_b, noise_a=noise_a)
    if rule.startswith("one run"):  # the noisier method's own statistic (true value 0)
        noise = side_noise(rule, table, n, rng, factor, law, "setting")
        return interval([np.array([[v]]) for v in table[1]], lambda m: m[:, 0], seed_noise=noise, kind="t")
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
    return interval(units, lambda m: m[:, 1] - m[:, 0], seed_noise=noise)


def hetero_cell(task: tuple) -> dict:
    """One row of the unequal-noise rows: a rule × noise × seed count, ``trials`` null trials."""
    rule, label, n, trials, seed = task
    factor, law = HETEROGENEITY[label]
    rng = cell_rng(seed, "heterogeneous", rule, label, n)
    return {"basis": f"heterogeneous: {rule}", "per_window_data": False, "regime": label, "seeds": n,
            "sigma_from": rule,
            **null_columns([hetero_trial(rng, rule, n, factor, law, tail=True) for _ in range(trials)])}


LEAK_FACTOR = 2.3  # no-tril over tril runs' method × seed SD, as the design-stage pilot measured (docs/verdicts.md)

LEAK_SEEDS = (1, 2, 3, 4)


def leakage_table(rng, n: int, shift: float = 0.0) -> pd.DataFrame:
    """lm_results.csv rows of the leakage ablation (role leakage, ×1): DAPE1x3-Kerple and DAPE1x3-ALiBi with and without
    tril, n seeds; log perplexity = level + seed effect (shared by a seed's runs) + run × seed effect (``LEAK_FACTOR`` ×
    larger without tril), no-tril runs moved by ``shift``; with one seed also a tril-only 7 runs × 2 seeds grid (the
    default's case, a σ of another kind)."""
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
    """The rule before for a leakage comparison with one seed: σ borrowed from a tril-only 7 × 2 grid, for twins whose
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
    """The unequal-noise rows: the paired comparison (pooled σ, own spread, a borrowed spread at one seed) under unequal
    method noise and heavy tails, the leakage claim through its own check, and σ of another kind (the rule before)."""
    cells = [(rule, label, n, trials, seed) for rule, counts in HETERO_RULES.items() for label in HETEROGENEITY
             for n in counts]
    leak = [(n, leakage_trials, seed) for n in LEAK_SEEDS] if leakage_trials else []
    return (each_cell(hetero_cell, cells, jobs) + each_cell(another_kind_cell, [(trials, seed)], jobs)
            + each_cell(leakage_cell, leak, jobs))
