"""The interval bases: paired, unpaired, one run's statistic, own spread; with and without per-window data."""

from __future__ import annotations

import numpy as np

from dape_core.report.intervals import UNDECIDED, combine_noise, decide, difference, interval
from .common import NOISE_SD, REGIMES, W, _noise, _rate, _rows, cell_rng, decided, grid, null_columns, seed_sd


def paired_trial(rng, n, main_sd, inter_sd, windows, shift, own_spread=False, tail=False):
    """Decided? Methods 0 and 1 of one setting, paired by seed (``tail``: (at 95 %, at 1 − 0.05/18))."""
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
    return decided(iv) if tail else decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


def unpaired_trial(rng, n, main_sd, inter_sd, windows, shift, tail=False):
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
    return decided(iv) if tail else decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


def level_trial(rng, n, main_sd, inter_sd, windows, shift, tail=False):
    """Decided? A run's own statistic (an explosion, a ΔP) against its true value: method 1's n seeds, σ as unpaired."""
    gamma = rng.normal(0.0, NOISE_SD, W)
    losses = grid(rng, n, main_sd, inter_sd, gamma, shift)
    units = [_rows((losses[1, s] - gamma)[:, None], windows) for s in range(n)]
    source = losses if n >= 2 else grid(rng, 2, main_sd, inter_sd, gamma)
    iv = interval(units, lambda m: m[:, 0], seed_noise=_noise(source.mean(axis=2), False, "grid"), kind="t")
    return decided(iv) if tail else decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


#: trials of a cell's power column (its null trials are read at 95 % and at 1 − 0.05/18, and need more)
POWER_TRIALS = 10000


def basis_cell(task: tuple) -> dict:
    """One row: a basis × window variant × regime × seed count; ``trials`` null trials, each read at 95 % and at
    1 − 0.05/18, and up to :data:`POWER_TRIALS` at 2 seed-SDs."""
    kind, windows, regime, n, trials, seed, power = task
    rng = cell_rng(seed, kind, windows, regime, n)
    main_sd, inter_sd = REGIMES[regime]
    unit = seed_sd(main_sd, inter_sd, kind in ("paired", "own spread"))

    def once(shift, tail=False):
        if kind == "unpaired":
            return unpaired_trial(rng, n, main_sd, inter_sd, windows, shift, tail=tail)
        if kind == "one run":
            return level_trial(rng, n, main_sd, inter_sd, windows, shift, tail=tail)
        return paired_trial(rng, n, main_sd, inter_sd, windows, shift, own_spread=kind != "paired", tail=tail)

    row = {"basis": kind, "per_window_data": windows, "regime": regime, "seeds": n,
           "sigma_from": ("the pair's own seeds" if kind == "own spread" else
                          "a borrowed 7 × 2 grid" if n == 1 else f"its setting's 7 × {n} grid"),
           **null_columns([once(0.0, tail=True) for _ in range(trials)])}
    if power:
        count = min(trials, POWER_TRIALS)
        row["power_at_2_sd"], row["power_se"] = _rate(sum(once(2 * unit) for _ in range(count)), count)
    return row
