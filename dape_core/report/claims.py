"""The paper's qualitative claims as checks over the aggregated CSVs, each with an explicit rule and a verdict
read off a 95 % interval: CONFIRMED, REFUTED or UNDECIDED (NOT-RUN when the rows a claim needs are absent).

Verdicts (the rules of ``claims.md``):

- Every check has a statistic, an interval and a claimed side (:mod:`dape_core.report.intervals`). CONFIRMED when
  the whole interval lies on the claimed side beyond the claim's margin, REFUTED when the whole interval lies on
  the opposite side of zero (of "no difference"; for the threshold claims, beyond the threshold the claim is
  contrasted with, named in its rule), UNDECIDED otherwise: a difference inside the noise is never a refutation,
  and a real gain smaller than the margin is not a confirmation.
- A claim of several checks is CONFIRMED when all its checks are, REFUTED when any is, UNDECIDED otherwise (no
  multiplicity correction: with k checks the chance that noise alone refutes one is up to k × 2.5 %).
- Intervals are Student's t on per-seed statistics (:mod:`dape_core.report.intervals`), σ the SD of one seed's
  statistic pooled over the grid's methods in the check's own setting — dataset, size, training length and budget
  (:mod:`dape_core.report.seed_noise`) —, or the grid's largest for that statistic where the setting has one seed
  (named "borrowed" in the basis), or the seeds' own spread without any multi-seed setting; one seed and no
  estimate: (−∞, +∞), UNDECIDED. The statistic whose σ a check uses: the mean loss within (×1, also for a model
  evaluated below its training length), beyond (×>1) or over all multiples for perplexity comparisons, the
  explosion's growth for ``baselines_explode_bounded``, the ΔP statistic for ``delta_p_sign``; CHE pools its own
  cells with several seeds, the sink its DAPE1x3 / DAPE pairs with several seeds.
- Runs are paired by seed (and window) only where they share initialisation and batch stream — the same setting
  and seed —; otherwise unpaired (Welch), each side with its setting's within-run σ (seed main effect included).
- The timing claim: per size, the ratio of medians of interleaved rounds (``timing_repeats.csv``), its rise between
  sizes with a bootstrap over rounds, on the device each row names (the paper timed GPUs); a timing.csv without
  per-repeat times gives no interval (UNDECIDED).
- What would decide an UNDECIDED check, and its cost: :mod:`dape_core.report.claim_costs`.
- The paper's own numbers (one value per cell, no seeds or windows) get point verdicts: the interval is the
  point, labelled "point (the paper's printed numbers)".
- A diverged run (``status`` "diverged") has perplexity +∞ in every draw: it loses every comparison it should win
  (REFUTED when the other side never diverged), whatever the noise.

Conventions shared by the rules:

- Lengths are multiples of the training length: "within" is ×1 (evaluation length = training length),
  "beyond" every evaluated multiple > 1.
- "A beats B" (at ×1, or beyond): the relative gain 1 − ppl_A / ppl_B, with ppl the geometric mean over the
  seeds both methods have and the multiples both were evaluated at (seeds missing one are dropped; methods
  without a shared seed are resampled each on its own), CONFIRMED when its interval lies at or above the margin,
  REFUTED when it lies below 0. The margins follow the size of the paper's own gaps: 0.5 % at ×1 (the paper's
  DAPE1x3 vs DAPE gaps at ×1 are 0.6–1.8 %), 1 % for DAPE1x3 against DAPE (k = 1) beyond, 2 % for everything else.
- Rows are found by role, never by a family's name: a claim reads the rows whose ``roles`` (the roles the
  configuration's families declare, e.g. ``central``) include its role, so families may be named freely and
  several families of one role are read together. A timing, CHE or sink table without a ``roles`` column is
  read whole.
- Settings are dataset × training length × size inside the claim's role; each evaluable setting gives the
  claim's checks.

Each claim yields a record: ``claim_id``, ``section``, ``statement``, ``rule``, ``core``, ``informational``,
``verdict``, ``basis`` (what its intervals saw), ``summary`` (the numbers behind the verdict) and ``numbers``
(the same per check, as a dict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from dape_core.report.aggregate import ROLES, in_role
from dape_core.report.claim_costs import run_costs, what_decides
from dape_core.report.claims_markdown import claims_markdown
from dape_core.report.intervals import (CONFIRMED, MARKS, NOT_RUN, POINT, REFUTED, UNDECIDED, Interval, SeedNoise,
                                        combine, combine_noise, decide, difference, interval, median_ratio_draws,
                                        percentile, rng_for, seeds_to_decide)
from dape_core.report.seed_noise import SeedNoiseSource, setting_of, where_of

__all__ = ["CLAIMS", "CONFIRMED", "CORE_CLAIMS", "NOT_RUN", "REFUTED", "UNDECIDED", "claims_markdown",
           "evaluate_claims", "evaluate_claims_on_paper"]

WITHIN_MARGIN = 0.005
DAPE_MARGIN = 0.01
MARGIN = 0.02
BOUNDED = 1.5
EXPLODES = 2.0
BOUNDED_RANGE = (2, 4)
EXPLODE_RANGE = (2, 16)
LEAK_RATIO, LEAK_ABSOLUTE = 0.5, 1.5
COMPARABLE = 0.05
DELTA_P_MARGIN = 0.01
TIMING_RISE = 0.02
CHE_MARGIN = 0.01
SINK_RATIO = 1.1
TIMED = ("Kerple", "DAPE1x3-Kerple")  # the timing claim's ratio: ms(Kerple) / ms(DAPE1x3-Kerple)
NO_REPEATS = "no per-repeat times (timing_repeats.csv): no interval"
PERMUTATION_INVARIANT = ("parity_check", "cycle_navigation", "bucket_sort")
SETTING = ["dataset", "train_len", "size"]
#: per-window column → the lm_results column whose log stands in for it without per-window data
PPL_OF = {"loss": "ppl", "loss_dp": "ppl_dp", "loss_local": "ppl_local"}


def _exp(x: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.exp(x))


def _gain(d: float) -> float:
    """1 − exp(−d): the relative gain of a log-ratio d = log ppl_B − log ppl_A (+∞ → 1, −∞ → −∞)."""
    with np.errstate(over="ignore"):
        return float(-np.expm1(-d))


# ----------------------------------------------------------------------------------------------- data access
def _lm(lm: pd.DataFrame | None, role: str) -> pd.DataFrame:
    """The rows of one role with ``multiple`` = eval_len / train_len and diverged runs at perplexity +∞."""
    if lm is None or lm.empty:
        return pd.DataFrame(columns=SETTING + ["run", "method", "seed", "eval_len", "multiple", "ppl"])
    df = in_role(lm, role)
    df = df[df["train_len"].notna() & df["eval_len"].notna()].copy()
    df["size"] = df["size"].fillna("-").astype(str) if "size" in df else "-"
    df["train_len"] = df["train_len"].astype(int)
    df["eval_len"] = df["eval_len"].astype(int)
    df["multiple"] = (df["eval_len"] / df["train_len"]).round(4)
    df["run"] = df["run"].astype(str) if "run" in df else ""
    ok = df["status"].eq("ok") if "status" in df else True
    df["ppl"] = df["ppl"].astype(float).where(ok, np.inf)
    if "ppl_local" in df and "delta_p" in df:  # the paper prints ΔP and the local perplexity only
        dp = df["ppl_dp"].astype(float) if "ppl_dp" in df else pd.Series(np.nan, index=df.index)
        df["ppl_dp"] = dp.fillna(df["ppl_local"].astype(float) - df["delta_p"].astype(float))
    if "tril" in df:
        df["tril"] = df["tril"].astype(str).str.lower().isin(["true", "1", "1.0"])
    return df


def _of_role(df: pd.DataFrame | None, role: str) -> pd.DataFrame | None:
    """The rows of ``role`` in a timing, CHE or sink table; the whole table when it has no ``roles`` column."""
    if df is None or "roles" not in df:
        return df
    return in_role(df, role)


def _rows(role: str) -> str:
    """How a rule names the rows it reads: "Rows of the central comparison (role central)"."""
    return f"Rows of {ROLES[role]} (role {role})"


def _settings(df: pd.DataFrame, keys=SETTING):
    if df.empty:
        return
    for key, g in df.groupby(keys, sort=True):
        yield ", ".join(f"{k}={v}" for k, v in zip(keys, key)), g


def _pick(g: pd.DataFrame, spec) -> pd.DataFrame:
    """Rows of one method ("Kerple") or one method at one hidden width (("DAPE-Kerple", 64))."""
    if isinstance(spec, tuple):
        method, width = spec
        return g[(g["method"] == method) & (pd.to_numeric(g["dape_width"], errors="coerce") == width)]
    return g[g["method"] == spec]


def _name(spec) -> str:
    return f"{spec[0]} (D={spec[1]})" if isinstance(spec, tuple) else spec


def _in(where: str, m: pd.Series) -> pd.Series:
    return {"within": m == 1, "beyond": m > 1, "all": m >= 1}[where]


def _f(x: float) -> str:
    if np.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return f"{x:.2f}" if abs(x) < 100 else f"{x:.4g}"


def _pct(x: float) -> str:
    if np.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return "nan" if np.isnan(x) else f"{100 * x:+.1f}%"


class Context:
    """What the checks read: the aggregated tables, the per-window losses by (run, seed, evaluation length), the
    multi-seed settings that give checks their seed noise, and whether verdicts are point verdicts (the paper's
    numbers)."""

    def __init__(self, lm=None, timing=None, che=None, sink=None, windows=None, point: bool = False,
                 timing_repeats=None):
        self.lm, self.timing, self.che, self.sink, self.point = lm, timing, che, sink, point
        self.timing_repeats = timing_repeats
        self.windows: dict[tuple[str, int, int], pd.DataFrame] = {}
        if windows is not None and len(windows):
            for (run, seed, n), g in windows.groupby(["run", "seed", "eval_len"], sort=False):
                self.windows[(str(run), int(seed), int(n))] = g.set_index(["document", "anchor"])
        self.seed_source = SeedNoiseSource(None if point else lm, windows)

    def noise(self, stat, paired: bool, rows: pd.DataFrame) -> SeedNoise | None:
        """σ of one seed's ``stat`` for the run(s) of ``rows`` (:mod:`~dape_core.report.seed_noise`): their
        setting's, or the grid's largest where the setting has one seed."""
        return self.seed_source.noise(stat, paired, setting_of(rows))

    def interval(self, units, statistic, key: str, inner: str = "windows", seed_noise: SeedNoise | None = None,
                 kind: str = "paired t") -> Interval:
        return interval(units, statistic, key, point=self.point, inner=inner, seed_noise=seed_noise, kind=kind)

    def difference(self, units_b, units_a, statistic, key: str, inner: str = "windows",
                   noise_b: SeedNoise | None = None, noise_a: SeedNoise | None = None) -> Interval:
        return difference(units_b, units_a, statistic, key, point=self.point, inner=inner, noise_b=noise_b,
                          noise_a=noise_a)

    def piece(self, rows: pd.DataFrame, column: str = "loss") -> pd.Series | float:
        """One method × seed × evaluation length (one row per run): the per-window ``column`` indexed by window
        (runs of one method and seed averaged), or without per-window data the log of the row's perplexity;
        +∞ when a run diverged."""
        if np.isinf(rows["ppl"].to_numpy(dtype=float)).any():
            return float("inf")
        found = [self.windows.get((run, int(seed), int(n)))
                 for run, seed, n in zip(rows["run"], rows["seed"], rows["eval_len"])]
        if all(f is not None and len(f) and column in f for f in found):
            series = pd.concat([f[column] for f in found], axis=1, join="inner").mean(axis=1)
            if len(series):
                return series
        return float(np.log(rows[PPL_OF[column]].astype(float)).mean())


def _unit(pieces: list) -> np.ndarray:
    """[rows, k]: the pieces' per-window values on the windows all share (a diverged piece is +∞ on each), or one
    row of their means when a piece has no per-window data or fewer than two windows are shared."""
    series = [p for p in pieces if isinstance(p, pd.Series)]
    if series and all(isinstance(p, pd.Series) or np.isinf(p) for p in pieces):
        common = series[0].index
        for p in series[1:]:
            common = common.intersection(p.index)
        if len(common) >= 2:
            return np.column_stack([p.reindex(common).to_numpy(dtype=float) if isinstance(p, pd.Series)
                                    else np.full(len(common), p) for p in pieces])
    return np.array([[p.mean() if isinstance(p, pd.Series) else p for p in pieces]], dtype=float)


def _seeds(rows: pd.DataFrame, lengths, columns=("loss",)) -> set:
    """Seeds with a row at every one of ``lengths`` (with the perplexities ``columns`` stand for)."""
    ok = rows[rows[[PPL_OF[c] for c in columns]].notna().all(axis=1)]
    have = ok.groupby("seed")["eval_len"].agg(set)
    return {seed for seed, lens in have.items() if set(lengths) <= lens}


def _seed_unit(ctx: Context, parts) -> np.ndarray:
    """The unit of one seed: ``parts`` lists (rows of one method and seed, evaluation lengths, column)."""
    return _unit([ctx.piece(rows[rows["eval_len"] == n], column) for rows, lengths, column in parts
                  for n in lengths])


def _compare(ctx: Context, ra: pd.DataFrame, rb: pd.DataFrame, lengths_a, lengths_b, key: str,
             stats=(("mean", "all", "loss"),) * 2) -> Interval | None:
    """log ppl_B − log ppl_A (each a mean over its lengths and the seeds), with its t-interval. Paired by seed (and
    window) only where the two share initialisation and batch stream — the same setting (dataset, size, training
    length and budget) and seed —, with the interaction σ of the per-run statistics ``stats`` (A's, B's);
    otherwise unpaired over all their seeds, each side with its setting's within-run σ. None when a side has no
    complete seed."""
    sa, sb = _seeds(ra, lengths_a), _seeds(rb, lengths_b)
    if not sa or not sb:
        return None
    setting = setting_of(ra)
    shared = sorted(sa & sb) if setting is not None and setting == setting_of(rb) else []
    k = len(lengths_a)
    if shared:
        units = [_seed_unit(ctx, [(ra[ra["seed"] == s], lengths_a, "loss"), (rb[rb["seed"] == s], lengths_b, "loss")])
                 for s in shared]
        parts = [ctx.noise(stat, True, ra) for stat in stats]
        noise = combine_noise(parts) if all(p is not None for p in parts) else None
        return ctx.interval(units, lambda m: m[:, k:].mean(axis=1) - m[:, :k].mean(axis=1), key, seed_noise=noise)
    units_a = [_seed_unit(ctx, [(ra[ra["seed"] == s], lengths_a, "loss")]) for s in sorted(sa)]
    units_b = [_seed_unit(ctx, [(rb[rb["seed"] == s], lengths_b, "loss")]) for s in sorted(sb)]
    return ctx.difference(units_b, units_a, lambda m: m.mean(axis=1), key,
                          noise_b=ctx.noise(stats[1], False, rb), noise_a=ctx.noise(stats[0], False, ra))


def _stat(where: str) -> tuple:
    """The per-run seed-noise statistic of a perplexity comparison at ``where`` (within, beyond, all)."""
    return ("mean", where, "loss")


def _gm(rows: pd.DataFrame, lengths) -> float:
    """Geometric mean of the perplexity over ``rows`` at ``lengths`` (+∞ with a diverged run)."""
    values = rows.loc[rows["eval_len"].isin(lengths), "ppl"].astype(float)
    with np.errstate(divide="ignore"):
        return float(np.exp(np.log(values).mean())) if len(values) else float("nan")


def _interval_text(iv: Interval, fmt=_pct) -> str:
    """" [low, high]" (nothing for a point verdict, whose scope says so)."""
    return "" if iv.basis == POINT else f" [{fmt(iv.low)}, {fmt(iv.high)}]"


def _record(verdict: str, text: str, iv: Interval | None, rule: dict | None = None, runs=(), **numbers) -> dict:
    """One check: its verdict, its text (ending with the verdict, what the interval saw and the seed noise it
    used) and its numbers; with ``rule`` (side, confirm, refute of :func:`decide`) an UNDECIDED check also gets
    the seeds that would decide it (``seeds_needed``) and the ``runs`` they would retrain."""
    scope = f"; {iv.scope()}" if iv is not None else ""
    if iv is not None and iv.seed_noise is not None:
        scope += f"; {iv.seed_noise.text()}"
    record = {"verdict": verdict, "text": f"{text} → {verdict}{scope}", **numbers}
    if iv is not None:
        record.update(basis=iv.basis, n_seeds=iv.n_seeds, n_rows=iv.n_rows, unit_sd=iv.unit_sd)
        if iv.seed_noise is not None:
            record.update(seed_sd=iv.seed_noise.sd, seed_df=iv.seed_noise.df)
    if rule is not None and iv is not None and verdict == UNDECIDED:
        needed, why = seeds_to_decide(iv, **rule)
        record.update(seeds_needed=needed, seeds_needed_text=why, runs=sorted({str(r) for r in runs}))
    return record


def _estimate_rate() -> tuple[float, float]:
    """The estimate block's defaults (workflow/schemas/config.schema.yaml): gpu_tflops, utilisation."""
    from dape_core.config.schema import SCHEMA_PATH, load_yaml

    props = load_yaml(SCHEMA_PATH)["properties"]["estimate"]["properties"]
    return float(props["gpu_tflops"]["default"]), float(props["utilisation"]["default"])


