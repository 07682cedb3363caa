"""Between-seed noise of a per-run statistic, estimated per setting where the grid trains runs with several seeds.

A *setting* (``SETTING``: dataset, size, training length and budget) fixes a run's initialisation and batch stream
apart from its method: runs of one setting and seed share the seed's data order (``dape_core.train.batch_starts``)
and initialisation of the shared shapes; runs of different settings share neither.

For a per-run statistic f, each setting whose runs share two or more seeds gives a table V[r, s] = f(run r, seed s)
over its R multi-seed runs and S seeds, one per *regime* (:data:`REGIMES`): a model without tril sees the tokens it
predicts (§4.5), so its noise is of another kind; causal and leaky runs are pooled apart, and a paired comparison
across the two (the leakage check) reads both together ("mixed"). As a two-way layout with one observation per cell
(Montgomery, *Design and Analysis of Experiments*, 9th ed., §5.3.5), V = μ_r + β_s + u_rs: β_s what a seed does to
every run alike, u_rs what it does to one run (its window noise included):

- a *paired* comparison (both methods of one setting and seed) sees u only: the interaction mean square
  Σ (V − V̄_r· − V̄_·s + V̄)² / ((R − 1)(S − 1)) estimates Var(u), pooled over the setting's methods (the claims'
  pairs read their own differences instead, since methods differ in Var(u));
- a run on its own or an *unpaired* comparison sees β + u: Var(β) + Var(u) from the seed and interaction mean squares
  on S − 1 degrees of freedom (:func:`table_variance`), since all runs of a setting share β_s.

:class:`SeedNoiseSource` applies :func:`table_variance` to ``lm_results.csv`` (with ``lm_windows.csv``): σ of a
check's own setting, or where that has one seed the grid's largest for the statistic in the same regime, named in the
basis as borrowed; none without a multi-seed setting.

Statistics (``stat``):

- ``("mean", where, column)``: the mean of ``column`` (loss, loss_dp, loss_local) over the multiples of ``where``:
  "within" (×1; also for a model evaluated at or below its training length), "beyond" (> 1), "all" (≥ 1);
- ``("at", multiple, column)``: ``column`` at one multiple;
- ``("growth", lo, hi)``: the largest loss(×m) − loss(×1) over lo ≤ m ≤ hi (the explosion statistic);
- ``("delta_p",)``: the mean over multiples ≥ 2 of loss_local − loss_dp (the ΔP statistic).

Without per-window losses a run's value at a length is the log of its perplexity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dape_core.report.intervals import SeedNoise

SETTING = ["dataset", "size", "train_len", "steps", "batch_size", "grad_accum"]
#: a run's regime: causal (tril, the default) or leaky (no tril); "mixed" names the pool of both in one setting
CAUSAL, LEAKY, MIXED = "tril", "no tril", "mixed"
REGIMES = (CAUSAL, LEAKY, MIXED)
COLUMNS = {"loss": "ppl", "loss_dp": "ppl_dp", "loss_local": "ppl_local"}


def setting_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the ``SETTING`` columns filled in a comparable form (:func:`setting_key`: missing → "-",
    grad_accum "1"), each distinct raw setting keyed once."""
    df = df.copy()
    present = [column for column in SETTING if column in df]
    raw = list(zip(*(df[column].tolist() for column in present))) if present else [()] * len(df)
    keys = {values: setting_key(dict(zip(present, values))) for values in set(raw)}
    for i, column in enumerate(SETTING):
        df[column] = [keys[values][i] for values in raw]
    return df


def _number(value) -> float:
    """A setting's count (as ``pd.to_numeric`` reads it; errors → nan)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def setting_key(values: dict) -> tuple:
    """The key of one row's setting: the ``SETTING`` columns as comparable strings (``values``: column → raw value;
    a column it lacks counts as missing → "-", grad_accum "1"; counts as whole numbers)."""
    key = []
    for column in SETTING:
        value = values.get(column)
        if column == "grad_accum":
            count = _number(value) if column in values else math.nan
            key.append(str(1 if math.isnan(count) else int(count)))
        elif column in ("train_len", "steps", "batch_size"):
            count = _number(value) if column in values else math.nan
            key.append("-" if math.isnan(count) else str(int(count)) if count.is_integer() else str(count))
        else:
            key.append("-" if column not in values or pd.isna(value) else str(value))
    return tuple(key)


def setting_of(rows: pd.DataFrame) -> tuple | None:
    """The one setting of some rows of ``lm_results.csv``; None when they span several (or none). Keyed on the
    rows' distinct raw values, since the checks ask it thousands of times."""
    if rows.empty:
        return None
    present = [column for column in SETTING if column in rows]
    distinct = set(zip(*(rows[column].tolist() for column in present))) if present else {()}
    keys = {setting_key(dict(zip(present, values))) for values in distinct}
    return next(iter(keys)) if len(keys) == 1 else None


