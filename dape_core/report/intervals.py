"""Interval verdicts: a t-interval on per-seed statistics whose seed variance is pooled over the grid, and three
outcomes.

A comparison's data are *units*, one per training seed, each a matrix [rows, k]: its rows are the evaluation
windows (or CHE lengths, or attention sequences) the unit was scored on, its k columns the quantities compared.
A unit's statistic is computed from its column means (``statistic`` maps [draws, k] column means to [draws]
values), so each seed gives one number v_s, and the window noise of that number is part of its seed-to-seed
spread.

The interval of the mean v̄ of n seeds is v̄ ± t_{ν, 0.975} · σ / √n (Student's t, Gelman et al., *Bayesian Data
Analysis*, 3rd ed., §3.2 — the predictive form with σ² estimated on ν degrees of freedom), where σ is the SD of one
seed's statistic:

- with a :class:`SeedNoise` — σ pooled over the grid's methods in the check's own setting (dataset, size,
  training length and budget; causal and leaky runs apart), or the grid's largest for that statistic where the setting has one seed
  (:mod:`dape_core.report.seed_noise`; Bouthillier et al., "Accounting for Variance in Machine Learning
  Benchmarks", MLSys 2021, recommend exactly this pooling when seeds are few) — σ and ν are the estimate's;
- otherwise, with n ≥ 2 seeds, the units' own sample SD and ν = n − 1 (exact under normality, wide with few
  seeds);
- with one seed and no estimate, (−∞, +∞): UNDECIDED; with one seed and a σ borrowed for it (``plan_only``: the
  claims borrow one for a run or an unpaired side with one seed), (−∞, +∞) as well, the σ kept to size the seeds a
  verdict needs — a method noisier than the σ it borrows can be decided beyond 5 % of the time
  (``python -m dape_core.report.calibration --only heterogeneity``).

Two methods trained on the same initialisation and batch stream (same setting, same seed) are compared by
:func:`interval` on the per-seed differences ("paired"; the claims read them with the pair's own spread,
:func:`dape_core.report.claim_context.compare`, since methods differ in noise); otherwise by :func:`difference` ("unpaired"): v̄_B − v̄_A
with σ_B²/n_B + σ_A²/n_A (Welch, *Biometrika* 34, 1947) on the fewer of the two sides' degrees of freedom (Hsu's
conservative ν, :func:`welch`: Welch–Satterthwaite's decides identical methods beyond 5 % when one side has few
seeds).

Calibration: :mod:`dape_core.report.calibration` simulates two identically distributed methods (seed main
effect, method × seed interaction, window effects and per-window noise; the interaction, the seed main effect or
the windows dominating) at every basis used here — 1 seed with the grid's σ, 2, 3, 4, 5 and 8 seeds, paired and
unpaired, with and without per-window data — and counts how often :func:`decide` calls them different at a zero
margin (nominal 5 %), and how often the same trials are decided at Holm's strictest level 1 − 0.05/18 (0.28 %;
20,000 trials a cell); Welch's comparison at unequal seed counts and noise is computed exactly at both levels;
``tests/test_verdict_calibration.py`` fails when a basis exceeds 7 %, or the shipped rows their nominal rates
beyond Monte-Carlo error.

A diverged run has statistic ±∞: when the estimate is infinite the interval is that point (a divergence is a fact,
whatever the noise); when both sides diverged it is undefined, (−∞, +∞).

What the interval saw is its *basis*, e.g. "paired t, seed noise of code, T 32, small, 1200 × 32 (7 runs × 2
seeds)", "unpaired t, …", "t on the seeds' own spread", "1 seed (seed noise not estimated: …)", and "point (the
paper's printed numbers)" for the paper's own numbers (one value each; the interval is the point). An interval
also carries ``unit_sd``, the σ of one seed, which :func:`seeds_to_decide` turns into the seeds a decision needs.

Timings are not seeds: a timing cell's units are its replicate jobs, each timing both sizes and both methods in
blocks of fresh worker processes (a job's rise the mean over its blocks of a ratio of medians over interleaved
rounds), read with Student's t over the jobs (:func:`interval`; :mod:`dape_core.report.timing_check`), with its own
calibration in the same simulation.
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
#: the fewest fresh seeds a design gives a run: two read their own spread on one degree of freedom (t 12.7), which
#: decides only an effect about nine times its σ wide, and a pilot's σ on one or two degrees of freedom, which sized
#: them, is too often far below the truth to promise that
MIN_FRESH_SEEDS = 3

#: the per-seed statistic: column means [draws, k] → one value per row [draws]
Statistic = Callable[[np.ndarray], np.ndarray]


@lru_cache(maxsize=4096)
def t_quantile(df: float, q: float = 0.5 + LEVEL / 2) -> float:
    """Student's t quantile (scipy.stats.t); the normal one for ν = ∞. Cached: a report asks the same few
    (ν, q) pairs thousands of times (:func:`seeds_to_decide` scans n = 2 … ``MAX_SEEDS``)."""
    return float(stats.norm.ppf(q) if not np.isfinite(df) else stats.t.ppf(q, df))


@dataclass(frozen=True)
class SeedNoise:
    """The SD ``sd`` of one seed's value of a statistic, its degrees of freedom ``df`` and where it was estimated
    (``source``)."""

    sd: float
    df: float
    source: str
    #: borrowed for one seed, which has no spread of its own: it sizes the seeds a verdict needs, never decides
    #: (a method noisier than the σ it borrows can be decided beyond 5 % of the time)
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
    #: the same interval at the Bonferroni level over m comparisons, where it is not a t-interval on its own scale
    #: (a mapped or a bootstrap interval; :func:`simultaneous`)
    widened: Callable[[float], Interval] | None = field(default=None, compare=False, repr=False)

    def map(self, f: Callable[[float], float]) -> Interval:
        """The same interval through an increasing function (e.g. log-ratio → relative gain); ``unit_sd`` through
        its slope at the estimate (the delta method); ``seed_noise`` stays on the scale it was estimated on, and
        :func:`simultaneous` widens it there."""
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
    """What an interval saw (module docstring): ``kind`` "paired t", "unpaired t" or "t"; the σ's source
    (``missing``: why there is none)."""
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
    """Within it every interval is read at 1 − 0.05 / ``divisor`` — t-intervals, bootstrap percentiles and the
    Bonferroni widenings of :func:`simultaneous` on top —, so a claim's rule, calibrated at 5 %, decides two
    identical methods at most 5 % / ``divisor`` of the time: Holm's step-down across the claims
    (:mod:`dape_core.report.holm`)."""
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
    """The mean over units (seeds) of ``statistic`` with its t-interval: ``seed_noise`` (σ of one seed, pooled over
    the grid) when given, else the units' own spread with ≥ 2 seeds, else (−∞, +∞). ``kind`` names the pairing
    ("paired t": a per-seed difference of two methods sharing initialisation and batch stream; "t": one run's
    statistic)."""
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
    conservative degrees of freedom of Hsu (1938) and Banerjee (1960) for two independent estimates (Mickey & Brown,
    *Ann. Math. Statist.* 37, 1966: the t_{min ν} quantile bounds the Behrens–Fisher statistic's at every ratio of
    variances); one estimate serving both sides (the same source) keeps its own ν — it is not two.
    Welch–Satterthwaite's ν, which grows whenever the smaller side's σ comes out small by chance, decides identical
    methods up to 7.5 % of the time at 3 seeds against 22 and 1.9 % at 1 − 0.05/18 (:func:`satterthwaite`; exact rates:
    ``python -m dape_core.report.calibration --only welch``)."""
    vb, va = noise_b.sd ** 2 / n_b, noise_a.sd ** 2 / n_a
    se2 = vb + va
    if se2 == 0:
        return 0.0, math.inf
    return math.sqrt(se2), min(noise_b.df, noise_a.df)