def _runs(*frames: pd.DataFrame) -> list[str]:
    """The runs of some rows (what more seeds would retrain)."""
    return sorted({str(r) for f in frames for r in f["run"]}) if frames else []


def _beats(ctx: Context, g: pd.DataFrame, a, b, where: str, margin: float, label: str) -> dict | None:
    """Does ``a`` beat ``b`` (lower perplexity) at ``where``: the gain 1 − ppl_a / ppl_b, its interval, verdict."""
    ra, rb = _pick(g, a), _pick(g, b)
    ma = set(ra.loc[_in(where, ra["multiple"]) & ra["ppl"].notna(), "multiple"])
    mb = set(rb.loc[_in(where, rb["multiple"]) & rb["ppl"].notna(), "multiple"])
    multiples = sorted(ma & mb)
    if not multiples:
        return None
    train_len = int(g["train_len"].iloc[0])
    lengths = [int(round(m * train_len)) for m in multiples]
    iv = _compare(ctx, ra, rb, lengths, lengths, f"beats|{label}|{_name(a)}|{_name(b)}|{where}",
                  (_stat(where), _stat(where)))
    if iv is None:
        return None
    gain = iv.map(_gain)
    rule = dict(side=1, confirm=margin, refute=0.0)
    verdict = decide(gain, **rule)
    a_ppl, b_ppl = _gm(ra, lengths), _gm(rb, lengths)
    text = (f"{label}: {_name(a)} {_f(a_ppl)} vs {_name(b)} {_f(b_ppl)} ({where}, "
            f"×{'/'.join(f'{m:g}' for m in multiples)}): gain {_pct(gain.estimate)}{_interval_text(gain)}, "
            f"margin {margin:.1%}")
    return _record(verdict, text, gain, rule, _runs(ra, rb), a=_name(a), b=_name(b), where=where, a_ppl=a_ppl,
                   b_ppl=b_ppl,
                   gain=gain.estimate, gain_low=gain.low, gain_high=gain.high, margin=margin, multiples=multiples)


