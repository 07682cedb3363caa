"""Between-seed noise of a check's statistic, estimated where the grid trains runs with several seeds.

A comparison of two trained models with one seed each sees the noise of its evaluation windows, not the noise of
training: another seed moves each model's loss by an amount the windows cannot show. That amount is measured
where the grid has it — every setting (dataset × training length × size) of ``lm_results.csv`` in which runs were
trained with the same two or more seeds (in ``config.yaml`` the central comparison on the code corpus: seven
methods × seeds 0 and 1) — and lent to the 1-seed checks (:mod:`dape_core.report.intervals`).

The estimator. For a per-run statistic f (e.g. the mean window loss at ×1, or over the multiples beyond ×1), each
source setting gives a table V[r, s] = f(run r, seed s) over its R multi-seed runs and their S shared seeds. Read
as a two-way layout with one observation per cell (Montgomery, *Design and Analysis of Experiments*, 9th ed.,
§5.3.5), V = μ_r + β_s + u_rs, where β_s is what a seed does to every run alike (the order of the training data)
and u_rs what it does to one run:

- a *paired* comparison (both methods trained with the same seed, the usual case) has seed variance
  τ²(f_A) + τ²(f_B), each τ² the method × seed interaction mean square
  Σ (V − V̄_r· − V̄_·s + V̄)² / ((R − 1)(S − 1)) of that side's statistic — β_s cancels in the difference;
- a run on its own (an explosion, a ΔP, an absolute perplexity) or an unpaired comparison has seed variance
  s²_w(f) (+ s²_w of the other side), the within-run mean square Σ (V − V̄_r·)² / (R(S − 1)).

Sums of squares and degrees of freedom are pooled over the source settings; the degrees of freedom ν travel with
σ (the seed offset is σ·t_ν). Why this source and estimator: the seeds of the central comparison are the only
place the grid retrains the same models, its runs are scored on the same windows as every other run of their
dataset, and the interaction mean square is the between-seed variance of exactly the differences the claims
compute, with (R − 1)(S − 1) degrees of freedom rather than one per pair of methods (the pairs share their seeds
and are not independent). Two caveats, both on the conservative side or stated: each V is the mean over the same
finite windows, so σ includes the part of the window noise that differs between seeds (the 1-seed bootstrap
counts it again); and σ is measured at the source's training budget — a family trained on fewer tokens may vary
more between seeds, which ``make robustness`` (a second run with shifted seeds) checks.

Statistics (the argument ``stat`` below):

- ``("mean", where, column)``: the mean of ``column`` (loss, loss_dp, loss_local) over the multiples of
  ``where`` — "within" (×1; also used for a model evaluated at or below its training length), "beyond" (every
  multiple > 1), "all" (≥ 1);
- ``("growth", lo, hi)``: the largest loss(×m) − loss(×1) over lo ≤ m ≤ hi (the explosion statistic);
- ``("delta_p",)``: the mean over multiples ≥ 2 of loss_local − loss_dp (the ΔP statistic).

Without per-window losses a run's value at a length is the log of its perplexity (the same numbers the
intervals read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dape_core.report.intervals import SeedNoise

GROUP = ["dataset", "train_len", "size"]
COLUMNS = {"loss": "ppl", "loss_dp": "ppl_dp", "loss_local": "ppl_local"}


def _statistic(stat: tuple, values: dict[float, dict[str, float]]) -> float:
    """One run × seed's statistic from its per-multiple means (nan when the run lacks the multiples)."""
    kind = stat[0]
    if kind == "mean":
        _, where, column = stat
        keep = {"within": lambda m: m == 1, "beyond": lambda m: m > 1, "all": lambda m: m >= 1}[where]
        xs = [v[column] for m, v in values.items() if keep(m) and column in v]
        return float(np.mean(xs)) if xs else math.nan
    if kind == "growth":
        _, lo, hi = stat
        if 1.0 not in values:
            return math.nan
        xs = [v["loss"] - values[1.0]["loss"] for m, v in values.items() if lo <= m <= hi]
        return float(max(xs)) if xs else math.nan
    if kind == "delta_p":
        xs = [v["loss_local"] - v["loss_dp"] for m, v in values.items()
              if m >= 2 and "loss_local" in v and "loss_dp" in v]
        return float(np.mean(xs)) if xs else math.nan
    raise ValueError(f"seed-noise statistic {stat!r}; allowed values: mean, growth, delta_p")


@dataclass
class _Setting:
    label: str
    seeds: list
    runs: dict = field(default_factory=dict)  # run → seed → multiple → column → mean


