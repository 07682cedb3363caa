"""The training-memory model (:mod:`dape_core.memory`) against the peaks that GPUs measured, and the kept compiled
scale (``COMPILED_KEPT_SCALE``) those peaks need (docs/performance.md, "The memory model against the GPU").

It reads, on any machine (the model traces on ``meta``; nothing runs on a GPU):

* ``gpu_calibration.csv`` rows (``benchmarks/calibrate_gpu.py``) of a configuration's jobs on CUDA under bf16 that
  were given their GPU's memory: one case per process, run as its job runs (micro-batch pieces, the memory model's
  ``recompute_scores``, the path's options in column ``path_options``; a row without it ran with all off), so the
  measured peak is the job's own;
* ``gpu_step.csv`` rows (``benchmarks/gpu_step.py``, eager mode; the materialized and compiled paths and the
  baselines): every case of a length stays resident while each one is timed, so a case's own peak is the measured
  one less the other cases' training states (fp32 weights and gradients and AdamW's two moments: 16 bytes a
  parameter each; a case that ran out of memory while timed counts as resident). The options are the row's
  ``path_options`` where recorded, else those its impl names (``compiled-triton-keep-c4``; none: all off, as every
  row before the column ran).

For each row: the measured and own peak, the path the model takes it for (``modelled_path``: a method without
an impl as training runs it today, whatever ran then; both DAPE paths trace alike but for the kept scale), the
modelled states, saved bytes (the trace, unscaled), transient and reserve; ``ratio`` = own / (states + saved + transient); ``bounded``: whether the modelled peak (the saved bytes
scaled where the model scales them, and the reserve: what a job is sized by) is at least the own peak; and for DAPE
on the compiled path with its scores kept, ``kept_scale_needed`` = (own − states − transient) / saved, the scale of
the trace's saved bytes that the measurement needs. ``COMPILED_KEPT_SCALE`` is the largest of these rounded up to a
multiple of :data:`SCALE_STEP`; ``tests/test_memory_fit.py`` checks the committed CSV against it.

    python benchmarks/memory_fit.py          # every committed GPU peak → benchmarks/results/memory_fit.csv
    python benchmarks/memory_fit.py --steps benchmarks/results/RUN/gpu_step.csv \\
        --calibrations benchmarks/results/RUN/gpu_calibration.csv --out /tmp/fit.csv     # one device run
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import pandas as pd

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.calibrate_gpu import case_model, cases  # noqa: E402
from benchmarks.gpu_step import case_settings  # noqa: E402
from benchmarks.harness import write_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
from dape_core import memory  # noqa: E402
from dape_core.errors import ConfigError  # noqa: E402
from dape_core.methods import method_label  # noqa: E402
from dape_core.model import GPTConfig  # noqa: E402
from dape_core.settings.attention import compiled_options_text, parse_compiled_options  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_OUT = RESULTS / "memory_fit.csv"
GIB = 2**30
SCALE_STEP = 0.05  # COMPILED_KEPT_SCALE is the needed scale rounded up to a multiple of this
STEP_VOCAB = 50304  # gpu_step.py's --vocab-size default, which every row before its vocab_size column ran with
STEP_COLUMNS = ("gpu", "size", "method", "mode", "train_len", "micro_batch", "precision", "status", "peak_gib")
CALIBRATION_COLUMNS = ("device", "device_type", "config", "size", "method", "train_len", "micro_batch", "precision",
                       "status", "pieces", "recompute_scores", "peak_mem_mb", "gpu_mem_gb")


def read_table(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """A results CSV with ``columns``; a cut, damaged or foreign one stops the script with one line naming it."""
    try:
        frame = pd.read_csv(path)
        for column in ("train_len", "micro_batch", "peak_gib", "peak_mem_mb", "pieces", "gpu_mem_gb"):
            if column in frame.columns:
                frame[column] = pd.to_numeric(frame[column], errors="raise")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as error:
        raise SystemExit(f"{path} is damaged ({type(error).__name__}); allowed: the CSV its benchmark writes")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise SystemExit(f"{path} lacks the columns {', '.join(missing)}; allowed: the CSV its benchmark writes")
    return frame


def resident_bytes(cfg) -> int:
    """What a built case holds between its steps: fp32 weights and gradients and AdamW's two moments, the memory
    model's fp32 states (16 bytes a parameter; bf16 autocast's weight copies live only inside a step)."""
    return memory.state_bytes(cfg)


def fit(cfg, sequences: int, precision: str, options: dict, own_bytes: float) -> dict:
    """The modelled terms of one measured step of ``sequences`` sequences and how the own peak compares."""
    modelled = memory.training_memory(cfg, sequences, precision=precision, path_options=options)
    saved = memory.model_saved_bytes(cfg, sequences, precision=precision, path_options=options)  # unscaled
    kept = memory.keeps_compiled_scores(cfg)
    return dict(
        train_len=cfg.train_len, sequences=sequences, precision=precision, modelled_path=memory.training_path(
            cfg.attention_impl), recompute_scores=cfg.recompute_scores, path_options=compiled_options_text(options),
        own_gib=own_bytes / GIB, states_gib=modelled.states / GIB, saved_gib=saved / GIB,
        transient_gib=modelled.transient / GIB, reserve_gib=modelled.reserve / GIB, peak_gib=modelled.peak / GIB,
        ratio=own_bytes / (modelled.states + saved + modelled.transient), bounded=bool(modelled.peak >= own_bytes),
        kept_scale_needed=(own_bytes - modelled.states - modelled.transient) / saved if kept else math.nan)


def _source(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)


def step_config(row, vocab_size: int) -> tuple[GPTConfig, dict]:
    """(model, path options) of a gpu_step.py case: ``method (impl)`` as its ``build_case`` builds it."""
    settings, options, _ = case_settings(str(row.method))
    recorded = getattr(row, "path_options", None)
    if isinstance(recorded, str):
        options = parse_compiled_options(recorded, field=f"gpu_step row {row.method}'s path_options")
    return GPTConfig(size=row.size, vocab_size=vocab_size, train_len=int(row.train_len), **settings), options


def step_rows(path: Path) -> list[dict]:
    """The rows of one gpu_step.csv whose peak the model stands for (eager mode, status ok, a measured peak, the
    materialized or compiled path or no processor), each less the other resident cases' states."""
    frame = read_table(path, STEP_COLUMNS)
    out = []
    for _, group in frame.groupby("train_len"):
        built = []
        for row in group.itertuples(index=False):
            vocab = int(row.vocab_size) if "vocab_size" in group.columns else STEP_VOCAB
            try:
                cfg, options = step_config(row, vocab)
            except ConfigError as error:  # a path_options value no benchmark writes
                raise SystemExit(f"{path}: {error}") from None
            resident = row.status in ("ok", "out_of_memory")
            built.append((row, cfg, options, resident_bytes(cfg) if resident else 0))
        states = sum(case[3] for case in built)
        for row, cfg, options, own_states in built:
            on_path = cfg.processor == "none" or memory.training_path(cfg.attention_impl) in ("materialized",
                                                                                                "compiled")
            if row.mode != "eager" or row.status != "ok" or math.isnan(row.peak_gib) or not on_path:
                continue
            others = states - own_states
            out.append(dict(source=_source(path), device=row.gpu, method=row.method, others_gib=others / GIB,
                            measured_gib=row.peak_gib,
                            **fit(cfg, int(row.micro_batch), str(row.precision), options,
                                  row.peak_gib * GIB - others)))
    return out


