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
- Intervals of perplexity comparisons come from a paired bootstrap over seeds and, within each drawn seed, over
  the evaluation windows (``lm_windows.csv``): seeds are resampled, then windows within each; both methods (and
  every evaluation length) get the same windows. With one seed per method the interval sees the window noise only
  ("windows only (1 seed: seed noise not seen)"): a CONFIRMED or REFUTED then says that these two trained models
  differ beyond the noise of the evaluation data, not that the difference would survive another training seed.
  Without per-window losses the seeds alone are resampled; with neither the interval is (−∞, +∞), UNDECIDED.
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

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from dape_core.report.aggregate import ROLES, in_role
from dape_core.report.intervals import (CONFIRMED, LEVEL, MARKS, NOT_RUN, POINT, REFUTED, RESAMPLES, UNDECIDED,
                                        Interval, combine, decide, difference, interval)

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
    """What the checks read: the aggregated tables, the per-window losses by (run, seed, evaluation length), and
    whether verdicts are point verdicts (the paper's numbers)."""

    def __init__(self, lm=None, timing=None, che=None, sink=None, windows=None, point: bool = False):
        self.lm, self.timing, self.che, self.sink, self.point = lm, timing, che, sink, point
        self.windows: dict[tuple[str, int, int], pd.DataFrame] = {}
        if windows is not None and len(windows):
            for (run, seed, n), g in windows.groupby(["run", "seed", "eval_len"], sort=False):
                self.windows[(str(run), int(seed), int(n))] = g.set_index(["document", "anchor"])

    def interval(self, units, statistic, key: str, inner: str = "windows") -> Interval:
        return interval(units, statistic, key, point=self.point, inner=inner)

    def difference(self, units_b, units_a, statistic, key: str, inner: str = "windows") -> Interval:
        return difference(units_b, units_a, statistic, key, point=self.point, inner=inner)

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


def _compare(ctx: Context, ra: pd.DataFrame, rb: pd.DataFrame, lengths_a, lengths_b, key: str) -> Interval | None:
    """log ppl_B − log ppl_A (each a mean over its lengths and the seeds), with its interval: paired by seed and
    window when the two share seeds, each resampled on its own otherwise. None when a side has no complete seed."""
    sa, sb = _seeds(ra, lengths_a), _seeds(rb, lengths_b)
    if not sa or not sb:
        return None
    shared = sorted(sa & sb)
    k = len(lengths_a)
    if shared:
        units = [_seed_unit(ctx, [(ra[ra["seed"] == s], lengths_a, "loss"), (rb[rb["seed"] == s], lengths_b, "loss")])
                 for s in shared]
        return ctx.interval(units, lambda m: m[:, k:].mean(axis=1) - m[:, :k].mean(axis=1), key)
    units_a = [_seed_unit(ctx, [(ra[ra["seed"] == s], lengths_a, "loss")]) for s in sorted(sa)]
    units_b = [_seed_unit(ctx, [(rb[rb["seed"] == s], lengths_b, "loss")]) for s in sorted(sb)]
    return ctx.difference(units_b, units_a, lambda m: m.mean(axis=1), key)


def _gm(rows: pd.DataFrame, lengths) -> float:
    """Geometric mean of the perplexity over ``rows`` at ``lengths`` (+∞ with a diverged run)."""
    values = rows.loc[rows["eval_len"].isin(lengths), "ppl"].astype(float)
    with np.errstate(divide="ignore"):
        return float(np.exp(np.log(values).mean())) if len(values) else float("nan")


def _interval_text(iv: Interval, fmt=_pct) -> str:
    """" [low, high]" (nothing for a point verdict, whose scope says so)."""
    return "" if iv.basis == POINT else f" [{fmt(iv.low)}, {fmt(iv.high)}]"


