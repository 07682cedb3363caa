"""Which of the compiled path's options a device run measured faster, and the ``CUDA_COMPILED_OPTIONS`` that follow
(docs/performance.md, "The compiled path's options on CUDA").

Reads a run's ``fused_layer.csv`` (``benchmarks/fused_layer.py --check``) and, where present, its ``gpu_step.csv``
(``benchmarks/gpu_step.py``), as ``benchmarks/fused_device.sh`` writes them. A materialized or compiled row with an
option (``-triton``: ``feature_map`` "triton", ``-cN``: ``causal_chunks`` N, ``-tf32``: ``tf32_scores``) is paired
with the row that differs from it by that option alone (``compiled-triton-keep-c4`` with ``compiled-triton-keep``),
in the layer at each shape and in the training step at each length. An option's value is set where

* it was measured: a layer pair at every shape of the run;
* it is faster in every pair: each layer pair's median ms, and each training-step pair's, where the run has them;
* its bf16 error is that of the row without it: every tensor's error against the fp32 plain path (output, dq,
  dk, dv) at most max(2e-2, 2 × the row without it's), the rule by which ``benchmarks/fused_check.py`` accepts the
  fused kernel's error against the materialized path's.

The options are judged in turn, the feature map, the chunk count, TF32, each on the pairs whose other options are
those chosen before it (and off for those after), so that an option is set only where it was measured faster in
the configuration it is set in. Of several causal chunk counts that pass, the one with the least layer time summed
over its pairs. An option that does not pass stays off (its default). Printed: each pair, each option's verdict and why, and the
``CUDA_COMPILED_OPTIONS`` to write into ``dape_core/config/measured/cuda_compiled_path.json`` (``benchmarks/adopt_device_run.py``
writes them with the rest of a run); the rule decides, a person commits.
With ``--text`` only the options, as ``benchmarks/calibrate_gpu.py --path-options`` takes them.

    python benchmarks/cuda_options.py benchmarks/results/RUN      # a device run's directory
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.fused_check import BASELINE_FACTOR, BOUNDS  # noqa: E402
from benchmarks.harness import path_variant  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
from dape_core.settings.attention import (COMPILED_OPTIONS_OFF, CUDA_COMPILED_OPTIONS,  # noqa: E402
                                         compiled_options_text)

OFF = dict(COMPILED_OPTIONS_OFF)  # each option's value when it is off
ERRORS = ("error_output", "error_grad_q", "error_grad_k", "error_grad_v")
LAYER_COLUMNS = ("batch", "train_len", "row", "ms", *ERRORS)  # fused_layer.py --check
STEP_COLUMNS = ("method", "train_len", "status", "step_ms")  # gpu_step.py
BF16_BOUND, ERROR_FACTOR = BOUNDS["bf16"], BASELINE_FACTOR  # fused_check.py's rule for a bf16 error


def row_key(name: str) -> tuple[str, frozenset] | None:
    """(path, options) of a materialized or compiled row's name; None for any other row."""
    path, options = path_variant(name)
    return (path, frozenset(options.items())) if path in ("materialized", "compiled") else None


def without(key: tuple[str, frozenset], option: str) -> tuple[str, frozenset]:
    path, options = key
    return path, frozenset((k, v) for k, v in options if k != option)


def layer_table(frame: pd.DataFrame) -> tuple[dict, dict]:
    """({(shape, key): ms}, {(shape, key): errors}) of the materialized and compiled layer rows."""
    times, errors = {}, {}
    for row in frame.itertuples(index=False):
        shape = (int(row.batch), int(row.train_len))
        name = str(row.row)
        if name.endswith("-error"):
            key = row_key(name.removesuffix("-error"))
            if key is not None:
                errors[shape, key] = [float(getattr(row, e)) for e in ERRORS]
        elif not name.startswith("profile-") and not math.isnan(float(row.ms)):
            key = row_key(name)
            if key is not None:
                times[shape, key] = float(row.ms)
    return times, errors


def step_table(frame: pd.DataFrame | None) -> dict:
    """{(method, train_len, key): step ms} of the training-step cases on a materialized or compiled impl."""
    steps = {}
    if frame is None:
        return steps
    for row in frame.itertuples(index=False):
        method, _, impl = str(row.method).partition(" (")
        key = row_key(impl.rstrip(")")) if impl else None
        if key is not None and row.status == "ok":
            steps[method, int(row.train_len), key] = float(row.step_ms)
    return steps