def _check_each(ctx: Context, g: pd.DataFrame, label: str, pairs) -> list[dict]:
    out = []
    for a, b, where, margin in pairs:
        r = _beats(ctx, g, a, b, where, margin, label)
        if r is not None:
            out.append(r)
    return out


# ----------------------------------------------------------------------------------------------- the claims
@dataclass(frozen=True)
class Claim:
    claim_id: str
    section: str
    statement: str
    rule: str
    check: Callable[[Context], list[dict]]
    core: bool = False
    informational: bool = False
    needs: tuple[str, ...] = field(default=("lm",))


def _explode_bounded(ctx: Context) -> list[dict]:
    df = _lm(ctx.lm, "central")
    checks, seen = [], set()
    for label, g in _settings(df):
        train_len = int(g["train_len"].iloc[0])
        for method, kind in [("NoPE", "explodes"), ("RoPE", "explodes"), ("ALiBi", "bounded"),
                             ("Kerple", "bounded")]:
            lo, hi = EXPLODE_RANGE if kind == "explodes" else BOUNDED_RANGE
            rows = g[g["method"] == method]
            multiples = sorted(m for m in set(rows["multiple"]) if lo <= m <= hi)
            lengths = [train_len] + [int(round(m * train_len)) for m in multiples]
            seeds = sorted(_seeds(rows, lengths)) if multiples and 1.0 in set(rows["multiple"]) else []
            if not seeds:
                continue
            seen.add(method)
            units = [_seed_unit(ctx, [(rows[rows["seed"] == s], lengths, "loss")]) for s in seeds]
            ratio = ctx.interval(units, lambda m: (m[:, 1:] - m[:, :1]).max(axis=1), f"explode|{label}|{method}",
                                 seed_noise=ctx.noise(("growth", lo, hi), False, rows), kind="t").map(_exp)
            text = (f"{label}: {method} {kind}? largest ppl(×{lo:g}–{hi:g}) / ppl(×1) {_f(ratio.estimate)}"
                    f"{_interval_text(ratio, _f)}")
            rule = (dict(side=1, confirm=EXPLODES, refute=BOUNDED) if kind == "explodes"
                    else dict(side=-1, confirm=BOUNDED, refute=EXPLODES))
            if any(np.isinf(u).any() for u in units):  # a diverged run's growth is undefined: it is not bounded
                verdict, text = (REFUTED if kind == "bounded" else UNDECIDED), f"{label}: {method} diverged"
            else:
                verdict = decide(ratio, **rule)
            checks.append(_record(verdict, text, ratio, rule, _runs(rows), method=method, kind=kind,
                                  ratio=ratio.estimate, ratio_low=ratio.low, ratio_high=ratio.high))
    return checks if seen == {"NoPE", "RoPE", "ALiBi", "Kerple"} else []


def _ordering_beyond(ctx: Context) -> list[dict]:
    out = []
    for label, g in _settings(_lm(ctx.lm, "central")):
        if {"Kerple", "DAPE-Kerple", "DAPE1x3-Kerple"} <= set(g["method"]):
            out += _check_each(ctx, g, label, [("DAPE1x3-Kerple", "DAPE-Kerple", "beyond", DAPE_MARGIN),
                                               ("DAPE-Kerple", "Kerple", "beyond", MARGIN)])
    return out


def _best_within(ctx: Context) -> list[dict]:
    out = []
    for label, g in _settings(_lm(ctx.lm, "central")):
        others = [m for m in sorted(set(g["method"])) if m != "DAPE1x3-Kerple"]
        out += _check_each(ctx, g, label, [("DAPE1x3-Kerple", m, "within", WITHIN_MARGIN) for m in others])
    return out


def _improves(encodings, role="every_encoding", against=lambda enc: enc,
              within=WITHIN_MARGIN, beyond=MARGIN):
    def check(ctx: Context) -> list[dict]:
        out = []
        for label, g in _settings(_lm(ctx.lm, role)):
            for enc in encodings:
                out += _check_each(ctx, g, label, [(f"DAPE1x3-{enc}", against(enc), "within", within),
                                                   (f"DAPE1x3-{enc}", against(enc), "beyond", beyond)])
        return out
    return check


