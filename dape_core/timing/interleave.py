"""The interleaving of a cell's methods: blocks of fresh worker processes, rounds in a rotated order, the replicate
jobs that continue the orders, and their merge into one summary and one table of repeats.

A worker builds its model and runs ``warmup`` untimed runs; then the parent runs ``repeats`` rounds, asking every
worker in turn for one timed run, the order rotated by one method each round so that none always goes first; one
worker computes at a time. That is one *block*; ``blocks`` blocks run one after another, each with fresh worker
processes (their build order rotated too): a process's own speed (thread placement, memory layout) is shared by all
its rounds and, on a 2-core CPU, moves a method's median between processes by more than its rounds scatter
(benchmarks/results/README.md, timing protocol), so an interval reads blocks, not rounds. What changes between jobs
moves it too, so the workflow runs a timing job as ``replicates`` separate jobs (``--replicate`` k, recorded in every
row) and merges them (``--merge``): every size and method of a replicate shares its blocks, and the timing claim reads
one value per replicate. ``--repeats-out`` keeps every repeat (one row per method × block × round) beside the summary
(``--out``: per method × length, median and min over every block's repeats; merged, over every replicate's).
"""

from __future__ import annotations

import json

import pandas as pd

from dape_core import io
from dape_core.errors import ConfigError
from dape_core.timing.case import SUMMARY_STATS, failed_row, out_of_memory_row, summary_row
from dape_core.timing.workers import Worker


def rotation(methods: int, round_index: int) -> list[int]:
    """The order of the methods in one round: rotated by one each round (0 1 2, 1 2 0, 2 0 1, …)."""
    start = round_index % methods if methods else 0
    return [*range(start, methods), *range(start)]


def time_cell(cell: list[dict], replicate: int = 0) -> tuple[list[dict], list[dict]]:
    """Time one cell's methods in ``blocks`` blocks of interleaved rounds, each with fresh warmed-up workers (one per
    method): summary rows (over every block) and a repeat row per method × block × round (``block``, ``round``
    counted across blocks, ``position`` in the round, ``ms``). Orders continue across replicate jobs (replicate k
    starts where k blocks of rounds would end), so no method goes first more often than the rotation gives."""
    repeats, done, failed = [], {}, set()
    rounds, blocks = cell[0]["repeats"], cell[0].get("blocks", 1)
    for block in range(blocks):
        workers: list[Worker] = []
        try:
            for case in cell:  # the processes start together (importing torch computes nothing that is timed) …
                workers.append(Worker(case))
            # … and build one after another: one worker computes at a time
            for i in rotation(len(workers), replicate * blocks + block):
                workers[i].ask({"build": workers[i].case})
            for round_index in range(block * rounds, (block + 1) * rounds):
                live = [w for w in workers if w.status == "ok"]
                for position, i in enumerate(rotation(len(live), replicate * blocks * rounds + round_index)):
                    reply = live[i].ask({"time": True})
                    if reply["status"] == "ok":
                        repeats.append({"run": live[i].case["run"], "block": block, "round": round_index,
                                        "position": position, "ms": reply["ms"]})
            for worker in workers:
                run = worker.case["run"]
                if worker.status != "ok":
                    failed.add(run)
                elif run not in failed:
                    finish = worker.ask({"finish": True})
                    first = done.setdefault(run, finish)
                    first["peak_mem_mb"] = max(first["peak_mem_mb"], finish["peak_mem_mb"])
        finally:
            for worker in workers:
                worker.close()
    rows, repeat_rows = [], []
    for case in cell:
        run = case["run"]
        if run in done and run not in failed:
            row = {"run": run, "cell": case["cell"], **done[run]["row"]}
            times = [r["ms"] for r in repeats if r["run"] == run]
            rows.append(summary_row(row, times, done[run]["peak_mem_mb"], done[run]["baseline_mb"]))
            repeat_rows += [{**{k: row[k] for k in REPEAT_SETTINGS}, **r} for r in repeats if r["run"] == run]
        else:
            rows.append(out_of_memory_row({"run": run, "cell": case["cell"], **failed_row(case)}))
    repeat_rows.sort(key=lambda r: (r["round"], r["position"]))
    return rows, repeat_rows