def judge(option: str, value, chosen: dict, times: dict, errors: dict, steps: dict) -> tuple[bool, float, list[str]]:
    """(passes, summed layer ms with it, lines) of one option value under the module's rule, from the pairs whose
    other options are those ``chosen`` so far."""
    lines, reasons, total = [], [], 0.0
    shapes = sorted({shape for shape, _ in times})
    paired = set()

    def pair(key) -> bool:
        options = dict(key[1])
        return options.get(option) == value and all(options.get(other, OFF[other]) == chosen[other]
                                                     for other in OFF if other != option)

    for (shape, key), ms in sorted(times.items(), key=str):
        if not pair(key) or (shape, without(key, option)) not in times:
            continue
        base = without(key, option)
        base_ms = times[shape, base]
        paired.add(shape)
        total += ms
        line = f"  layer B {shape[0]} × T {shape[1]}: {name_of(key)} {ms:.2f} ms, {name_of(base)} {base_ms:.2f} ms, " \
               f"×{ms / base_ms:.3f}"
        if ms >= base_ms:
            reasons.append(f"not faster in the layer at B {shape[0]} × T {shape[1]}")
        if (shape, key) in errors and (shape, base) in errors:
            mine, theirs = errors[shape, key], errors[shape, base]
            allowed = [max(BF16_BOUND, ERROR_FACTOR * e) for e in theirs]
            line += (f"; errors (output, dq, dk, dv) {' '.join(f'{m:.2e}' for m in mine)}, allowed "
                     f"{' '.join(f'{a:.2e}' for a in allowed)}")
            if any(m > a for m, a in zip(mine, allowed)):
                reasons.append(f"its bf16 error exceeds the row without it at B {shape[0]} × T {shape[1]}")
        else:
            reasons.append(f"no error rows for the pair at B {shape[0]} × T {shape[1]}")
        lines.append(line)
    for (method, length, key), ms in sorted(steps.items(), key=str):
        if not pair(key) or (method, length, without(key, option)) not in steps:
            continue
        base_ms = steps[method, length, without(key, option)]
        lines.append(f"  step {method} T {length}: {name_of(key)} {ms:.1f} ms, {name_of(without(key, option))} "
                     f"{base_ms:.1f} ms, ×{ms / base_ms:.3f}")
        if ms >= base_ms:
            reasons.append(f"not faster in the {method} step at T {length}")
    missing = [s for s in shapes if s not in paired]
    context = " ".join(f"{other}={chosen[other]}" for other in OFF if other != option)
    if not paired:
        reasons.append(f"not measured (no layer pair with {context})")
    elif missing:
        reasons.append("not measured at " + ", ".join(f"B {b} × T {n}" for b, n in missing))
    verdict = "set" if not reasons else "off: " + "; ".join(dict.fromkeys(reasons))
    return not reasons, total, [f"{option} = {value!r}: {verdict}", *lines]


def name_of(key: tuple[str, frozenset]) -> str:
    """A row name of (path, options), as harness.path_variant reads it."""
    path, options = key[0], dict(key[1])
    name = path + ("-triton" if options.get("feature_map") == "triton" else "")
    name += "-keep" if options.get("recompute_scores") is False else ""
    name += "-tf32" if options.get("tf32_scores") else ""
    return name + (f"-c{options['causal_chunks']}" if "causal_chunks" in options else "")


def decide(times: dict, errors: dict, steps: dict) -> tuple[dict, list[str]]:
    """(the CUDA_COMPILED_OPTIONS the run supports, the report's lines): the options in turn — the feature map, the
    chunk count, TF32 — each judged on the pairs whose other options are those chosen before it (off for those
    after), so that what is set was measured faster in the configuration it is set in."""
    chosen, lines = dict(OFF), []
    chunk_counts = sorted({dict(key[1])["causal_chunks"] for _, key in times if "causal_chunks" in dict(key[1])})
    chunk_counts = [n for n in chunk_counts if n != OFF["causal_chunks"]]
    for option, values in (("feature_map", ["triton"]), ("causal_chunks", chunk_counts), ("tf32_scores", [True])):
        if not values:
            lines.append(f"{option}: off: not measured (no row with it)")
        passing = []
        for value in values:
            passes, total, report = judge(option, value, chosen, times, errors, steps)
            lines += report
            if passes:
                passing.append((total, value))
        if passing:  # of several chunk counts that pass, the least summed layer time
            chosen[option] = min(passing, key=lambda item: item[0])[1]
    return chosen, lines


def read_table(parser: argparse.ArgumentParser, path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """A run's CSV with ``columns``; a cut, damaged or foreign one stops the script with one line naming it."""
    try:
        frame = pd.read_csv(path)
        for column in ("batch", "train_len", "ms", "step_ms", *ERRORS):
            if column in frame.columns:
                frame[column] = pd.to_numeric(frame[column], errors="raise")
        for column in ("batch", "train_len"):  # every row names its shape
            if column in frame.columns and frame[column].isna().any():
                raise ValueError(f"a row without {column}")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as error:
        parser.error(f"{path} is damaged ({type(error).__name__}); allowed: the CSV its benchmark writes, which "
                     "a new device run rewrites")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        parser.error(f"{path} lacks the columns {', '.join(missing)}; allowed: the CSV its benchmark writes")
    return frame


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a device run's directory (fused_layer.csv, gpu_step.csv)")
    parser.add_argument("--text", action="store_true",
                        help="print only the options, 'name=value …' (benchmarks/calibrate_gpu.py --path-options)")
    args = parser.parse_args(argv)
    layer_csv, step_csv = args.run / "fused_layer.csv", args.run / "gpu_step.csv"
    if not layer_csv.is_file():
        parser.error(f"run: {args.run} has no fused_layer.csv; allowed: a directory benchmarks/fused_device.sh "
                     "wrote with its layer step")
    times, errors = layer_table(read_table(parser, layer_csv, LAYER_COLUMNS))
    steps = step_table(read_table(parser, step_csv, STEP_COLUMNS) if step_csv.is_file() else None)
    chosen, lines = decide(times, errors, steps)
    if args.text:
        print(compiled_options_text(chosen))
        return 0
    print("\n".join(lines))
    if set(chosen) != set(CUDA_COMPILED_OPTIONS):
        raise SystemExit(f"CUDA_COMPILED_OPTIONS names {sorted(CUDA_COMPILED_OPTIONS)}, this rule {sorted(chosen)}")
    now = dict(CUDA_COMPILED_OPTIONS)
    print(f"CUDA_COMPILED_OPTIONS = {chosen!r}" + ("  (as now)" if chosen == now else f"  (now {now!r})"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