def _record(verdict: str, text: str, iv: Interval | None, **numbers) -> dict:
    """One check: its verdict, its text (ending with the verdict and what the interval saw) and its numbers."""
    scope = f"; {iv.scope()}" if iv is not None else ""
    record = {"verdict": verdict, "text": f"{text} → {verdict}{scope}", **numbers}
    if iv is not None:
        record.update(basis=iv.basis, n_seeds=iv.n_seeds, n_rows=iv.n_rows)
    return record


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
    iv = _compare(ctx, ra, rb, lengths, lengths, f"beats|{label}|{_name(a)}|{_name(b)}|{where}")
    if iv is None:
        return None
    gain = iv.map(_gain)
    verdict = decide(gain, side=1, confirm=margin, refute=0.0)
    a_ppl, b_ppl = _gm(ra, lengths), _gm(rb, lengths)
    text = (f"{label}: {_name(a)} {_f(a_ppl)} vs {_name(b)} {_f(b_ppl)} ({where}, "
            f"×{'/'.join(f'{m:g}' for m in multiples)}): gain {_pct(gain.estimate)}{_interval_text(gain)}, "
            f"margin {margin:.1%}")
    return _record(verdict, text, gain, a=_name(a), b=_name(b), where=where, a_ppl=a_ppl, b_ppl=b_ppl,
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
            ratio = ctx.interval(units, lambda m: (m[:, 1:] - m[:, :1]).max(axis=1),
                                 f"explode|{label}|{method}").map(_exp)
            text = (f"{label}: {method} {kind}? largest ppl(×{lo:g}–{hi:g}) / ppl(×1) {_f(ratio.estimate)}"
                    f"{_interval_text(ratio, _f)}")
            if any(np.isinf(u).any() for u in units):  # a diverged run's growth is undefined: it is not bounded
                verdict, text = (REFUTED if kind == "bounded" else UNDECIDED), f"{label}: {method} diverged"
            elif kind == "explodes":
                verdict = decide(ratio, side=1, confirm=EXPLODES, refute=BOUNDED)
            else:
                verdict = decide(ratio, side=-1, confirm=BOUNDED, refute=EXPLODES)
            checks.append(_record(verdict, text, ratio, method=method, kind=kind, ratio=ratio.estimate,
                                  ratio_low=ratio.low, ratio_high=ratio.high))
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


def _level(ctx: Context, rows: pd.DataFrame, lengths, key: str) -> Interval | None:
    """The geometric-mean perplexity of ``rows`` at ``lengths`` over its seeds, with its interval."""
    seeds = sorted(_seeds(rows, lengths))
    if not seeds:
        return None
    units = [_seed_unit(ctx, [(rows[rows["seed"] == s], lengths, "loss")]) for s in seeds]
    return ctx.interval(units, lambda m: m.mean(axis=1), key).map(_exp)


def _leakage(ctx: Context) -> list[dict]:
    df = _lm(ctx.lm, "leakage")
    out = []
    if df.empty or "tril" not in df:
        return out
    df = df[df["method"].str.startswith("DAPE") & (df["multiple"] == 1)]
    for label, g in _settings(df, SETTING + ["encoding", "kernel_size"]):
        lengths = [int(g["train_len"].iloc[0])]
        tril, leak = g[g["tril"]], g[~g["tril"]]
        d = _compare(ctx, tril, leak, lengths, lengths, f"leak|{label}")
        absolute = _level(ctx, leak, lengths, f"leak|{label}")  # same key: the same seeds drawn
        if d is None or absolute is None:
            continue
        ratio = d.map(_exp)
        by_ratio = decide(ratio, side=-1, confirm=LEAK_RATIO, refute=1.0)
        collapsed = by_ratio == CONFIRMED or absolute.high <= LEAK_ABSOLUTE
        verdict = CONFIRMED if collapsed else by_ratio
        text = (f"{label}: no-tril ppl {_f(absolute.estimate)}{_interval_text(absolute, _f)}, no-tril / tril "
                f"{ratio.estimate:.3f}{_interval_text(ratio, lambda x: f'{x:.3f}')} at ×1")
        out.append(_record(verdict, text, ratio, ratio=ratio.estimate, ratio_low=ratio.low, ratio_high=ratio.high,
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
    supported, cells, contradicted, total, bases = [], 0, 0, 0, set()
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
                              f"kernel|{label}|{m:g}|{k}|{largest}")
                if iv is None:
                    continue
                gain = iv.map(_gain)
                bases.add(gain.basis)
                verdicts.append(decide(gain, side=1, confirm=0.0, refute=0.0))
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
    return [{"verdict": verdict, "text": f"{text} → {verdict}; {'; '.join(sorted(bases))}",
             "basis": "; ".join(sorted(bases)), "cases": supported, "n_compared": total,
             "n_contradicting": contradicted}]


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
                d = _compare(ctx, longest, g[g["train_len"] == t], [lmax], [lmax], f"equal|{label}|{t}|{lmax}")
                if d is None:
                    continue
                ratio = d.map(_exp)
                verdict = decide(ratio, side=-1, confirm=1 + COMPARABLE, refute=1 + COMPARABLE)
                text = (f"{label}: train {t} vs {lmax} at eval {lmax}: ppl ratio {ratio.estimate:.3f}"
                        f"{_interval_text(ratio, lambda x: f'{x:.3f}')}")
                out.append(_record(verdict, text, ratio, train_len=t, longest=lmax, ratio=ratio.estimate,
                                   ratio_low=ratio.low, ratio_high=ratio.high))
        else:
            short = g[g["train_len"] == l0]
            d = _compare(ctx, short, longest, [l0], [l0], f"hurts|{label}|{l0}|{lmax}")
            if d is None:
                continue
            gain = d.map(_gain)
            verdict = decide(gain, side=1, confirm=MARGIN, refute=0.0)
            text = (f"{label}: at eval {l0}, train {l0} {_f(_gm(short, [l0]))} vs train {lmax} "
                    f"{_f(_gm(longest, [l0]))}: gain {_pct(gain.estimate)}{_interval_text(gain)}")
            out.append(_record(verdict, text, gain, gain=gain.estimate, gain_low=gain.low, gain_high=gain.high))
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
                               f"delta_p|{label}|{method}").map(_gain)
            verdict = decide(rel, side=sign, confirm=sign * DELTA_P_MARGIN, refute=0.0)
            text = (f"{label}: {method} ΔP / local ppl at ×≥2 {_pct(rel.estimate)}{_interval_text(rel)} "
                    f"(claimed {'> +' if sign > 0 else '< −'}{DELTA_P_MARGIN:.0%})")
            out.append(_record(verdict, text, rel, method=method, relative=rel.estimate, relative_low=rel.low,
                               relative_high=rel.high))
    methods = {c["method"] for c in out}
    return out if "RoPE" in methods and methods & {"DAPE-Kerple", "DAPE1x3-Kerple"} else []


def _timing(ctx: Context) -> list[dict]:
    t = _of_role(ctx.timing, "forward_time")
    if t is None or t.empty:
        return []
    t = t[(t["mode"] == "forward") & t["method"].isin(["Kerple", "DAPE1x3-Kerple"])].copy()
    t["scale"] = t["n_layer"].astype(float) * t["d_model"].astype(float) ** 2
    out = []
    keys = ["device", "seq_len", "batch_size", "threads"]
    for k, g in t.groupby(keys, dropna=False):
        ms = g.pivot_table(index=["scale", "size"], columns="method", values="median_ms", aggfunc="mean").dropna()
        if len(ms) < 2 or ms.shape[1] < 2:
            continue
        ratio = (ms["Kerple"] / ms["DAPE1x3-Kerple"]).sort_index()
        rises = np.diff(ratio.to_numpy())
        verdict = CONFIRMED if (rises >= TIMING_RISE).all() else REFUTED if (rises < 0).any() else UNDECIDED
        label = ", ".join(f"{a}={b}" for a, b in zip(keys, k))
        text = (f"{label}: Kerple / DAPE1x3-Kerple ms by size "
                + " → ".join(f"{size} {r:.3f}" for (_, size), r in ratio.items()))
        out.append({"verdict": verdict, "text": f"{text} → {verdict}; point (medians of repeated timings)",
                    "basis": "point (medians of repeated timings)",
                    "ratio": {size: round(float(r), 4) for (_, size), r in ratio.items()}})
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

    tasks, wins, refuted, undecided, checks_basis = [], [], [], [], ""
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
            diff = ctx.interval(units, lambda m: m[:, nk:].max(axis=1) - m[:, :nk].max(axis=1), key, inner="lengths")
        else:
            diff = ctx.difference([_unit(unit(task, "DAPE1x3-Kerple", x, lrs["DAPE1x3-Kerple"]))
                                   for x in sorted(seeds["DAPE1x3-Kerple"])],
                                  [_unit(unit(task, "Kerple", x, lrs["Kerple"])) for x in sorted(seeds["Kerple"])],
                                  lambda m: m.max(axis=1), key, inner="lengths")
        verdict = decide(diff, side=1, confirm=CHE_MARGIN, refute=0.0)
        tasks.append(task)
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
    return [{"verdict": verdict, "text": f"{text} → {verdict}; {checks_basis}", "basis": checks_basis,
             "wins": wins, "losses": refuted, "n_tasks": n}]


def _sink(ctx: Context) -> list[dict]:
    """sink.csv's ``sink_mass``: per run, evaluation length and layer, the mean attention probability that
    queries at positions ≥ 16 place on the first key (position 0), averaged over heads, queries and sequences
    (App. K's "attention sink"). Runs are compared on the mean over layers, paired by seed where both methods
    have the seed."""
    sink = _of_role(ctx.sink, "attention_maps")
    if sink is None or sink.empty:
        return []
    run = "run" if "run" in sink else "seed"
    keys = ["method", run, "eval_len"] + (["seed"] if "seed" in sink and run != "seed" else [])
    per_run = sink.groupby(keys)["sink_mass"].mean().dropna().reset_index()
    if "seed" not in per_run:
        per_run["seed"] = np.nan
    out = []
    for method in sorted(m for m in set(per_run["method"]) if str(m).startswith("DAPE1x3-")):
        base = "DAPE-" + method.split("-", 1)[1]
        for length in sorted(set(per_run.loc[per_run["method"] == method, "eval_len"])):
            a = per_run[(per_run["method"] == method) & (per_run["eval_len"] == length)]
            b = per_run[(per_run["method"] == base) & (per_run["eval_len"] == length)]
            if a.empty or b.empty:
                continue
            key = f"sink|{method}|{length}"
            shared = sorted(set(a["seed"].dropna()) & set(b["seed"].dropna()))
            if shared:
                units = [[[np.log(a.loc[a["seed"] == s, "sink_mass"]).mean(),
                           np.log(b.loc[b["seed"] == s, "sink_mass"]).mean()]] for s in shared]
                d = ctx.interval(units, lambda m: m[:, 0] - m[:, 1], key, inner="sequences")
            else:
                d = ctx.difference([[[v]] for v in np.log(a["sink_mass"])], [[[v]] for v in np.log(b["sink_mass"])],
                                   lambda m: m[:, 0], key, inner="sequences")
            ratio = d.map(_exp)
            verdict = decide(ratio, side=1, confirm=SINK_RATIO, refute=1.0)
            text = (f"{method} vs {base} at {length}: sink mass {a['sink_mass'].mean():.3f} vs "
                    f"{b['sink_mass'].mean():.3f}, ratio {ratio.estimate:.2f}"
                    f"{_interval_text(ratio, lambda x: f'{x:.2f}')} ({len(a)} vs {len(b)} runs)")
            out.append(_record(verdict, text, ratio, eval_len=int(length), dape1x3=float(a["sink_mass"].mean()),
                               dape=float(b["sink_mass"].mean()), ratio=ratio.estimate))
    return out


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
          "timing.csv rows of role forward_time (the whole table when it has no roles), mode forward, per device × "
          "seq_len × batch × threads with ≥ 2 sizes (ordered by n_layer · d_model²): the ratio ms(Kerple) / "
          f"ms(DAPE1x3-Kerple). A point rule on the medians of repeated timings (timing.csv keeps no per-repeat "
          f"times to resample): CONFIRMED when the ratio rises by ≥ {TIMING_RISE:g} from each size to the next, "
          f"REFUTED when it falls at some step, UNDECIDED otherwise.",
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
          "queries at positions ≥ 16, one sequence per run), per encoding and evaluation length: the ratio of the "
          "layer-mean sink mass of DAPE1x3 to DAPE (geometric mean over runs, paired by seed), its interval "
          f"from the runs (seeds) alone: CONFIRMED when ≥ {SINK_RATIO:g}, REFUTED when < 1; one run per method "
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
                    point: bool = False) -> pd.DataFrame:
    """One record per claim: verdict CONFIRMED / REFUTED / UNDECIDED / NOT-RUN, what its intervals saw, the rule,
    and the numbers behind the verdict.

    ``lm``: lm_results.csv rows; ``windows``: lm_windows.csv (per-window losses; without them the intervals
    resample seeds only); ``timing``: timing.csv; ``che``: che_results.csv; ``sink``: sink.csv, whose
    ``sink_mass`` is the mean attention probability placed on the first key by queries at positions ≥ 16.
    ``point``: point verdicts (the paper's numbers). ``claim_ids`` restricts the evaluation to some claims."""
    ctx = Context(lm, timing, che, sink, windows, point)
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
        rows.append({"claim_id": claim.claim_id, "section": claim.section, "statement": claim.statement,
                     "rule": claim.rule, "core": claim.core, "informational": claim.informational,
                     "verdict": verdict, "basis": basis, "summary": summary, "numbers": numbers})
    return pd.DataFrame(rows)