#: per-repeat rows (``--repeats-out``, one per method × length × block × round): these settings of the summary row,
#: then ``replicate``, ``block`` (its worker processes), ``round`` (across the replicate's blocks), ``position``, ``ms``
REPEAT_SETTINGS = ("run", "method", "encoding", "processor", "kernel_size", "dape_width", "size", "n_layer",
                   "d_model", "seq_len", "batch_size", "mode", "precision", "attention_impl", "attention_path",
                   "dape_dtype", "device", "device_type", "cpu_model", "threads", "warmup", "cell")
REPEAT_COLUMNS = (*REPEAT_SETTINGS, "replicate", "block", "round", "position", "ms")


def repeats_path(out: str) -> str:
    """The per-repeat CSV beside a summary CSV: ``x.csv`` → ``x.repeats.csv``."""
    return str(out)[:-4] + ".repeats.csv" if str(out).endswith(".csv") else f"{out}.repeats.csv"


def replicate_spec(spec_text: str | None, replicate: int) -> str | None:
    """The spec digest of replicate ``replicate`` of the job whose merge has spec ``spec_text`` (``replicate`` in place
    of ``replicates``, :func:`dape_core.config.timing_spec`); None without a spec (a merge by hand checks seals)."""
    if spec_text is None:
        return None
    spec = {k: v for k, v in json.loads(spec_text).items() if k != "replicates"}
    return io.spec_digest({**spec, "replicate": replicate})


def merge(paths: list[str], replicates: int, spec_text: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Merge the replicate jobs' summaries (``paths``, the k-th replicate k's, each with its .repeats.csv): every
    repeat with its ``replicate``, and per method × length the median and min over all repeats, the largest peak
    memory, ``replicates`` in place of ``replicate``. Each file's seal, settings, columns and replicate are checked: a
    damaged or foreign one stops the merge with one line naming it."""
    from dape_core import artefacts

    if len(paths) != replicates:
        raise ConfigError(f"merge: {len(paths)} replicate files for replicates {replicates}; allowed values: one "
                          f"summary CSV per replicate job, rep0 … rep{replicates - 1}")
    summaries, repeats = [], []
    for k, path in enumerate(paths):
        digest = replicate_spec(spec_text, k)
        for kind, file, frames in ((artefacts.TIMING, path, summaries),
                                   (artefacts.REPEATS, repeats_path(path), repeats)):
            frame = artefacts.read_csv(file, kind, spec=digest)
            if "replicate" not in frame or set(frame["replicate"].dropna().astype(int)) - {k}:
                raise artefacts.fail(file, f"is not replicate {k}'s (its replicate column: "
                                     f"{sorted(set(frame.get('replicate', pd.Series(['none'])).astype(str)))}); "
                                     f"expected the {kind.name} of replicate {k}", kind.rule)
            frames.append(frame)
    all_repeats = pd.concat(repeats, ignore_index=True).sort_values(["replicate", "round", "position"],
                                                                      kind="stable")
    stacked = pd.concat(summaries, ignore_index=True)
    rows = []
    for (run, cell), group in stacked.groupby(["run", "cell"], sort=False):
        first = group.iloc[0].to_dict()
        base = {k: v for k, v in first.items() if k not in SUMMARY_STATS and k != "replicate"}
        if not (group["status"] == "ok").all() or len(group) != replicates:
            rows.append({**out_of_memory_row(base), "replicates": replicates})
            continue
        peak_row = group.loc[group["peak_mem_mb"].idxmax()]
        times = all_repeats.loc[(all_repeats["run"] == run) & (all_repeats["cell"] == cell), "ms"].tolist()
        baseline = float(peak_row["peak_mem_mb"] - peak_row["peak_mem_over_baseline_mb"])
        rows.append({**summary_row(base, times, float(peak_row["peak_mem_mb"]), baseline),
                     "replicates": replicates})
    return pd.DataFrame(rows), all_repeats[list(REPEAT_COLUMNS)].reset_index(drop=True)
