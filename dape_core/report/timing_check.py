"""The timing check (§4.9, Table 7): the forward time of Kerple over DAPE1x3-Kerple per model size from the
interleaved rounds of timing_repeats.csv, and its rise between sizes with a t-interval over worker blocks."""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np
import pandas as pd

from dape_core.report.claim_context import Context, of_role
from dape_core.report.intervals import POINT, UNDECIDED, Interval, combine, decide, difference

TIMED = ("Kerple", "DAPE1x3-Kerple")  # the ratio: ms(Kerple) / ms(DAPE1x3-Kerple)
NO_REPEATS = "no per-repeat times (timing_repeats.csv): no interval"
#: the fewest worker blocks per size the interval is read on: with fewer, Welch's t has too few degrees of freedom
#: to say anything, and the shipped simulation holds the rule at 3 or more (benchmarks/results/
#: verdict_calibration.csv, the timing rows)
MIN_BLOCKS = 3


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


def rise_interval(smaller: np.ndarray, larger: np.ndarray, basis: str) -> Interval:
    """The rise of the ratio from one size to the next: mean over the larger size's blocks − mean over the smaller
    size's, with its Welch t-interval on the blocks' own spread (each block a process of its own: the units a
    process's speed is shared within)."""
    iv = difference([np.array([v]) for v in larger], [np.array([v]) for v in smaller], lambda m: m[:, 0])
    return dataclasses.replace(iv, basis=basis)


def timing_overhead_shrinks(ctx: Context, t: Mapping) -> list[dict]:
    """§4.9's forward time, per device × seq_len × batch × threads with ≥ 2 sizes (ordered by n_layer · d_model²): the
    ratio ms(Kerple) / ms(DAPE1x3-Kerple) of each size's blocks (a ratio of medians over a block's interleaved
    rounds), and the rise from each size to the next with its Welch interval over blocks (:func:`rise_interval`)."""
    summary = of_role(ctx.timing, "forward_time")
    if ctx.point:
        return timing_points(summary, t)
    reps = of_role(ctx.timing_repeats, "forward_time")
    if reps is None or reps.empty:  # an older timing.csv: medians only, no interval
        return [{"verdict": UNDECIDED, "basis": NO_REPEATS,
                 "text": f"timing.csv without per-repeat times ({check['text'].split(':')[0]}) → {UNDECIDED}; "
                         f"{NO_REPEATS}"} for check in timing_points(summary, t, POINT)]
    reps = reps[(reps["mode"] == "forward") & reps["method"].isin(TIMED)].copy()
    reps["scale"] = reps["n_layer"].astype(float) * reps["d_model"].astype(float) ** 2
    out = []
    keys = ["device", "seq_len", "batch_size", "threads"]
    for k, g in reps.groupby(keys, dropna=False):
        label = ", ".join(f"{a}={b}" for a, b in zip(keys, k))
        sizes = []
        for (scale, size), gs in g.groupby(["scale", "size"], sort=True):
            ratios = block_ratios(gs)
            if len(ratios):
                rounds = int(gs.groupby("method").size().min())
                sizes.append((size, float(np.mean(ratios)), ratios, rounds))
        if len(sizes) < 2:
            continue
        device, blocks_min = str(k[0]), min(len(r) for _, _, r, _ in sizes)
        rounds_min = min(n for *_, n in sizes)
        basis = (f"Welch t over {blocks_min}+ blocks of fresh worker processes per size ({rounds_min}+ interleaved "
                 f"rounds in all) on {device}, each block's ratio of medians (the paper timed GPUs)")
        few = blocks_min < MIN_BLOCKS
        if few:
            basis = (f"{blocks_min} block{'s' if blocks_min != 1 else ''} of worker processes per size on {device}: "
                     f"fewer than {MIN_BLOCKS}, no interval (a process's own speed is shared by all its rounds: "
                     "rounds alone do not measure it)")
        rises, judged = [], []
        rule = dict(side=1, confirm=t["rise"], refute=0.0)
        for (s0, r0, b0, _), (s1, r1, b1, _) in zip(sizes, sizes[1:]):
            rise = r1 - r0
            if few:
                rises.append(f"{s0} → {s1} {rise:+.3f}")
                continue
            iv = rise_interval(b0, b1, basis)
            judged.append((iv, rule))
            rises.append(f"{s0} → {s1} {rise:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]")
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
    """The paper's printed times (one number per cell): the rise of ms(Kerple) / ms(DAPE1x3-Kerple) between sizes
    as a point."""
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
