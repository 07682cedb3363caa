"""What every rule's simulation shares: the seed-statistics grid, its pooled noise, cell streams, workers, rule rows."""

from __future__ import annotations

import math
import zlib

import numpy as np

from dape_core.report.intervals import UNDECIDED, SeedNoise, decide, simultaneous
from dape_core.report.seed_noise import table_variance


R, W, NOISE_SD = 7, 64, 0.9

WINDOW_SE = NOISE_SD / math.sqrt(W)  # SE of one method's mean over its windows

REGIMES = {  # (seed main effect SD, interaction SD)
    "seed noise dominates": (3 * WINDOW_SE, 2 * WINDOW_SE),
    "seed main effect dominates": (4 * WINDOW_SE, 0.5 * WINDOW_SE),
    "window noise dominates": (0.5 * WINDOW_SE, 0.25 * WINDOW_SE),
}

#: Holm's strictest divisor: the step-down's first step reads each claim at 1 − 0.05/18 (0.28 %), so a rule must hold
#: there too (:mod:`dape_core.report.holm`)
HOLM_DIVISOR = 18
#: the fewest null trials a cell is read on at 1 − 0.05/18 (SE 0.037 % at 0.28 %)
TAIL_TRIALS = 20000

SEEDS = (1, 2, 3, 4, 5, 8)
#: the seed counts of a design's fresh seeds beyond those: a check read on 1024 windows at ×1 gets up to
#: design.max_seeds (32 in config.yaml) fresh seeds per method; the interval bases are simulated there too
MANY_SEEDS = (16, 32)


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


def seed_sd(main_sd: float, inter_sd: float, paired: bool) -> float:
    """SD of one seed's statistic of one method as the basis sees it (the unit of the power column)."""
    return math.sqrt(inter_sd ** 2 + WINDOW_SE ** 2 + (0.0 if paired else main_sd ** 2))


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


def each_cell(row_of, cells: list, jobs: int) -> list[dict]:
    """``row_of`` of every cell, ``jobs`` cells at a time in worker processes (each cell draws from its own stream,
    so the rows do not depend on ``jobs``)."""
    if jobs <= 1:
        return [row_of(cell) for cell in cells]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(row_of, cells))


def decided(iv, side: int = 1, confirm: float = 0.0, refute: float = 0.0) -> tuple[bool, bool]:
    """(decided at 95 %, at 1 − 0.05/:data:`HOLM_DIVISOR`): ``decide`` on the interval and on it widened to Holm's
    strictest level (:func:`~dape_core.report.intervals.simultaneous`, as ``family_level`` widens)."""
    rule = dict(side=side, confirm=confirm, refute=refute)
    return decide(iv, **rule) != UNDECIDED, decide(simultaneous(iv, HOLM_DIVISOR), **rule) != UNDECIDED


def null_columns(null: list[tuple[bool, bool]]) -> dict:
    """A row's trials and false-decision rates at 95 % and at 1 − 0.05/:data:`HOLM_DIVISOR`, with their Monte-Carlo
    SEs, from its null trials' :func:`decided` outcomes."""
    rate, se = _rate(sum(d for d, _ in null), len(null))
    tail, tail_se = _rate(sum(d for _, d in null), len(null))
    return {"trials": len(null), "false_decisions": rate, "false_decisions_se": se, "false_decisions_at_18": tail,
            "false_decisions_at_18_se": tail_se}


def _rate(hits: int, trials: int) -> tuple[float, float]:
    p = hits / trials
    return p, math.sqrt(max(p * (1 - p), 1.0 / trials) / trials)


def cell_rng(seed: int, *key) -> np.random.Generator:
    """A cell's own random stream, from ``seed`` and the cell's name: a cell draws the same trials whichever other
    cells run beside it (adding a seed count leaves every other row as it was)."""
    name = "|".join(map(str, key)).encode()
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(name)]))
