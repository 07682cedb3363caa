"""The timing rule: the rise of ms(A) / ms(B) between two sizes of two identical methods, as the timing claim reads it
(:mod:`dape_core.report.timing_check`), with and without an effect of the job a worker runs in. A worker's log time in
round r of block b of job j, for size s and method m, is

    log ms = job[j, s, m] + process[j, b, s, m] + round[j, b, r] + noise[j, b, s, m, r] (+ log 2 or 3, an outlier)

with the round effect shared by that round's workers, each worker's process effect drawn once per block (fresh
processes), and the job effect once per job for each size × method (another moment or placement on the machine: it
does not cancel in the ratio, the conservative case). Two designs, each read at 95 % and at Holm's strictest level over
the 18 claims, 1 − 0.05/18 (:func:`dape_core.report.intervals.family_level`), on the same trials:

- *replicate jobs* (the workflow's): every block times both sizes and both methods, interleaved; ``jobs`` jobs of
  ``blocks`` blocks, read by :func:`~dape_core.report.timing_check.rise_interval` over the jobs' rises;
- *one job per size* (the design before): ``blocks`` blocks a size, Welch's t over them (:func:`welch_over_blocks`),
  blind to the job effect that a size's blocks share."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dape_core.report.intervals import UNDECIDED, decide, difference, family_level
from dape_core.report.timing_check import job_ratios, job_rises, rise_interval

from .common import _rate, cell_rng

#: rounds per block: the fewest a shipped configuration times (config.yaml's, configs/paper.yaml's); more are quieter
TIMING_ROUNDS_PER_BLOCK = 5
#: the claims Holm's step-down runs over: its strictest level is 1 − 0.05 / FAMILY_CLAIMS
FAMILY_CLAIMS = 18

#: (round effect SD, each worker's SD, share of outliers, their factor, each worker's process effect SD — drawn per
#: block of fresh processes —, its law), log scale. As measured: the default run's timing on a 2-core CPU
#: (reports/timing_repeats.csv: round SD 0.16–0.32, a method's SD about it 0.13–0.27, 5–20 % of rounds above 1.5 × its
#: median) and benchmarks/results/timing_protocol.csv (a median moves 0.1–0.2 between processes, more than rounds say)
AS_MEASURED = (0.25, 0.2, 0.15, 2.0, 0.15, "normal")
PROCESS = {
    "as measured on 2 CPU cores: round SD 0.25, method SD 0.2, 15 % outliers × 2, process SD 0.15": AS_MEASURED,
    "process effects with t₃ tails (scale 0.1), round SD 0.25, method SD 0.2, 15 % outliers × 2":
        (0.25, 0.2, 0.15, 2.0, 0.1, "t3"),
    "interleaved rounds, 5 % outliers × 3, process SD 0.02": (0.05, 0.04, 0.05, 3.0, 0.02, "normal"),
}
#: the job effect's SD per size × method on the log scale: none; 0.04 "as measured across runs" (the job-to-job SD of
#: the rise that four clean-clone runs of the design before gave, docs/verdicts.md and reports/history.md, at ratios
#: 0.56–0.80 an SD of about 0.04 of each size × method's log time); and 2.5× that
JOB_SDS = {"no job effect": 0.0, "job effect SD 0.04 (as measured across runs)": 0.04, "job effect SD 0.1": 0.1}
#: the regimes of the replicate-job rows: every process regime without and with the measured job effect, the
#: measured process regime with the larger one, and t₃-tailed job effects
TIMING_REGIMES = {f"{process}; {job}": (PROCESS[process], sd, "normal") for process in PROCESS
                  for job, sd in list(JOB_SDS.items())[:2]}
TIMING_REGIMES[f"{next(iter(PROCESS))}; {list(JOB_SDS)[2]}"] = (AS_MEASURED, JOB_SDS["job effect SD 0.1"],
                                                                   "normal")
TIMING_REGIMES[f"{next(iter(PROCESS))}; job effects with t₃ tails (scale 0.04)"] = (AS_MEASURED, 0.04, "t3")
#: (replicate jobs, blocks per job) of the shipped configurations: configs/smoke.yaml and the default of the
#: setting (2 × 1), configs/gpu.yaml, grid.yaml and paper.yaml (4 × 1), config.yaml (8 × 2)
TIMING_DESIGNS = ((2, 1), (4, 1), (8, 2))
#: the design before, each size in a job of its own: config.yaml's 16 blocks, the other configurations' 4
ONE_JOB_PER_SIZE_BLOCKS = (4, 16)
ONE_JOB_PER_SIZE_REGIMES = tuple(f"{next(iter(PROCESS))}; {job}" for job in JOB_SDS)


def _draws(rng, shape, sd: float, tails: str) -> np.ndarray:
    """Effects of SD ``sd`` (normal) or scale ``sd`` (Student's t with 3 degrees of freedom)."""
    return (rng.standard_t(3, shape) if tails == "t3" else rng.normal(0.0, 1.0, shape)) * sd


def simulate(rng, trials: int, jobs: int, blocks: int, sizes: int, rise: float, process: tuple, job_sd: float,
             job_tails: str = "normal", rounds: int = TIMING_ROUNDS_PER_BLOCK) -> np.ndarray:
    """ms[trial, job, block, size, method, round] of two methods (0 = A, 1 = B) at ``sizes`` sizes, the round effect
    shared by every worker of a block's round; A/B is 1 at the first size and 1 + ``rise`` at the last."""
    round_sd, time_sd, outliers, factor, process_sd, tails = process
    shape = (trials, jobs, blocks, sizes, 2, rounds)
    log_ms = (_draws(rng, (trials, jobs, 1, sizes, 2, 1), job_sd, job_tails)
              + _draws(rng, (trials, jobs, blocks, sizes, 2, 1), process_sd, tails)
              + rng.normal(0.0, round_sd, (trials, jobs, blocks, 1, 1, rounds))
              + rng.normal(0.0, time_sd, shape))
    ms = 10.0 * np.exp(log_ms) * np.where(rng.random(shape) < outliers, factor, 1.0)
    ms[:, :, :, -1, 0] *= 1.0 + rise
    return ms


def as_table(ms: np.ndarray) -> pd.DataFrame:
    """One trial's times (ms[job, block, size, method, round]) as timing_repeats.csv rows of methods A and B."""
    jobs, blocks, sizes, _, rounds = ms.shape
    j, b, s, m, r = np.meshgrid(*(np.arange(n) for n in ms.shape), indexing="ij")
    return pd.DataFrame({"replicate": j.ravel(), "block": b.ravel(), "size": s.ravel(), "cell": "cell",
                         "method": np.where(m.ravel() == 0, "Kerple", "DAPE1x3-Kerple"),
                         "round": (b * rounds + r).ravel(), "ms": ms.ravel()})


def replicate_rise(ms: np.ndarray):
    """The interval the claim reads on one trial of the replicate-job design (ms[job, block, size, method, round]): t
    over the jobs' rises (:func:`~dape_core.report.timing_check.job_ratios`, ``rise_interval``)."""
    table = as_table(ms)
    ratios = [job_ratios(table[table["size"] == s]) for s in (0, ms.shape[2] - 1)]
    return rise_interval(job_rises(*ratios), "timing")


def block_ratio_array(ms: np.ndarray) -> np.ndarray:
    """ratio[..., job, block, size]: each block's median ms(A) / median ms(B) over its rounds, for many trials at
    once (the numbers of :func:`~dape_core.report.timing_check.ratio_of_medians`; a test compares them)."""
    return np.median(ms[..., 0, :], axis=-1) / np.median(ms[..., 1, :], axis=-1)


def replicate_rises(ms: np.ndarray) -> np.ndarray:
    """rises[trial, job] of the replicate-job design: the mean over a job's blocks of the last size's block ratio −
    the first's (what :func:`~dape_core.report.timing_check.job_rises` gives; a test compares them)."""
    per_job = block_ratio_array(ms).mean(axis=-2)
    return per_job[..., -1] - per_job[..., 0]


def welch_over_blocks(smaller: np.ndarray, larger: np.ndarray):
    """The rule before replicate jobs: mean over the larger size's blocks − mean over the smaller size's, Welch's
    t-interval on the blocks' own spread (:func:`dape_core.report.intervals.difference`)."""
    return difference([np.array([v]) for v in larger], [np.array([v]) for v in smaller], lambda m: m[:, 0])


def one_job_per_size_blocks(ms: np.ndarray) -> np.ndarray:
    """blocks[trial, size, block] of the design before: size k timed in job k alone (its own job effect, its own
    round effects), each block's ratio of medians."""
    ratios = block_ratio_array(ms)  # [trial, job, block, size]
    return np.stack([ratios[:, 0, :, 0], ratios[:, 1, :, -1]], axis=1)


def _decided(iv) -> bool:
    return decide(iv, side=1, confirm=0.0, refute=0.0) != UNDECIDED


def decisions(read, units: np.ndarray) -> tuple[int, int]:
    """Trials decided at 95 % and at 1 − 0.05/18: ``read(units[i])`` each trial's interval, read at both levels."""
    at_95 = at_holm = 0
    for unit in units:
        at_95 += _decided(read(unit))
        with family_level(FAMILY_CLAIMS):
            at_holm += _decided(read(unit))
    return at_95, at_holm


def timing_rows(task: tuple) -> list[dict]:
    """Two rows (95 % and 1 − 0.05/18) of one design × regime: ``trials`` null trials and ``power_trials`` at a rise
    of 2 SDs of one job's rise (replicate jobs) or of the rise (the design before)."""
    design, jobs, blocks, regime, trials, power_trials, seed = task
    rng = cell_rng(seed, "timing", design, regime, jobs, blocks)
    if design == "replicate jobs":
        process, job_sd, job_tails = TIMING_REGIMES[regime]
        n_jobs, units, read = jobs, replicate_rises, lambda rises: rise_interval(rises, "timing")
    else:  # a job per size: job 0 times size 0, job 1 size 1
        process, job_sd, job_tails = AS_MEASURED, JOB_SDS[regime.split("; ", 1)[1]], "normal"
        n_jobs, units, read = 2, one_job_per_size_blocks, lambda pair: welch_over_blocks(pair[0], pair[1])

    def count(n: int, rise: float) -> tuple[int, int]:
        done, totals = 0, np.zeros(2, dtype=int)
        while done < n:
            chunk = min(2000, n - done)
            totals += decisions(read, units(simulate(rng, chunk, n_jobs, blocks, 2, rise, process, job_sd,
                                                     job_tails)))
            done += chunk
        return int(totals[0]), int(totals[1])

    null = count(trials, 0.0)
    power = None
    if power_trials:
        draws = units(simulate(rng, 2000, n_jobs, blocks, 2, 0.0, process, job_sd, job_tails))
        unit = float(np.std(draws)) if design == "replicate jobs" else float(np.std(
            draws[:, 1].mean(axis=1) - draws[:, 0].mean(axis=1)))
        power = count(power_trials, 2 * unit)
    rows = []
    for i, level in enumerate(("95 %", f"Holm's strictest level 1 − 0.05/{FAMILY_CLAIMS}")):
        if design == "replicate jobs":
            basis = f"timing (replicate jobs, both sizes in every block, t over jobs) at {level}"
            sigma = (f"the jobs' own spread, ν = {jobs - 1} ({blocks} block{'s' if blocks > 1 else ''} of "
                     f"{TIMING_ROUNDS_PER_BLOCK} rounds a job); power at a rise of 2 SDs of one job's rise")
        else:
            basis = f"timing (the design before: one job per size, Welch over blocks) at {level}"
            sigma = (f"the blocks' own spread ({blocks} blocks of {TIMING_ROUNDS_PER_BLOCK} rounds a size); power at "
                     "a rise of 2 SDs of the rise")
        rate, se = _rate(null[i], trials)
        row = {"basis": basis, "per_window_data": False, "regime": regime,
               "seeds": jobs if design == "replicate jobs" else blocks, "sigma_from": sigma, "trials": trials,
               "false_decisions": rate, "false_decisions_se": se}
        if power is not None:
            row["power_at_2_sd"], row["power_se"] = _rate(power[i], power_trials)
        rows.append(row)
    return rows


def timing_cells(trials: int, seed: int, power_trials: int, before_trials: int | None = None) -> list[tuple]:
    """The cells of the timing rows: every shipped design × regime of the replicate-job rule, and the design
    before at its block counts without and with a job effect."""
    cells = [("replicate jobs", jobs, blocks, regime, trials, power_trials, seed)
             for regime in TIMING_REGIMES for jobs, blocks in TIMING_DESIGNS]
    cells += [("one job per size", 1, blocks, regime, before_trials or trials, power_trials, seed)
              for regime in ONE_JOB_PER_SIZE_REGIMES for blocks in ONE_JOB_PER_SIZE_BLOCKS]
    return cells


def timing_rows_all(trials: int, seed: int, power_trials: int, jobs: int = 1,
                    before_trials: int | None = None) -> list[dict]:
    """Every timing row (:func:`timing_cells`), ``jobs`` cells at a time."""
    from .common import each_cell

    return [row for rows in each_cell(timing_rows, timing_cells(trials, seed, power_trials, before_trials), jobs)
            for row in rows]
