"""How well a design's pilot predicts the seed noise of its fresh seeds, and the prior degrees of freedom of the
σ that sizes them (dape_core.report.claim_context.PRIOR_DF), from a finished run of a design-stage configuration.

    python benchmarks/sizing_noise.py [--reports reports] [--min-fresh 3]
                                      [--out benchmarks/results/sizing_noise.csv]

Per paired check of the pilot (the seeds below the design's fresh_seeds_from) that the fresh seeds reach with at
least ``--min-fresh`` seeds: the pair's own σ in the pilot (ν = pilot seeds − 1; with one pilot seed, none: the
pool sizes it), its setting's pooled interaction σ (of its regime), and the fresh seeds' own σ of the same pair. The prior degrees of freedom d₀ of a pair's σ²
about its pool are estimated by the method of moments (Smyth, limma 2004): the variance of log(fresh σ² / pooled
σ²) over the checks, less its sampling part (the mean of ψ′(ν_fresh / 2)), is the variance of the pairs' true
log σ² about the pool, which a scaled inverse-χ² of d₀ degrees of freedom gives as ψ′(d₀ / 2). Then each sizing
rule's error against the fresh σ: the own σ alone, the pool as a floor, and the moderated σ at d₀ and at
PRIOR_DF — the mean |log(σ / fresh σ)| and how many checks it puts below half, or above twice, the fresh σ.

The script reads a check's own and pooled σ by substituting, for the time of one evaluation each, the function
that combines them (``claim_context.sizing_sd``) with one that returns either limit. Every table is checked where
it is read; a damaged file stops with one line naming it.
"""

from __future__ import annotations

import argparse
import json
import math
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import polygamma

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def sizing_by(rule):
    """``claim_context.sizing_sd`` replaced by ``rule`` (own, pooled, n) → σ for the duration."""
    from dape_core.report import claim_context

    kept = claim_context.sizing_sd
    claim_context.sizing_sd = rule
    try:
        yield
    finally:
        claim_context.sizing_sd = kept


def paired_sds(tables: dict, fresh: bool) -> dict:
    """(setting, a, b, where) → (the σ each paired check's record carries, its seeds), over every claim."""
    from dape_core.report.claims import evaluate_claims

    verdicts = evaluate_claims(tables["lm_results"], che=tables["che_results"], sink=tables["sink"],
                               windows=tables["lm_windows"], fresh=fresh)
    out = {}
    for record in verdicts.to_dict("records"):
        numbers = record["numbers"] if isinstance(record["numbers"], dict) else json.loads(record["numbers"] or "{}")
        for key, check in numbers.items():
            basis = str(check.get("basis", "")) if isinstance(check, dict) else ""
            # a paired check (one seed of a pilot: paired too, with no spread of its own, sized at its pool)
            if check.get("a") and (basis.startswith("paired") or basis.startswith("1 seed (a paired")):
                out.setdefault((key.split(": ", 1)[-1], check["a"], check["b"], check.get("where")),
                               (check.get("unit_sd"), check.get("n_seeds")))
    return out


def checks(tables: dict, fresh_from: int, min_fresh: int) -> pd.DataFrame:
    """One row per paired check the pilot and at least ``min_fresh`` fresh seeds have: own, pooled, fresh σ."""
    def part(frame, fresh):
        seeds = pd.to_numeric(frame["seed"], errors="coerce")
        return frame[(seeds >= fresh_from) if fresh else (seeds < fresh_from)].reset_index(drop=True)

    pilot = {name: part(frame, False) for name, frame in tables.items()}
    later = {name: part(frame, True) for name, frame in tables.items()}
    with sizing_by(lambda own, pooled, n: own if n > 1 else pooled):
        own = paired_sds(pilot, True)
    with sizing_by(lambda own, pooled, n: pooled):
        pooled = paired_sds(pilot, True)
    fresh = paired_sds(later, False)
    rows = []
    for key, (sd, n) in sorted(fresh.items(), key=str):
        if key in own and n and n >= min_fresh and all(np.isfinite(v) for v in (sd, own[key][0], pooled[key][0])):
            rows.append({"setting": key[0], "a": key[1], "b": key[2], "where": key[3], "pilot_seeds": own[key][1],
                         "own_sd": own[key][0], "pooled_sd": pooled[key][0], "fresh_seeds": n, "fresh_sd": sd})
    return pd.DataFrame(rows)


