"""The CHE check (§4.8, Table 6): DAPE1x3-Kerple against Kerple per permutation-variant task, on the best OOD
accuracy over learning rates, each task's interval on its own seeds' spread (the seed noise pooled over the CHE
cells with several seeds sizes a task with one seed, never decides it)."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from dape_core.report.claim_context import Context, interval_text, of_role, own_or_borrowed, unit_of
from dape_core.report.intervals import (CONFIRMED, MARKS, NO_PAIR_SPREAD, REFUTED, UNDECIDED, SeedNoise, decide,
                                        fresh_sizing, level_for, seeds_to_decide, simultaneous)

PERMUTATION_INVARIANT = ("parity_check", "cycle_navigation", "bucket_sort")  # left out: the paper's Table 6


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


def che_beats_kerple(ctx: Context, t: Mapping) -> list[dict]:
    """Per permutation-variant task, DAPE1x3-Kerple − Kerple of the best OOD accuracy over learning rates, won above
    ``t["margin"]``, lost below 0; the claim holds on more than half the tasks. A task reads its own seeds: paired,
    the spread of its per-seed differences (ν = n − 1), else each side's (:func:`~dape_core.report.intervals.welch`),
    since a σ pooled over cells decides a noisier task beyond 5 % (``python -m dape_core.report.calibration --only
    sink``); with one seed the task is UNDECIDED and the pooled σ sizes the seeds it needs
    (:func:`~dape_core.report.claim_context.own_or_borrowed`)."""
    che = of_role(ctx.che, "che")
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
    found = []  # (task, interval of DAPE1x3-Kerple − Kerple, the task's CHE cells)
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
            units = [unit_of(unit(task, "Kerple", x, lrs["Kerple"])
                           + unit(task, "DAPE1x3-Kerple", x, lrs["DAPE1x3-Kerple"])) for x in shared]
            diff = ctx.interval(units, lambda m: m[:, nk:].max(axis=1) - m[:, :nk].max(axis=1), key, inner="lengths",
                                seed_noise=own_or_borrowed(_scaled(noise, 2), len(shared)), missing=NO_PAIR_SPREAD)
        else:
            diff = ctx.difference([unit_of(unit(task, "DAPE1x3-Kerple", x, lrs["DAPE1x3-Kerple"]))
                                   for x in sorted(seeds["DAPE1x3-Kerple"])],
                                  [unit_of(unit(task, "Kerple", x, lrs["Kerple"])) for x in sorted(seeds["Kerple"])],
                                  lambda m: m.max(axis=1), key, inner="lengths",
                                  noise_b=own_or_borrowed(noise, len(seeds["DAPE1x3-Kerple"])),
                                  noise_a=own_or_borrowed(noise, len(seeds["Kerple"])))
        cells = sorted(set(s.loc[s["method"].isin(["Kerple", "DAPE1x3-Kerple"]), "cell"])) if "cell" in s else []
        found.append((task, diff, cells))
    if not found:
        return []
    n = len(found)
    # more than half won confirms, at least half lost refutes: each task read at the level that keeps either
    # verdict as rare for identical methods as one 95 % interval (intervals.level_for)
    win_at, loss_at = level_for(n // 2 + 1, n), level_for(int(np.ceil(n / 2)), n)
    rule = dict(side=1, confirm=t["margin"], refute=0.0)
    tasks, wins, refuted, undecided, checks_basis, needs = [], [], [], [], "", []
    for task, diff, cells in found:
        won = decide(simultaneous(diff, win_at), **rule) == CONFIRMED
        lost = decide(simultaneous(diff, loss_at), **rule) == REFUTED
        verdict = CONFIRMED if won else REFUTED if lost else UNDECIDED
        tasks.append(task)
        towards = win_at if diff.estimate > t["margin"] else loss_at
        needed, _ = seeds_to_decide(diff, **rule, comparisons=towards)
        needs.append((diff.estimate, needed, cells))
        text = (f"{task} {100 * diff.estimate:+.1f}"
                f"{interval_text(diff, lambda x: f'{100 * x:+.1f}')} points {MARKS[verdict]}")
        (wins if verdict == CONFIRMED else refuted if verdict == REFUTED else undecided).append(text)
        checks_basis = diff.basis
    verdict = CONFIRMED if len(wins) > n / 2 else REFUTED if n - len(refuted) <= n / 2 else UNDECIDED
    listed = "; ".join(wins + refuted + undecided)
    text = (f"DAPE1x3-Kerple − Kerple, best OOD accuracy over learning rates: won beyond the noise on {len(wins)} "
            f"of {n} permutation-variant tasks, lost on {len(refuted)} ({listed})")
    seed_text = f"; one-seed tasks sized with the CHE cells' pooled {noise.text()}" if noise is not None else ""
    record = {"verdict": verdict, "text": f"{text} → {verdict}; {checks_basis}{seed_text}", "basis": checks_basis,
              "wins": wins, "losses": refuted, "n_tasks": n}
    if noise is not None and seed_text:
        record.update(seed_sd=noise.sd, seed_df=noise.df)
    if verdict == UNDECIDED or fresh_sizing():
        record.update(_che_seeds(needs, n, t["margin"], lower_bound=noise is None))
    return [record]


def _scaled(noise: SeedNoise | None, sides: int) -> SeedNoise | None:
    """The seed noise of a difference of ``sides`` 1-seed sides, each with variance σ²."""
    if noise is None or sides == 0:
        return None
    return SeedNoise(noise.sd * np.sqrt(sides), noise.df, noise.source)


def _che_seed_noise(summary: pd.DataFrame) -> SeedNoise | None:
    """Between-seed SD of one CHE cell's best OOD accuracy over learning rates, pooled over the task × method cells
    with ≥ 2 seeds (the one-way layout's error term, Montgomery §3.3), which sizes a one-seed task; None when no cell
    has several seeds (CHE accuracies share no scale with perplexities, so the LM source does not serve)."""
    best = summary.groupby(["task", "method", "seed"])["accuracy"].max().reset_index()
    ss, df = 0.0, 0
    for _, g in best.groupby(["task", "method"]):
        if len(g) >= 2:
            ss += float(((g["accuracy"] - g["accuracy"].mean()) ** 2).sum())
            df += len(g) - 1
    if df == 0:
        return None
    return SeedNoise(float(np.sqrt(ss / df)), df, f"the CHE cells with several seeds ({df} degrees of freedom)")


def _che_seeds(needs: list, n_tasks: int, margin: float, lower_bound: bool = False) -> dict:
    """Seeds that decide the CHE claim at the observed per-task effects: CONFIRMED, the ⌊n/2⌋+1-th smallest n among
    tasks whose estimate exceeds the margin; else REFUTED, the ⌈n/2⌉-th smallest among tasks below 0 (each task's n
    from :func:`seeds_to_decide`; a lower bound, "≥ n", when the seed noise is not estimated)."""
    def kth(candidates, k):
        values = sorted(x for x in candidates if x[0] is not None)
        return values[k - 1] if len(values) >= k else None

    win = kth([(n, cells) for est, n, cells in needs if est > margin], n_tasks // 2 + 1)
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