def regime_of(rows: pd.DataFrame) -> str:
    """The regime of some rows: causal when all have tril on (or no ``tril`` column), leaky when none do, else mixed."""
    if "tril" not in rows or rows.empty:
        return CAUSAL
    tril = causal(pd.Series(rows["tril"].unique()))
    return CAUSAL if tril.all() else LEAKY if not tril.any() else MIXED


def causal(tril: pd.Series) -> pd.Series:
    """Which rows have tril on (True in any of the forms a CSV gives it; unset means the default, on)."""
    return tril.astype(str).str.lower().isin(["true", "1", "1.0", "nan", "none", "<na>", ""])


def setting_label(key: tuple) -> str:
    """"code, T 32, small, 1200 steps × batch 32" (× grad_accum when > 1)."""
    dataset, size, train_len, steps, batch, accum = (str(k) for k in key)
    budget = " × ".join(part for part, value in ((f"{steps} steps", steps), (f"batch {batch}", batch),
                                                 (accum, accum if accum != "1" else "-")) if value != "-")
    return f"{dataset}, T {train_len}, {size}" + (f", {budget}" if budget else "")


def table_variance(table: np.ndarray, paired: bool) -> tuple[float, float] | None:
    """(variance, degrees of freedom) of one seed's value of a statistic from an R × S table (runs × seeds; rows with
    a non-finite value dropped). ``paired``: the interaction mean square MS_int on (R − 1)(S − 1). Unpaired:
    Var(β) + Var(u) = (MS_seed + (R − 1) MS_int) / R, MS_seed = R Σ_s (V̄_·s − V̄)² / (S − 1), on S − 1, the fewer
    of its parts' degrees of freedom (all runs share β); not Satterthwaite's ν (*Biometrics Bulletin* 2, 1946), which
    from mean squares of 1–4 degrees of freedom decides two identical runs up to 11 % of the time where β dominates
    (dape_core.report.calibration). A single run: None paired, its own spread on S − 1 unpaired."""
    table = np.asarray(table, dtype=float)
    if table.ndim != 2 or table.shape[1] < 2:
        return None
    table = table[np.isfinite(table).all(axis=1)]
    r, s = table.shape
    if r == 0:
        return None
    row_means = table.mean(axis=1, keepdims=True)
    if r == 1:
        return (None if paired else (float(((table - row_means) ** 2).sum()) / (s - 1), s - 1))
    resid = table - row_means - table.mean(axis=0, keepdims=True) + table.mean()
    ms_int = float((resid ** 2).sum()) / ((r - 1) * (s - 1))
    if paired:
        return ms_int, (r - 1) * (s - 1)
    ms_seed = r * float(((table.mean(axis=0) - table.mean()) ** 2).sum()) / (s - 1)
    return (ms_seed + (r - 1) * ms_int) / r, s - 1


def _statistic(stat: tuple, values: dict[float, dict[str, float]]) -> float:
    """One run × seed's statistic from its per-multiple means (nan when the run lacks the multiples)."""
    kind = stat[0]
    if kind == "mean":
        _, where, column = stat
        keep = {"within": lambda m: m == 1, "beyond": lambda m: m > 1, "all": lambda m: m >= 1}[where]
        xs = [v[column] for m, v in values.items() if keep(m) and column in v]
        return float(np.mean(xs)) if xs else math.nan
    if kind == "at":
        _, multiple, column = stat
        at = values.get(float(multiple), {})
        return float(at[column]) if column in at else math.nan
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
    raise ValueError(f"seed-noise statistic {stat!r}; allowed values: mean, at, growth, delta_p")


@dataclass
class _Setting:
    key: tuple
    regime: str
    seeds: list
    runs: dict = field(default_factory=dict)  # run → seed → multiple → column → mean
    only_regime: bool = True  # the setting has runs of this regime only (its label needs no regime)

    def label(self) -> str:
        regime = "" if self.only_regime else {LEAKY: ", tril off", MIXED: ", tril on and off",
                                              CAUSAL: ", tril on"}[self.regime]
        return f"{setting_label(self.key)}{regime} ({len(self.runs)} runs × {len(self.seeds)} seeds)"