def evaluate_claims_on_paper() -> pd.DataFrame:
    """The same rules applied to the paper's own printed numbers (Tables 1–7, 9 and §4) as point verdicts: a check
    of the rules. Claims the paper supports only with figures come out NOT-RUN."""
    from dape_core.report.paper import as_che, as_lm_results, as_timing

    return evaluate_claims(as_lm_results(), timing=as_timing(), che=as_che(), point=True)


HOW_TO_READ = (
    f"Each check has a statistic and its {LEVEL:.0%} interval: CONFIRMED when the whole interval lies on the "
    "claimed side beyond the claim's margin, REFUTED when it lies wholly on the opposite side of zero (for the "
    "threshold claims, beyond the contrasting threshold their rule names), UNDECIDED otherwise — a difference "
    "inside the noise is never a refutation, and a real gain below the margin is not a confirmation. A claim of "
    "several checks is CONFIRMED when all are, REFUTED when any is, UNDECIDED otherwise (no multiplicity "
    "correction); NOT-RUN when no setting has the rows it needs. Intervals of perplexity comparisons come from a "
    f"paired bootstrap ({RESAMPLES} draws): seeds are resampled, then evaluation windows within each drawn seed, the "
    "same windows for both methods and every length. The basis says what an interval saw: \"seeds × windows\"; "
    "\"windows only (1 seed: seed noise not seen)\" — these two trained models differ (or not) beyond the noise "
    "of the evaluation data, which says nothing about another training seed; \"seeds only\" without per-window "
    "losses; \"no interval\" when there is nothing to resample (UNDECIDED). The column on the paper's numbers "
    "gives point verdicts (one printed number per cell: the interval is the point). A diverged run counts as "
    "perplexity +∞ in every draw. Lengths are multiples of the training length (×1 = the training length); core "
    "claims are marked ★. Marks: ✓ CONFIRMED, ✗ REFUTED, ? UNDECIDED.")


