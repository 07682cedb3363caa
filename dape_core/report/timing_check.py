"""The timing check (§4.9, Table 7): the forward time of Kerple over DAPE1x3-Kerple per model size from the
interleaved rounds of timing_repeats.csv, and its rise between sizes with a t-interval over replicate jobs.

Every block of worker processes times both sizes and both methods, interleaved; the blocks are spread over
``replicates`` separate jobs. What changes between jobs (another moment, another placement) moves every block of a
job alike, so the unit is the job: each gives one rise (the mean over its blocks of the larger size's block ratio −
the smaller's), and the interval is Student's t over the jobs' rises, ν = jobs − 1, exact for normal job means
whatever the share of job-to-job variation (a jobs-and-blocks model with Satterthwaite's ν would need that share
estimated from few jobs). The verdict is a statement about the device the jobs ran on."""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np
import pandas as pd

from dape_core.report.claim_context import Context, of_role
from dape_core.report.intervals import POINT, UNDECIDED, Interval, combine, decide, interval

TIMED = ("Kerple", "DAPE1x3-Kerple")  # the ratio: ms(Kerple) / ms(DAPE1x3-Kerple)
NO_REPEATS = "no per-repeat times (timing_repeats.csv): no interval"
#: a table of the design before replicate jobs: each size timed in a job of its own, its blocks all in that job
NO_REPLICATES = ("timing_repeats.csv without replicate jobs (each size timed in a job of its own): its blocks do not "
                 "carry what varies between jobs, no interval; redo the timing jobs")
#: the sizes of one replicate timed in different cells (separate jobs): their rise would carry two jobs' effects
SEPARATE_CELLS = "the sizes were timed in separate jobs, not in the same blocks: no interval"
#: the fewest replicate jobs the interval is read on (one has no spread); the shipped simulation holds the rule at
#: every job count the shipped configurations use (benchmarks/results/verdict_calibration.csv, the timing rows)
MIN_JOBS = 2


def ratio_of_medians(kerple_ms: np.ndarray, dape_ms: np.ndarray) -> float:
    """One block's ratio: median ms(Kerple) / median ms(DAPE1x3-Kerple) over its interleaved rounds."""
    return float(np.median(kerple_ms) / np.median(dape_ms))


def block_ratios(rounds: pd.DataFrame) -> np.ndarray:
    """ms(Kerple) / ms(DAPE1x3-Kerple), a ratio of medians over each block's interleaved rounds (one value per
    block of fresh worker processes; a table without ``block`` is one block)."""
    blocks = rounds["block"] if "block" in rounds else pd.Series(0, index=rounds.index)
    out = []
    for _, g in rounds.assign(block=blocks.fillna(0)).groupby("block", sort=True):
        ms = g.pivot_table(index=["cell", "round"], columns="method", values="ms", aggfunc="mean").dropna()
        if ms.shape[1] == 2 and len(ms):
            out.append(ratio_of_medians(ms[TIMED[0]].to_numpy(), ms[TIMED[1]].to_numpy()))
    return np.array(out, dtype=float)


def job_ratios(rounds: pd.DataFrame) -> dict[int, float]:
    """One size's ratio per replicate job: the mean over the job's blocks of :func:`block_ratios`."""
    out = {}
    for replicate, g in rounds.groupby("replicate", sort=True):
        ratios = block_ratios(g)
        if len(ratios):
            out[int(replicate)] = float(np.mean(ratios))
    return out


def job_rises(smaller: Mapping[int, float], larger: Mapping[int, float]) -> np.ndarray:
    """The rise in each replicate job that timed both sizes: its larger size's ratio − its smaller size's."""
    return np.array([larger[k] - smaller[k] for k in sorted(set(smaller) & set(larger))], dtype=float)


def rise_interval(rises: np.ndarray, basis: str) -> Interval:
    """The rise of the ratio from one size to the next: the mean of the replicate jobs' rises with Student's
    t-interval on their own spread, ν = jobs − 1 (each job one unit)."""
    iv = interval([np.array([v]) for v in rises], lambda m: m[:, 0], kind="t")
    return dataclasses.replace(iv, basis=basis)