class SeedNoiseSource:
    """The multi-seed settings of an ``lm_results.csv`` (and ``lm_windows.csv``), and any statistic's seed SD there."""

    def __init__(self, lm: pd.DataFrame | None, windows: pd.DataFrame | None = None):
        self.settings: dict[tuple, _Setting] = {}
        self._cache: dict[tuple, tuple[float, float] | None] = {}
        if lm is None or lm.empty or "seed" not in lm:
            return
        df = lm[lm["train_len"].notna() & lm["eval_len"].notna()]
        if "status" in df:
            df = df[df["status"].eq("ok")]
        df = setting_frame(df)
        df["multiple"] = (df["eval_len"].astype(float) / df["train_len"].astype(float)).round(4)
        df = df.drop_duplicates(["run", "seed", "eval_len"])
        means = _window_means(windows)
        df["regime"] = np.where(causal(df["tril"]), CAUSAL, LEAKY) if "tril" in df else CAUSAL
        for key, whole in df.groupby(SETTING, sort=True):
            present = sorted(set(whole["regime"]))
            pools = [(r, whole[whole["regime"] == r]) for r in present]
            if len(present) > 1:
                pools.append((MIXED, whole))
            for regime, g in pools:
                setting = self._pool(tuple(str(k) for k in key), regime, g, means)
                if setting is not None:
                    setting.only_regime = len(present) == 1
                    self.settings[(setting.key, regime)] = setting

    @staticmethod
    def _pool(key: tuple, regime: str, g: pd.DataFrame, means: dict) -> _Setting | None:
        """The table of one setting and regime: its runs with two or more seeds over the seeds they share."""
        seeds_of = g.groupby("run")["seed"].agg(lambda s: set(s))
        multi = [run for run, seeds in seeds_of.items() if len(seeds) >= 2]
        if not multi:
            return None
        shared = sorted(set.intersection(*[seeds_of[run] for run in multi]))
        if len(shared) < 2:
            return None
        setting = _Setting(key, regime, shared)
        setting.runs = {run: {seed: {} for seed in shared} for run in multi}
        present = {c: p for c, p in COLUMNS.items() if p in g}
        for run, seed, n, multiple, *ppls in zip(g["run"], g["seed"], g["eval_len"], g["multiple"],
                                                 *(g[p].tolist() for p in present.values())):
            per_multiple = setting.runs.get(run, {}).get(seed)
            if per_multiple is None:
                continue
            found = means.get((str(run), int(seed), int(n)))
            if found is None:
                found = {c: float(np.log(v)) for c, v in zip(present, ppls) if pd.notna(v) and v > 0}
            per_multiple[float(multiple)] = found
        return setting

    def __bool__(self) -> bool:
        return bool(self.settings)

    def _variance(self, key: tuple, stat: tuple, paired: bool) -> tuple[float, float] | None:
        """(mean square, degrees of freedom) of ``stat`` in one setting, None without degrees of freedom."""
        cache = (key, stat, paired)
        if cache not in self._cache:
            setting = self.settings[key]
            table = np.array([[_statistic(stat, setting.runs[run][seed]) for seed in setting.seeds]
                              for run in setting.runs])
            self._cache[cache] = table_variance(table, paired)
        return self._cache[cache]

    def noise(self, stat: tuple, paired: bool, setting: tuple | None, regime: str = CAUSAL) -> SeedNoise | None:
        """σ of one seed's value of ``stat`` for a run of ``setting`` and ``regime`` (``paired``: its interaction
        part): the setting's own estimate in that regime, else the largest any setting gives in the same regime (the
        basis says it is borrowed), never a pool of another kind (measured: docs/verdicts.md, "Noise of the same kind
        only"); None when no setting gives one."""
        if regime not in REGIMES:
            raise ValueError(f"seed-noise regime {regime!r}; allowed values: {', '.join(REGIMES)}")
        if setting is not None and (setting, regime) in self.settings:
            own = self._variance((setting, regime), stat, paired)
            if own is not None:
                return SeedNoise(math.sqrt(own[0]), own[1], self.settings[(setting, regime)].label())
        found = [(v, key) for key in self.settings if key[1] == regime
                 and (v := self._variance(key, stat, paired)) is not None]
        if not found:
            return None
        (variance, df), key = max(found, key=lambda x: x[0][0])
        return SeedNoise(math.sqrt(variance), df, f"{self.settings[key].label()}, borrowed (the grid's largest for "
                                                  "this statistic: this setting has one seed)")


def _window_means(windows: pd.DataFrame | None) -> dict[tuple[str, int, int], dict[str, float]]:
    """(run, seed, eval_len) → the mean per-window loss of each column."""
    if windows is None or windows.empty:
        return {}
    columns = [c for c in COLUMNS if c in windows]
    means = windows.groupby(["run", "seed", "eval_len"])[columns].mean()
    return {(str(run), int(seed), int(n)): {c: float(v) for c, v in row.items() if pd.notna(v)}
            for (run, seed, n), row in means.iterrows()}


def where_of(multiple: float) -> str:
    """The statistic class of a model evaluated at ``multiple`` of its training length: within (≤ ×1) or beyond."""
    return "within" if multiple <= 1 else "beyond"
