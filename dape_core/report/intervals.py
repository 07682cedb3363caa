"""Interval verdicts: a t-interval on per-seed statistics, seed variance pooled over the grid, and three outcomes.

A comparison's data are *units*, one per training seed, each a matrix [rows, k]: rows the evaluation windows (or CHE
lengths, or attention sequences) it was scored on, columns the k quantities compared. ``statistic`` maps [draws, k]
column means to [draws] values, so each seed gives one number v_s, its window noise part of its seed-to-seed spread.

The interval of the mean v̄ of n seeds is v̄ ± t_{ν, 0.975} · σ / √n (Student's t; Gelman et al., *Bayesian Data
Analysis*, 3rd ed., §3.2, σ² estimated on ν degrees of freedom), σ the SD of one seed's statistic:

- with a :class:`SeedNoise`, its σ and ν: pooled over the grid's methods in the check's own setting, or borrowed
  (:mod:`dape_core.report.seed_noise`; the pooling Bouthillier et al., MLSys 2021, recommend when seeds are few);
- otherwise, with n ≥ 2 seeds, the units' own sample SD on ν = n − 1 (exact under normality, wide with few seeds);
- with one seed, (−∞, +∞): UNDECIDED; a borrowed σ (``plan_only``) only sizes the seeds a verdict needs, since a
  method noisier than the σ it borrows can be decided beyond 5 % (``python -m dape_core.report.calibration --only
  heterogeneity``).

Two methods sharing initialisation and batch stream (same setting and seed) are compared by :func:`interval` on the
per-seed differences ("paired"; the claims read the pair's own spread, :func:`dape_core.report.claim_context.compare`,
since methods differ in noise); otherwise by :func:`difference` ("unpaired"): v̄_B − v̄_A with σ_B²/n_B + σ_A²/n_A
(Welch, *Biometrika* 34, 1947) on the fewer of the two sides' degrees of freedom (Hsu's conservative ν, :func:`welch`).

Calibration (:mod:`dape_core.report.calibration`; docs/verdicts.md, "Calibrated, and shown to be"): two identically
distributed methods at every basis used here, decided by :func:`decide` at a zero margin (nominal 5 %) and at Holm's
strictest 1 − 0.05/18 (0.28 %), Welch's comparison exactly; ``tests/test_verdict_calibration.py`` fails when a basis
exceeds 7 %, or the shipped rows their nominal rates beyond Monte-Carlo error.

A diverged run has statistic ±∞: an infinite estimate's interval is that point (a divergence is a fact, whatever the
noise); when both sides diverged it is undefined, (−∞, +∞).

An interval's *basis* says what it saw, e.g. "paired t, seed noise of code, T 32, small, 1200 × 32 (7 runs × 2
seeds)", "t on the seeds' own spread", "1 seed (…)" or "point (the paper's printed numbers)"; its ``unit_sd`` (the σ
of one seed) sizes the seeds a decision needs (:func:`seeds_to_decide`).

Timings are not seeds: a timing cell's units are its replicate jobs, read with Student's t over the jobs
(:mod:`dape_core.report.timing_check`) and calibrated in the same simulation.
"""

from __future__ import annotations

import math
import zlib
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np
from scipy import stats

CONFIRMED, REFUTED, UNDECIDED, NOT_RUN = "CONFIRMED", "REFUTED", "UNDECIDED", "NOT-RUN"
VERDICTS = (CONFIRMED, REFUTED, UNDECIDED, NOT_RUN)
MARKS = {CONFIRMED: "✓", REFUTED: "✗", UNDECIDED: "?"}
LEVEL = 0.95
POWER = 0.8
SEED = 0
POINT = "point (the paper's printed numbers)"
NO_SEED_NOISE = "1 seed (seed noise not estimated: no setting has several seeds)"
NO_MIXED_NOISE = "1 seed (seed noise not estimated: no setting has runs with tril on and off on several seeds)"
NO_PAIR_SPREAD = "1 seed (a paired comparison reads its own pair's spread over seeds, which needs two)"
OWN_SPREAD = "the seeds' own spread"
PLAN_ONLY = "1 seed (a borrowed σ sizes the seeds a verdict needs, never decides)"
MAX_SEEDS = 100
#: the fewest fresh seeds a design gives a run: two read their own spread on one degree of freedom (t 12.7), deciding
#: only an effect about nine times its σ, and the pilot's σ that sized them is too often far below the truth
MIN_FRESH_SEEDS = 3

