"""Welch's comparison of two sides of unequal seed counts and noise, computed exactly: the rule's degrees of freedom
(:func:`dape_core.report.intervals.welch`) beside Welch–Satterthwaite's, at 95 % and at 1 − 0.05/18."""

from __future__ import annotations

import numpy as np
from scipy import special, stats

from dape_core.report.intervals import LEVEL, OWN_SPREAD, SeedNoise, welch
from .common import HOLM_DIVISOR

#: (fewer, more) seeds a side: each side reads its own spread from 2 seeds, a design's fresh seeds from 3
#: (MIN_FRESH_SEEDS), a pilot or the default's comparisons up to 22–32 on one side
WELCH_SEEDS = ((2, 2), (2, 3), (2, 8), (2, 22), (3, 3), (3, 4), (3, 8), (3, 16), (3, 22), (3, 32), (4, 4), (4, 22),
               (5, 22), (8, 8), (8, 22), (16, 16), (32, 32))
#: the fewer seeds' side's SD over the other's (its interaction SD at 1/3 … 10 × the other's)
WELCH_RATIOS = (1 / 3, 1 / 2, 1.0, 2.0, 3.0, 10.0)
WELCH_RULES = {"Welch (ν = min of the sides', the rule; exact)": welch,
               "Welch–Satterthwaite ν (the rule before; exact)": None}
#: Gauss–Legendre nodes per side (doubling them moves no rate by more than 1e-7: tests/test_verdict_calibration.py)
NODES = 200


def _quantile_nodes(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes u ∈ (0, 1) and weights for ∫₀¹ f(u) du, dense near 0 and 1 (u = v²/2 on each half: Gauss–Legendre in
    v), where a χ² quantile with few degrees of freedom moves fastest."""
    x, w = np.polynomial.legendre.leggauss(k)
    v, w = 0.5 * (x + 1), 0.5 * w
    u = np.concatenate([0.5 * v ** 2, 1 - 0.5 * v[::-1] ** 2])
    return u, np.concatenate([v * w, (v * w)[::-1]])


def welch_rate(n_few: int, n_many: int, ratio: float, divisor: float = 1.0, rule=welch, nodes: int = NODES) -> float:
    """P(0 ∉ the interval of mean_B − mean_A) for two normal samples of equal mean, n_few seeds at SD ``ratio`` and
    n_many at SD 1, each σ its own sample SD (ν = n − 1), read at 1 − 0.05/``divisor``. The sample variances are
    independent of the means (Cochran's theorem), so given them the difference is N(0, τ²) and the rate is
    E[2 Φ(−t_ν · SE / τ)] over s² = σ² χ²_{n−1}/(n − 1) on each side: a double integral, by Gauss–Legendre quadrature
    on the χ² quantiles. ν from ``rule`` (:func:`~dape_core.report.intervals.welch` on the sides' σ; None:
    :func:`~dape_core.report.intervals.satterthwaite` per pair of variances)."""
    df_few, df_many = n_few - 1, n_many - 1
    u, w = _quantile_nodes(nodes)
    x_few, x_many = stats.chi2.ppf(u, df_few) / df_few, stats.chi2.ppf(u, df_many) / df_many
    v_few = ratio ** 2 * x_few[:, None] / n_few  # SE² parts on the grid of the two sample variances
    v_many = x_many[None, :] / n_many
    se = np.sqrt(v_few + v_many)
    tau = np.sqrt(ratio ** 2 / n_few + 1 / n_many)
    q = 1 - (1 - LEVEL) / (2 * divisor)
    if rule is None:
        nu = (v_few + v_many) ** 2 / (v_few ** 2 / df_few + v_many ** 2 / df_many)  # satterthwaite's, vectorised
    else:  # the rule's ν does not depend on the variances drawn: one call on the sides' σ gives it
        nu = rule(SeedNoise(ratio, df_few, OWN_SPREAD), n_few, SeedNoise(1.0, df_many, OWN_SPREAD), n_many)[1]
    p = 2 * special.ndtr(-special.stdtrit(nu, q) * se / tau)
    return float((p * np.outer(w, w)).sum())


def welch_rows() -> list[dict]:
    """One row per rule × seed counts × SD ratio: the exact rate at 95 % and at 1 − 0.05/18 (SE 0)."""
    return [{"basis": basis, "per_window_data": False,
             "regime": f"the side of {n_few} seeds at {ratio:.3g}× the other's SD", "seeds": n_few,
             "other_seeds": n_many, "sigma_from": f"each side's own spread, {n_few} against {n_many} seeds",
             "trials": 0, "false_decisions": welch_rate(n_few, n_many, ratio, 1.0, rule), "false_decisions_se": 0.0,
             "false_decisions_at_18": welch_rate(n_few, n_many, ratio, HOLM_DIVISOR, rule),
             "false_decisions_at_18_se": 0.0}
            for basis, rule in WELCH_RULES.items() for n_few, n_many in WELCH_SEEDS for ratio in WELCH_RATIOS]
