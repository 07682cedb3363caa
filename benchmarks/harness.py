"""What the benchmark scripts share: each measured case runs in a fresh process (a worker: this script again with
``--worker KIND PAYLOAD``), peak memory is the process's maximum resident set, every row names the machine, and
the results CSV is replaced atomically after every finished group (nothing measured is lost to a later failure)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

from dape_core.machine import cpu_model, rss_mb  # noqa: F401 (rss_mb: the benchmarks import it from here)


def run_worker(script: str | Path, kind: str, payload: dict):
    """``script --worker KIND PAYLOAD`` in a fresh process: its last stdout line, as JSON. Its ``bench: `` lines
    on stderr are passed on (not library warnings)."""
    out = subprocess.run([sys.executable, str(script), "--worker", kind, json.dumps(payload)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} worker failed for {payload}:\n{out.stderr[-3000:]}")
    for line in out.stderr.splitlines():
        if line.startswith("bench: "):
            print(line, file=sys.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine_info(device: str | None = None) -> dict:
    """CPU model (:func:`dape_core.machine.cpu_model`), cores, versions; with ``device``, the GPU's name (None off
    CUDA)."""
    info = dict(cpu=cpu_model(), cores=os.cpu_count())
    if device is not None:
        info["gpu"] = torch.cuda.get_device_name(0) if device == "cuda" else None
    return dict(info, torch=torch.__version__, python=platform.python_version())


def write_rows(rows: list[dict], out: Path) -> None:
    """Every row measured so far to ``out``, replacing it atomically."""
    partial = out.with_name(out.name + ".partial")
    pd.DataFrame(rows).to_csv(partial, index=False)
    partial.replace(out)


def path_variant(name: str) -> tuple[str, dict]:
    """(path, options) of a benchmark's path name ``PATH[-triton][-keep][-tf32][-cN]``: ``-triton`` the Triton
    feature map (``feature_map="triton"``), ``-keep`` ``recompute_scores`` off, ``-tf32`` A = q·kᵀ and its backward
    on TF32 tensor cores (``tf32_scores``), ``-cN`` at least N causal chunks (``causal_chunks``): options of the
    materialized and compiled paths, off where the name does not say them."""
    options = {}
    head, _, last = name.rpartition("-")
    if head and last[:1] == "c" and last[1:].isdigit():
        options["causal_chunks"], name = int(last[1:]), head
    if name.endswith("-tf32"):
        options["tf32_scores"], name = True, name.removesuffix("-tf32")
    if name.endswith("-keep"):
        options["recompute_scores"], name = False, name.removesuffix("-keep")
    if name.endswith("-triton"):
        options["feature_map"], name = "triton", name.removesuffix("-triton")
    return name, options


@contextlib.contextmanager
def path_options(**options):
    """The materialized and compiled paths run with exactly ``options`` inside (``feature_map``, ``causal_chunks``,
    ``tf32_scores`` as given, the others off: what a benchmark's row names, whatever the compiled path's options on
    CUDA are, ``dape_core.implementations.path_options``), as they were after. Enter it around the whole step,
    forward and backward."""
    import dape_core.attention as attention

    kept = attention.path_options
    attention.path_options = lambda impl, device_type: dict(options)
    try:
        yield
    finally:
        attention.path_options = kept
