"""The language-model checks behind the claims: each reads one role's rows of lm_results.csv (and the per-window
losses) through :mod:`~dape_core.report.claim_context` and returns one record per check, decided against the
thresholds ``t`` its claim declares (:mod:`~dape_core.report.claims`)."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Union

import numpy as np
import pandas as pd

from dape_core.report.claim_context import (SETTING, Context, compare, exp, fmt, gain_of, geometric_mean, in_range,
                                            interval_text, lm_rows, name_of, pct, pick, record, runs_of, seed_unit,
                                            seeds_with, settings, stat_of)
from dape_core.report.intervals import (CONFIRMED, REFUTED, UNDECIDED, Interval, decide, fresh_sizing,
                                        seeds_to_decide,
                                        simultaneous)
from dape_core.report.seed_noise import where_of

#: (A, B, where, threshold name): A beats B at ``where`` (within, beyond, all) with margin t[threshold name]; a
#: method is a name ("Kerple") or a name and a DAPE width (("DAPE-Kerple", 64))
Pair = tuple
Pairs = Union[Iterable[Pair], Callable[[pd.DataFrame], Iterable[Pair]]]


def beats(ctx: Context, g: pd.DataFrame, a, b, where: str, margin: float, label: str) -> dict | None:
    """Does ``a`` beat ``b`` (lower perplexity) at ``where``: the gain 1 − ppl_a / ppl_b, its interval, verdict."""
    ra, rb = pick(g, a), pick(g, b)
    ma = set(ra.loc[in_range(where, ra["multiple"]) & ra["ppl"].notna(), "multiple"])
    mb = set(rb.loc[in_range(where, rb["multiple"]) & rb["ppl"].notna(), "multiple"])
    multiples = sorted(ma & mb)
    if not multiples:
        return None
    train_len = int(g["train_len"].iloc[0])
    lengths = [int(round(m * train_len)) for m in multiples]
    iv = compare(ctx, ra, rb, lengths, lengths, f"beats|{label}|{name_of(a)}|{name_of(b)}|{where}",
                  (stat_of(where), stat_of(where)))
    if iv is None:
        return None
    gain = iv.map(gain_of)
    rule = dict(side=1, confirm=margin, refute=0.0)
    verdict = decide(gain, **rule)
    a_ppl, b_ppl = geometric_mean(ra, lengths), geometric_mean(rb, lengths)
    text = (f"{label}: {name_of(a)} {fmt(a_ppl)} vs {name_of(b)} {fmt(b_ppl)} ({where}, "
            f"×{'/'.join(f'{m:g}' for m in multiples)}): gain {pct(gain.estimate)}{interval_text(gain)}, "
            f"margin {margin:.1%}")
    return record(verdict, text, gain, rule, runs_of(ra, rb), a=name_of(a), b=name_of(b), where=where, a_ppl=a_ppl,
                   b_ppl=b_ppl,
                   gain=gain.estimate, gain_low=gain.low, gain_high=gain.high, margin=margin, multiples=multiples)


def beats_each(role: str, pairs: Pairs, require: Iterable[str] = ()) -> Callable[[Context, Mapping], list[dict]]:
    """A check: in every setting of ``role`` that has the methods ``require``, each (A, B, where, threshold) of
    ``pairs`` (a list, or a function of the setting's rows) — A beats B at ``where`` with margin t[threshold]."""
    def check(ctx: Context, t: Mapping) -> list[dict]:
        out = []
        for label, g in settings(lm_rows(ctx.lm, role)):
            if not set(require) <= set(g["method"]):
                continue
            for a, b, where, margin in (pairs(g) if callable(pairs) else pairs):
                result = beats(ctx, g, a, b, where, t[margin], label)
                if result is not None:
                    out.append(result)
        return out
    return check


def against_every_other(method: str, where: str, margin: str) -> Callable[[pd.DataFrame], list[Pair]]:
    """Pairs for "``method`` beats every other method of the setting at ``where``"."""
    return lambda g: [(method, other, where, margin) for other in sorted(set(g["method"])) if other != method]


def explode_bounded(ctx: Context, t: Mapping) -> list[dict]:
    """Per central setting, NoPE and RoPE explode and ALiBi and Kerple stay bounded: the largest ppl(×m) / ppl(×1)
    over ``t["explode_range"]`` / ``t["bounded_range"]`` against ``t["explodes"]`` and ``t["bounded"]``. CONFIRMED
    needs all four methods; a REFUTED check refutes with fewer (fresh seeds sized towards REFUTED reach NoPE alone)."""
    df = lm_rows(ctx.lm, "central")
    checks, seen = [], set()
    for label, g in settings(df):
        train_len = int(g["train_len"].iloc[0])
        for method, kind in [("NoPE", "explodes"), ("RoPE", "explodes"), ("ALiBi", "bounded"),
                             ("Kerple", "bounded")]:
            lo, hi = t["explode_range"] if kind == "explodes" else t["bounded_range"]
            rows = g[g["method"] == method]
            multiples = sorted(m for m in set(rows["multiple"]) if lo <= m <= hi)
            lengths = [train_len] + [int(round(m * train_len)) for m in multiples]
            seeds = sorted(seeds_with(rows, lengths)) if multiples and 1.0 in set(rows["multiple"]) else []
            if not seeds:
                continue
            seen.add(method)
            units = [seed_unit(ctx, [(rows[rows["seed"] == s], lengths, "loss")]) for s in seeds]
            ratio = ctx.interval(units, lambda m: (m[:, 1:] - m[:, :1]).max(axis=1), f"explode|{label}|{method}",
                                 seed_noise=ctx.noise(("growth", lo, hi), False, rows), kind="t").map(exp)
            text = (f"{label}: {method} {kind}? largest ppl(×{lo:g}–{hi:g}) / ppl(×1) {fmt(ratio.estimate)}"
                    f"{interval_text(ratio, fmt)}")
            rule = (dict(side=1, confirm=t["explodes"], refute=t["bounded"]) if kind == "explodes"
                    else dict(side=-1, confirm=t["bounded"], refute=t["explodes"]))
            diverged = any(np.isinf(u).any() for u in units)
            if diverged:  # a diverged run's growth is undefined: it is not bounded
                verdict, text = (REFUTED if kind == "bounded" else UNDECIDED), f"{label}: {method} diverged"
            else:
                verdict = decide(ratio, **rule)
            checks.append(record(verdict, text, ratio, rule, runs_of(rows), fact=diverged, show=fmt, method=method,
                                  kind=kind, ratio=ratio.estimate, ratio_low=ratio.low, ratio_high=ratio.high))
    if seen == {"NoPE", "RoPE", "ALiBi", "Kerple"}:
        return checks
    return checks if any(c["verdict"] == REFUTED for c in checks) else []  # never CONFIRMED on part of them


def level(ctx: Context, rows: pd.DataFrame, lengths, key: str, stat=("mean", "within", "loss")) -> Interval | None:
    """The geometric-mean perplexity of ``rows`` at ``lengths`` over its seeds, with its interval (one seed: the
    within-run seed noise of ``stat``)."""
    seeds = sorted(seeds_with(rows, lengths))
    if not seeds:
        return None
    units = [seed_unit(ctx, [(rows[rows["seed"] == s], lengths, "loss")]) for s in seeds]
    return ctx.interval(units, lambda m: m.mean(axis=1), key, seed_noise=ctx.noise(stat, False, rows),
                        kind="t").map(exp)


LEAK_ROUTES = 2  # the leakage claim confirms by the ratio or by the absolute no-tril perplexity


def leakage(ctx: Context, t: Mapping) -> list[dict]:
    """Per encoding and setting of the leakage role, at ×1, no-tril against its tril twin: collapsed when the ratio is
    within ``t["ratio"]`` or the no-tril perplexity within ``t["absolute"]`` (each route at the Bonferroni level over
    the two), REFUTED when the ratio's 95 % interval lies above 1."""
    df = lm_rows(ctx.lm, "leakage")
    out = []
    if df.empty or "tril" not in df:
        return out
    df = df[df["method"].str.startswith("DAPE") & (df["multiple"] == 1)]
    for label, g in settings(df, SETTING + ["encoding", "kernel_size"]):
        lengths = [int(g["train_len"].iloc[0])]
        tril, leak = g[g["tril"]], g[~g["tril"]]
        d = compare(ctx, tril, leak, lengths, lengths, f"leak|{label}", (stat_of("within"), stat_of("within")))
        absolute = level(ctx, leak, lengths, f"leak|{label}")  # same key: the same seeds drawn
        if d is None or absolute is None:
            continue
        ratio = d.map(exp)
        rule = dict(side=-1, confirm=t["ratio"], refute=1.0)
        # two routes to CONFIRMED, each read at 97.5 % (Bonferroni over the two); REFUTED has one route, at 95 %
        by_ratio = decide(simultaneous(ratio, LEAK_ROUTES), **rule)
        collapsed = by_ratio == CONFIRMED or simultaneous(absolute, LEAK_ROUTES).high <= t["absolute"]
        verdict = CONFIRMED if collapsed else REFUTED if decide(ratio, **rule) == REFUTED else UNDECIDED
        text = (f"{label}: no-tril ppl {fmt(absolute.estimate)}{interval_text(absolute, fmt)}, no-tril / tril "
                f"{ratio.estimate:.3f}{interval_text(ratio, lambda x: f'{x:.3f}')} at ×1")
        check = record(verdict, text, ratio, rule, runs_of(tril, leak), show=lambda x: f"{x:.3f}",
                       ratio=ratio.estimate, ratio_low=ratio.low, ratio_high=ratio.high,
                       no_tril_ppl=absolute.estimate, no_tril_ppl_high=absolute.high,
                       tril_ppl=geometric_mean(tril, lengths))
        if f"towards {CONFIRMED}" in str(check.get("seeds_needed_text")):  # the ratio route is read at 97.5 %
            needed, why = seeds_to_decide(ratio, **rule, comparisons=LEAK_ROUTES)
            check.update(seeds_needed=needed, seeds_needed_text=why,
                         _size=lambda power, ratio=ratio, rule=rule: seeds_to_decide(
                             ratio, **rule, comparisons=LEAK_ROUTES, power=power))
        out.append(check)
    return out


def kernel_not_largest(ctx: Context, t: Mapping) -> list[dict]:
    """One check over every setting × encoding × multiple ≥ ×1 of the kernel sweep with ≥ 3 kernel sizes, each
    smaller kernel against the largest at that length. CONFIRMED when some smaller kernel's gain lies above
    ``t["margin"]`` on its Bonferroni interval over all m comparisons (:func:`~dape_core.report.intervals.simultaneous`:
    "some of m" at most 5 % for identical kernels); REFUTED when every comparison's 95 % interval lies below 0 (an
    intersection: no correction)."""
    df = lm_rows(ctx.lm, "kernel_sweep")
    df = df[df["method"].str.startswith("DAPE") & (df["multiple"] >= 1)]
    cells = []  # (label, multiple, [(kernel, largest, interval on the log scale, rows)])
    for label, g in settings(df, SETTING + ["encoding"]):
        train_len = int(g["train_len"].iloc[0])
        for m, gm in g.groupby("multiple"):
            kernels = sorted(int(k) for k in set(gm["kernel_size"]))
            if len(kernels) < 3:
                continue
            largest, lengths = kernels[-1], [int(round(m * train_len))]
            found = []
            for k in kernels[:-1]:
                iv = compare(ctx, gm[gm["kernel_size"] == k], gm[gm["kernel_size"] == largest], lengths, lengths,
                              f"kernel|{label}|{m:g}|{k}|{largest}", (("at", float(m), "loss"),) * 2)
                if iv is not None:
                    found.append((k, largest, iv, gm[gm["kernel_size"].isin([k, largest])]))
            if found:
                cells.append((label, m, found))
    comparisons = sum(len(found) for _, _, found in cells)
    supported, confirmed_cells, contradicted, bases, noises, to_confirm = [], 0, 0, set(), set(), []
    for label, m, found in cells:
        verdicts = []
        for k, largest, iv, rows in found:
            gain, joint = iv.map(gain_of), simultaneous(iv, comparisons).map(gain_of)
            bases.add(gain.basis)
            if gain.seed_noise is not None:
                noises.add(gain.seed_noise.text())
            if decide(joint, side=1, confirm=t["margin"], refute=0.0) == CONFIRMED:
                verdicts.append(CONFIRMED)
                supported.append(f"{label} ×{m:g}: k={k} beats k={largest} by {pct(gain.estimate)}"
                                 f"{interval_text(joint)}")
            elif decide(gain, side=1, confirm=t["margin"], refute=0.0) == REFUTED:
                verdicts.append(REFUTED)
            else:
                verdicts.append(UNDECIDED)
            if (verdicts[-1] == UNDECIDED or fresh_sizing()) and gain.estimate > 0:
                needed = seeds_to_decide(joint, side=1, confirm=t["margin"], refute=0.0, comparisons=comparisons)[0]
                if needed is not None:
                    to_confirm.append((needed, runs_of(rows)))
        confirmed_cells += CONFIRMED in verdicts
        contradicted += all(v == REFUTED for v in verdicts)
    if not cells:
        return []
    total = len(cells)
    verdict = CONFIRMED if supported else REFUTED if contradicted == total else UNDECIDED
    text = (f"{total} setting × multiple cells, {comparisons} comparisons (Bonferroni over them for a smaller kernel "
            f"beating the largest): in {confirmed_cells} a smaller kernel beats the largest beyond the noise, in "
            f"{contradicted} the largest beats every smaller one" + (f"; e.g. {supported[0]}" if supported else ""))
    result = {"verdict": verdict, "text": f"{text} → {verdict}; {'; '.join(sorted(bases | noises))}",
              "basis": "; ".join(sorted(bases)), "cases": supported, "n_compared": total,
              "n_contradicting": contradicted}
    if verdict == UNDECIDED or fresh_sizing():  # one smaller kernel beating the largest confirms: the cheapest
        needed, runs = min(to_confirm, default=(None, []))
        result.update(seeds_needed=needed, runs=runs, seeds_needed_text=(
            f"{needed} (towards {CONFIRMED}, the cheapest cell)" if needed else
            "none at the observed effects: no smaller kernel's estimate beats the largest"))
    return [result]


def _equal_tokens(ctx: Context, kind: str, thresholds: Mapping) -> list[dict]:
    df = lm_rows(ctx.lm, "equal_tokens")
    out = []
    for label, g in settings(df, ["dataset", "size", "method"]):
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
                d = compare(ctx, longest, shorter, [lmax], [lmax], f"equal|{label}|{t}|{lmax}",
                             (stat_of("within"), stat_of(where_of(lmax / t))))
                if d is None:
                    continue
                ratio = d.map(exp)
                rule = dict(side=-1, confirm=1 + thresholds["tolerance"], refute=1 + thresholds["tolerance"])
                verdict = decide(ratio, **rule)
                text = (f"{label}: train {t} vs {lmax} at eval {lmax}: ppl ratio {ratio.estimate:.3f}"
                        f"{interval_text(ratio, lambda x: f'{x:.3f}')}")
                out.append(record(verdict, text, ratio, rule, runs_of(longest, shorter), show=lambda x: f"{x:.3f}",
                                   train_len=t, longest=lmax,
                                   ratio=ratio.estimate, ratio_low=ratio.low, ratio_high=ratio.high))
        else:
            short = g[g["train_len"] == l0]
            d = compare(ctx, short, longest, [l0], [l0], f"hurts|{label}|{l0}|{lmax}",
                         (stat_of("within"), stat_of(where_of(l0 / lmax))))
            if d is None:
                continue
            gain = d.map(gain_of)
            rule = dict(side=1, confirm=thresholds["margin"], refute=0.0)
            verdict = decide(gain, **rule)
            text = (f"{label}: at eval {l0}, train {l0} {fmt(geometric_mean(short, [l0]))} vs train {lmax} "
                    f"{fmt(geometric_mean(longest, [l0]))}: gain {pct(gain.estimate)}{interval_text(gain)}")
            out.append(record(verdict, text, gain, rule, runs_of(short, longest), gain=gain.estimate,
                               gain_low=gain.low, gain_high=gain.high))
    return out


def equal_tokens_comparable(ctx: Context, t: Mapping) -> list[dict]:
    """DAPE1x3-Kerple of the equal-token role, per dataset and size: each training length T in [L/8, L) against
    the longest L at evaluation length L, the ratio ppl_T / ppl_L within 1 + ``t["tolerance"]``."""
    return _equal_tokens(ctx, "comparable", t)


def long_training_hurts_short(ctx: Context, t: Mapping) -> list[dict]:
    """Every method of the equal-token role with ≥ 2 training lengths: at the shortest length T0 the T0-trained
    model beats the longest-trained one with margin ``t["margin"]``."""
    return _equal_tokens(ctx, "hurts", t)


def delta_p_sign(ctx: Context, t: Mapping) -> list[dict]:
    """App. A's ΔP at multiples ≥ ×2 of the central comparison: the relative ΔP 1 − ppl_dp / ppl_local above
    +``t["margin"]`` for DAPE-Kerple and DAPE1x3-Kerple, below −``t["margin"]`` for RoPE."""
    df = lm_rows(ctx.lm, "central")
    if "delta_p" not in df:
        return []
    df = df[(df["multiple"] >= 2) & df["delta_p"].notna() & df["ppl_local"].notna()]
    out = []
    for label, g in settings(df):
        train_len = int(g["train_len"].iloc[0])
        for method, sign in [("DAPE-Kerple", 1), ("DAPE1x3-Kerple", 1), ("RoPE", -1)]:
            rows = g[g["method"] == method]
            lengths = [int(round(m * train_len)) for m in sorted(set(rows["multiple"]))]
            seeds = sorted(seeds_with(rows, lengths, ("loss_local", "loss_dp")))
            if not seeds:
                continue
            k = len(lengths)
            units = [seed_unit(ctx, [(rows[rows["seed"] == s], lengths, "loss_local"),
                                      (rows[rows["seed"] == s], lengths, "loss_dp")]) for s in seeds]
            rel = ctx.interval(units, lambda m: m[:, :k].mean(axis=1) - m[:, k:].mean(axis=1),
                               f"delta_p|{label}|{method}", seed_noise=ctx.noise(("delta_p",), False, rows),
                               kind="t").map(gain_of)
            rule = dict(side=sign, confirm=sign * t["margin"], refute=0.0)
            verdict = decide(rel, **rule)
            text = (f"{label}: {method} ΔP / local ppl at ×≥2 {pct(rel.estimate)}{interval_text(rel)} "
                    f"(claimed {'> +' if sign > 0 else '< −'}{t['margin']:.0%})")
            out.append(record(verdict, text, rel, rule, runs_of(rows), method=method, relative=rel.estimate,
                               relative_low=rel.low, relative_high=rel.high))
    methods = {c["method"] for c in out}
    return out if "RoPE" in methods and methods & {"DAPE-Kerple", "DAPE1x3-Kerple"} else []
