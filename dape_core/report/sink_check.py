"""The attention-sink check (App. K): DAPE1x3 against DAPE on the attention the queries place on the first key,
paired by seed and sequence, each pair's interval on the spread of its own per-seed differences."""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd

from dape_core.report.claim_context import Context, exp, interval_text, of_role, own_or_borrowed, record
from dape_core.report.intervals import NO_PAIR_SPREAD, SeedNoise, decide


def sink_stronger(ctx: Context, t: Mapping) -> list[dict]:
    """App. K: the ratio DAPE1x3 / DAPE of the sink mass, CONFIRMED at or above ``t["ratio"]``. ``sink_mass``: per
    run, length, sequence and layer, the mean attention probability queries at positions ≥ 16 place on the first key.
    A run × seed's statistic is the mean over sequences of the log layer-mean sink mass; DAPE1x3-X is compared with
    DAPE-X paired by seed and sequence (runs of one setting share initialisation, batch stream and sequences), on the
    spread of the pair's own per-seed differences (ν = n − 1), since a σ pooled over encodings decides a noisier pair
    beyond 5 % (``python -m dape_core.report.calibration --only sink``). With one shared seed the interval is (−∞, +∞)
    and the paired σ pooled over the encodings with several seeds at that length sizes the seeds a verdict needs
    (:func:`~dape_core.report.claim_context.own_or_borrowed`)."""
    sink = of_role(ctx.sink, "attention_maps")
    if sink is None or sink.empty:
        return []
    sink = sink[pd.to_numeric(sink["sink_mass"], errors="coerce") > 0].copy()
    run = "run" if "run" in sink else "seed"
    if "seed" not in sink:  # runs without seeds: each run counts as a seed of its method, unpaired
        sink["seed"] = pd.factorize(sink[run])[0]
    if "sequence" not in sink:
        sink["sequence"] = 0
    keys = ["method", run, "seed", "eval_len", "sequence"] if run != "seed" else ["method", "seed", "eval_len",
                                                                                    "sequence"]
    per_seq = sink.groupby(keys, dropna=False)["sink_mass"].mean().reset_index()
    per_seq["log_mass"] = np.log(per_seq["sink_mass"].astype(float))

    def units(rows_a, rows_b, seeds):
        """Per shared seed: [sequences, 2] of log sink masses (DAPE1x3, DAPE) on the sequences both have."""
        out = []
        for seed in seeds:
            a = rows_a[rows_a["seed"] == seed].groupby("sequence")["log_mass"].mean()
            b = rows_b[rows_b["seed"] == seed].groupby("sequence")["log_mass"].mean()
            both = a.index.intersection(b.index)
            out.append(np.column_stack([a[both].to_numpy(), b[both].to_numpy()]))
        return out

    pairs = []
    for method in sorted(m for m in set(per_seq["method"]) if str(m).startswith("DAPE1x3-")):
        base = "DAPE-" + method.split("-", 1)[1]
        for length in sorted(set(per_seq.loc[per_seq["method"] == method, "eval_len"])):
            a = per_seq[(per_seq["method"] == method) & (per_seq["eval_len"] == length)]
            b = per_seq[(per_seq["method"] == base) & (per_seq["eval_len"] == length)]
            if not a.empty and not b.empty:
                shared = sorted(set(a["seed"].dropna()) & set(b["seed"].dropna()))
                pairs.append((method, base, length, a, b, shared, units(a, b, shared)))
    out = []
    for method, base, length, a, b, shared, paired_units in pairs:
        key = f"sink|{method}|{length}"
        if shared:
            noise = None if ctx.point else _pooled_differences(
                [u for m, _, n, *_, us in pairs if n == length for u in [us] if len(us) >= 2],
                f"the DAPE1x3 / DAPE sink pairs with several seeds at length {length}")
            d = ctx.interval(paired_units, lambda m: m[:, 0] - m[:, 1], key, inner="sequences",
                             seed_noise=own_or_borrowed(noise, len(shared)), missing=NO_PAIR_SPREAD)
        else:
            d = ctx.difference([r.groupby("sequence")["log_mass"].mean().to_numpy()[:, None]
                                for _, r in a.groupby("seed", dropna=False)],
                               [r.groupby("sequence")["log_mass"].mean().to_numpy()[:, None]
                                for _, r in b.groupby("seed", dropna=False)],
                               lambda m: m[:, 0], key, inner="sequences")
        ratio = d.map(exp)
        rule = dict(side=1, confirm=t["ratio"], refute=1.0)
        verdict = decide(ratio, **rule)
        n_a, n_b = a["seed"].nunique(dropna=False), b["seed"].nunique(dropna=False)
        text = (f"{method} vs {base} at {length}: sink mass {a['sink_mass'].mean():.3f} vs "
                f"{b['sink_mass'].mean():.3f}, ratio {ratio.estimate:.2f}"
                f"{interval_text(ratio, lambda x: f'{x:.2f}')} ({n_a} vs {n_b} runs)")
        runs = [str(r) for r in (*a[run], *b[run])] if run == "run" else []
        out.append(record(verdict, text, ratio, rule, sorted(set(runs)), show=lambda x: f"{x:.2f}",
                           eval_len=int(length),
                           dape1x3=float(a["sink_mass"].mean()), dape=float(b["sink_mass"].mean()),
                           ratio=ratio.estimate, ratio_low=ratio.low, ratio_high=ratio.high))
    return out


def _pooled_differences(groups: list[list[np.ndarray]], source: str) -> SeedNoise | None:
    """σ of one seed's paired difference (column 0 − column 1 of a unit's means) pooled over groups of ≥ 2 seeds
    (Montgomery §3.3), which sizes a one-seed pair; None without degrees of freedom."""
    ss, df = 0.0, 0
    for group in groups:
        d = np.array([u[:, 0].mean() - u[:, 1].mean() for u in group if len(u)])
        if len(d) >= 2 and np.isfinite(d).all():
            ss += float(((d - d.mean()) ** 2).sum())
            df += len(d) - 1
    return SeedNoise(math.sqrt(ss / df), df, f"{source} (ν {df})") if df else None
