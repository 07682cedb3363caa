"""The timing check (§4.9, Table 7): the forward time of Kerple over DAPE1x3-Kerple per model size from the
interleaved rounds of timing_repeats.csv, and its rise between sizes with a bootstrap interval over rounds."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from dape_core.report.claim_context import Context, of_role
from dape_core.report.intervals import (POINT, UNDECIDED, Interval, combine, decide, median_ratio_draws, percentile,
                                        rng_for)

TIMED = ("Kerple", "DAPE1x3-Kerple")  # the ratio: ms(Kerple) / ms(DAPE1x3-Kerple)
NO_REPEATS = "no per-repeat times (timing_repeats.csv): no interval"
#: the fewest interleaved rounds per size the interval is read on: the bootstrap of 2–4 rounds decides two identical
#: methods 6–33 % of the time, of 5 or more at most 5 % (benchmarks/results/verdict_calibration.csv, the timing rows)
MIN_ROUNDS = 5


def timing_overhead_shrinks(ctx: Context, t: Mapping) -> list[dict]:
    """§4.9's forward time, per device × seq_len × batch × threads with ≥ 2 sizes (ordered by n_layer · d_model²): the ratio of medians
    ms(Kerple) / ms(DAPE1x3-Kerple) of each size's interleaved rounds, and the rise from each size to the next with
    its interval (rounds resampled, paired by round; :func:`~dape_core.report.intervals.median_ratio_draws`)."""
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
            rounds = gs.pivot_table(index=["cell", "round"], columns="method", values="ms", aggfunc="mean").dropna()
            if rounds.shape[1] == 2 and len(rounds) >= 2:
                kerple, dape = rounds[TIMED[0]].to_numpy(), rounds[TIMED[1]].to_numpy()
                draws = median_ratio_draws(kerple, dape, rng_for(f"timing|{label}|{size}"))
                sizes.append((size, float(np.median(kerple) / np.median(dape)), draws, len(rounds)))
        if len(sizes) < 2:
            continue
        device, rounds_min = str(k[0]), min(n for *_, n in sizes)
        basis = (f"ratio of medians of {rounds_min}+ interleaved rounds per size on {device} (rounds resampled; "
                 "the paper timed GPUs)")
        few = rounds_min < MIN_ROUNDS
        if few:
            basis = (f"{rounds_min} interleaved rounds per size on {device}: fewer than {MIN_ROUNDS}, no interval "
                     "(a bootstrap of so few rounds decides identical methods beyond 5 % of the time)")
        rises, judged = [], []
        rule = dict(side=1, confirm=t["rise"], refute=0.0)
        for (s0, r0, d0, _), (s1, r1, d1, n1) in zip(sizes, sizes[1:]):
            iv = percentile(r1 - r0, d1 - d0, basis, n1)
            judged.append((iv, rule))
            rises.append(f"{s0} → {s1} {r1 - r0:+.3f}" + ("" if few else f" [{iv.low:+.3f}, {iv.high:+.3f}]"))
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