def prior_df(df: pd.DataFrame) -> float:
    """d₀ by the method of moments (∞ when the fresh σ scatter no more about the pool than sampling explains)."""
    log_ratio = np.log(df["fresh_sd"] ** 2 / df["pooled_sd"] ** 2)
    excess = float(log_ratio.var(ddof=1) - polygamma(1, (df["fresh_seeds"] - 1) / 2).mean())
    return math.inf if excess <= 0 else float(brentq(lambda d: polygamma(1, d / 2) - excess, 1e-3, 1e6))


def moderated(df: pd.DataFrame, d0: float) -> pd.Series:
    """max(own, √((d₀·pooled² + ν·own²)/(d₀ + ν))), ν = pilot seeds − 1 (the pool where the pilot has one seed)."""
    nu = (df["pilot_seeds"] - 1).astype(float)
    if not math.isfinite(d0):
        return np.maximum(df["own_sd"], df["pooled_sd"]).where(nu > 0, df["pooled_sd"])
    mod = np.sqrt((d0 * df["pooled_sd"] ** 2 + nu * df["own_sd"] ** 2) / (d0 + nu))
    return np.maximum(df["own_sd"], mod).where(nu > 0, df["pooled_sd"])


def errors(df: pd.DataFrame, sized: pd.Series) -> dict:
    ratio = sized / df["fresh_sd"]
    return {"mean_abs_log_error": round(float(np.abs(np.log(ratio)).mean()), 3),
            "below_half": int((ratio < 0.5).sum()), "above_twice": int((ratio > 2).sum())}


def main(argv=None) -> int:
    from design_ceiling import positive, read_run

    from dape_core.report.claim_context import PRIOR_DF

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reports", default=str(ROOT / "reports"), help="a design-stage run's reports directory")
    p.add_argument("--min-fresh", type=positive(int, "a whole number ≥ 2"), default=3,
                   help="the fewest fresh seeds of a check that is compared (≥ 2: a σ of its own)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sizing_noise.csv"))
    args = p.parse_args(argv)
    if args.min_fresh < 2:
        p.error(f"argument --min-fresh: {args.min_fresh!r}: allowed values: a whole number ≥ 2")
    tables, design = read_run(Path(args.reports))
    df = checks(tables, design["fresh_seeds_from"], args.min_fresh)
    if len(df) < 3:
        raise SystemExit(f"{args.reports}: {len(df)} paired checks with a pilot and {args.min_fresh}+ fresh seeds; "
                         "too few to measure")
    d0 = prior_df(df)
    rules = {"own σ": df["own_sd"].where(df["pilot_seeds"] > 1, df["pooled_sd"]),
             "pooled σ as a floor": moderated(df, math.inf),
             f"moderated, d0 = {d0:.1f} (measured)": moderated(df, d0),
             f"moderated, d0 = {PRIOR_DF} (PRIOR_DF)": moderated(df, PRIOR_DF)}
    for name, sized in rules.items():
        df[name] = sized
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False, float_format="%.5f")
    with pd.option_context("display.width", 200):
        print(df[["setting", "a", "b", "where", "pilot_seeds", "own_sd", "pooled_sd", "fresh_seeds", "fresh_sd"]]
              .to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    print(f"{len(df)} paired checks; prior degrees of freedom d0 = {d0:.1f} (method of moments)")
    for name, sized in rules.items():
        print(f"  {name}: {errors(df, sized)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