def _naive_dape_rope(ctx: Context) -> list[dict]:
    out = []
    for label, g in _settings(_lm(ctx.lm, "every_encoding")):
        out += _check_each(ctx, g, label, [("RoPE", "DAPE-RoPE", "all", MARGIN)])
    return out


def _data_adaptive(ctx: Context) -> list[dict]:
    out = []
    for label, g in _settings(_lm(ctx.lm, "central")):
        out += _check_each(ctx, g, label, [("DAPE1x3-Kerple", b, w, m) for b in ("CoPE", "XL")
                                           for w, m in (("within", WITHIN_MARGIN), ("beyond", MARGIN))])
    return out


def _level(ctx: Context, rows: pd.DataFrame, lengths, key: str, stat=("mean", "within", "loss")) -> Interval | None:
    """The geometric-mean perplexity of ``rows`` at ``lengths`` over its seeds, with its interval (one seed: the
    within-run seed noise of ``stat``)."""
    seeds = sorted(_seeds(rows, lengths))
    if not seeds:
        return None
    units = [_seed_unit(ctx, [(rows[rows["seed"] == s], lengths, "loss")]) for s in seeds]
    return ctx.interval(units, lambda m: m.mean(axis=1), key, seed_noise=ctx.noise(stat, False, rows),
                        kind="t").map(_exp)


def _leakage(ctx: Context) -> list[dict]:
    df = _lm(ctx.lm, "leakage")
    out = []
    if df.empty or "tril" not in df:
        return out
    df = df[df["method"].str.startswith("DAPE") & (df["multiple"] == 1)]
    for label, g in _settings(df, SETTING + ["encoding", "kernel_size"]):
        lengths = [int(g["train_len"].iloc[0])]
        tril, leak = g[g["tril"]], g[~g["tril"]]
        d = _compare(ctx, tril, leak, lengths, lengths, f"leak|{label}", (_stat("within"), _stat("within")))
        absolute = _level(ctx, leak, lengths, f"leak|{label}")  # same key: the same seeds drawn
        if d is None or absolute is None:
            continue
        ratio = d.map(_exp)
        rule = dict(side=-1, confirm=LEAK_RATIO, refute=1.0)
        by_ratio = decide(ratio, **rule)
        collapsed = by_ratio == CONFIRMED or absolute.high <= LEAK_ABSOLUTE
        verdict = CONFIRMED if collapsed else by_ratio
        text = (f"{label}: no-tril ppl {_f(absolute.estimate)}{_interval_text(absolute, _f)}, no-tril / tril "
                f"{ratio.estimate:.3f}{_interval_text(ratio, lambda x: f'{x:.3f}')} at ×1")
        out.append(_record(verdict, text, ratio, rule, _runs(tril, leak), ratio=ratio.estimate, ratio_low=ratio.low,
                           ratio_high=ratio.high,
                           no_tril_ppl=absolute.estimate, no_tril_ppl_high=absolute.high,
                           tril_ppl=_gm(tril, lengths)))
    return out


def _width(ctx: Context) -> list[dict]:
    out = []
    for label, g in _settings(_lm(ctx.lm, "width_sweep")):
        for w in (10, 21):
            out += _check_each(ctx, g, label,
                               [(("DAPE1x3-Kerple", w), ("DAPE-Kerple", 64), "within", WITHIN_MARGIN),
                                (("DAPE1x3-Kerple", w), ("DAPE-Kerple", 64), "beyond", DAPE_MARGIN)])
    return out


def _kernel_not_largest(ctx: Context) -> list[dict]:
    df = _lm(ctx.lm, "kernel_sweep")
    df = df[df["method"].str.startswith("DAPE") & (df["multiple"] >= 1)]
    supported, cells, contradicted, total, bases, noises, to_confirm = [], 0, 0, 0, set(), set(), []
    for label, g in _settings(df, SETTING + ["encoding"]):
        train_len = int(g["train_len"].iloc[0])
        for m, gm in g.groupby("multiple"):
            kernels = sorted(int(k) for k in set(gm["kernel_size"]))
            if len(kernels) < 3:
                continue
            largest, lengths = kernels[-1], [int(round(m * train_len))]
            verdicts = []
            for k in kernels[:-1]:
                iv = _compare(ctx, gm[gm["kernel_size"] == k], gm[gm["kernel_size"] == largest], lengths, lengths,
                              f"kernel|{label}|{m:g}|{k}|{largest}", (_stat(where_of(m)),) * 2)
                if iv is None:
                    continue
                gain = iv.map(_gain)
                bases.add(gain.basis)
                verdicts.append(decide(gain, side=1, confirm=0.0, refute=0.0))
                if gain.seed_noise is not None:
                    noises.add(gain.seed_noise.text())
                needed = seeds_to_decide(gain, side=1, confirm=0.0, refute=0.0)[0]
                if verdicts[-1] == UNDECIDED and needed is not None and gain.estimate > 0:
                    to_confirm.append((needed, _runs(gm[gm["kernel_size"].isin([k, largest])])))
                if verdicts[-1] == CONFIRMED:
                    supported.append(f"{label} ×{m:g}: k={k} beats k={largest} by {_pct(gain.estimate)}"
                                     f"{_interval_text(gain)}")
            if not verdicts:
                continue
            total += 1
            cells += CONFIRMED in verdicts
            contradicted += all(v == REFUTED for v in verdicts)
    if total == 0:
        return []
    verdict = CONFIRMED if supported else REFUTED if contradicted == total else UNDECIDED
    text = (f"{total} setting × multiple cells: in {cells} a smaller kernel beats the largest beyond the noise, in "
            f"{contradicted} the largest beats every smaller one" + (f"; e.g. {supported[0]}" if supported else ""))
    record = {"verdict": verdict, "text": f"{text} → {verdict}; {'; '.join(sorted(bases | noises))}",
              "basis": "; ".join(sorted(bases)), "cases": supported, "n_compared": total,
              "n_contradicting": contradicted}
    if verdict == UNDECIDED:  # one smaller kernel beating the largest confirms: the cheapest such cell
        needed, runs = min(to_confirm, default=(None, []))
        record.update(seeds_needed=needed, runs=runs, seeds_needed_text=(
            f"{needed} (towards {CONFIRMED}, the cheapest cell)" if needed else
            "none at the observed effects: no smaller kernel's estimate beats the largest"))
    return [record]


def _equal_tokens(ctx: Context, kind: str) -> list[dict]:
    df = _lm(ctx.lm, "equal_tokens")
    out = []
    for label, g in _settings(df, ["dataset", "size", "method"]):
        lengths = sorted(set(g["train_len"]))
        if len(lengths) < 2:
            continue
        lmax, l0 = lengths[-1], lengths[0]
        longest = g[g["train_len"] == lmax]
        if kind == "comparable":
            if g["method"].iloc[0] != "DAPE1x3-Kerple":
                continue
            for t in [t for t in lengths[:-1] if t >= lmax / 8]:
                shorter = g[g["train_len"] == t]
                d = _compare(ctx, longest, shorter, [lmax], [lmax], f"equal|{label}|{t}|{lmax}",
                             (_stat("within"), _stat(where_of(lmax / t))))
                if d is None:
                    continue
                ratio = d.map(_exp)
                rule = dict(side=-1, confirm=1 + COMPARABLE, refute=1 + COMPARABLE)
                verdict = decide(ratio, **rule)
                text = (f"{label}: train {t} vs {lmax} at eval {lmax}: ppl ratio {ratio.estimate:.3f}"
                        f"{_interval_text(ratio, lambda x: f'{x:.3f}')}")
                out.append(_record(verdict, text, ratio, rule, _runs(longest, shorter), train_len=t, longest=lmax,
                                   ratio=ratio.estimate, ratio_low=ratio.low, ratio_high=ratio.high))
        else:
            short = g[g["train_len"] == l0]
            d = _compare(ctx, short, longest, [l0], [l0], f"hurts|{label}|{l0}|{lmax}",
                         (_stat("within"), _stat(where_of(l0 / lmax))))
            if d is None:
                continue
            gain = d.map(_gain)
            rule = dict(side=1, confirm=MARGIN, refute=0.0)
            verdict = decide(gain, **rule)
            text = (f"{label}: at eval {l0}, train {l0} {_f(_gm(short, [l0]))} vs train {lmax} "
                    f"{_f(_gm(longest, [l0]))}: gain {_pct(gain.estimate)}{_interval_text(gain)}")
            out.append(_record(verdict, text, gain, rule, _runs(short, longest), gain=gain.estimate,
                               gain_low=gain.low, gain_high=gain.high))
    return out