#: the per-seed statistic: column means [draws, k] → one value per row [draws]
Statistic = Callable[[np.ndarray], np.ndarray]


@lru_cache(maxsize=4096)
def t_quantile(df: float, q: float = 0.5 + LEVEL / 2) -> float:
    """Student's t quantile (scipy.stats.t), the normal one for ν = ∞; cached (:func:`seeds_to_decide` scans n)."""
    return float(stats.norm.ppf(q) if not np.isfinite(df) else stats.t.ppf(q, df))


@dataclass(frozen=True)
class SeedNoise:
    """The SD ``sd`` of one seed's value of a statistic, its degrees of freedom ``df`` and where it was estimated."""

    sd: float
    df: float
    source: str
    #: borrowed for one seed, which has no spread of its own: it sizes the seeds a verdict needs, never decides
    plan_only: bool = False

    def text(self) -> str:
        """"seed noise σ 0.024 (ν 6)" for the text of a check."""
        return f"seed noise σ {self.sd:.3g} (ν {self.df:.3g})"


@dataclass(frozen=True)
class Interval:
    """A statistic's estimate and its 95 % interval, with what the interval saw."""

    estimate: float
    low: float
    high: float
    basis: str
    n_seeds: int
    n_rows: int  # rows (windows, lengths, sequences) per seed, the fewest over seeds; 1 without per-row data
    unit_sd: float = math.nan  # σ: SD of one seed's statistic; nan when unknown
    seed_noise: SeedNoise | None = None  # the σ the interval used (own spread included)
    #: this interval at the Bonferroni level over m comparisons, for a mapped or bootstrap one (:func:`simultaneous`)
    widened: Callable[[float], Interval] | None = field(default=None, compare=False, repr=False)

    def map(self, f: Callable[[float], float]) -> Interval:
        """The interval through an increasing ``f`` (e.g. log-ratio → relative gain), ``unit_sd`` through its slope
        at the estimate (delta method); ``seed_noise`` stays on its own scale, where :func:`simultaneous` widens it."""
        return Interval(f(self.estimate), f(self.low), f(self.high), self.basis, self.n_seeds, self.n_rows,
                        self.unit_sd * _slope(f, self.estimate), self.seed_noise,
                        lambda comparisons: simultaneous(self, comparisons).map(f))

    def scope(self) -> str:
        """"paired t, …: 2 seeds × 64 windows" for the text of a check."""
        return self.basis if self.basis == POINT else f"{self.basis}: {self.n_seeds} × {self.n_rows}"


def _slope(f: Callable[[float], float], x: float) -> float:
    """|f'(x)| by a central difference (1 where x is not finite)."""
    if not np.isfinite(x):
        return 1.0
    h = 1e-6 * max(1.0, abs(x))
    with np.errstate(over="ignore", invalid="ignore"):
        slope = abs(f(x + h) - f(x - h)) / (2 * h)
    return float(slope) if np.isfinite(slope) else math.nan


def basis(kind: str, noise: SeedNoise | None, n_rows: int, inner: str = "windows",
          missing: str = NO_SEED_NOISE) -> str:
    """What an interval saw (module docstring): ``kind`` ("paired t", "unpaired t", "t") and the σ's source or
    ``missing`` (why there is none)."""
    if noise is None:
        text = missing
    elif noise.source == OWN_SPREAD:
        text = f"{kind} on {OWN_SPREAD}"
    else:
        text = f"{kind}, seed noise of {noise.source}"
    if noise is not None and noise.plan_only:
        text = f"{PLAN_ONLY}: {text}"
    return text if n_rows >= 2 else f"{text} (no per-{inner[:-1]} data)"


def rng_for(key: str) -> np.random.Generator:
    """The generator of one check, seeded from its key (stable across runs and Python processes)."""
    return np.random.default_rng([SEED, zlib.crc32(key.encode("utf-8"))])


def per_seed(units: Sequence[np.ndarray], statistic: Statistic) -> np.ndarray:
    """Each unit's statistic on all its rows: one value per seed."""
    with np.errstate(invalid="ignore"):
        return np.array([statistic(np.atleast_2d(np.asarray(u, dtype=float)).mean(axis=0)[None])[0]
                         for u in units], dtype=float)


def own_noise(values: np.ndarray) -> SeedNoise | None:
    """σ from the seeds' own spread (ν = n − 1), None with fewer than two finite values."""
    finite = values[np.isfinite(values)]
    if len(finite) < 2 or len(finite) < len(values):
        return None
    return SeedNoise(float(np.std(finite, ddof=1)), len(finite) - 1, OWN_SPREAD)


