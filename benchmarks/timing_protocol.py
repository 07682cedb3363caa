"""How the timing claim's protocol holds up run to run: config.yaml's forward-time jobs timed again, several times, at
each worker thread count, each read by the claim's own check.

    python benchmarks/timing_protocol.py [--config config.yaml] [--runs 3] [--compute-threads 1 2]
                                         [--out benchmarks/results/timing_protocol.csv]

The timing claim (§4.9, Table 7) reads the rise of ms(Kerple) / ms(DAPE1x3-Kerple) from the small to the medium
model. Each of ``--runs`` runs times every replicate job of the configuration's forward-time job as the workflow
does (`dape time --spec … --threads <the rule's threads>`, one after another, the configuration's replicates, blocks
and rounds), with ``compute_threads`` set to each value of ``--compute-threads`` in turn (the runs interleave the
thread counts), and reads it with :mod:`dape_core.report.timing_check`: each block's ratio, each replicate job's
rise, their t-interval over the jobs, the verdict at the claim's threshold. It writes one row per run × thread count
× replicate × size × block (the block's ratio and its rounds' spread) with the run's rise, interval and verdict, and
prints, per thread count, the rises of the runs side by side: an interval that holds covers the other runs' rises
about as often as its level says, and a protocol whose runs' rises disagree beyond their intervals is missing a
source of noise.

Measured on an idle 2-core machine; nothing else may run beside it (the timings are the measurement).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def forward_time_jobs(config: Path) -> tuple[dict[str, dict], int, float]:
    """The configuration's forward-time replicate jobs (name/rep{k} → spec settings), the rule's threads, the
    claim's threshold."""
    import yaml

    from dape_core.config import families
    from dape_core.config.provenance import timing_spec
    from dape_core.report.claims import CLAIMS

    plan = families.build_plan(yaml.safe_load(config.read_text()))
    roles = {f: meta.get("role") for f, meta in plan.config["families"].items()}
    timed = {m["run"] for m in plan.timing_members if roles.get(m["family"]) == "forward_time"}
    jobs = {f"{name}-rep{k}": timing_spec(job, plan.timing_runs, k).settings
            for name, job in plan.timing_jobs.items() if set(job["runs"]) & timed
            for k in range(int(job["settings"]["replicates"]))}
    threads = int(plan.config["resources"]["time_lm"]["threads"])
    claim = next(c for c in CLAIMS if c.claim_id == "timing_overhead_shrinks")
    return jobs, threads, float(claim.thresholds["rise"])


def time_job(spec: dict, threads: int, folder: Path, name: str) -> tuple[pd.DataFrame, float]:
    """One `dape time` job as the workflow runs it: its repeats table (checked where it is read) and wall seconds."""
    from dape_core import artefacts

    out = folder / f"{name}.csv"
    dape = Path(sys.executable).with_name("dape")
    start = time.perf_counter()
    done = subprocess.run([str(dape), "time", "--spec", json.dumps(spec), "--threads", str(threads), "--out",
                           str(out)], capture_output=True, text=True)  # the spec names its replicate
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"dape time for {name} failed: {done.stderr.strip().splitlines()[-1:]}")
    repeats = out.with_name(f"{name}.repeats.csv")
    return artefacts.read_csv(repeats, artefacts.REPEATS), wall


def read_run(tables: list[pd.DataFrame], rise_threshold: float) -> tuple[list[dict], dict]:
    """Block rows and the run's rise, interval and verdict, by the claim's own functions."""
    from dape_core.report.intervals import decide
    from dape_core.report.timing_check import TIMED, block_ratios, job_ratios, job_rises, rise_interval

    reps = pd.concat(tables, ignore_index=True)
    reps = reps[reps["method"].isin(TIMED)]
    reps["scale"] = reps["n_layer"].astype(float) * reps["d_model"].astype(float) ** 2
    rows, sizes = [], []
    for (_, size), g in reps.groupby(["scale", "size"], sort=True):
        sizes.append((size, job_ratios(g)))
        for replicate, gr in g.groupby("replicate"):
            for block, ratio in zip(sorted(gr["block"].unique()), block_ratios(gr)):
                one = gr[gr["block"] == block]
                per_round = (one[one["method"] == TIMED[0]]["ms"].to_numpy()
                             / one[one["method"] == TIMED[1]]["ms"].to_numpy())
                rows.append({"size": size, "replicate": int(replicate), "block": int(block),
                             "ratio": round(ratio, 4), "rounds": len(per_round),
                             "round_ratio_sd": round(float(np.std(per_round, ddof=1)), 4)})
    (s0, r0), (s1, r1) = sizes[0], sizes[-1]
    iv = rise_interval(job_rises(r0, r1), "timing")
    run = {"smaller": s0, "larger": s1, "ratio_smaller": round(float(np.mean(list(r0.values()))), 4),
           "ratio_larger": round(float(np.mean(list(r1.values()))), 4), "rise": round(iv.estimate, 4),
           "low": round(iv.low, 4), "high": round(iv.high, 4),
           "verdict": decide(iv, side=1, confirm=rise_threshold, refute=0.0)}
    return rows, run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "config.yaml"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--compute-threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "timing_protocol.csv"))
    args = p.parse_args(argv)
    jobs, threads, threshold = forward_time_jobs(Path(args.config))
    if any(not 1 <= c <= threads for c in args.compute_threads):
        raise SystemExit(f"--compute-threads: allowed values: 1 … {threads} (the rule's threads)")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for compute in args.compute_threads:
                tables, wall = [], 0.0
                for name, spec in jobs.items():
                    table, seconds = time_job({**spec, "compute_threads": compute}, threads, Path(tmp),
                                              f"{name}-c{compute}-r{run}")
                    tables.append(table)
                    wall += seconds
                blocks, summary = read_run(tables, threshold)
                print(f"compute_threads {compute}, run {run}: rise {summary['rise']:+.3f} "
                      f"[{summary['low']:+.3f}, {summary['high']:+.3f}] → {summary['verdict']} ({wall:.0f} s)",
                      flush=True)
                out += [{"compute_threads": compute, "run": run, **b, **summary, "job_seconds": round(wall, 1),
                         "cpu_model": table["cpu_model"].iloc[0] if "cpu_model" in table else "",
                         "torch": __import__("torch").__version__} for b in blocks]
    df = pd.DataFrame(out)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    runs = df.drop_duplicates(["compute_threads", "run"])
    for compute, g in runs.groupby("compute_threads"):
        covered = sum(int(((g["rise"].drop(i) >= r.low) & (g["rise"].drop(i) <= r.high)).sum())
                      for i, r in g.iterrows())
        others = len(g) * (len(g) - 1)
        print(f"compute_threads {compute}: rises {', '.join(f'{x:+.3f}' for x in g['rise'])}; "
              f"{covered} of {others} other runs' rises inside a run's interval; verdicts "
              f"{', '.join(g['verdict'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