def calibration_rows(path: Path) -> list[dict]:
    """The rows of one gpu_calibration.csv measured as jobs run (CUDA, bf16, status ok, given ``gpu_mem_gb``),
    each matched to its configuration's case."""
    frame = read_table(path, CALIBRATION_COLUMNS)
    frame = frame[frame.device_type.eq("cuda") & frame.precision.eq("bf16") & frame.status.eq("ok")
                  & frame.gpu_mem_gb.notna()]
    out, by_config = [], {}
    for row in frame.itertuples(index=False):
        config = ROOT / row.config
        if not config.is_file():
            raise SystemExit(f"{path}: row {row.method} T{row.train_len} names {row.config}, which is not a "
                             "configuration here; allowed: a row calibrate_gpu.py wrote from this repository")
        todo = by_config.setdefault(row.config, cases(config))
        match = [c for c in todo if (c["method"], c["size"], c["train_len"], c["micro_batch"])
                 == (row.method, row.size, int(row.train_len), int(row.micro_batch))]
        if not match:
            raise SystemExit(f"{path}: row {row.method} {row.size} T{row.train_len} × {row.micro_batch} is no case "
                             f"of {row.config}; allowed: a row calibrate_gpu.py wrote from it")
        cfg = case_model(match[0])
        if method_label(cfg.encoding, cfg.processor, cfg.kernel_size) != row.method:
            raise SystemExit(f"{path}: row {row.method} does not match its case")
        if cfg.processor != "none":
            cfg = dataclasses.replace(cfg, recompute_scores=bool(row.recompute_scores))
        recorded = getattr(row, "path_options", None)
        try:
            options = parse_compiled_options(recorded if isinstance(recorded, str) else "", field="path_options")
        except ConfigError as error:  # a path_options value no benchmark writes
            raise SystemExit(f"{path}: row {row.method} T{row.train_len}: {error}") from None
        own = row.peak_mem_mb * 2**20
        out.append(dict(source=_source(path), device=row.device, method=row.method, others_gib=0.0,
                        measured_gib=own / GIB, **fit(cfg, int(row.pieces), "bf16", options, own)))
    return out