def satterthwaite(noise_b: SeedNoise, n_b: int, noise_a: SeedNoise, n_a: int) -> float:
    """Welch–Satterthwaite's ν = (v_B + v_A)² / (v_B²/ν_B + v_A²/ν_A), v = σ²/n (Welch, *Biometrika* 34, 1947): the
    rule :func:`welch` replaced, kept for the calibration's comparison."""
    vb, va = noise_b.sd ** 2 / n_b, noise_a.sd ** 2 / n_a
    if vb + va == 0:
        return math.inf
    return (vb + va) ** 2 / ((vb ** 2 / noise_b.df if vb else 0.0) + (va ** 2 / noise_a.df if va else 0.0))


def difference(units_b: Sequence[np.ndarray], units_a: Sequence[np.ndarray], statistic: Statistic, key: str = "", *,
               point: bool = False, inner: str = "windows", noise_b: SeedNoise | None = None,
               noise_a: SeedNoise | None = None) -> Interval:
    """mean statistic over B's units − over A's units, unpaired (no shared initialisation and batch stream):
    SE² = σ_B²/n_B + σ_A²/n_A on :func:`welch`'s conservative ν = min(ν_B, ν_A); each σ the side's ``noise`` (its setting's, pooled over
    the grid) or its own spread with ≥ 2 seeds; (−∞, +∞) when a side has neither."""
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
    """``iv`` widened to the Bonferroni level 1 − 0.05 / ``comparisons`` (Dunn, *JASA* 56, 1961): of that many
    intervals, all cover their true values with probability ≥ 95 %, so "some interval lies above the threshold"
    decides two identical methods at most 5 % of the time. A t-interval's half-widths scale by t_{ν,1−0.025/m} /
    t_{ν,0.975}; a mapped interval is widened on the scale its noise was estimated on and mapped again, a bootstrap
    interval reads its draws' quantiles at that level; a point, an unbounded interval or one without a seed-noise
    estimate is returned as it is. ``comparisons`` may be fractional (:func:`level_for`)."""
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
    """Within it every check is sized, decided or not, for a verdict read on fresh seeds alone
    (:func:`seeds_to_decide` with ``fresh``): the design stage's pilot chooses the seeds, it never decides."""
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
    """Seeds per method at which :func:`decide` would reach a verdict at the observed effect with 80 % power
    (``power``), by
    the sample size of a comparison of means (Chow, Shao & Wang, *Sample Size Calculations in Clinical Research*,
    2nd ed., §3.1) with t quantiles: the smallest n ≥ ((t_{ν,0.975} + t_{ν,0.8}) · σ / δ)², σ = ``unit_sd`` (one
    seed's SD), ν = max(the estimate's degrees of freedom, n − 1) (n seeds of the check's own runs give their
    setting at least n − 1), δ the distance
    from the estimate to the threshold it lies beyond (CONFIRMED's, or REFUTED's on the other side). (None, why)
    when no number of seeds decides: an estimate between the two thresholds stays UNDECIDED however many seeds,
    and without σ there is nothing to scale; "> MAX_SEEDS" is capped. With ``comparisons`` > 1 the interval is one
    of that many Bonferroni-corrected ones (:func:`simultaneous`): t_{ν,1−0.025/m} in place of t_{ν,0.975}.
    ``fresh`` (default: inside :func:`sizing_fresh_seeds`): the seeds of a new sample that alone gives the
    verdict — n from :data:`MIN_FRESH_SEEDS`, ν = n − 1 (none of the estimate's seeds or degrees of freedom carry
    over)."""
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
    1 − 0.05 · needed / of. By Markov's inequality on the count of false decisions, P(≥ j of n) ≤ n · α / j, so j
    of n decide two identical methods at most as often as one interval at 95 % does: j = 1 is Bonferroni's "any of
    n", j = n the intersection "all of n" at the plain level."""
    return of / max(1, needed)


def combine(verdicts: Sequence[str]) -> str:
    """A claim of several checks: CONFIRMED when all are, REFUTED when any is, else UNDECIDED; NOT-RUN when none
    (its checks' REFUTED read at the Bonferroni level over them: :func:`~dape_core.report.claim_context.jointly`)."""
    if not verdicts:
        return NOT_RUN
    if any(v == REFUTED for v in verdicts):
        return REFUTED
    return CONFIRMED if all(v == CONFIRMED for v in verdicts) else UNDECIDED
