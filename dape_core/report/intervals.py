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

One seed per method: the windows of one trained model say nothing about another training seed, so a 1-seed
interval is never read from its windows alone. With a :class:`SeedNoise` (the between-seed SD σ of the check's
statistic and its degrees of freedom ν, estimated where the grid trains methods with several seeds:
:mod:`dape_core.report.seed_noise`) every bootstrap draw of the windows gets an independent seed offset σ·t_ν —
the predictive distribution of one new seed's deviation when σ² is estimated with ν degrees of freedom (a normal
seed effect with unknown variance: Student's t, Gelman et al., *Bayesian Data Analysis*, 3rd ed., §3.2), wider
than Normal(0, σ) by exactly the uncertainty of the estimate. Without one the interval is (−∞, +∞): UNDECIDED.

What the interval saw is its *basis*:

- "seeds × windows": several seeds, and windows within each;
- "1 seed + seed noise from <source>": one seed per method, its windows resampled and a seed offset σ·t_ν added
  to each draw (σ and ν are in the check's text and numbers);
- "1 seed (seed noise not estimated: no setting has several seeds)": one seed and no multi-seed source: the
  interval is (−∞, +∞) and the verdict UNDECIDED (unless a divergence decides it);
- "seeds only (no per-window data)": several seeds, their aggregate numbers only;
- "1 seed + seed noise from <source> (no per-window data)": one seed without windows: the seed offset alone;
- "point (the paper's printed numbers)": the paper's own numbers, one value each; the interval is the point.

An interval also carries ``unit_sd``, the SD of the statistic of one seed (seed noise and that seed's window
noise together, on the statistic's scale), which :func:`seeds_to_decide` turns into the seeds a decision needs.
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
NO_SEED_NOISE = "1 seed (seed noise not estimated: no setting has several seeds)"
#: the power rule of :func:`seeds_to_decide`: z of the two-sided 95 % interval and of 80 % power
Z_LEVEL, Z_POWER = 1.959964, 0.841621
MAX_SEEDS = 100

#: the per-seed statistic: column means of the drawn rows [draws, k] → one value per draw [draws]
Statistic = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class SeedNoise:
    """The between-seed SD ``sd`` of a check's statistic (one seed per method), its degrees of freedom ``df`` and
    where it was estimated (``source``)."""

    sd: float
    df: int
    source: str

    def text(self) -> str:
        """"seed noise σ 0.024 (ν 6)" for the text of a check."""
        return f"seed noise σ {self.sd:.3g} (ν {self.df})"


@dataclass(frozen=True)
class Interval:
    """A statistic's estimate and its 95 % interval, with what the interval saw."""

    estimate: float
    low: float
    high: float
    basis: str
    n_seeds: int
    n_rows: int  # rows (windows, lengths) per seed, the fewest over seeds; 1 without per-row data
    unit_sd: float = math.nan  # SD of one seed's statistic (seed + window noise); nan when unknown
    seed_noise: SeedNoise | None = None  # the seed offset added to a 1-seed interval

    def map(self, f: Callable[[float], float]) -> Interval:
        """The same interval through an increasing function (e.g. log-ratio → relative gain); ``unit_sd`` through
        its slope at the estimate (the delta method); ``seed_noise`` stays on the scale it was added on."""
        return Interval(f(self.estimate), f(self.low), f(self.high), self.basis, self.n_seeds, self.n_rows,
                        self.unit_sd * _slope(f, self.estimate), self.seed_noise)

    def scope(self) -> str:
        """"2 seeds × 32 windows" style counts for the text of a check."""
        return self.basis if self.basis == POINT else f"{self.basis}: {self.n_seeds} × {self.n_rows}"


def _slope(f: Callable[[float], float], x: float) -> float:
    """|f'(x)| by a central difference (1 where x is not finite)."""
    if not np.isfinite(x):
        return 1.0
    h = 1e-6 * max(1.0, abs(x))
    with np.errstate(over="ignore", invalid="ignore"):
        slope = abs(f(x + h) - f(x - h)) / (2 * h)
    return float(slope) if np.isfinite(slope) else math.nan


def basis(n_seeds: int, n_rows: int, inner: str = "windows", noise: SeedNoise | None = None) -> str:
    """What an interval over ``n_seeds`` units of ``n_rows`` rows each saw (see the module docstring)."""
    if n_seeds >= 2:
        return f"seeds × {inner}" if n_rows >= 2 else f"seeds only (no per-{inner[:-1]} data)"
    if noise is None:
        return NO_SEED_NOISE
    return f"1 seed + seed noise from {noise.source}" + ("" if n_rows >= 2 else f" (no per-{inner[:-1]} data)")


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


def _spread(draws: np.ndarray | None) -> float:
    """The variance of finite draws (0 without draws; nan when a draw is not finite)."""
    if draws is None:
        return 0.0
    return float(np.var(draws)) if np.isfinite(draws).all() else math.nan


def _finish(estimate: float, draws: np.ndarray | None, n_seeds: int, n_rows: int, inner: str, point: bool,
            noise: SeedNoise | None = None, rng: np.random.Generator | None = None,
            resamples: int = RESAMPLES) -> Interval:
    """The interval of ``draws``; with one seed, the draws plus a seed offset σ·t_ν each (``noise``), or (−∞, +∞)
    without a seed-noise estimate. ``unit_sd``: one seed's SD (n_seeds × the draws' variance with several seeds;
    the windows' variance plus σ² with one)."""
    if point:
        return Interval(estimate, estimate, estimate, POINT, n_seeds, n_rows)
    label = basis(n_seeds, n_rows, inner, noise)
    if n_seeds >= 2:
        if draws is None:
            return Interval(estimate, float("-inf"), float("inf"), label, n_seeds, n_rows)
        return Interval(estimate, *_bounds(draws), label, n_seeds, n_rows, math.sqrt(n_seeds * _spread(draws)))
    if np.isinf(estimate):  # a divergence (±∞) is a fact in every draw, whatever the noise
        return Interval(estimate, estimate, estimate, label, n_seeds, n_rows, math.nan, noise)
    window_var = _spread(draws)
    if noise is None:
        return Interval(estimate, float("-inf"), float("inf"), label, n_seeds, n_rows,
                        math.nan if draws is None else math.sqrt(window_var))
    base = draws if draws is not None else np.full(resamples, estimate)
    rng = rng if rng is not None else np.random.default_rng(SEED)
    with np.errstate(invalid="ignore"):
        noisy = base + noise.sd * rng.standard_t(noise.df, size=len(base))
    return Interval(estimate, *_bounds(noisy), label, n_seeds, n_rows, math.sqrt(window_var + noise.sd ** 2),
                    noise)


def interval(units: Sequence[np.ndarray], statistic: Statistic, key: str, *, point: bool = False,
             inner: str = "windows", resamples: int = RESAMPLES, seed_noise: SeedNoise | None = None) -> Interval:
    """The mean over units (seeds) of ``statistic``, with its nested bootstrap interval (paired: every column of a
    unit is resampled with the same rows); one unit gets ``seed_noise`` added to its draws (module docstring)."""
    units = [np.atleast_2d(np.asarray(u, dtype=float)) for u in units]
    n_rows = min(len(u) for u in units)
    estimate = _estimate(units, statistic)
    resamplable = len(units) >= 2 or n_rows >= 2
    rng = rng_for(key)
    draws = _draws(units, statistic, rng, resamples) if resamplable and not point else None
    return _finish(estimate, draws, len(units), n_rows, inner, point, seed_noise, rng, resamples)


def difference(units_b: Sequence[np.ndarray], units_a: Sequence[np.ndarray], statistic: Statistic, key: str, *,
               point: bool = False, inner: str = "windows", resamples: int = RESAMPLES,
               seed_noise: SeedNoise | None = None) -> Interval:
    """mean statistic over B's units − over A's units, each side resampled on its own (unpaired: the methods share
    no seed); when a side has one seed, ``seed_noise`` (the unpaired between-seed SD) is added to the draws."""
    units_a = [np.atleast_2d(np.asarray(u, dtype=float)) for u in units_a]
    units_b = [np.atleast_2d(np.asarray(u, dtype=float)) for u in units_b]
    n_seeds = min(len(units_a), len(units_b))
    n_rows = min(len(u) for u in [*units_a, *units_b])
    with np.errstate(invalid="ignore"):
        estimate = _estimate(units_b, statistic) - _estimate(units_a, statistic)
    draws = None
    rng = rng_for(key)
    if not point and (n_seeds >= 2 or n_rows >= 2):
        with np.errstate(invalid="ignore"):
            draws = _draws(units_b, statistic, rng, resamples) - _draws(units_a, statistic, rng, resamples)
    return _finish(estimate, draws, n_seeds, n_rows, inner, point, seed_noise, rng, resamples)


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


def seeds_to_decide(iv: Interval, *, side: int, confirm: float, refute: float) -> tuple[int | None, str]:
    """Seeds per method at which :func:`decide` would reach a verdict at the observed effect, by the normal power
    rule of a paired comparison of means (Chow, Shao & Wang, *Sample Size Calculations in Clinical Research*,
    2nd ed., §3.1): n = ⌈((z_0.975 + z_0.8) · s / δ)²⌉, with s = ``unit_sd`` (one seed's SD: seed and window noise)
    and δ the distance from the estimate to the threshold it lies beyond (CONFIRMED's, or REFUTED's on the other
    side); 80 % power. (None, why) when no number of seeds decides: an estimate between the two thresholds stays
    UNDECIDED however many seeds, and without ``unit_sd`` there is nothing to scale; "> MAX_SEEDS" is capped."""
    est, s = iv.estimate, iv.unit_sd
    if iv.basis == POINT:
        return None, "point verdict: no seeds"
    if not np.isfinite(est):
        return None, "diverged or undefined"
    if not np.isfinite(s) or s <= 0:
        return None, "unknown (no per-seed SD)"
    confirm_at = max(confirm, refute) if side > 0 else min(confirm, refute)
    if side * (est - confirm_at) > 0:
        delta, towards = abs(est - confirm_at), CONFIRMED
    elif side * (est - refute) < 0:
        delta, towards = abs(est - refute), REFUTED
    else:
        return None, "none: the estimate lies between the thresholds"
    n = math.ceil(((Z_LEVEL + Z_POWER) * s / delta) ** 2)
    n = max(n, iv.n_seeds + 1, 2)
    if n > MAX_SEEDS:
        return None, f"> {MAX_SEEDS} (towards {towards})"
    if iv.basis == NO_SEED_NOISE:  # s is the window noise alone: a lower bound
        return n, f"≥ {n} (towards {towards}; window noise only, the seed noise is not estimated)"
    return n, f"{n} (towards {towards})"


def combine(verdicts: Sequence[str]) -> str:
    """A claim of several checks: CONFIRMED when all are, REFUTED when any is, else UNDECIDED; NOT-RUN when none."""
    if not verdicts:
        return NOT_RUN
    if any(v == REFUTED for v in verdicts):
        return REFUTED
    return CONFIRMED if all(v == CONFIRMED for v in verdicts) else UNDECIDED