#: f of :func:`family_level`: every interval read at 1 − 0.05 / f (1: the plain 95 %)
_FAMILY = ContextVar("family_level", default=1.0)


@contextmanager
def family_level(divisor: float):
    """Within it every interval (bootstrap percentiles and :func:`simultaneous`'s widenings too) is read at
    1 − 0.05 / ``divisor``, so a rule calibrated at 5 % decides two identical methods at most 5 % / ``divisor`` of
    the time: Holm's step-down across the claims (:mod:`dape_core.report.holm`)."""
    token = _FAMILY.set(max(1.0, float(divisor)))
    try:
        yield
    finally:
        _FAMILY.reset(token)


def _level(comparisons: float = 1.0) -> float:
    """The two-sided quantile of an interval read at 1 − 0.05 / (``comparisons`` × the family divisor)."""
    return 1 - (1 - LEVEL) / (2 * max(1.0, comparisons) * _FAMILY.get())


def _t_interval(estimate: float, se: float, df: float) -> tuple[float, float]:
    half = t_quantile(df, _level()) * se
    return estimate - half, estimate + half


def _n_rows(units) -> int:
    return min(len(np.atleast_2d(np.asarray(u, dtype=float))) for u in units)


def interval(units: Sequence[np.ndarray], statistic: Statistic, key: str = "", *, point: bool = False,
             inner: str = "windows", seed_noise: SeedNoise | None = None, kind: str = "paired t",
             missing: str = NO_SEED_NOISE) -> Interval:
    """The mean over units (seeds) of ``statistic`` with its t-interval: σ from ``seed_noise`` when given, else the
    units' own spread with ≥ 2 seeds, else (−∞, +∞). ``kind``: "paired t" (per-seed differences of two methods
    sharing initialisation and batch stream) or "t" (one run's statistic)."""
    values = per_seed(units, statistic)
    n, n_rows = len(values), _n_rows(units)
    with np.errstate(invalid="ignore"):
        estimate = float(np.mean(values))
    if point:
        return Interval(estimate, estimate, estimate, POINT, n, n_rows)
    noise = seed_noise if seed_noise is not None else own_noise(values)
    label = basis(kind, noise, n_rows, inner, missing)
    if np.isinf(estimate):  # a divergence is a fact in every seed that had it, whatever the noise
        return Interval(estimate, estimate, estimate, label, n, n_rows, math.nan, noise)
    if noise is None or not np.isfinite(estimate) or not np.isfinite(noise.sd):
        return Interval(estimate, -math.inf, math.inf, label, n, n_rows, math.nan, noise)
    if noise.plan_only:  # (−∞, +∞) with the σ that sizes the seeds a verdict needs
        return Interval(estimate, -math.inf, math.inf, label, n, n_rows, noise.sd, noise)
    return Interval(estimate, *_t_interval(estimate, noise.sd / math.sqrt(n), noise.df), label, n, n_rows,
                    noise.sd, noise)


def welch(noise_b: SeedNoise, n_b: int, noise_a: SeedNoise, n_a: int) -> tuple[float, float]:
    """(standard error, degrees of freedom) of mean_B − mean_A: SE² = σ_B²/n_B + σ_A²/n_A on ν = min(ν_B, ν_A), the
    conservative ν of Hsu (1938) and Banerjee (1960) (Mickey & Brown, *Ann. Math. Statist.* 37, 1966: t_{min ν}
    bounds the Behrens–Fisher statistic at every variance ratio); one estimate serving both sides keeps its own ν.
    Welch–Satterthwaite's ν (:func:`satterthwaite`) grows when the smaller side's σ comes out small by chance and
    decides identical methods beyond 5 % (measured: benchmarks/results/README.md, verdict_calibration.csv; exact
    rates: ``python -m dape_core.report.calibration --only welch``)."""
    vb, va = noise_b.sd ** 2 / n_b, noise_a.sd ** 2 / n_a
    se2 = vb + va
    if se2 == 0:
        return 0.0, math.inf
    return math.sqrt(se2), min(noise_b.df, noise_a.df)


def satterthwaite(noise_b: SeedNoise, n_b: int, noise_a: SeedNoise, n_a: int) -> float:
    """Welch–Satterthwaite's ν = (v_B + v_A)² / (v_B²/ν_B + v_A²/ν_A), v = σ²/n (Welch, *Biometrika* 34, 1947), for
    the calibration's comparison with :func:`welch`."""
    vb, va = noise_b.sd ** 2 / n_b, noise_a.sd ** 2 / n_a
    if vb + va == 0:
        return math.inf
    return (vb + va) ** 2 / ((vb ** 2 / noise_b.df if vb else 0.0) + (va ** 2 / noise_a.df if va else 0.0))


