"""What the claims' checks read and how they report: a role's rows with their multiples, the per-window losses of a
run × seed × length (:class:`Context`), a seed's unit, the comparison of two methods' log-perplexities (paired by seed
only within a setting, :func:`compare`), and one check's record with the seeds that would decide it. No claim is named
here: the checks (``lm_checks``, ``timing_check``, ``che_check``, ``sink_check``) and :mod:`~dape_core.report.claims`
build on it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from dape_core.report.aggregate import ROLES, in_role
from dape_core.report.intervals import (CONFIRMED, NO_PAIR_SPREAD, NO_SEED_NOISE, POINT, REFUTED, UNDECIDED, Interval,
                                        SeedNoise, combine_noise, decide, difference, fresh_sizing, interval,
                                        seeds_to_decide,
                                        simultaneous)
from dape_core.report.seed_noise import MIXED, SeedNoiseSource, causal, regime_of, setting_of

SETTING = ["dataset", "train_len", "size"]  # a check's setting inside its role: one set of checks per value
#: per-window column → the lm_results column whose log stands in for it without per-window data
PPL_OF = {"loss": "ppl", "loss_dp": "ppl_dp", "loss_local": "ppl_local"}


def exp(x: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.exp(x))


def gain_of(d: float) -> float:
    """1 − exp(−d): the relative gain of a log-ratio d = log ppl_B − log ppl_A (+∞ → 1, −∞ → −∞)."""
    with np.errstate(over="ignore"):
        return float(-np.expm1(-d))


# ----------------------------------------------------------------------------------------------- data access
def lm_rows(lm: pd.DataFrame | None, role: str) -> pd.DataFrame:
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
        df["tril"] = causal(df["tril"])
    return df


def of_role(df: pd.DataFrame | None, role: str) -> pd.DataFrame | None:
    """The rows of ``role`` in a timing, CHE or sink table; the whole table when it has no ``roles`` column."""
    if df is None or "roles" not in df:
        return df
    return in_role(df, role)


def rows_text(role: str) -> str:
    """How a rule names the rows it reads: "Rows of the central comparison (role central)"."""
    return f"Rows of {ROLES[role]} (role {role})"


def settings(df: pd.DataFrame, keys=SETTING):
    if df.empty:
        return
    for key, g in df.groupby(keys, sort=True):
        yield ", ".join(f"{k}={v}" for k, v in zip(keys, key)), g


def pick(g: pd.DataFrame, spec) -> pd.DataFrame:
    """Rows of one method ("Kerple") or one method at one hidden width (("DAPE-Kerple", 64))."""
    if isinstance(spec, tuple):
        method, width = spec
        return g[(g["method"] == method) & (pd.to_numeric(g["dape_width"], errors="coerce") == width)]
    return g[g["method"] == spec]


def name_of(spec) -> str:
    return f"{spec[0]} (D={spec[1]})" if isinstance(spec, tuple) else spec


def in_range(where: str, m: pd.Series) -> pd.Series:
    return {"within": m == 1, "beyond": m > 1, "all": m >= 1}[where]


def fmt(x: float) -> str:
    if np.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return f"{x:.2f}" if abs(x) < 100 else f"{x:.4g}"


def pct(x: float) -> str:
    if np.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return "nan" if np.isnan(x) else f"{100 * x:+.1f}%"


class Context:
    """What the checks read: the aggregated tables, the per-window losses by (run, seed, evaluation length), the
    multi-seed settings that give seed noise, and whether verdicts are point verdicts (the paper's numbers)."""

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
        """σ of one seed's ``stat`` for the run of ``rows``, by :func:`own_or_borrowed`: None (its own spread) with
        two or more seeds; with one, its setting's σ in its regime (causal, leaky, or both for a paired comparison
        across them) or the grid's largest (:mod:`~dape_core.report.seed_noise`), as a plan only."""
        return own_or_borrowed(self.seed_source.noise(stat, paired, setting_of(rows), regime_of(rows)),
                               rows["seed"].nunique() if "seed" in rows else 1)

    def interval(self, units, statistic, key: str, inner: str = "windows", seed_noise: SeedNoise | None = None,
                 kind: str = "paired t", missing: str = NO_SEED_NOISE) -> Interval:
        return interval(units, statistic, key, point=self.point, inner=inner, seed_noise=seed_noise, kind=kind,
                        missing=missing)

    def difference(self, units_b, units_a, statistic, key: str, inner: str = "windows",
                   noise_b: SeedNoise | None = None, noise_a: SeedNoise | None = None) -> Interval:
        return difference(units_b, units_a, statistic, key, point=self.point, inner=inner, noise_b=noise_b,
                          noise_a=noise_a)

    def piece(self, rows: pd.DataFrame, column: str = "loss") -> pd.Series | float:
        """One method × seed × evaluation length: the per-window ``column`` by window (runs of one method and seed
        averaged), or without per-window data the log of the rows' perplexity; +∞ when a run diverged."""
        return self.piece_of(records(rows, column), column)

    def piece_of(self, rows: list[tuple], column: str = "loss") -> pd.Series | float:
        """:meth:`piece` of rows given as :func:`records` (a check asks thousands: no frame per piece)."""
        if np.isinf(np.array([ppl for _, _, _, ppl, _ in rows], dtype=float)).any():
            return float("inf")
        found = [self.windows.get((run, int(seed), int(n))) for run, seed, n, _, _ in rows]
        if all(f is not None and len(f) and column in f for f in found):
            series = pd.concat([f[column] for f in found], axis=1, join="inner").mean(axis=1)
            if len(series):
                return series
        if any(value is MISSING for *_, value in rows):
            raise KeyError(PPL_OF[column])
        return float(np.log(np.array([value for *_, value in rows], dtype=float)).mean())


MISSING = object()  # a row without the perplexity a column stands for


def records(rows: pd.DataFrame, column: str = "loss") -> list[tuple]:
    """(run, seed, eval_len, ppl, the perplexity ``column`` stands for) per row of ``rows``."""
    stands_for = rows[PPL_OF[column]].tolist() if PPL_OF[column] in rows else [MISSING] * len(rows)
    return list(zip(rows["run"].tolist(), rows["seed"].tolist(), rows["eval_len"].tolist(), rows["ppl"].tolist(),
                    stands_for))


def shared_windows(pieces: list) -> pd.Index | None:
    """The windows every per-window piece of ``pieces`` holds (None: no piece has per-window data)."""
    series = [p for p in pieces if isinstance(p, pd.Series)]
    if not series:
        return None
    common = series[0].index
    for p in series[1:]:
        common = common.intersection(p.index)
    return common


def unit_of(pieces: list, windows: pd.Index | None = None) -> np.ndarray:
    """[rows, k]: the pieces' per-window values on the windows all share (within ``windows`` if given; a diverged
    piece +∞ on each), or one row of their means without per-window data or with fewer than two shared windows."""
    series = [p for p in pieces if isinstance(p, pd.Series)]
    if series and all(isinstance(p, pd.Series) or np.isinf(p) for p in pieces):
        common = shared_windows(series)
        if windows is not None:
            common = common.intersection(windows)
        if len(common) >= 2:
            return np.column_stack([p.reindex(common).to_numpy(dtype=float) if isinstance(p, pd.Series)
                                    else np.full(len(common), p) for p in pieces])
    return np.array([[p.mean() if isinstance(p, pd.Series) else p for p in pieces]], dtype=float)


def seeds_with(rows: pd.DataFrame, lengths, columns=("loss",)) -> set:
    """Seeds with a row at every one of ``lengths`` (with the perplexities ``columns`` stand for)."""
    ok = rows[[PPL_OF[c] for c in columns]].notna().all(axis=1).to_numpy()
    have: dict = {}
    for seed, n, kept in zip(rows["seed"].tolist(), rows["eval_len"].tolist(), ok):
        if kept:
            have.setdefault(seed, set()).add(n)
    return {seed for seed, lens in have.items() if set(lengths) <= lens}


def seed_pieces(ctx: Context, parts) -> list:
    """The pieces of one seed's unit (:func:`seed_unit`), one per part × length."""
    pieces = []
    for rows, lengths, column in parts:
        rows = records(rows, column) if isinstance(rows, pd.DataFrame) else rows
        pieces += [ctx.piece_of([r for r in rows if r[2] == n], column) for n in lengths]
    return pieces


def seed_unit(ctx: Context, parts) -> np.ndarray:
    """One seed's unit: ``parts`` lists (rows of one method and seed as a frame or :func:`records`, lengths, column)."""
    return unit_of(seed_pieces(ctx, parts))


def own_or_borrowed(borrowed: SeedNoise | None, n_seeds: int) -> SeedNoise | None:
    """The σ a comparison's side (or a run's own statistic) reads: with two or more seeds its own spread (None: the
    interval computes it, ν = n − 1), since a σ pooled over methods decides a noisier one too often (``python -m
    dape_core.report.calibration --only heterogeneity``); with one, the ``borrowed`` σ as a plan only: it sizes the
    seeds a verdict needs, and the interval is (−∞, +∞)."""
    if n_seeds >= 2:
        return None
    return replace(borrowed, plan_only=True) if borrowed is not None else None


#: the prior degrees of freedom of a pair's σ² about its setting's pooled σ² (:func:`sizing_sd`), measured by the
#: method of moments, pilot against fresh seeds (benchmarks/results/README.md, Sizing noise)
PRIOR_DF = 8


def sizing_sd(own: float, pooled: float, n_seeds: int) -> float:
    """The σ that sizes a comparison's seeds (never its interval): with one shared seed, the ``pooled`` σ (a pair's
    interaction σ pooled over its setting's methods, or the two sides' within-run σ); in a design's pilot
    (:func:`~dape_core.report.intervals.sizing_fresh_seeds`), its ``own`` spread (ν = n − 1) moderated towards it as
    Smyth's moderated variance (limma, 2004): σ̃² = (d₀·pooled² + ν·own²) / (d₀ + ν), d₀ = :data:`PRIOR_DF`, never
    below ``own``. Why: two seeds' own spread falls below half the truth one time in three (P(χ²₁ < 1/4) = 0.38) and
    then promises too few fresh seeds (σ̃ ≥ 0.94 × pooled there); with many seeds the own spread speaks for itself
    (docs/verdicts.md, the design stage)."""
    if n_seeds == 1:
        return pooled
    if not (math.isfinite(own) and math.isfinite(pooled)):
        return own
    nu = n_seeds - 1
    return max(own, math.sqrt((PRIOR_DF * pooled ** 2 + nu * own ** 2) / (PRIOR_DF + nu)))


def compare(ctx: Context, ra: pd.DataFrame, rb: pd.DataFrame, lengths_a, lengths_b, key: str,
             stats=(("mean", "all", "loss"),) * 2) -> Interval | None:
    """log ppl_B − log ppl_A (each a mean over its lengths and seeds) with its t-interval; None when a side has no
    complete seed. Paired by seed (and window) only where the two share initialisation and batch stream (the same
    setting and seed), on the spread of the pair's own per-seed differences (ν = n − 1; one shared seed: UNDECIDED,
    :data:`NO_PAIR_SPREAD`), since methods differ in noise (``python -m dape_core.report.calibration --only
    heterogeneity``); with one shared seed, or in a design's pilot, ``unit_sd`` is sized from the setting's pooled
    interaction σ of its regime (:func:`sizing_sd`), a plan, never a verdict. Otherwise unpaired (Welch) over all
    their seeds on the windows both sides scored, each side its own spread, or with one seed its setting's within-run
    σ of ``stats`` (A's, B's) as a plan (:func:`own_or_borrowed`)."""
    sa, sb = seeds_with(ra, lengths_a), seeds_with(rb, lengths_b)
    if not sa or not sb:
        return None
    setting_a, setting_b = setting_of(ra), setting_of(rb)
    regime_a, regime_b = regime_of(ra), regime_of(rb)
    shared = sorted(sa & sb) if setting_a is not None and setting_a == setting_b else []
    by_seed_a, by_seed_b = _by_seed(ra), _by_seed(rb)
    k = len(lengths_a)
    if shared:
        units = [seed_unit(ctx, [(by_seed_a[s], lengths_a, "loss"), (by_seed_b[s], lengths_b, "loss")])
                 for s in shared]
        iv = ctx.interval(units, lambda m: m[:, k:].mean(axis=1) - m[:, :k].mean(axis=1), key, seed_noise=None,
                          missing=NO_PAIR_SPREAD)
        if (len(shared) == 1 or fresh_sizing()) and not ctx.point:
            regime = regime_a if regime_a == regime_b else MIXED
            parts = [ctx.seed_source.noise(stat, True, setting_a, regime) for stat in stats]
            if all(p is not None for p in parts):
                iv = replace(iv, unit_sd=sizing_sd(iv.unit_sd, combine_noise(parts).sd, len(shared)))
        return iv
    # the windows both sides scored: runs of other training lengths may score more (``max_windows_within``), and a
    # mean over other windows would differ by their difficulty
    pieces_a = [seed_pieces(ctx, [(by_seed_a[s], lengths_a, "loss")]) for s in sorted(sa)]
    pieces_b = [seed_pieces(ctx, [(by_seed_b[s], lengths_b, "loss")]) for s in sorted(sb)]
    windows = shared_windows([p for pieces in pieces_a + pieces_b for p in pieces])
    units_a = [unit_of(pieces, windows) for pieces in pieces_a]
    units_b = [unit_of(pieces, windows) for pieces in pieces_b]
    pooled = [ctx.seed_source.noise(stats[1], False, setting_b, regime_b),
              ctx.seed_source.noise(stats[0], False, setting_a, regime_a)]
    iv = ctx.difference(units_b, units_a, lambda m: m.mean(axis=1), key,
                        noise_b=own_or_borrowed(pooled[0], len(sb)), noise_a=own_or_borrowed(pooled[1], len(sa)))
    if fresh_sizing() and not ctx.point and min(len(sa), len(sb)) >= 2 and all(p is not None for p in pooled):
        # a design's pilot: the two sides' own spreads, not below their settings' pooled within-run σ
        iv = replace(iv, unit_sd=sizing_sd(iv.unit_sd, combine_noise(pooled).sd, min(len(sa), len(sb))))
    return iv


def _by_seed(rows: pd.DataFrame, column: str = "loss") -> dict:
    """seed → the :func:`records` of that seed."""
    out: dict = {}
    for record in records(rows, column):
        out.setdefault(record[1], []).append(record)
    return out


def stat_of(where: str) -> tuple:
    """The per-run seed-noise statistic of a perplexity comparison at ``where`` (within, beyond, all)."""
    return ("mean", where, "loss")


def geometric_mean(rows: pd.DataFrame, lengths) -> float:
    """Geometric mean of the perplexity over ``rows`` at ``lengths`` (+∞ with a diverged run)."""
    values = rows.loc[rows["eval_len"].isin(lengths), "ppl"].astype(float)
    with np.errstate(divide="ignore"):
        return float(np.exp(np.log(values).mean())) if len(values) else float("nan")


def interval_text(iv: Interval, show=pct) -> str:
    """" [low, high]" (nothing for a point verdict, whose scope says so)."""
    return "" if iv.basis == POINT else f" [{show(iv.low)}, {show(iv.high)}]"


def record(verdict: str, text: str, iv: Interval | None, rule: dict | None = None, runs=(), *, fact: bool = False,
           show=pct, **numbers) -> dict:
    """One check: its verdict, its text (ending with the verdict, the basis and seed noise) and its numbers. With
    ``rule`` (:func:`decide`'s side, confirm, refute) an UNDECIDED check also gets ``seeds_needed`` and the ``runs``
    to retrain, and the claim may read ``iv`` again among its checks (:func:`jointly`; ``show`` formats its bounds)
    unless the verdict is a ``fact`` (a divergence), not the rule's reading of ``iv``."""
    scope = f"; {iv.scope()}" if iv is not None else ""
    if iv is not None and iv.seed_noise is not None:
        scope += f"; {iv.seed_noise.text()}"
    record = {"verdict": verdict, "text": f"{text} → {verdict}{scope}", **numbers}
    if iv is not None:
        record.update(basis=iv.basis, n_seeds=iv.n_seeds, n_rows=iv.n_rows, unit_sd=iv.unit_sd)
        if iv.seed_noise is not None:
            record.update(seed_sd=iv.seed_noise.sd, seed_df=iv.seed_noise.df)
    if rule is not None and iv is not None and (verdict == UNDECIDED or fresh_sizing()):
        needed, why = seeds_to_decide(iv, **rule)
        record.update(seeds_needed=needed, seeds_needed_text=why, runs=sorted({str(r) for r in runs}),
                      _size=lambda power: seeds_to_decide(iv, **rule, power=power))
    if rule is not None and iv is not None and not fact:
        record.update(_judged=[(iv, rule)], _head=text, _scope=scope, _show=show,
                      _runs=sorted({str(r) for r in runs}))
    return record


def judged_intervals(checks: list[dict]) -> int:
    """The intervals a claim's checks judged (the Bonferroni m of :func:`jointly`)."""
    return sum(len(c.get("_judged", ())) for c in checks)


def jointly(checks: list[dict], at_least: int = 0) -> list[dict]:
    """A claim's checks read together: any REFUTED refutes the claim, so with m intervals judged each REFUTED is read
    at the Bonferroni level 1 − 0.05 / m (:func:`simultaneous`), while CONFIRMED, which needs all, stays at 95 % (an
    intersection). A check REFUTED alone but not jointly becomes UNDECIDED and says so; an open check heading to
    REFUTED is sized at that level. Records without judged intervals (facts, rules over their own intervals) keep
    their verdicts. ``at_least``: the least m (the design stage reads its fresh seeds at the level of every interval
    its pilot judged, so that a refutation on some of them stays within 5 %)."""
    m = max(judged_intervals(checks), at_least)
    if m <= 1:
        return checks
    level = f"1 − 0.05/{m} over the claim's {m} intervals"
    out = []
    for c in checks:
        judged = c.get("_judged")
        if not judged or c["verdict"] == CONFIRMED:
            out.append(c)
            continue
        joint = [(simultaneous(iv, m), rule) for iv, rule in judged]
        c = {**c, "joint_comparisons": m}
        if c["verdict"] == REFUTED:
            if any(decide(iv, **rule) == REFUTED for iv, rule in joint):
                c["text"] = f"{c['_head']} → {REFUTED} (also at {level}){c['_scope']}"
            else:
                shown = "; ".join(interval_text(iv, c["_show"]).strip() for iv, _ in joint)
                c.update(verdict=UNDECIDED, text=f"{c['_head']} → {UNDECIDED} ({REFUTED} at 95 % alone, not at "
                                                  f"{level}: {shown}){c['_scope']}")
        if (c["verdict"] == UNDECIDED or fresh_sizing()) and len(judged) == 1 and "_runs" in c:  # of seeds
            iv, rule = judged[0]  # record() sized an open check at 95 %; a demoted one has no size yet
            heading = c.get("seeds_needed_text") or seeds_to_decide(iv, **rule)[1]
            if f"towards {REFUTED}" in heading:
                needed, why = seeds_to_decide(iv, **rule, comparisons=m)
                c.update(seeds_needed=needed, seeds_needed_text=why, runs=c.get("runs", c["_runs"]))
        out.append(c)
    return out


def public(check: dict) -> dict:
    """A check's numbers as claims.csv stores them: without its text and what :func:`jointly` reads."""
    return {k: v for k, v in check.items() if k != "text" and not k.startswith("_")}


def runs_of(*frames: pd.DataFrame) -> list[str]:
    """The runs of some rows (what more seeds would retrain)."""
    return sorted({str(r) for f in frames for r in f["run"]}) if frames else []