def timing_overhead_shrinks(ctx: Context, t: Mapping) -> list[dict]:
    """§4.9's forward time, per device × seq_len × batch × threads with ≥ 2 sizes (ordered by n_layer · d_model²):
    each size's ratio ms(Kerple) / ms(DAPE1x3-Kerple) per replicate job (:func:`job_ratios`), and the rise from each
    size to the next with its t-interval over the jobs (:func:`rise_interval`)."""
    summary = of_role(ctx.timing, "forward_time")
    if ctx.point:
        return timing_points(summary, t)
    reps = of_role(ctx.timing_repeats, "forward_time")
    if reps is None or reps.empty:  # an older timing.csv: medians only, no interval
        return [{"verdict": UNDECIDED, "basis": NO_REPEATS,
                 "text": f"timing.csv without per-repeat times ({check['text'].split(':')[0]}) → {UNDECIDED}; "
                         f"{NO_REPEATS}"} for check in timing_points(summary, t, POINT)]
    if "replicate" not in reps or reps["replicate"].isna().all():  # the design before replicate jobs
        return [{"verdict": UNDECIDED, "basis": NO_REPLICATES,
                 "text": f"{check['text'].rsplit(' → ', 1)[0]} → {UNDECIDED}; {NO_REPLICATES}"}
                for check in timing_points(summary, t, POINT)]
    reps = reps[(reps["mode"] == "forward") & reps["method"].isin(TIMED)].copy()
    reps["scale"] = reps["n_layer"].astype(float) * reps["d_model"].astype(float) ** 2
    out = []
    keys = ["device", "seq_len", "batch_size", "threads"]
    for k, g in reps.groupby(keys, dropna=False):
        label = ", ".join(f"{a}={b}" for a, b in zip(keys, k))
        sizes = []
        for (scale, size), gs in g.groupby(["scale", "size"], sort=True):
            ratios = job_ratios(gs)
            if ratios:
                blocks = int(gs.groupby("replicate")["block"].nunique().min()) if "block" in gs else 1
                sizes.append((size, float(np.mean(list(ratios.values()))), ratios, blocks, set(gs["cell"])))
        if len(sizes) < 2:
            continue
        device = str(k[0])
        pairs = [(a, b, job_rises(a[2], b[2])) for a, b in zip(sizes, sizes[1:])]
        jobs_min, blocks_min = min(len(r) for *_, r in pairs), min(s[3] for s in sizes)
        together = all(a[4] == b[4] for a, b, _ in pairs)
        basis = (f"t over {jobs_min}+ replicate jobs (ν = {jobs_min - 1}), each timing both sizes and both methods "
                 f"interleaved in {blocks_min}+ block{'s' if blocks_min != 1 else ''} of fresh worker processes, "
                 f"each job's rise the mean over its blocks of a ratio of medians, on {device} (the paper timed "
                 "GPUs)")
        few = jobs_min < MIN_JOBS or not together
        if not together:
            basis = SEPARATE_CELLS
        elif few:
            basis = (f"{jobs_min} replicate job{'s' if jobs_min != 1 else ''} timing both sizes on {device}: fewer "
                     f"than {MIN_JOBS}, no interval (what changes between jobs is shared by all of a job's blocks: "
                     "blocks alone do not measure it)")
        rises, judged = [], []
        rule = dict(side=1, confirm=t["rise"], refute=0.0)
        for (s0, r0, *_), (s1, r1, *_), per_job in pairs:
            rise = r1 - r0
            if few:
                rises.append(f"{s0} → {s1} {rise:+.3f}")
                continue
            iv = rise_interval(per_job, basis)
            judged.append((iv, rule))
            rises.append(f"{s0} → {s1} {iv.estimate:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]")
        verdict = UNDECIDED if few else combine([decide(iv, **rule) for iv, rule in judged])
        text = (f"{label}: Kerple / DAPE1x3-Kerple ms by size " + " → ".join(f"{s} {r:.3f}" for s, r, *_ in sizes)
                + f"; rise {'; '.join(rises)} (claimed ≥ {t['rise']:g} at each step)")
        # each rise is read again among the claim's other rises (claim_context.jointly: REFUTED at Bonferroni's level)
        check = {"verdict": verdict, "text": f"{text} → {verdict}; {basis}", "basis": basis, "device": device,
                 "ratio": {s: round(r, 4) for s, r, *_ in sizes}}
        if not few:
            check.update(_judged=judged, _head=text, _scope=f"; {basis}", _show=lambda x: f"{x:+.3f}")
        out.append(check)
    return out


def timing_points(times: pd.DataFrame | None, t: Mapping, basis: str = POINT) -> list[dict]:
    """The paper's printed times (one per cell): the rise of ms(Kerple) / ms(DAPE1x3-Kerple) across sizes as a point."""
    if times is None or times.empty:
        return []
    times = times[(times["mode"] == "forward") & times["method"].isin(TIMED)].copy()
    times["scale"] = times["n_layer"].astype(float) * times["d_model"].astype(float) ** 2
    out = []
    for k, g in times.groupby(["device", "seq_len", "batch_size"], dropna=False):
        ms = g.pivot_table(index=["scale", "size"], columns="method", values="median_ms", aggfunc="mean").dropna()
        if len(ms) < 2 or ms.shape[1] < 2:
            continue
        ratio = (ms[TIMED[0]] / ms[TIMED[1]]).sort_index().to_numpy()
        verdict = combine([decide(Interval(r, r, r, POINT, 1, 1), side=1, confirm=t["rise"], refute=0.0)
                           for r in np.diff(ratio)])
        text = f"seq_len={k[1]}: Kerple / DAPE1x3-Kerple ms by size " + " → ".join(f"{r:.3f}" for r in ratio)
        out.append({"verdict": verdict, "text": f"{text} → {verdict}; {POINT}", "basis": POINT})
    return out
