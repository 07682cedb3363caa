"""The measured throughput of a training job: rows of a calibration CSV (``estimate.calibration``, written by
``benchmarks/calibrate_gpu.py``, one per device × size × method × train_len × micro-batch × precision × path) looked up
by a run's key. A job's GPU-hours are its tokens (steps × batch_size × grad_accum × train_len) over one GPU's tokens/s,
taken in this order:

1. **measured**: the row of the same device whose shape (size, n_layer, n_head, d_model, vocab_size), method (encoding,
   processor, kernel_size, dape_width), train_len, micro-batch (the run's batch_size), precision, attention_impl and
   dape_dtype are the run's;
2. **scaled**: else, at the same FLOP/s, the row of the same method (encoding, processor, kernel_size), precision,
   attention_impl, dape_dtype and device nearest in FLOPs per token (smallest |log ratio|), then in tokens per
   micro-batch;
3. **FLOP estimate**: else FLOPs / (``gpu_tflops`` × ``utilisation``).

Only rows of status ``ok`` count (others did not fit); ``estimate.calibration_device`` picks among several devices."""

from __future__ import annotations

import math
from pathlib import Path

from dape_core.config.flops import flops_per_token, run_shape
from dape_core.errors import ConfigError
from dape_core.settings.attention import (CUDA_COMPILED_OPTIONS, CUDA_TRAINING_PATH, compiled_options_text,
                                         parse_compiled_options)

MEASURED, SCALED, FLOPS = "measured", "scaled", "FLOP estimate"
SHAPE = ("size", "n_layer", "n_head", "d_model", "vocab_size")
METHOD = ("encoding", "processor", "kernel_size")
PATH = ("precision", "attention_impl", "dape_dtype")
# a calibration row's key: the shape, the method with its width, the length, the micro-batch and the path
CALIBRATION_KEY = (*SHAPE, *METHOD, "dape_width", "train_len", "micro_batch", *PATH)
CALIBRATION_COLUMNS = ("device", *CALIBRATION_KEY, "tokens_per_s", "status")


def calibration_key(settings: dict, vocab_size: int) -> dict:
    """A run's calibration key (:data:`CALIBRATION_KEY`): its settings with the shape resolved from the size."""
    cfg = run_shape(settings, vocab_size)
    key = {name: settings[name] for name in (*METHOD, "dape_width", "train_len", *PATH)}
    key.update(size=settings["size"], n_layer=cfg.n_layer, n_head=cfg.n_head, d_model=cfg.d_model,
               vocab_size=vocab_size, micro_batch=settings["batch_size"])
    return {name: key[name] for name in CALIBRATION_KEY}


def row_flops_per_token(row: dict) -> float:
    """FLOPs per token of a calibration row's model at its train_len (same formula as a run's)."""
    settings = {name: str(row[name]) for name in ("size", "encoding", "processor", "attention_impl", "dape_dtype")}
    settings.update({name: int(row[name]) for name in ("n_layer", "n_head", "d_model", "kernel_size", "dape_width")})
    return flops_per_token(settings, int(row["vocab_size"]), int(row["train_len"]))


def load_calibration(assumptions: dict) -> tuple[list[dict] | None, str]:
    """Usable rows (status ok, one device) of ``estimate.calibration``, None if none, and a note of what was read."""
    path = assumptions.get("calibration")
    if not path:
        return None, "no estimate.calibration: FLOP estimate"
    if not Path(path).is_file():
        return None, (f"calibration {path} not found (benchmarks/calibrate_gpu.py writes it on a GPU): "
                      "FLOP estimate")
    import pandas as pd

    try:
        frame = pd.read_csv(path, comment="#")
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as err:
        raise ConfigError(f"estimate.calibration: {path} is not a readable CSV ({err}); allowed values: a CSV of "
                          "benchmarks/calibrate_gpu.py") from None
    missing = [c for c in CALIBRATION_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"estimate.calibration: {path} lacks the columns {', '.join(missing)}; allowed values: a "
                          f"CSV of benchmarks/calibrate_gpu.py (columns {', '.join(CALIBRATION_COLUMNS)})")
    if frame.empty:
        raise ConfigError(f"estimate.calibration: {path} holds no rows; allowed values: a CSV of "
                          "benchmarks/calibrate_gpu.py with at least one measured case")
    rate = pd.to_numeric(frame["tokens_per_s"], errors="coerce")
    whole = frame[list(CALIBRATION_COLUMNS)].notna().all(axis=1) & (rate > 0)
    damaged = [i for i, (status, fine) in enumerate(zip(frame["status"], whole)) if pd.isna(status) or
               (status == "ok" and not fine)]
    if damaged:
        raise ConfigError(f"estimate.calibration: {path} data row {damaged[0] + 1} is cut or damaged (no status, or an "
                          "`ok` row without every key and a positive tokens_per_s); allowed values: a whole CSV of "
                          "benchmarks/calibrate_gpu.py, which rewrites it")
    devices = sorted(frame["device"].astype(str).unique())
    device = assumptions.get("calibration_device")
    if device is None and len(devices) > 1:
        raise ConfigError(f"estimate.calibration_device: null, but {path} holds several devices; allowed values: "
                          f"{', '.join(devices)}")
    if device is not None and device not in devices:
        raise ConfigError(f"estimate.calibration_device: {device!r} is not in {path}; allowed values: "
                          f"{', '.join(devices) or 'none (the CSV has no rows)'}")
    device = device if device is not None else (devices[0] if devices else "none")
    rows = frame[(frame["device"].astype(str) == device) & (frame["status"] == "ok")].to_dict("records")
    return rows, (f"calibration {path}, device {device}: {len(rows)} measured rows{_older_path(rows)}"
                  f"{_older_options(rows)}")


