"""The interval bases (paired, unpaired, one run's statistic, the seeds' own spread; with and without per-window data) and the timing rule on blocks of interleaved rounds."""

from __future__ import annotations

import numpy as np

from dape_core.report.intervals import UNDECIDED, combine_noise, decide, difference, interval
from dape_core.report.timing_check import ratio_of_medians, rise_interval
from .common import NOISE_SD, REGIMES, W, _noise, _rate, _rows, cell_rng, decided, grid, seed_sd, tail_columns


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
    """Decided? One run's own statistic (an explosion, a ΔP) against its true value: n seeds of method 1, σ from
    its setting's R × n table (seed and interaction mean squares), or borrowed from a 7 × 2 table with one seed."""
    gamma = rng.normal(0.0, NOISE_SD, W)
    losses = grid(rng, n, main_sd, inter_sd, gamma, shift)
    units = [_rows((losses[1, s] - gamma)[:, None], windows) for s in range(n)]
    source = losses if n >= 2 else grid(rng, 2, main_sd, inter_sd, gamma)
    iv = interval(units, lambda m: m[:, 0], seed_noise=_noise(source.mean(axis=2), False, "grid"), kind="t")
    return decided(iv) if tail else decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


ROUND_SD, TIME_SD, OUTLIERS, PROCESS_SD = 0.05, 0.04, 0.05, 0.02
#: the timing rule's regimes: (shared round effect SD, each method's SD, share of outliers, their factor, each
#: method's process effect SD — one draw per block of fresh worker processes —, its distribution), all on the log
#: scale. "as measured": the default run's timing on a 2-core CPU (reports/timing_repeats.csv) — the round effect's
#: SD 0.16–0.32, each method's SD about it 0.13–0.27, 5–20 % of rounds above 1.5 × the method's median — and
#: benchmarks/results/timing_protocol.csv: a method's median moves between worker processes by 0.1–0.2 on the log
#: scale, more than its rounds say
SMALL_NOISE = "interleaved rounds, 5 % outliers"  # the first regime
TIMING_REGIMES = {
    SMALL_NOISE: (ROUND_SD, TIME_SD, OUTLIERS, 3.0, PROCESS_SD, "normal"),
    "as measured on 2 CPU cores: round SD 0.25, method SD 0.2, 15 % outliers × 2, process SD 0.15":
        (0.25, 0.2, 0.15, 2.0, 0.15, "normal"),
    "process effects with t₃ tails (scale 0.1), round SD 0.25, method SD 0.2, 15 % outliers × 2":
        (0.25, 0.2, 0.15, 2.0, 0.1, "t3"),
}
#: the block counts the timing claim reads an interval at: its fewest (dape_core.report.timing_check.MIN_BLOCKS), the
#: shipped configurations' (config.yaml 16; configs/gpu.yaml, grid.yaml and paper.yaml 4) and 8
TIMING_BLOCKS = (3, 4, 8, 16)
#: rounds per block in the simulation: config.yaml's and configs/paper.yaml's 5, the fewest a shipped configuration
#: times (a block's ratio of medians over more rounds is only quieter)
TIMING_ROUNDS_PER_BLOCK = 5


def timing_cell(rng, blocks: int, ratio: float = 1.0, regime: str = SMALL_NOISE,
                rounds: int = TIMING_ROUNDS_PER_BLOCK) -> np.ndarray:
    """The block ratios of ms(A) / ms(B) of one size: each block fresh processes (a process effect per method),
    interleaved rounds (a shared round effect, log-normal noise, outliers; :data:`TIMING_REGIMES`)."""
    round_sd, time_sd, outliers, factor, process_sd, tails = TIMING_REGIMES[regime]
    out = np.empty(blocks)
    for b in range(blocks):
        process = (rng.standard_t(3, 2) if tails == "t3" else rng.normal(0.0, 1.0, 2)) * process_sd
        shared = rng.normal(0.0, round_sd, rounds)
        a = np.exp(shared + process[0] + rng.normal(0.0, time_sd, rounds)) * ratio * np.where(
            rng.random(rounds) < outliers, factor, 1)
        bb = np.exp(shared + process[1] + rng.normal(0.0, time_sd, rounds)) * np.where(
            rng.random(rounds) < outliers, factor, 1)
        out[b] = ratio_of_medians(10.0 * a, 10.0 * bb)
    return out


def timing_trial(rng, blocks: int, rise: float, regime: str = SMALL_NOISE, tail: bool = False):
    """Decided? The rise of ms(A)/ms(B) between two sizes (independent cells), as the timing claim computes it
    (``tail``: (at 95 %, at 1 − 0.05/18))."""
    smaller, larger = timing_cell(rng, blocks, 1.0, regime), timing_cell(rng, blocks, 1.0 + rise, regime)
    iv = rise_interval(smaller, larger, "timing")
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

    null = np.array([once(0.0, tail=True) for _ in range(trials)], dtype=bool).reshape(trials, 2)
    rate, se = _rate(int(null[:, 0].sum()), trials)
    row = {"basis": kind, "per_window_data": windows, "regime": regime, "seeds": n,
           "sigma_from": ("the pair's own seeds" if kind == "own spread" else
                          "a borrowed 7 × 2 grid" if n == 1 else f"its setting's 7 × {n} grid"),
           "trials": trials, "false_decisions": rate, "false_decisions_se": se,
           **tail_columns(int(null[:, 1].sum()), trials)}
    if power:
        count = min(trials, POWER_TRIALS)
        row["power_at_2_sd"], row["power_se"] = _rate(sum(once(2 * unit) for _ in range(count)), count)
    return row


def timing_row(task: tuple) -> dict:
    """The timing rule's row at ``blocks`` blocks of worker processes per size, in one of :data:`TIMING_REGIMES`."""
    blocks, trials, seed, power, regime = task
    rng = cell_rng(seed, "timing blocks", regime, blocks)
    null = np.array([timing_trial(rng, blocks, 0.0, regime, tail=True) for _ in range(trials)],
                    dtype=bool).reshape(trials, 2)
    rate, se = _rate(int(null[:, 0].sum()), trials)
    row = {"basis": "timing (ratio of medians per block of worker processes, Welch over blocks)",
           "per_window_data": False, "regime": regime, "seeds": blocks,
           "sigma_from": f"the blocks' own spread ({TIMING_ROUNDS_PER_BLOCK} rounds a block)",
           "trials": trials, "false_decisions": rate, "false_decisions_se": se,
           **tail_columns(int(null[:, 1].sum()), trials)}
    if power:
        spread = np.std(timing_cell(rng, 400, 1.0, regime))
        count = min(trials, POWER_TRIALS)
        row["power_at_2_sd"], row["power_se"] = _rate(
            sum(timing_trial(rng, blocks, 2 * spread, regime) for _ in range(count)), count)
    return row
