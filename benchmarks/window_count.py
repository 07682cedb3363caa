"""How many evaluation windows a within-length comparison should read: a finished run's models scored again with more
windows at the lengths up to their training length, each comparison's seed noise measured at each count, and what
the design stage could decide with them.

    python benchmarks/window_count.py --workdir RUN [--windows 64 128 256 512 1024] [--min-seeds 5]
                                      [--budget-minutes 35] [--max-seeds 16 32]
                                      [--out benchmarks/results/window_count.csv]
                                      [--ceiling-out benchmarks/results/window_count_ceiling.csv]

A paired comparison's per-seed statistic is the mean over W windows of two methods' loss difference; across seeds it
varies by what a seed does to the pair as a whole and by what it does window by window, which more windows average
away (``benchmarks/noise_components.py`` estimates the split from random halves of a run's own windows). This
measures it: every model of a finished design-stage run (``RUN/results/lm/{run}/seed{s}/model.pt``) is evaluated
again as its job evaluated it (the spec its ``evaluate.log`` records) with ``max_windows_within`` = the largest
``--windows`` (:func:`dape_core.evaluate.evaluate_windows`: the run's own windows first — every loss its
``windows.csv`` holds is compared —, more of the same documents at the lengths up to the training length).

- ``--out``: per pair of runs of one setting (the same training length, batch, steps and size) with at least
  ``--min-seeds`` shared seeds, and per run alone, the σ of one seed's mean loss (difference) at the shortest
  length on the first W windows, for each W; the seeds a check needs scale with σ², so ``seeds_ratio``
  (σ²(W) / σ²(the run's own count)) is what W windows need for each seed the run's count needs. Estimates from few
  seeds are rough; the medians over many pairs say more.
- ``--ceiling-out``: the design stage's own sizing and choice (``benchmarks/design_ceiling.py``) on the run's
  tables with the re-scored windows, priced with the run's job-seconds, on every seed (foresight) and on the
  pilot's seeds alone (what the design would choose), beside the same on the run's own windows. A planning
  figure, never a verdict.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import itertools
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from design_ceiling import ceiling, positive, read_run  # noqa: E402

SPEC = re.compile(r"--spec '(\{.*?\})'")


def spec_of(workdir: Path, run: str, seed: int) -> dict:
    """The evaluation spec the run's job used (the first line of its ``evaluate.log``)."""
    log = workdir / "logs" / "lm" / run / f"seed{seed}" / "evaluate.log"
    try:
        return json.loads(SPEC.search(log.read_text(encoding="utf-8").splitlines()[0]).group(1))
    except (OSError, IndexError, AttributeError, json.JSONDecodeError) as err:
        raise SystemExit(f"{log}: not the log of a `dape evaluate` job ({type(err).__name__})") from None


def rescore(job) -> pd.DataFrame:
    """One model evaluated again as its job did, with ``total`` windows at the lengths up to its training length;
    per-window rows with ``run``, ``seed``, ``committed`` (the loss its windows.csv holds, NaN for a new window)
    and ``train_len``."""
    import torch

    from dape_core import artefacts
    from dape_core.data import load_split
    from dape_core.errors import ArtefactError
    from dape_core.evaluate import evaluate_windows
    from dape_core.train import load_model

    workdir, run, seed, total = job
    torch.set_num_threads(1)
    folder = workdir / "results" / "lm" / run / f"seed{seed}"
    spec = spec_of(workdir, run, seed)
    try:  # every file checked where it is read (seal, kind, columns): a damaged one stops with one line
        model, ckpt = load_model(folder / "model.pt")
        data_dir = artefacts.read_csv(folder / "eval.csv", artefacts.EVAL)["data_dir"].iloc[0]
        committed = artefacts.read_csv(folder / "windows.csv", artefacts.WINDOWS)
    except (ArtefactError, OSError) as err:
        raise SystemExit(str(err).splitlines()[0]) from None
    model.cfg.query_chunk_size = spec["query_chunk_size"]
    train_len = int(ckpt["train_settings"]["train_len"])
    _, windows = evaluate_windows(
        model, load_split(workdir / str(data_dir), "val"), spec["eval_lens"], train_len=train_len,
        window=spec["window"], delta_p_window=spec.get("delta_p_window"), min_scored_tokens=spec["min_scored_tokens"],
        max_windows=spec["max_windows"], max_windows_within=total, batch_size=spec["batch_size"], seed=spec["seed"],
        n_boot=0)
    committed = committed.set_index(["eval_len", "document", "anchor"])["loss"]
    key = pd.MultiIndex.from_frame(windows[["eval_len", "document", "anchor"]])
    windows = windows.assign(run=run, seed=seed, train_len=train_len, committed=committed.reindex(key).to_numpy(),
                             order=windows.groupby("eval_len").cumcount())
    if windows["committed"].notna().sum() != len(committed):
        raise SystemExit(f"{folder}: its windows.csv holds windows this evaluation does not score")
    setting = (train_len, ckpt["train_settings"]["batch_size"], ckpt["train_settings"]["steps"],
               ckpt["model_config"]["size"])
    return windows.assign(setting=json.dumps(setting))


