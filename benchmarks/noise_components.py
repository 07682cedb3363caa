"""How much of a paired comparison's seed noise is the evaluation windows', from a finished run's per-window losses.

    python benchmarks/noise_components.py [--windows reports/lm_windows.csv] [--min-seeds 4]
                                          [--out benchmarks/results/noise_components.csv]

A paired comparison's per-seed statistic is the mean over the same W evaluation windows (the same for every seed and
method, ``docs/verdicts.md``) of the two methods' loss difference. Across seeds it varies by what a seed does to the
pair as a whole (σ²_seed) and by what it does window by window (c / W: the seed × window interaction, which more
windows average away). Keeping a random half of the windows — the same half for every seed, so the windows' own
difficulty still cancels — the seed-to-seed variance becomes σ²_seed + 2c/W; so c/W ≈ Var(half) − Var(all), averaged
over ``--splits`` random halves, and σ²(k·W) ≈ σ²_seed + c / (k·W). Per pair of runs of one setting with at least
``--min-seeds`` shared seeds, at ×1 ("within") and over the multiples beyond it ("beyond"): the σ of one seed's
statistic with the run's W windows, the window share c/W / σ², and the σ with 4W windows; the seeds a check needs
scale with σ², so the last column is the seeds 4W windows would need for each seed W windows need. An estimate from
few seeds (the column ``seeds``) is rough; a share outside [0, 1] (sampling noise) is written as its bound.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["seed", "eval_len", "document", "anchor"]


def statistic_table(windows: pd.DataFrame, run_a: str, run_b: str, where: str) -> pd.DataFrame:
    """[seed × window] of loss(b) − loss(a) at ×1 (``within``: each run's shortest length) or beyond it."""
    a, b = windows[windows["run"] == run_a], windows[windows["run"] == run_b]
    shortest = min(a["eval_len"].min(), b["eval_len"].min())
    keep = (lambda f: f[f["eval_len"] == shortest]) if where == "within" else (lambda f: f[f["eval_len"] > shortest])
    merged = keep(a).merge(keep(b), on=KEYS, suffixes=("_a", "_b"))
    merged["d"] = merged["loss_b"] - merged["loss_a"]
    return merged.pivot_table(index="seed", columns=["eval_len", "document", "anchor"], values="d").dropna(axis=1)


def components(table: pd.DataFrame, splits: int, rng: np.random.Generator) -> dict:
    """σ with all windows, the window share of σ², and σ with 4× the windows (module docstring)."""
    values = table.to_numpy()
    full = float(values.mean(axis=1).var(ddof=1))
    width = values.shape[1]
    halves = [float(values[:, rng.permutation(width)[: width // 2]].mean(axis=1).var(ddof=1)) for _ in range(splits)]
    window = min(full, max(0.0, float(np.mean(halves)) - full))  # c / W, within [0, the whole variance]
    seed = max(0.0, full - window)
    at_4w = seed + window / 4
    return {"seeds": values.shape[0], "windows": width, "sd": full ** 0.5,
            "window_share": window / full if full > 0 else float("nan"), "sd_4w": at_4w ** 0.5,
            "seeds_ratio_4w": at_4w / full if full > 0 else float("nan")}


def main(argv=None) -> pd.DataFrame:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--windows", default=str(ROOT / "reports" / "lm_windows.csv"))
    p.add_argument("--results", default=None, help="lm_results.csv beside it (the runs' settings); default: beside")
    p.add_argument("--min-seeds", type=int, default=4)
    p.add_argument("--splits", type=int, default=200)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "noise_components.csv"))
    args = p.parse_args(argv)
    windows = pd.read_csv(args.windows)
    results = pd.read_csv(args.results or Path(args.windows).with_name("lm_results.csv"))
    setting = ["dataset", "size", "train_len", "steps", "batch_size", "tril"]
    settings = results.drop_duplicates("run").set_index("run")[[c for c in setting if c in results]]
    seeds = windows.groupby("run")["seed"].agg(lambda s: set(s.unique()))
    rng = np.random.default_rng(0)
    rows = []
    for run_a, run_b in itertools.combinations(sorted(seeds.index), 2):
        same = run_a in settings.index and run_b in settings.index and \
            settings.loc[run_a].astype(str).equals(settings.loc[run_b].astype(str))
        if not same or len(seeds[run_a] & seeds[run_b]) < args.min_seeds:
            continue
        for where in ("within", "beyond"):
            table = statistic_table(windows, run_a, run_b, where)
            if table.shape[0] >= args.min_seeds and table.shape[1] >= 4:
                rows.append({"run_a": run_a, "run_b": run_b, "where": where, **components(table, args.splits, rng)})
    out = pd.DataFrame(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    out.round(4).to_csv(args.out, index=False)
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(out.round(3).to_string(index=False))
    return out


if __name__ == "__main__":
    main()