def _delta_p(ctx: Context) -> list[dict]:
    df = _lm(ctx.lm, "central")
    if "delta_p" not in df:
        return []
    df = df[(df["multiple"] >= 2) & df["delta_p"].notna() & df["ppl_local"].notna()]
    out = []
    for label, g in _settings(df):
        train_len = int(g["train_len"].iloc[0])
        for method, sign in [("DAPE-Kerple", 1), ("DAPE1x3-Kerple", 1), ("RoPE", -1)]:
            rows = g[g["method"] == method]
            lengths = [int(round(m * train_len)) for m in sorted(set(rows["multiple"]))]
            seeds = sorted(_seeds(rows, lengths, ("loss_local", "loss_dp")))
            if not seeds:
                continue
            k = len(lengths)
            units = [_seed_unit(ctx, [(rows[rows["seed"] == s], lengths, "loss_local"),
                                      (rows[rows["seed"] == s], lengths, "loss_dp")]) for s in seeds]
            rel = ctx.interval(units, lambda m: m[:, :k].mean(axis=1) - m[:, k:].mean(axis=1),
                               f"delta_p|{label}|{method}", seed_noise=ctx.noise(("delta_p",), False, rows),
                               kind="t").map(_gain)
            rule = dict(side=sign, confirm=sign * DELTA_P_MARGIN, refute=0.0)
            verdict = decide(rel, **rule)
            text = (f"{label}: {method} ΔP / local ppl at ×≥2 {_pct(rel.estimate)}{_interval_text(rel)} "
                    f"(claimed {'> +' if sign > 0 else '< −'}{DELTA_P_MARGIN:.0%})")
            out.append(_record(verdict, text, rel, rule, _runs(rows), method=method, relative=rel.estimate,
                               relative_low=rel.low, relative_high=rel.high))
    methods = {c["method"] for c in out}
    return out if "RoPE" in methods and methods & {"DAPE-Kerple", "DAPE1x3-Kerple"} else []


def _timing(ctx: Context) -> list[dict]:
    """Per device × seq_len × batch × threads with ≥ 2 sizes (ordered by n_layer · d_model²): the ratio of medians
    ms(Kerple) / ms(DAPE1x3-Kerple) of each size's interleaved rounds, and the rise from each size to the next with
    its interval (rounds resampled, paired by round; :func:`~dape_core.report.intervals.median_ratio_draws`)."""
    summary = _of_role(ctx.timing, "forward_time")
    if ctx.point:
        return _timing_points(summary)
    reps = _of_role(ctx.timing_repeats, "forward_time")
    if reps is None or reps.empty:  # an older timing.csv: medians only, no interval
        return [{"verdict": UNDECIDED, "basis": NO_REPEATS,
                 "text": f"timing.csv without per-repeat times ({check['text'].split(':')[0]}) → {UNDECIDED}; "
                         f"{NO_REPEATS}"} for check in _timing_points(summary, POINT)]
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
        rises, verdicts = [], []
        rule = dict(side=1, confirm=TIMING_RISE, refute=0.0)
        for (s0, r0, d0, _), (s1, r1, d1, n1) in zip(sizes, sizes[1:]):
            iv = percentile(r1 - r0, d1 - d0, basis, n1)
            verdicts.append(decide(iv, **rule))
            rises.append(f"{s0} → {s1} {r1 - r0:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]")
        verdict = combine(verdicts)
        text = (f"{label}: Kerple / DAPE1x3-Kerple ms by size " + " → ".join(f"{s} {r:.3f}" for s, r, *_ in sizes)
                + f"; rise {'; '.join(rises)} (claimed ≥ {TIMING_RISE:g} at each step)")
        out.append({"verdict": verdict, "text": f"{text} → {verdict}; {basis}", "basis": basis, "device": device,
                    "ratio": {s: round(r, 4) for s, r, *_ in sizes}})
    return out


def _timing_points(t: pd.DataFrame | None, basis: str = POINT) -> list[dict]:
    """The paper's printed times (one number per cell): the rise of ms(Kerple) / ms(DAPE1x3-Kerple) between sizes
    as a point."""
    if t is None or t.empty:
        return []
    t = t[(t["mode"] == "forward") & t["method"].isin(TIMED)].copy()
    t["scale"] = t["n_layer"].astype(float) * t["d_model"].astype(float) ** 2
    out = []
    for k, g in t.groupby(["device", "seq_len", "batch_size"], dropna=False):
        ms = g.pivot_table(index=["scale", "size"], columns="method", values="median_ms", aggfunc="mean").dropna()
        if len(ms) < 2 or ms.shape[1] < 2:
            continue
        ratio = (ms[TIMED[0]] / ms[TIMED[1]]).sort_index().to_numpy()
        verdict = combine([decide(Interval(r, r, r, POINT, 1, 1), side=1, confirm=TIMING_RISE, refute=0.0)
                           for r in np.diff(ratio)])
        text = f"seq_len={k[1]}: Kerple / DAPE1x3-Kerple ms by size " + " → ".join(f"{r:.3f}" for r in ratio)
        out.append({"verdict": verdict, "text": f"{text} → {verdict}; {POINT}", "basis": POINT})
    return out


def _ood_lengths(rows: pd.DataFrame, summary: pd.Series) -> pd.Series | None:
    """The per-length accuracies (indexed by length) behind one CHE summary row: its last ``n_samples`` /
    (samples per length) lengths, the range its accuracy averages; None without length rows."""
    if rows.empty or pd.isna(summary.get("n_samples", np.nan)):
        return None
    per_length = rows.sort_values("length")
    count = summary["n_samples"] / per_length["n_samples"].iloc[0]
    if not float(count).is_integer() or not 2 <= count <= len(per_length):
        return None
    return per_length.tail(int(count)).set_index("length")["accuracy"]