def difference(units_b: Sequence[np.ndarray], units_a: Sequence[np.ndarray], statistic: Statistic, key: str = "", *,
               point: bool = False, inner: str = "windows", noise_b: SeedNoise | None = None,
               noise_a: SeedNoise | None = None) -> Interval:
    """Mean statistic over B's units − over A's, unpaired (no shared initialisation and batch stream), by
    :func:`welch`; each σ the side's ``noise`` or its own spread with ≥ 2 seeds; (−∞, +∞) when a side has neither."""
    vb, va = per_seed(units_b, statistic), per_seed(units_a, statistic)
    n_rows = min(_n_rows(units_b), _n_rows(units_a))
    n_seeds = min(len(vb), len(va))
    with np.errstate(invalid="ignore"):
        estimate = float(np.mean(vb) - np.mean(va))
    if point:
        return Interval(estimate, estimate, estimate, POINT, n_seeds, n_rows)
    nb = noise_b if noise_b is not None else own_noise(vb)
    na = noise_a if noise_a is not None else own_noise(va)
    combined = None
    if nb is not None and na is not None:
        se, df = welch(nb, len(vb), na, len(va))
        sources = list(dict.fromkeys([nb.source, na.source]))
        combined = SeedNoise(math.sqrt(nb.sd ** 2 + na.sd ** 2), df, " and ".join(sources),
                             plan_only=nb.plan_only or na.plan_only)
    label = basis("unpaired t", combined, n_rows, inner)
    if np.isinf(estimate):
        return Interval(estimate, estimate, estimate, label, n_seeds, n_rows, math.nan, combined)
    if combined is None or not np.isfinite(estimate):
        return Interval(estimate, -math.inf, math.inf, label, n_seeds, n_rows, math.nan, combined)
    if combined.plan_only:  # a side of one seed: its borrowed σ sizes, never decides
        return Interval(estimate, -math.inf, math.inf, label, n_seeds, n_rows, combined.sd, combined)
    return Interval(estimate, *_t_interval(estimate, se, df), label, n_seeds, n_rows, combined.sd, combined)


def combine_noise(parts: Sequence[SeedNoise]) -> SeedNoise | None:
    """The σ of a sum or difference of independent per-seed statistics: √Σσ², the fewest degrees of freedom."""
    if not parts:
        return None
    sources = list(dict.fromkeys(p.source for p in parts))
    return SeedNoise(math.sqrt(sum(p.sd ** 2 for p in parts)), min(p.df for p in parts), "; ".join(sources))


def percentile(estimate: float, draws: np.ndarray, label: str, n: int, n_rows: int = 1,
               comparisons: float = 1) -> Interval:
    """The central percentile interval of bootstrap ``draws`` (conservative order statistics) at ``LEVEL``, or
    with ``comparisons`` m at the Bonferroni level 1 − 0.05 / m."""
    alpha = 1 - _level(comparisons)
    low = float(np.quantile(draws, alpha, method="lower"))
    high = float(np.quantile(draws, 1 - alpha, method="higher"))
    return Interval(estimate, low, high, label, n, n_rows, float(np.std(draws)) * math.sqrt(max(n, 1)),
                    widened=lambda m: percentile(estimate, draws, label, n, n_rows, max(1.0, comparisons) * m))


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


def simultaneous(iv: Interval, comparisons: float) -> Interval:
    """``iv`` widened to the Bonferroni level 1 − 0.05 / ``comparisons`` (Dunn, *JASA* 56, 1961): all that many
    intervals cover with probability ≥ 95 %, so "some interval lies above the threshold" decides two identical methods
    at most 5 % of the time. A t-interval's half-widths scale by t_{ν,1−0.025/m} / t_{ν,0.975}; a mapped one is widened
    on its noise's scale and mapped again, a bootstrap one reads its draws at that level; a point, an unbounded one or
    one without seed noise comes back as it is. ``comparisons`` may be fractional (:func:`level_for`)."""
    if comparisons <= 1 or iv.basis == POINT or not (np.isfinite(iv.low) and np.isfinite(iv.high)):
        return iv
    if iv.widened is not None:
        return iv.widened(comparisons)
    noise = iv.seed_noise
    if noise is None:
        return iv
    scale = t_quantile(noise.df, _level(comparisons)) / t_quantile(noise.df, _level())
    return replace(iv, low=iv.estimate - (iv.estimate - iv.low) * scale,
                   high=iv.estimate + (iv.high - iv.estimate) * scale)