def needed_scale(rows: list[dict]) -> float:
    """The least multiple of :data:`SCALE_STEP` at or above every row's ``kept_scale_needed`` (NaN without one)."""
    needed = [r["kept_scale_needed"] for r in rows if not math.isnan(r["kept_scale_needed"])]
    if not needed:
        return math.nan
    return round(math.ceil(max(needed) / SCALE_STEP - 1e-9) * SCALE_STEP, 10)


def fit_all(steps: list[Path], calibrations: list[Path], out: Path) -> list[dict]:
    """Every row of the ``gpu_step.csv`` and ``gpu_calibration.csv`` files against the model, written to ``out``."""
    rows = [r for p in steps for r in step_rows(p)] + [r for p in calibrations for r in calibration_rows(p)]
    write_rows(rows, out)  # atomically: a cut run leaves the last whole fit
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=Path, nargs="*", default=None,
                        help="gpu_step.csv files (default: every one under benchmarks/results)")
    parser.add_argument("--calibrations", type=Path, nargs="*", default=None,
                        help="gpu_calibration.csv files (default: every one under benchmarks/results)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    steps = sorted(RESULTS.rglob("gpu_step.csv")) if args.steps is None else args.steps
    calibrations = sorted(RESULTS.rglob("gpu_calibration.csv")) if args.calibrations is None else args.calibrations
    rows = fit_all(steps, calibrations, args.out)
    for r in rows:
        kept = "" if math.isnan(r["kept_scale_needed"]) else f"  kept scale needed {r['kept_scale_needed']:.2f}"
        print(f"{r['source']:<48} {r['method']:<34} T{r['train_len']:<5} × {r['sequences']:<3} own "
              f"{r['own_gib']:5.1f} GiB  model s+s+t {r['states_gib'] + r['saved_gib'] + r['transient_gib']:5.1f} "
              f"(×{r['ratio']:.2f})  peak {r['peak_gib']:5.1f} {'≥' if r['bounded'] else '<'} own{kept}")
    scale = needed_scale(rows)
    print(f"COMPILED_KEPT_SCALE needed: {scale:g} (now {memory.COMPILED_KEPT_SCALE:g}); "
          f"{sum(not r['bounded'] for r in rows)} of {len(rows)} peaks above the model's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