def _che(ctx: Context) -> list[dict]:
    che = _of_role(ctx.che, "che")
    if che is None or che.empty:
        return []
    che = che[~che["task"].isin(PERMUTATION_INVARIANT) & che["method"].isin(["Kerple", "DAPE1x3-Kerple"])].copy()
    if che.empty or not che["row_type"].eq("summary").any():
        return []
    scale = 100.0 if che.loc[che["row_type"] == "summary", "accuracy"].max() > 1 else 1.0
    che["accuracy"] = che["accuracy"] / scale
    che["lr"] = che["lr"].fillna(-1.0)
    summary, lengths = che[che["row_type"] == "summary"], che[che["row_type"] == "length"]

    def unit(task: str, method: str, seed, lrs) -> list:
        """Per learning rate: the OOD per-length accuracies of one task, method and seed (or its summary)."""
        pieces = []
        for lr in lrs:
            s = summary[(summary["task"] == task) & (summary["method"] == method) & (summary["seed"] == seed)
                        & (summary["lr"] == lr)].iloc[0]
            rows = lengths[(lengths["task"] == task) & (lengths["method"] == method) & (lengths["seed"] == seed)
                           & (lengths["lr"] == lr)]
            per_length = _ood_lengths(rows, s)
            pieces.append(per_length if per_length is not None else float(s["accuracy"]))
        return pieces

    noise = None if ctx.point else _che_seed_noise(summary)
    tasks, wins, refuted, undecided, checks_basis, needs = [], [], [], [], "", []
    for task in sorted(set(summary["task"])):
        s = summary[summary["task"] == task]
        seeds = {m: set(s.loc[s["method"] == m, "seed"]) for m in ("Kerple", "DAPE1x3-Kerple")}
        if not seeds["Kerple"] or not seeds["DAPE1x3-Kerple"]:
            continue
        lrs = {m: sorted(set.intersection(*[set(s.loc[(s["method"] == m) & (s["seed"] == x), "lr"])
                                            for x in seeds[m]])) for m in seeds}
        if not lrs["Kerple"] or not lrs["DAPE1x3-Kerple"]:
            continue
        shared, nk = sorted(seeds["Kerple"] & seeds["DAPE1x3-Kerple"]), len(lrs["Kerple"])
        key = f"che|{task}"
        if shared:
            units = [_unit(unit(task, "Kerple", x, lrs["Kerple"])
                           + unit(task, "DAPE1x3-Kerple", x, lrs["DAPE1x3-Kerple"])) for x in shared]
            diff = ctx.interval(units, lambda m: m[:, nk:].max(axis=1) - m[:, :nk].max(axis=1), key, inner="lengths",
                                seed_noise=_scaled(noise, 2))
        else:
            diff = ctx.difference([_unit(unit(task, "DAPE1x3-Kerple", x, lrs["DAPE1x3-Kerple"]))
                                   for x in sorted(seeds["DAPE1x3-Kerple"])],
                                  [_unit(unit(task, "Kerple", x, lrs["Kerple"])) for x in sorted(seeds["Kerple"])],
                                  lambda m: m.max(axis=1), key, inner="lengths", noise_b=noise, noise_a=noise)
        rule = dict(side=1, confirm=CHE_MARGIN, refute=0.0)
        verdict = decide(diff, **rule)
        tasks.append(task)
        needed, _ = seeds_to_decide(diff, **rule)
        cells = sorted(set(s.loc[s["method"].isin(["Kerple", "DAPE1x3-Kerple"]), "cell"])) if "cell" in s else []
        needs.append((diff.estimate, needed, cells))
        text = (f"{task} {100 * diff.estimate:+.1f}"
                f"{_interval_text(diff, lambda x: f'{100 * x:+.1f}')} points {MARKS[verdict]}")
        (wins if verdict == CONFIRMED else refuted if verdict == REFUTED else undecided).append(text)
        checks_basis = diff.basis
    if not tasks:
        return []
    n = len(tasks)
    verdict = CONFIRMED if len(wins) > n / 2 else REFUTED if n - len(refuted) <= n / 2 else UNDECIDED
    listed = "; ".join(wins + refuted + undecided)
    text = (f"DAPE1x3-Kerple − Kerple, best OOD accuracy over learning rates: won beyond the noise on {len(wins)} "
            f"of {n} permutation-variant tasks, lost on {len(refuted)} ({listed})")
    seed_text = f"; {noise.text()}" if noise is not None else ""
    record = {"verdict": verdict, "text": f"{text} → {verdict}; {checks_basis}{seed_text}", "basis": checks_basis,
              "wins": wins, "losses": refuted, "n_tasks": n}
    if noise is not None and seed_text:
        record.update(seed_sd=noise.sd, seed_df=noise.df)
    if verdict == UNDECIDED:
        record.update(_che_seeds(needs, n, lower_bound=noise is None))
    return [record]


def _scaled(noise: SeedNoise | None, sides: int) -> SeedNoise | None:
    """The seed noise of a difference of ``sides`` 1-seed sides, each with variance σ²."""
    if noise is None or sides == 0:
        return None
    return SeedNoise(noise.sd * np.sqrt(sides), noise.df, noise.source)


def _che_seed_noise(summary: pd.DataFrame) -> SeedNoise | None:
    """Between-seed SD of one CHE cell's best OOD accuracy over learning rates: the within-cell mean square over
    the task × method cells with ≥ 2 seeds, pooled (the one-way layout's error term, Montgomery §3.3); None when
    no cell has several seeds (CHE accuracies share no scale with perplexities, so the LM source does not serve)."""
    best = summary.groupby(["task", "method", "seed"])["accuracy"].max().reset_index()
    ss, df = 0.0, 0
    for _, g in best.groupby(["task", "method"]):
        if len(g) >= 2:
            ss += float(((g["accuracy"] - g["accuracy"].mean()) ** 2).sum())
            df += len(g) - 1
    if df == 0:
        return None
    return SeedNoise(float(np.sqrt(ss / df)), df, f"the CHE cells with several seeds ({df} degrees of freedom)")