#: True while claims are sized for fresh seeds (:func:`sizing_fresh_seeds`): the design stage's pilot
_FRESH = ContextVar("sizing_fresh_seeds", default=False)


@contextmanager
def sizing_fresh_seeds():
    """Within it every check, decided or not, is sized for a verdict on fresh seeds alone (:func:`seeds_to_decide`
    with ``fresh``): the design stage's pilot chooses the seeds, it never decides."""
    token = _FRESH.set(True)
    try:
        yield
    finally:
        _FRESH.reset(token)


def fresh_sizing() -> bool:
    """Whether checks are being sized for fresh seeds (:func:`sizing_fresh_seeds`)."""
    return _FRESH.get()


def seeds_to_decide(iv: Interval, *, side: int, confirm: float, refute: float,
                    comparisons: int = 1, fresh: bool | None = None, power: float = POWER) -> tuple[int | None, str]:
    """Seeds per method at which :func:`decide` would reach a verdict at the observed effect with ``power`` (80 %),
    by the sample size of a comparison of means (Chow, Shao & Wang, *Sample Size Calculations in Clinical Research*,
    2nd ed., §3.1) with t quantiles: the smallest n ≥ ((t_{ν,0.975} + t_{ν,0.8}) · σ / δ)², σ = ``unit_sd``,
    ν = max(the estimate's ν, n − 1), δ the distance from the estimate to the threshold it lies beyond (CONFIRMED's,
    or REFUTED's on the other side). (None, why) when no n decides: an estimate between the thresholds, or no σ;
    "> MAX_SEEDS" is capped. ``comparisons`` m > 1: one of m Bonferroni intervals (:func:`simultaneous`),
    t_{ν,1−0.025/m} for t_{ν,0.975}. ``fresh`` (default: inside :func:`sizing_fresh_seeds`): a new sample alone gives
    the verdict, n from :data:`MIN_FRESH_SEEDS` on ν = n − 1 (nothing of the estimate carries over)."""
    fresh = fresh_sizing() if fresh is None else fresh
    est, s = iv.estimate, iv.unit_sd
    if iv.basis == POINT:
        return None, "point verdict: no seeds"
    if not np.isfinite(est):
        return None, "diverged or undefined"
    if not np.isfinite(s) or s <= 0:
        return None, "unknown (no seed-noise estimate)"
    confirm_at = max(confirm, refute) if side > 0 else min(confirm, refute)
    if side * (est - confirm_at) > 0:
        delta, towards = abs(est - confirm_at), CONFIRMED
    elif side * (est - refute) < 0:
        delta, towards = abs(est - refute), REFUTED
    else:
        return None, "none: the estimate lies between the thresholds"
    known = 0.0 if fresh or iv.seed_noise is None or iv.seed_noise.source == OWN_SPREAD else iv.seed_noise.df
    for n in range(MIN_FRESH_SEEDS if fresh else max(iv.n_seeds + 1, 2), MAX_SEEDS + 1):
        df = max(known, n - 1)  # n seeds of the check's own runs estimate σ on at least n − 1 degrees of freedom
        level = 1 - (1 - LEVEL) / (2 * max(1, comparisons))
        if n >= ((t_quantile(df, level) + t_quantile(df, power)) * s / delta) ** 2:
            return n, f"{n} (towards {towards})"
    return None, f"> {MAX_SEEDS} (towards {towards})"


def level_for(needed: int, of: int) -> float:
    """The comparisons m at which each of ``of`` intervals is read when ``needed`` of them make a verdict: each at
    1 − 0.05 · needed / of. By Markov's inequality, P(≥ j of n false) ≤ n · α / j, so j of n decide two identical
    methods at most as often as one 95 % interval: j = 1 is Bonferroni's "any of n", j = n "all of n"."""
    return of / max(1, needed)


def combine(verdicts: Sequence[str]) -> str:
    """A claim of several checks: CONFIRMED when all are, REFUTED when any is, else UNDECIDED; NOT-RUN when none
    (its checks' REFUTED read at the Bonferroni level over them: :func:`~dape_core.report.claim_context.jointly`)."""
    if not verdicts:
        return NOT_RUN
    if any(v == REFUTED for v in verdicts):
        return REFUTED
    return CONFIRMED if all(v == CONFIRMED for v in verdicts) else UNDECIDED