def noise(scored: pd.DataFrame, counts: list[int], min_seeds: int) -> pd.DataFrame:
    """One row per pair of runs of one setting (and per run alone) × window count: σ of one seed's mean loss
    (difference) at the shortest length over the first W windows."""
    shortest = scored.groupby("run")["eval_len"].transform("min")
    short = scored[scored["eval_len"] == shortest]
    losses = {(run, seed): g.sort_values("order")["loss"].to_numpy() for (run, seed), g in short.groupby(["run", "seed"])}
    setting = short.groupby("run")["setting"].first()
    seeds = short.groupby("run")["seed"].unique().map(lambda s: sorted(int(x) for x in s))
    rows = []

    def add(kind, a, b, shared, value):
        first = None
        for w in counts:
            sd = float(np.std([value(s, w) for s in shared], ddof=1))
            first = sd if first is None else first
            rows.append({"kind": kind, "run_a": a, "run_b": b, "seeds": len(shared), "windows": w,
                         "sd": round(sd, 5), "seeds_ratio": round((sd / first) ** 2, 4) if first else np.nan})

    for a, b in itertools.combinations(sorted(seeds.index), 2):
        shared = sorted(set(seeds[a]) & set(seeds[b]))
        if setting[a] == setting[b] and len(shared) >= min_seeds:
            add("paired", a, b, shared, lambda s, w: float((losses[(b, s)][:w] - losses[(a, s)][:w]).mean()))
    for a in sorted(seeds.index):
        if len(seeds[a]) >= min_seeds:
            add("one run", a, "", seeds[a], lambda s, w: float(losses[(a, s)][:w].mean()))
    return pd.DataFrame(rows)


def ceilings(reports: Path, scored: pd.DataFrame, budgets, caps) -> pd.DataFrame:
    """The design's choice on every seed and on the pilot's seeds, with the run's own windows and the re-scored
    ones (``windows`` column: ``own`` or ``re-scored``; ``seeds_read``: ``all`` or ``pilot``)."""
    tables, design = read_run(reports)
    own = tables["lm_windows"]
    redone = scored[own.columns]
    keys = set(zip(redone["run"], redone["seed"]))
    more = pd.concat([own[[k not in keys for k in zip(own["run"], own["seed"])]], redone], ignore_index=True)
    out = []
    for label, windows in (("own", own), ("re-scored", more)):
        for seeds_read in ("all", "pilot"):
            t = {**tables, "lm_windows": windows}
            if seeds_read == "pilot":
                t = {k: v[pd.to_numeric(v["seed"], errors="coerce") < design["fresh_seeds_from"]]
                     if v is not None and "seed" in v else v for k, v in t.items()}
            out.append(ceiling(t, design, budgets, caps).assign(windows=label, seeds_read=seeds_read))
    return pd.concat(out, ignore_index=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", type=Path, required=True, help="a finished design-stage run's working directory")
    p.add_argument("--windows", type=positive(int, "whole numbers ≥ 1"), nargs="+", default=[64, 128, 256, 512, 1024])
    p.add_argument("--min-seeds", type=positive(int, "a whole number ≥ 2"), default=5)
    p.add_argument("--budget-minutes", type=positive(float, "a number > 0"), nargs="+", default=[35.0])
    p.add_argument("--max-seeds", type=positive(int, "a whole number ≥ 1"), nargs="+", default=[16, 32])
    p.add_argument("--jobs", type=positive(int, "a whole number ≥ 1"), default=2)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "window_count.csv")
    p.add_argument("--ceiling-out", type=Path, default=ROOT / "benchmarks" / "results" / "window_count_ceiling.csv")
    args = p.parse_args(argv)
    if args.min_seeds < 2:
        p.error(f"--min-seeds: {args.min_seeds!r}: allowed values: a whole number ≥ 2")
    models = sorted((path.parent.parent.name, int(path.parent.name.removeprefix("seed")))
                    for path in (args.workdir / "results" / "lm").glob("*/seed*/model.pt"))
    if not models:
        raise SystemExit(f"{args.workdir}: no results/lm/<run>/seed<s>/model.pt: not a finished run's directory")
    with futures.ProcessPoolExecutor(args.jobs) as pool:
        scored = pd.concat(pool.map(rescore, [(args.workdir, run, seed, max(args.windows)) for run, seed in models]),
                           ignore_index=True)
    drift = float((scored["loss"] - scored["committed"]).abs().max())
    table = noise(scored, sorted(set(args.windows)), args.min_seeds).assign(committed_max_abs_diff=drift)
    limits = ceilings(args.workdir / "reports", scored, args.budget_minutes, args.max_seeds)
    for path, frame in ((args.out, table), (args.ceiling_out, limits)):
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False)
    paired = table[table["kind"] == "paired"]
    print(f"{len(models)} models re-scored; the {int(scored['committed'].notna().sum())} losses their windows.csv "
          f"hold reproduced to {drift:.2e}")
    print("median seeds ratio of the paired comparisons by window count:",
          json.dumps({int(w): round(float(g["seeds_ratio"].median()), 3) for w, g in paired.groupby("windows")}))
    for (windows, seeds_read, cap, budget), g in limits.groupby(["windows", "seeds_read", "max_seeds",
                                                                  "budget_minutes"], sort=False):
        kept = g[g["kept"]]
        print(f"{windows} windows, {seeds_read} seeds, max_seeds {cap}, budget {budget:g} min: {len(kept)} claims "
              f"({kept['cumulative_minutes'].max() if len(kept) else 0:.1f} min): "
              + ", ".join(f"{r.claim_id} {r.seeds}" for r in kept.itertuples()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
