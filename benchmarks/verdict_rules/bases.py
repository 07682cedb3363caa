"""The interval bases (paired, unpaired, one run's statistic, the seeds' own spread; with and without per-window data) and the timing rule on interleaved rounds."""

from __future__ import annotations

import numpy as np

from dape_core.report.intervals import UNDECIDED, combine_noise, decide, difference, interval, median_ratio_draws, percentile
from .common import NOISE_SD, REGIMES, W, _noise, _rate, _rows, cell_rng, grid, seed_sd


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
