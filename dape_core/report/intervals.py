"""Interval verdicts: a nested, paired bootstrap over seeds and evaluation windows, and three outcomes.

A comparison's data are *units*, one per seed (one trained model of each method compared), each a matrix
[rows, k]: its rows are the evaluation windows both methods scored (the same windows for every method and length,
so rows pair them), its k columns the quantities compared (e.g. the per-window loss of method A at each length, then
of method B). A unit without per-window data has one row. One bootstrap draw resamples the units with replacement
and, within each drawn unit, its rows with replacement (the same rows for every column); the per-seed statistic
is computed from the column means of the drawn rows and averaged over the drawn units (the two-stage bootstrap
of hierarchical data, Davison & Hinkley 1997, ch. 3). Resampling n seeds with replacement understates their
spread by (n − 1)/n, which matters with the two or three seeds of a run: each seed's centre (its statistic on all
its windows) is moved away from the mean of the centres by √(n/(n − 1)) before its windows are resampled. The
interval is the 2.5 and 97.5 percentiles of the draws (conservative order statistics, so ±∞ from a diverged run
pass through). Draws are seeded from the check's own key, so a verdict does not depend on which other claims were
evaluated or in which order.

Calibration: with two seeds the seed level of any bootstrap sees only two values, so when the seed-to-seed noise
of a difference is as large as its window noise (as it is at this project's default scale) the interval excludes
0 more often than 5 % of the time for a method compared with itself; three seeds come close to the nominal rate
(``tests/test_verdicts.py`` bounds both rates on synthetic losses at that noise). More seeds, not a looser rule,
are the remedy.

What the interval saw is its *basis*:

- "seeds × windows": several seeds, and windows within each;
- "windows only (1 seed: seed noise not seen)": one seed per method — the interval says whether the difference
  between these two trained models exceeds the noise of the evaluation data; it cannot say whether it would
  survive retraining with another seed;
- "seeds only (no per-window data)": several seeds, their aggregate numbers only;
- "no interval (1 seed, no per-window data)": nothing to resample: the interval is (−∞, +∞) and the verdict
  UNDECIDED (unless a divergence decides it: a diverged run's perplexity is +∞ in every draw);
- "point (the paper's printed numbers)": the paper's own numbers, one value each; the interval is the point.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

CONFIRMED, REFUTED, UNDECIDED, NOT_RUN = "CONFIRMED", "REFUTED", "UNDECIDED", "NOT-RUN"
VERDICTS = (CONFIRMED, REFUTED, UNDECIDED, NOT_RUN)
MARKS = {CONFIRMED: "✓", REFUTED: "✗", UNDECIDED: "?"}
LEVEL = 0.95
RESAMPLES = 2000
SEED = 0
POINT = "point (the paper's printed numbers)"

#: the per-seed statistic: column means of the drawn rows [draws, k] → one value per draw [draws]
Statistic = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Interval:
    """A statistic's estimate and its 95 % interval, with what the interval saw."""

    estimate: float
    low: float
    high: float
    basis: str
    n_seeds: int
    n_rows: int  # rows (windows, lengths) per seed, the fewest over seeds; 1 without per-row data

    def map(self, f: Callable[[float], float]) -> Interval:
        """The same interval through an increasing function (e.g. log-ratio → relative gain)."""
        return Interval(f(self.estimate), f(self.low), f(self.high), self.basis, self.n_seeds, self.n_rows)

    def scope(self) -> str:
        """"2 seeds × 32 windows" style counts for the text of a check."""
        return self.basis if self.basis == POINT else f"{self.basis}: {self.n_seeds} × {self.n_rows}"


def basis(n_seeds: int, n_rows: int, inner: str = "windows") -> str:
    """What an interval over ``n_seeds`` units of ``n_rows`` rows each saw (see the module docstring)."""
    if n_seeds >= 2:
        return f"seeds × {inner}" if n_rows >= 2 else f"seeds only (no per-{inner[:-1]} data)"
    if n_rows >= 2:
        return f"{inner} only (1 seed: seed noise not seen)"
    return f"no interval (1 seed, no per-{inner[:-1]} data)"


def rng_for(key: str) -> np.random.Generator:
    """The generator of one check, seeded from its key (stable across runs and Python processes)."""
    return np.random.default_rng([SEED, zlib.crc32(key.encode("utf-8"))])


def _centres(units: Sequence[np.ndarray], statistic: Statistic) -> np.ndarray:
    """Each unit's statistic on all its rows."""
    with np.errstate(invalid="ignore"):
        return np.array([statistic(values.mean(axis=0)[None])[0] for values in units])