def _older_options(rows: list[dict]) -> str:
    """The estimate's note on DAPE rows measured on the compiled path (``attention_impl: auto``) with other options than
    CUDA's now (:data:`~dape_core.settings.attention.CUDA_COMPILED_OPTIONS`; no ``path_options``: all off): each is set
    only where it measured faster, so their throughput is a lower bound."""
    now = compiled_options_text(CUDA_COMPILED_OPTIONS)
    older = [text for row in rows if row.get("processor") != "none" and str(row.get("attention_impl")) == "auto"
             and str(row.get("attention_path")) == CUDA_TRAINING_PATH
             and (text := _recorded_options(row.get("path_options"))) != now]
    if not older:
        return ""
    return (f" ({len(older)} DAPE rows measured with the {CUDA_TRAINING_PATH} path's options "
            f"{' / '.join(sorted(set(older)))}, not today's {now} on CUDA, each set where it measured faster "
            "(docs/performance.md): their GPU-hours are upper bounds until benchmarks/calibrate_gpu.py is rerun)")


def _recorded_options(value) -> str:
    """A calibration row's ``path_options``, checked; missing (measured before the column): all off."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return compiled_options_text({})
    return compiled_options_text(parse_compiled_options(str(value), field="estimate.calibration's path_options"))


def _older_path(rows: list[dict]) -> str:
    """The estimate's note on DAPE rows measured with ``attention_impl: auto`` on another path than auto trains with on
    CUDA now (:data:`~dape_core.settings.attention.CUDA_TRAINING_PATH`): their throughput is that path's."""
    older = sorted({str(row.get("attention_path")) for row in rows
                    if row.get("processor") != "none" and str(row.get("attention_impl")) == "auto"
                    and str(row.get("attention_path")) not in (CUDA_TRAINING_PATH, "nan", "None")})
    if not older:
        return ""
    count = sum(1 for row in rows if str(row.get("attention_path")) in older and row.get("processor") != "none")
    return (f" ({count} DAPE rows measured on the {', '.join(older)} path, which auto trained with before; it now "
            f"trains with {CUDA_TRAINING_PATH} on CUDA, whose step measured 0.57–0.67× the materialized one on an "
            "H200 (docs/performance.md): their GPU-hours are upper bounds until benchmarks/calibrate_gpu.py is "
            "rerun)")


def throughput(key: dict, flops_per_token: float, rows: list[dict] | None) -> tuple[float | None, str]:
    """Tokens/s of one GPU for a run's calibration key, and where it comes from: ``measured``, ``scaled from …``,
    or (None, ``FLOP estimate``) — the order of this module's docstring."""
    if not rows:
        return None, FLOPS
    for row in rows:
        if all(_same(row[name], key[name]) for name in CALIBRATION_KEY):
            return float(row["tokens_per_s"]), MEASURED
    candidates = [row for row in rows if all(_same(row[name], key[name]) for name in (*METHOD, *PATH))]
    if not candidates:
        return None, FLOPS
    tokens = key["micro_batch"] * key["train_len"]

    def distance(row):
        return (abs(math.log(row_flops_per_token(row) / flops_per_token)),
                abs(math.log(row["micro_batch"] * row["train_len"] / tokens)))

    nearest = min(candidates, key=distance)
    rate = float(nearest["tokens_per_s"]) * row_flops_per_token(nearest) / flops_per_token
    width = f" D={nearest['dape_width']}" if not _same(nearest["dape_width"], key["dape_width"]) else ""
    return rate, (f"{SCALED} from {nearest['size']} T={nearest['train_len']} B={nearest['micro_batch']}{width} "
                  f"({float(nearest['tokens_per_s']):.4g} tokens/s)")


def _same(a, b) -> bool:
    """Equal, comparing numbers as numbers (a CSV reads 32 as 32 or 32.0) and anything else as text."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