def _che_seeds(needs: list, n_tasks: int, lower_bound: bool = False) -> dict:
    """Seeds that decide the CHE claim at the observed per-task effects: CONFIRMED needs more than half the tasks
    won, so the ⌊n/2⌋+1-th smallest n among tasks whose estimate exceeds the margin; else REFUTED, the
    ⌈n/2⌉-th smallest among tasks whose estimate is below 0 (each task's n from :func:`seeds_to_decide`; a lower
    bound, "≥ n", when the seed noise is not estimated)."""
    def kth(candidates, k):
        values = sorted(x for x in candidates if x[0] is not None)
        return values[k - 1] if len(values) >= k else None

    win = kth([(n, cells) for est, n, cells in needs if est > CHE_MARGIN], n_tasks // 2 + 1)
    loss = kth([(n, cells) for est, n, cells in needs if est < 0], int(np.ceil(n_tasks / 2)))
    pick, towards = (win, CONFIRMED) if win is not None else (loss, REFUTED)
    if pick is None:
        return {"seeds_needed": None, "runs": [], "seeds_needed_text":
                "unknown: no seed-noise estimate for CHE, or too few tasks beyond a threshold"}
    n, _ = pick
    cells = sorted({c for est, m, cs in needs if m is not None and m <= n for c in cs})
    text = (f"≥ {n} (towards {towards}; noise of the lengths only, the seed noise is not estimated)" if lower_bound
            else f"{n} (towards {towards})")
    return {"seeds_needed": n, "runs": cells, "che_cells": cells, "seeds_needed_text": text}


def _sink(ctx: Context) -> list[dict]:
    """sink.csv's ``sink_mass``: per run, evaluation length, sequence and layer, the mean attention probability
    that queries at positions ≥ 16 place on the first key (App. K's "attention sink"). A run × seed's statistic is
    the mean over its sequences of the log layer-mean sink mass; DAPE1x3-X is compared with DAPE-X paired by seed
    and sequence (the attention-map runs of one setting share initialisation, batch stream and sequences), with
    the seed noise of those paired differences pooled over the encodings with several seeds at that length."""
    sink = _of_role(ctx.sink, "attention_maps")
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
            d = ctx.interval(paired_units, lambda m: m[:, 0] - m[:, 1], key, inner="sequences", seed_noise=noise)
        else:
            d = ctx.difference([r.groupby("sequence")["log_mass"].mean().to_numpy()[:, None]
                                for _, r in a.groupby("seed", dropna=False)],
                               [r.groupby("sequence")["log_mass"].mean().to_numpy()[:, None]
                                for _, r in b.groupby("seed", dropna=False)],
                               lambda m: m[:, 0], key, inner="sequences")
        ratio = d.map(_exp)
        rule = dict(side=1, confirm=SINK_RATIO, refute=1.0)
        verdict = decide(ratio, **rule)
        n_a, n_b = a["seed"].nunique(dropna=False), b["seed"].nunique(dropna=False)
        text = (f"{method} vs {base} at {length}: sink mass {a['sink_mass'].mean():.3f} vs "
                f"{b['sink_mass'].mean():.3f}, ratio {ratio.estimate:.2f}"
                f"{_interval_text(ratio, lambda x: f'{x:.2f}')} ({n_a} vs {n_b} runs)")
        runs = [str(r) for r in (*a[run], *b[run])] if run == "run" else []
        out.append(_record(verdict, text, ratio, rule, sorted(set(runs)), eval_len=int(length),
                           dape1x3=float(a["sink_mass"].mean()), dape=float(b["sink_mass"].mean()),
                           ratio=ratio.estimate, ratio_low=ratio.low, ratio_high=ratio.high))
    return out


def _pooled_differences(groups: list[list[np.ndarray]], source: str) -> SeedNoise | None:
    """σ of one seed's paired difference (column 0 − column 1 of a unit's means), pooled over groups of ≥ 2 seeds
    (Montgomery §3.3: Σ within-group sums of squares over Σ (n − 1)); None without degrees of freedom."""
    ss, df = 0.0, 0
    for group in groups:
        d = np.array([u[:, 0].mean() - u[:, 1].mean() for u in group if len(u)])
        if len(d) >= 2 and np.isfinite(d).all():
            ss += float(((d - d.mean()) ** 2).sum())
            df += len(d) - 1
    return SeedNoise(math.sqrt(ss / df), df, f"{source} (ν {df})") if df else None


_BEATS = ("'A beats B' = the relative gain 1 − ppl_A / ppl_B (geometric means over the shared seeds and "
          "multiples) has its 95 % interval at or above the margin (CONFIRMED), or below 0 (REFUTED)")

CLAIMS: tuple[Claim, ...] = (
    Claim("baselines_explode_bounded", "§4.1, Fig. 2",
          "NoPE and RoPE perplexity explodes beyond the training length while ALiBi and Kerple stay bounded.",
          f"{_rows('central')}, per setting and method: the statistic is the largest ppl(×m) / ppl(×1) over the "
          f"evaluated multiples m in the range (geometric mean over seeds). Explodes (×{EXPLODE_RANGE[0]}–"
          f"{EXPLODE_RANGE[1]}): CONFIRMED when the interval is ≥ {EXPLODES:g}, REFUTED when it is < {BOUNDED:g} "
          f"(bounded). Bounded (×{BOUNDED_RANGE[0]}–{BOUNDED_RANGE[1]}): CONFIRMED when the interval is ≤ "
          f"{BOUNDED:g}, REFUTED when it is > {EXPLODES:g}; a diverged run is not bounded (REFUTED) and its "
          "explosion undecided (the paper's own Kerple reaches 1.7–2.1× at ×8–16, Tables 2 and 5). All four "
          "methods must be evaluated.",
          _explode_bounded, core=True),
    Claim("dape_ordering_beyond", "§4.1",
          "Beyond the training length DAPE1x3-Kerple ≤ DAPE-Kerple ≤ Kerple.",
          f"{_rows('central')}, every setting with the three methods, beyond (×>1): DAPE1x3-Kerple beats "
          f"DAPE-Kerple with margin {DAPE_MARGIN:.0%} and DAPE-Kerple beats Kerple with margin {MARGIN:.0%}; "
          + _BEATS + ".", _ordering_beyond, core=True),
    Claim("dape1x3_best_within", "§4.1",
          "DAPE1x3-Kerple has the best perplexity within the training length.",
          f"{_rows('central')}, at ×1: DAPE1x3-Kerple beats every other method of the setting with margin "
          f"{WITHIN_MARGIN:.1%}; " + _BEATS + ".", _best_within),
    Claim("dape1x3_improves_nope_rope", "§4.4, Fig. 1",
          "DAPE1x3 improves NoPE and RoPE, within and beyond the training length.",
          f"{_rows('every_encoding')}, for NoPE and RoPE (each evaluated): DAPE1x3-X beats X at ×1 (margin "
          f"{WITHIN_MARGIN:.1%}) and beyond (margin {MARGIN:.0%}); " + _BEATS + ".",
          _improves(("NoPE", "RoPE")), core=True),
    Claim("dape1x3_improves_additive", "§4.4, Fig. 5",
          "DAPE1x3 improves ALiBi, Kerple and FIRE, within and beyond the training length.",
          f"{_rows('every_encoding')}, for ALiBi, Kerple and FIRE (each evaluated): DAPE1x3-X beats X at ×1 "
          f"(margin {WITHIN_MARGIN:.1%}) and beyond (margin {MARGIN:.0%}); " + _BEATS + ".",
          _improves(("ALiBi", "Kerple", "FIRE"))),
    Claim("dape1x3_beats_dape_additive", "§4.4",
          "DAPE1x3 outperforms DAPE (kernel 1×1) for every additive encoding.",
          f"{_rows('every_encoding')}, for ALiBi, Kerple and FIRE (each evaluated): DAPE1x3-X beats DAPE-X at "
          f"×1 (margin {WITHIN_MARGIN:.1%}) and beyond (margin {DAPE_MARGIN:.0%}); " + _BEATS + ".",
          _improves(("ALiBi", "Kerple", "FIRE"), against=lambda enc: f"DAPE-{enc}", beyond=DAPE_MARGIN)),
    Claim("naive_dape_degrades_rope", "§3.2, Fig. 1",
          "Naive DAPE (kernel 1×1) degrades RoPE.",
          f"{_rows('every_encoding')}: RoPE beats DAPE-RoPE over all evaluated multiples ≥ ×1 together "
          f"(margin {MARGIN:.0%}); " + _BEATS + ".", _naive_dape_rope),
    Claim("leakage_collapse", "§4.5, Fig. 6",
          "Without tril the DAPE1x3 perplexity collapses towards 1.",
          f"{_rows('leakage')}, per encoding and setting, at ×1, no-tril against its tril twin (paired by seed "
          f"and window): CONFIRMED when the interval of ppl(no tril) / ppl(tril) is ≤ {LEAK_RATIO:g} or the "
          f"interval of the no-tril perplexity is ≤ {LEAK_ABSOLUTE:g}; REFUTED when the ratio's interval is "
          "> 1 (no gain from reading future keys).", _leakage, core=True),
    Claim("narrow_dape1x3_beats_wide_dape", "§4.6",
          "DAPE1x3-Kerple with D_DAPE 10 or 21 beats DAPE-Kerple with D_DAPE 64.",
          f"{_rows('width_sweep')}, for D_DAPE 10 and 21 (each evaluated): DAPE1x3-Kerple beats DAPE-Kerple at "
          f"D_DAPE 64 at ×1 (margin {WITHIN_MARGIN:.1%}) and beyond (margin {DAPE_MARGIN:.0%}); " + _BEATS + ".",
          _width, core=True),
    Claim("kernel_size_not_always_largest", "§4.7, Tables 4–5",
          "The optimal kernel size is not always the largest one.",
          f"Informational. {_rows('kernel_sweep')}, per setting, encoding and multiple ≥ ×1 with at least three "
          "kernel sizes, each smaller kernel against the largest (gain 1 − ppl_k / ppl_largest, no margin): "
          "CONFIRMED when in some cell a smaller kernel's gain interval lies above 0, REFUTED when in every cell "
          "every smaller kernel's lies below 0. One check over all cells and no multiplicity correction: the "
          "paper's own evidence is a 0.2–0.4% gap (Books3 at 8192).", _kernel_not_largest, informational=True),
    Claim("equal_tokens_comparable", "§4.2, Fig. 3",
          "With the same training tokens, DAPE1x3-Kerple trained on shorter sequences performs comparably to "
          "training on longer ones.",
          f"{_rows('equal_tokens')}, DAPE1x3-Kerple, per dataset and size: with L the longest training length, "
          f"for every training length T in [L/8, L), the ratio ppl_T / ppl_L at evaluation length L (paired by "
          f"seed and window): CONFIRMED when its interval is ≤ {1 + COMPARABLE:g} (one-sided: better is "
          f"comparable), REFUTED when it is > {1 + COMPARABLE:g} (the claim's own tolerance is its boundary).",
          lambda ctx: _equal_tokens(ctx, "comparable")),
    Claim("long_training_hurts_short", "§4.2",
          "Training on longer sequences hurts performance at short evaluation lengths.",
          f"{_rows('equal_tokens')}, every method with ≥ 2 training lengths: at evaluation length T0 (the "
          f"shortest training length) the T0-trained model beats the longest-trained one with margin "
          f"{MARGIN:.0%}; " + _BEATS + ".", lambda ctx: _equal_tokens(ctx, "hurts")),
    Claim("delta_p_sign", "App. A, Table 1",
          "ΔP is positive for DAPE variants and negative for RoPE at long evaluation lengths.",
          f"{_rows('central')}, multiples ≥ ×2: the relative ΔP 1 − ppl_dp / ppl_local (geometric means over "
          f"seeds and those multiples; per window, the loss with the full and with the local context) is "
          f"CONFIRMED ≥ +{DELTA_P_MARGIN:.0%} for DAPE-Kerple and DAPE1x3-Kerple and ≤ −{DELTA_P_MARGIN:.0%} "
          f"for RoPE, REFUTED when its interval lies on the other side of 0. Needs RoPE and a DAPE variant.",
          _delta_p),
    Claim("timing_overhead_shrinks", "§4.9, Table 7",
          "The time overhead of DAPE1x3-Kerple relative to Kerple shrinks as the model grows.",
          "timing_repeats.csv rows of role forward_time (the whole table when it has no roles), mode forward, per "
          "device × seq_len × batch × threads with ≥ 2 sizes (ordered by n_layer · d_model²): per size, the ratio "
          "of medians ms(Kerple) / ms(DAPE1x3-Kerple) over the cell's interleaved rounds (methods alternated, "
          "warm-up discarded), and its rise from each size to the next with a 95 % interval from a bootstrap of "
          f"the rounds (paired by round): CONFIRMED when every rise's interval lies at or above {TIMING_RISE:g}, "
          "REFUTED when some rise's interval lies below 0, UNDECIDED otherwise (also without per-repeat times). "
          "The device is named in the check: the paper's claim is about GPUs.",
          _timing, core=True, needs=("timing",)),
    Claim("che_dape1x3_beats_kerple", "§4.8, Table 6",
          "On CHE, DAPE1x3-Kerple beats Kerple on most of the permutation-variant tasks.",
          f"che_results.csv rows of role che, tasks other than {', '.join(PERMUTATION_INVARIANT)}: per task, the "
          f"difference DAPE1x3-Kerple − Kerple of the best OOD accuracy over learning rates, its interval from a "
          f"bootstrap over seeds and, within a seed, over the evaluated OOD lengths (each the accuracy of its "
          f"samples; per-sample accuracies are not stored), paired by length. A task is won when the interval is "
          f"≥ {100 * CHE_MARGIN:g} point, lost when it is < 0. CONFIRMED when more than half of the evaluated "
          f"tasks are won, REFUTED when the tasks not lost are at most half, UNDECIDED otherwise.",
          _che, needs=("che",)),
    Claim("sink_stronger_with_dape1x3", "App. K",
          "DAPE1x3 shows a stronger attention sink than DAPE.",
          "sink.csv rows of role attention_maps (sink_mass = mean attention probability on the first key from "
          "queries at positions ≥ 16, per sequence and layer), per encoding and evaluation length: the ratio of "
          "the layer-mean sink mass of DAPE1x3 to DAPE (geometric mean over sequences and seeds), paired by seed "
          "and sequence, a t-interval over seeds with σ pooled over the DAPE1x3 / DAPE pairs with several seeds "
          f"at that length: CONFIRMED when ≥ {SINK_RATIO:g}, REFUTED when < 1; one seed without a pooled σ "
"gives no interval (UNDECIDED).", _sink, needs=("sink",)),
    Claim("dape1x3_beats_dape_larger_models", "§4.3, Table 3",
          "DAPE1x3-Kerple outperforms DAPE-Kerple at larger model sizes too.",
          f"{_rows('model_size')}, per size: DAPE1x3-Kerple beats DAPE-Kerple at ×1 (margin "
          f"{WITHIN_MARGIN:.1%}) and beyond (margin {DAPE_MARGIN:.0%}); " + _BEATS + ".",
          _improves(("Kerple",), role="model_size", against=lambda enc: "DAPE-Kerple", beyond=DAPE_MARGIN)),
    Claim("dape1x3_beats_data_adaptive", "App. J, Table 9",
          "DAPE1x3-Kerple beats the data-adaptive encodings CoPE and Transformer-XL.",
          f"{_rows('central')}: DAPE1x3-Kerple beats CoPE and XL (each evaluated) at ×1 (margin "
          f"{WITHIN_MARGIN:.1%}) and beyond (margin {MARGIN:.0%}); " + _BEATS + ".", _data_adaptive),
)

CORE_CLAIMS: tuple[str, ...] = tuple(c.claim_id for c in CLAIMS if c.core)


def evaluate_claims(lm: pd.DataFrame | None, timing: pd.DataFrame | None = None, che: pd.DataFrame | None = None,
                    sink: pd.DataFrame | None = None, claim_ids=None, *, windows: pd.DataFrame | None = None,
                    point: bool = False, gpu_tflops: float | None = None,
                    utilisation: float | None = None, timing_repeats: pd.DataFrame | None = None) -> pd.DataFrame:
    """One record per claim: verdict CONFIRMED / REFUTED / UNDECIDED / NOT-RUN, what its intervals saw, the seed
    noise they used, the rule, the numbers behind the verdict, and for an UNDECIDED claim the seeds per method
    that would decide it with what those runs cost (``gpu_tflops`` and ``utilisation``: the configuration's
    ``estimate`` block, its schema defaults when None).

    ``lm``: lm_results.csv rows; ``windows``: lm_windows.csv (per-window losses; without them each seed's
    statistic comes from its perplexities); ``timing``: timing.csv; ``timing_repeats``: timing_repeats.csv (each
    interleaved repeat: the timing claim's interval); ``che``: che_results.csv; ``sink``: sink.csv, whose
    ``sink_mass`` is the mean attention probability placed on the first key by queries at positions ≥ 16.
    ``point``: point verdicts (the paper's numbers). ``claim_ids`` restricts the evaluation to some claims."""
    ctx = Context(lm, timing, che, sink, windows, point, timing_repeats)
    default_tflops, default_utilisation = _estimate_rate()
    costs = run_costs(lm, gpu_tflops or default_tflops, utilisation or default_utilisation)
    rows = []
    for claim in CLAIMS:
        if claim_ids is not None and claim.claim_id not in claim_ids:
            continue
        checks = claim.check(ctx)
        verdict = combine([c["verdict"] for c in checks])
        if not checks:
            summary, basis = "no rows for this check (" + ", ".join(claim.needs) + ")", ""
        else:
            summary = "; ".join(f"{MARKS[c['verdict']]} {c['text']}" for c in checks)
            basis = "; ".join(dict.fromkeys(c["basis"] for c in checks if c.get("basis")))
        numbers = {f"{i}: {c['text'].split(':')[0]}": {k: v for k, v in c.items() if k != "text"}
                   for i, c in enumerate(checks)}
        noise = "; ".join(dict.fromkeys(f"σ {c['seed_sd']:.3g} (ν {c['seed_df']})" for c in checks
                                        if c.get("seed_sd") is not None))
        record = {"claim_id": claim.claim_id, "section": claim.section, "statement": claim.statement,
                  "rule": claim.rule, "core": claim.core, "informational": claim.informational,
                  "verdict": verdict, "basis": basis, "seed_noise": noise, "summary": summary,
                  "seeds_to_decide": "", "extra_jobs": None, "extra_cpu_hours": None, "extra_gpu_hours": None,
                  "gpu_bound": "", "numbers": numbers}
        if verdict == UNDECIDED:
            record.update(what_decides(checks, costs))
        rows.append(record)
    return pd.DataFrame(rows)


def evaluate_claims_on_paper() -> pd.DataFrame:
    """The same rules applied to the paper's own printed numbers (Tables 1–7, 9 and §4) as point verdicts: a check
    of the rules. Claims the paper supports only with figures come out NOT-RUN."""
    from dape_core.report.paper import as_che, as_lm_results, as_timing

    return evaluate_claims(as_lm_results(), timing=as_timing(), che=as_che(), point=True)