def _draws(units: Sequence[np.ndarray], statistic: Statistic, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Bootstrap draws of mean-over-units of statistic(column means of each unit's resampled rows), each unit's
    centre moved away from the mean of the centres by √(n/(n−1)) (n ≥ 2 units, all finite)."""
    n = len(units)
    centres = _centres(units, statistic)
    shift = np.zeros(n)
    if n >= 2 and np.isfinite(centres).all():
        shift = (math.sqrt(n / (n - 1)) - 1) * (centres - centres.mean())
    pick = rng.integers(0, n, size=(resamples, n))
    per_unit = np.empty((resamples, n))
    for u, values in enumerate(units):
        where = pick == u
        count = int(where.sum())
        if count == 0:
            continue
        rows = rng.integers(0, len(values), size=(count, len(values)))
        with np.errstate(invalid="ignore"):
            per_unit[where] = statistic(values[rows].mean(axis=1)) + shift[u]
    with np.errstate(invalid="ignore"):
        return per_unit.mean(axis=1)


def _estimate(units: Sequence[np.ndarray], statistic: Statistic) -> float:
    with np.errstate(invalid="ignore"):
        return float(np.mean(_centres(units, statistic)))


def _bounds(draws: np.ndarray) -> tuple[float, float]:
    """The central ``LEVEL`` percentile interval; (−∞, +∞) when a draw is undefined (both sides diverged)."""
    if np.isnan(draws).any():
        return float("-inf"), float("inf")
    alpha = (1 - LEVEL) / 2
    return float(np.quantile(draws, alpha, method="lower")), float(np.quantile(draws, 1 - alpha, method="higher"))


def _finish(estimate: float, draws: np.ndarray | None, n_seeds: int, n_rows: int, inner: str,
            point: bool) -> Interval:
    if point:
        return Interval(estimate, estimate, estimate, POINT, n_seeds, n_rows)
    label = basis(n_seeds, n_rows, inner)
    if draws is None:  # nothing to resample: only a divergence (±∞) is a fact rather than a point among others
        low, high = (estimate, estimate) if np.isinf(estimate) else (float("-inf"), float("inf"))
        return Interval(estimate, low, high, label, n_seeds, n_rows)
    return Interval(estimate, *_bounds(draws), label, n_seeds, n_rows)


def interval(units: Sequence[np.ndarray], statistic: Statistic, key: str, *, point: bool = False,
             inner: str = "windows", resamples: int = RESAMPLES) -> Interval:
    """The mean over units (seeds) of ``statistic``, with its nested bootstrap interval (paired: every column of a
    unit is resampled with the same rows)."""
    units = [np.atleast_2d(np.asarray(u, dtype=float)) for u in units]
    n_rows = min(len(u) for u in units)
    estimate = _estimate(units, statistic)
    resamplable = len(units) >= 2 or n_rows >= 2
    draws = _draws(units, statistic, rng_for(key), resamples) if resamplable and not point else None
    return _finish(estimate, draws, len(units), n_rows, inner, point)


def difference(units_b: Sequence[np.ndarray], units_a: Sequence[np.ndarray], statistic: Statistic, key: str, *,
               point: bool = False, inner: str = "windows", resamples: int = RESAMPLES) -> Interval:
    """mean statistic over B's units − over A's units, each side resampled on its own (unpaired: the methods share
    no seed)."""
    units_a = [np.atleast_2d(np.asarray(u, dtype=float)) for u in units_a]
    units_b = [np.atleast_2d(np.asarray(u, dtype=float)) for u in units_b]
    n_seeds = min(len(units_a), len(units_b))
    n_rows = min(len(u) for u in [*units_a, *units_b])
    with np.errstate(invalid="ignore"):
        estimate = _estimate(units_b, statistic) - _estimate(units_a, statistic)
    draws = None
    if not point and (n_seeds >= 2 or n_rows >= 2):
        rng = rng_for(key)
        with np.errstate(invalid="ignore"):
            draws = _draws(units_b, statistic, rng, resamples) - _draws(units_a, statistic, rng, resamples)
    return _finish(estimate, draws, n_seeds, n_rows, inner, point)


def decide(iv: Interval, *, side: int, confirm: float, refute: float) -> str:
    """CONFIRMED when the whole interval lies on the claimed side beyond ``confirm`` (side +1: low ≥ confirm and
    low > refute; side −1: high ≤ confirm and high < refute), REFUTED when the whole interval lies beyond
    ``refute`` on the other side (side +1: high < refute; side −1: low > refute), UNDECIDED otherwise."""
    low, high = iv.low, iv.high
    if np.isnan(low) or np.isnan(high):
        return UNDECIDED
    if side > 0:
        return CONFIRMED if low >= confirm and low > refute else REFUTED if high < refute else UNDECIDED
    return CONFIRMED if high <= confirm and high < refute else REFUTED if low > refute else UNDECIDED


def combine(verdicts: Sequence[str]) -> str:
    """A claim of several checks: CONFIRMED when all are, REFUTED when any is, else UNDECIDED; NOT-RUN when none."""
    if not verdicts:
        return NOT_RUN
    if any(v == REFUTED for v in verdicts):
        return REFUTED
    return CONFIRMED if all(v == CONFIRMED for v in verdicts) else UNDECIDED
