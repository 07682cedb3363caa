"""``dape time``: a timing job's cells from its options (every method of ``--methods`` at each length), timed
interleaved, one replicate job's rows written; or, with ``--merge``, its replicate jobs merged.

Paper widths that do not fit a machine can be timed at reduced depth (``--n-layer``): rows carry the depth and a
per-layer time. ``--equal-tokens N`` sets the batch to N / T for every length, as §4.2 compares lengths at equal
tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import pandas as pd

from dape_core import io, settings as fields
from dape_core.errors import ConfigError
from dape_core.settings import AttentionSettings
from dape_core.settings.model import GPTConfig
from dape_core.settings.timing import TIMED_SHAPE, TimingSettings
from dape_core.timing.case import timed_method
from dape_core.timing.interleave import REPEAT_COLUMNS, merge, repeats_path, time_cell
from dape_core.timing.workers import TimingWorkerError


def cases(settings: TimingSettings) -> list[dict]:
    """One case per length: the attention settings, the shape, the batch (or equal_tokens / length), the protocol."""
    GPTConfig(size=settings.size, n_layer=settings.n_layer, **dataclasses.asdict(settings.attention_settings()))
    out = []
    for n in settings.seq_lens:
        batch = settings.batch_size if settings.equal_tokens is None else settings.equal_tokens // n
        if batch < 1:
            raise ConfigError(f"equal_tokens: {settings.equal_tokens} is smaller than seq_len {n}; allowed values: "
                              "≥ the longest seq_len")
        case = {k: v for k, v in dataclasses.asdict(settings).items() if k not in ("seq_lens", "equal_tokens")}
        out.append({**case, "seq_len": n, "batch_size": batch})
    return out


def parse_methods(text: str | dict | None, settings: TimingSettings) -> dict[str, TimingSettings]:
    """``--methods`` (JSON text or a spec's object): run name → attention settings and shape over the options;
    without it, the options' one method, named by its label."""
    if text is None:
        return {timed_method(settings, settings.precision): settings}
    try:
        methods = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as err:
        raise ConfigError(f"methods: not valid JSON ({err}); allowed values: a JSON object run name → attention "
                          "settings") from None
    if not isinstance(methods, dict) or not methods or not all(isinstance(v, dict) for v in methods.values()):
        raise ConfigError("methods: allowed values: a non-empty JSON object run name → attention settings")
    allowed = (*fields.field_names(AttentionSettings), *TIMED_SHAPE)
    out = {}
    for run, attention in methods.items():
        for key in attention:
            if key not in allowed:
                raise ConfigError(f"methods.{run}.{key}: unknown setting; allowed values: {', '.join(allowed)}")
        try:
            out[run] = dataclasses.replace(settings, **attention)
        except ConfigError as err:
            raise ConfigError(f"methods.{run}.{err}") from None
    return out


def cells(methods: dict[str, TimingSettings], job: str) -> list[list[dict]]:
    """One cell per length: every method's (every size's) case, with its ``run``, ``cell`` ``{job}-T{length}`` and
    the cell size."""
    per_method = {run: cases(settings) for run, settings in methods.items()}
    lengths = next(iter(per_method.values()))
    return [[{**per_method[run][i], "run": run, "cell": f"{job}-T{case['seq_len']}", "cell_size": len(methods)}
             for run in methods] for i, case in enumerate(lengths)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    fields.add_arguments(p, TimingSettings)
    p.add_argument("--methods", help="JSON: run name → attention settings of each method timed in the same cells "
                                     "(interleaved; over the attention options); default: the options' one method")
    p.add_argument("--replicate", type=int, default=0, help="which replicate job of the timing job this is (0, 1, …; "
                                                            "recorded in every row)")
    p.add_argument("--merge", nargs="+", metavar="CSV", help="merge the summaries of the `replicates` replicate jobs "
                   "(their .repeats.csv beside them) into --out and --repeats-out instead of timing")
    p.add_argument("--out", required=True, help="summary CSV: one row per method × length")
    p.add_argument("--repeats-out", help="per-repeat CSV: one row per method × length × round (default: the "
                                         "summary's name with .repeats.csv)")


def run(args) -> int:
    settings = fields.from_args(TimingSettings, args)
    if args.merge:
        summary, repeat_rows = merge(args.merge, settings.replicates, args.spec)
        io.write_csv(args.repeats_out or repeats_path(args.out), repeat_rows, seal=True)
        io.write_csv(args.out, summary, seal=True)
        print(f"dape time: merged {len(args.merge)} replicate jobs: {len(summary)} rows, {len(repeat_rows)} repeats",
              file=sys.stderr)
        return 0
    if args.replicate < 0:
        raise ConfigError(f"replicate: {args.replicate}; allowed values: 0, 1, …")
    job = os.path.basename(args.out).removesuffix(".csv")
    if job.startswith("rep") and job[3:].isdigit():  # results/timing/{job}/rep{k}.csv: the cells are the job's
        job = os.path.basename(os.path.dirname(os.path.abspath(args.out)))
    rows, repeat_rows = [], []
    try:
        for cell in cells(parse_methods(args.methods, settings), job):
            summary, repeats = time_cell(cell, args.replicate)
            rows += summary
            repeat_rows += repeats
    except TimingWorkerError as err:
        print(f"dape time: error: {err}", file=sys.stderr)
        return 1
    rows = [{**row, "replicate": args.replicate} for row in rows]
    repeat_rows = [{**row, "replicate": args.replicate} for row in repeat_rows]
    io.write_csv(args.repeats_out or repeats_path(args.out), pd.DataFrame(repeat_rows, columns=list(REPEAT_COLUMNS)),
                 seal=True)
    io.write_csv(args.out, pd.DataFrame(rows), seal=True)
    for row in rows:
        result = (f"{row['median_ms']:.1f} ms (median of {row['blocks']} × {row['repeats']} interleaved), "
                  f"{row['peak_mem_mb']:.0f} MB" if row["status"] == "ok" else row["status"])
        print(f"{row['run']}: {row['method']} {row['mode']} T={row['seq_len']} B={row['batch_size']} on "
              f"{row['device']}: {result}", file=sys.stderr)
    return 0