def _rho_lines(rho: pd.DataFrame | None) -> list[str]:
    if rho is None or rho.empty:
        return ["No run setting shares methods with the paper's tables.", ""]
    out = ["| role | run setting | paper setting | ρ by multiple | mean ρ |", "|---|---|---|---|---|"]
    for _, r in rho.iterrows():
        paper = (f"{r['paper_dataset']}, train {int(r['paper_train_len'])}, {r['paper_size']}"
                 if pd.notna(r["paper_train_len"]) else "no printed numbers")
        mean = "–" if pd.isna(r["mean_spearman"]) else f"{r['mean_spearman']:.2f}"
        out.append(f"| {r['role']} | {r['dataset']}, train {r['train_len']}, {r['size']} | {paper} | "
                   f"{r['spearman_by_multiple'] or '–'} | {mean} |")
    return out + [""]


def claims_markdown(df: pd.DataFrame, paper: pd.DataFrame | None = None, rho: pd.DataFrame | None = None) -> str:
    """A Markdown report: the verdict counts and how to read them, Spearman's ρ of each setting's method ordering
    against the paper's (``rho``, from :func:`dape_core.report.compare.setting_correlations`), the verdicts with
    the numbers behind them, then each claim's rule. With ``paper`` (from :func:`evaluate_claims_on_paper`) a
    column gives each rule's point verdict on the paper's own numbers."""
    def cell(x) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    on_paper = None if paper is None else paper.set_index("claim_id")["verdict"]
    counts = df["verdict"].value_counts()
    extra = "" if on_paper is None else " on the paper's numbers (point) |"
    out = ["# Claims", "",
           ", ".join(f"{counts.get(v, 0)} {v}" for v in (CONFIRMED, REFUTED, UNDECIDED, NOT_RUN)) + ".", "",
           HOW_TO_READ, "",
           "## Method orderings against the paper", "",
           "Spearman's ρ between the run's and the paper's ordering of the methods both have, per role and run "
           "setting, at each multiple (n = shared methods) and averaged over the multiples (see "
           "paper_comparison.md).", ""]
    out += _rho_lines(rho)
    out += ["## Verdicts", "",
            "| claim | section | statement | verdict | basis |" + extra + " numbers |",
            "|---|---|---|---|---|" + ("---|" if extra else "") + "---|"]
    for _, r in df.iterrows():
        star = " ★" if r["core"] else ""
        info = " (informational)" if r["informational"] else ""
        paper_cell = "" if on_paper is None else f" {on_paper.get(r['claim_id'], NOT_RUN)} |"
        out.append(f"| `{r['claim_id']}`{star} | {cell(r['section'])} | {cell(r['statement'])} | "
                   f"**{r['verdict']}**{info} | {cell(r['basis']) or '–'} |{paper_cell} {cell(r['summary'])} |")
    out += ["", "## Rules", ""]
    out += [f"- `{r['claim_id']}` ({cell(r['section'])}): {r['rule']}" for _, r in df.iterrows()]
    return "\n".join(out) + "\n"
