"""The attention-sink rule through the claim's own check (sink_stronger) on simulated sink tables, under equal
noise and with the pair read noisier than the other encodings'."""

from __future__ import annotations

import math

import pandas as pd

from dape_core.report.intervals import UNDECIDED, decide, simultaneous
from .common import HOLM_DIVISOR, _rate, null_columns


SINK_ENCODINGS, SINK_SEQUENCES, SINK_LAYERS, SINK_NOISE = ("ALiBi", "Kerple", "FIRE"), 8, 2, 0.3

SINK_SE = SINK_NOISE / math.sqrt(SINK_SEQUENCES)  # SE of one run's mean log mass over its sequences

SINK_REGIMES = {"interaction dominates": 2 * SINK_SE, "sequence noise dominates": 0.5 * SINK_SE}
#: the first encoding's pair (the one read) at this many times the others' interaction SD, the interaction
#: dominating: a σ pooled over the encodings would understate its noise
SINK_HETEROGENEITY = {"the pair read at 2× the other encodings' interaction SD": 2.0,
                      "the pair read at 3× the other encodings' interaction SD": 3.0}


def sink_table(rng, n: int, inter_sd: float, shift: float = 0.0, factor: float = 1.0) -> pd.DataFrame:
    """A sink.csv of the attention-map runs: DAPE1x3-X (shifted by ``shift`` in log mass) and DAPE-X per encoding,
    the first encoding's two methods at ``factor`` × the interaction SD."""
    rows = []
    sequence = rng.normal(0.0, 0.5, SINK_SEQUENCES)
    for e, encoding in enumerate(SINK_ENCODINGS):
        seed_effect = rng.normal(0.0, 0.4, n)
        for method, moved in ((f"DAPE1x3-{encoding}", shift), (f"DAPE-{encoding}", 0.0)):
            for s in range(n):
                base = -2.0 + seed_effect[s] + rng.normal(0.0, inter_sd * (factor if e == 0 else 1.0)) + moved
                for q in range(SINK_SEQUENCES):
                    value = base + sequence[q] + rng.normal(0.0, SINK_NOISE)
                    for layer in range(SINK_LAYERS):
                        rows.append((method, f"{method}-run", s, 64, q, layer, math.exp(value + rng.normal(0, 0.1))))
    return pd.DataFrame(rows, columns=["method", "run", "seed", "eval_len", "sequence", "layer", "sink_mass"])


def sink_trial(rng, n: int, inter_sd: float, shift: float, factor: float = 1.0, tail: bool = False):
    """Decided? The sink rule's check of the first encoding's pair, at a ratio threshold of 1 (zero margin);
    ``tail``: (at 95 %, its interval read at 1 − 0.05/18)."""
    from dape_core.report.claim_context import Context
    from dape_core.report.sink_check import sink_stronger

    checks = sink_stronger(Context(sink=sink_table(rng, n, inter_sd, shift, factor)), {"ratio": 1.0})
    first = next(c for c in checks if c["text"].startswith(f"DAPE1x3-{SINK_ENCODINGS[0]} "))
    if not tail:
        return first["verdict"] != UNDECIDED
    [(iv, rule)] = first["_judged"]
    return first["verdict"] != UNDECIDED, decide(simultaneous(iv, HOLM_DIVISOR), **rule) != UNDECIDED


def sink_rows(trials: int, rng, seeds=(1, 2, 3, 5), power: bool = True) -> list[dict]:
    """The sink rule's rows: equal noise in two regimes, and the pair read noisier than the other encodings'
    (:data:`SINK_HETEROGENEITY`, null trials only)."""
    rows = []
    regimes = [(regime, inter_sd, 1.0) for regime, inter_sd in SINK_REGIMES.items()]
    regimes += [(regime, SINK_REGIMES["interaction dominates"], factor)
                for regime, factor in SINK_HETEROGENEITY.items()]
    for regime, inter_sd, factor in regimes:
        unit = math.sqrt(2 * inter_sd ** 2 + 2 * SINK_SE ** 2)  # SD of one seed's paired difference
        for n in seeds:
            row = {"basis": "sink (paired differences, each pair's own spread)", "per_window_data": True,
                   "regime": regime, "seeds": n,
                   "sigma_from": "the pair's own per-seed differences" if n >= 2 else "none (n = 1)",
                   **null_columns([sink_trial(rng, n, inter_sd, 0.0, factor, tail=True) for _ in range(trials)])}
            if power and factor == 1.0:
                row["power_at_2_sd"], row["power_se"] = _rate(
                    sum(sink_trial(rng, n, inter_sd, 2 * unit) for _ in range(trials)), trials)
            rows.append(row)
    return rows