class SeedNoiseSource:
    """The multi-seed settings of an ``lm_results.csv`` (with its ``lm_windows.csv``), and the pooled between-seed
    variance of any statistic over them."""

    def __init__(self, lm: pd.DataFrame | None, windows: pd.DataFrame | None = None):
        self.settings: list[_Setting] = []
        self._cache: dict[tuple, tuple[float, int] | None] = {}
        if lm is None or lm.empty or "seed" not in lm:
            return
        df = lm[lm["train_len"].notna() & lm["eval_len"].notna()].copy()
        if "status" in df:
            df = df[df["status"].eq("ok")]
        df["size"] = df["size"].fillna("-").astype(str) if "size" in df else "-"
        df["multiple"] = (df["eval_len"].astype(float) / df["train_len"].astype(float)).round(4)
        df = df.drop_duplicates(["run", "seed", "eval_len"])
        means = _window_means(windows)
        for key, g in df.groupby(GROUP, sort=True):
            seeds_of = g.groupby("run")["seed"].agg(lambda s: set(s))
            multi = [run for run, seeds in seeds_of.items() if len(seeds) >= 2]
            if not multi:
                continue
            shared = sorted(set.intersection(*[seeds_of[run] for run in multi]))
            if len(shared) < 2:
                continue
            roles = sorted({r for x in g.loc[g["run"].isin(multi), "roles"].dropna().astype(str)
                            for r in x.split(";") if r}) if "roles" in g else []
            label = (f"{len(multi)} runs × {len(shared)} seeds of {key[0]}, T {key[1]}, {key[2]}"
                     + (f" (role {', '.join(roles)})" if roles else ""))
            setting = _Setting(label, shared)
            for run in multi:
                setting.runs[run] = {}
                for seed in shared:
                    rows = g[(g["run"] == run) & (g["seed"] == seed)]
                    per_multiple = {}
                    for _, row in rows.iterrows():
                        found = means.get((str(run), int(seed), int(row["eval_len"])))
                        if found is None:
                            found = {c: float(np.log(row[p])) for c, p in COLUMNS.items()
                                     if p in row and pd.notna(row[p]) and row[p] > 0}
                        per_multiple[float(row["multiple"])] = found
                    setting.runs[run][seed] = per_multiple
            self.settings.append(setting)

    def __bool__(self) -> bool:
        return bool(self.settings)

    def source(self) -> str:
        """The settings the estimate pools, for a basis."""
        return "; ".join(s.label for s in self.settings)

    def variance(self, stat: tuple, paired: bool) -> tuple[float, int] | None:
        """(pooled mean square, degrees of freedom) of ``stat`` over the source settings: the method × seed
        interaction (``paired``) or the within-run mean square (module docstring); None without degrees of
        freedom."""
        key = (stat, paired)
        if key not in self._cache:
            ss, df = 0.0, 0
            for setting in self.settings:
                table = np.array([[_statistic(stat, setting.runs[run][seed]) for seed in setting.seeds]
                                  for run in setting.runs])
                table = table[np.isfinite(table).all(axis=1)]
                r, s = table.shape if table.size else (0, len(setting.seeds))
                if paired and r >= 2:
                    resid = table - table.mean(axis=1, keepdims=True) - table.mean(axis=0, keepdims=True) + table.mean()
                    ss, df = ss + float((resid ** 2).sum()), df + (r - 1) * (s - 1)
                elif not paired and r >= 1:
                    ss, df = ss + float(((table - table.mean(axis=1, keepdims=True)) ** 2).sum()), df + r * (s - 1)
            self._cache[key] = (ss / df, df) if df > 0 else None
        return self._cache[key]

    def noise(self, stats: list[tuple], paired: bool) -> SeedNoise | None:
        """The seed noise of a check whose statistic is Σ ± the per-run statistics ``stats`` (one per side): σ² the
        sum of their variances, ν the fewest degrees of freedom; None when one cannot be estimated."""
        parts = [self.variance(stat, paired) for stat in stats]
        if not parts or any(p is None for p in parts):
            return None
        return SeedNoise(math.sqrt(sum(v for v, _ in parts)), min(d for _, d in parts), self.source())


def _window_means(windows: pd.DataFrame | None) -> dict[tuple[str, int, int], dict[str, float]]:
    """(run, seed, eval_len) → the mean per-window loss of each column."""
    if windows is None or windows.empty:
        return {}
    columns = [c for c in COLUMNS if c in windows]
    means = windows.groupby(["run", "seed", "eval_len"])[columns].mean()
    return {(str(run), int(seed), int(n)): {c: float(v) for c, v in row.items() if pd.notna(v)}
            for (run, seed, n), row in means.iterrows()}


def where_of(multiple: float) -> str:
    """The statistic class of a model evaluated at ``multiple`` of its training length: within (≤ ×1) or
    beyond."""
    return "within" if multiple <= 1 else "beyond"
