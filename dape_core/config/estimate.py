"""Jobs per rule and the GPU-hours of the training jobs: from measured throughput where there is one, otherwise
from the decoder's own FLOP count.

Each run's model is built on the meta device (no memory, no computation), so FLOP counts come from
:meth:`dape_core.model.GPT.flops_per_token` — the formula the training summary reports — rather than a second one.

A training job's GPU-hours are its tokens (steps × batch_size × grad_accum × train_len) divided by a throughput
in tokens/s of one GPU, taken in this order:

1. **measured**: ``estimate.calibration`` names a CSV written by ``benchmarks/calibrate_gpu.py`` (one row per
   device × size × method × train_len × micro-batch × precision × path, with the tokens/s of training steps).
   A row of the same device whose shape (size, n_layer, n_head, d_model, vocab_size), method (encoding,
   processor, kernel_size, dape_width), train_len, micro-batch (the run's batch_size), precision, attention_impl
   and dape_dtype equal the run's gives its tokens/s as is.
2. **scaled**: otherwise the nearest measured row of the same method (encoding, processor, kernel_size),
   precision, attention_impl, dape_dtype and device — nearest in FLOPs per token (smallest |log ratio|), then in
   tokens per micro-batch — gives tokens/s × flops_per_token(measured) / flops_per_token(run): the same FLOP/s.
3. **FLOP estimate**: otherwise (no CSV, or no row of the method on that device) FLOPs / (``gpu_tflops`` ×
   ``utilisation``).

Rows whose status is not ``ok`` (a micro-batch that did not fit) are not used. ``estimate.calibration_device``
picks the device when the CSV holds several. GPU-hours assume one GPU's throughput per GPU (a job on N GPUs
takes 1/N of the time on each).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from dape_core.errors import ConfigError

MEASURED, SCALED, FLOPS = "measured", "scaled", "FLOP estimate"
SHAPE = ("size", "n_layer", "n_head", "d_model", "vocab_size")
METHOD = ("encoding", "processor", "kernel_size")
PATH = ("precision", "attention_impl", "dape_dtype")
# a calibration row's key: the shape, the method with its width, the length, the micro-batch and the path
CALIBRATION_KEY = (*SHAPE, *METHOD, "dape_width", "train_len", "micro_batch", *PATH)
CALIBRATION_COLUMNS = ("device", *CALIBRATION_KEY, "tokens_per_s", "status")


@lru_cache(maxsize=None)
def _model_on_meta(model_settings: tuple):
    import torch

    from dape_core.model import GPT, GPTConfig

    with torch.device("meta"):
        return GPT(GPTConfig(**dict(model_settings)))


def _model(settings: dict, vocab_size: int):
    """The run's decoder on the meta device (its config has the resolved n_layer, n_head and d_model)."""
    from dape_core.model import GPTConfig
    from dape_core.settings import field_names

    model = {k: settings[k] for k in field_names(GPTConfig) if k in settings}
    model.update(vocab_size=vocab_size)
    model.pop("train_len", None)  # the length enters the count as flops_per_token's argument
    return _model_on_meta(tuple(sorted(model.items())))


def training_flops(settings: dict, vocab_size: int) -> float:
    """Training FLOPs of one LM run: FLOPs per token (GPT on the meta device) × tokens of all its steps."""
    return _model(settings, vocab_size).flops_per_token(settings["train_len"]) * training_tokens(settings)


def training_tokens(settings: dict) -> int:
    """Tokens of all steps of one LM run: steps × batch_size × grad_accum × train_len."""
    return settings["steps"] * settings["batch_size"] * settings["grad_accum"] * settings["train_len"]


def run_vocab(plan, settings: dict) -> int:
    """The vocabulary an estimate uses for a run: ``estimate.vocab_size``, or its dataset's ``vocab_size``."""
    return plan.config["estimate"]["vocab_size"] or plan.datasets[settings["dataset"]]["vocab_size"]


def calibration_key(settings: dict, vocab_size: int) -> dict:
    """A run's calibration key (:data:`CALIBRATION_KEY`): its settings with the shape resolved from the size."""
    cfg = _model(settings, vocab_size).cfg
    key = {name: settings[name] for name in (*METHOD, "dape_width", "train_len", *PATH)}
    key.update(size=settings["size"], n_layer=cfg.n_layer, n_head=cfg.n_head, d_model=cfg.d_model,
               vocab_size=vocab_size, micro_batch=settings["batch_size"])
    return {name: key[name] for name in CALIBRATION_KEY}


def row_flops_per_token(row: dict) -> float:
    """FLOPs per token of a calibration row's model at its train_len (same formula as a run's)."""
    settings = {name: str(row[name]) for name in ("size", "encoding", "processor", "attention_impl", "dape_dtype")}
    settings.update({name: int(row[name]) for name in ("n_layer", "n_head", "d_model", "kernel_size", "dape_width")})
    return _model(settings, int(row["vocab_size"])).flops_per_token(int(row["train_len"]))


# ----------------------------------------------------------------------------------------------- calibration
def load_calibration(assumptions: dict) -> tuple[list[dict] | None, str]:
    """The usable rows (status ok, one device) of ``estimate.calibration`` and a sentence saying what was read;
    ``None`` when there is no calibration to read."""
    path = assumptions.get("calibration")
    if not path:
        return None, "no estimate.calibration: FLOP estimate"
    if not Path(path).is_file():
        return None, (f"calibration {path} not found (benchmarks/calibrate_gpu.py writes it on a GPU): "
                      "FLOP estimate")
    import pandas as pd

    frame = pd.read_csv(path, comment="#")
    missing = [c for c in CALIBRATION_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"estimate.calibration: {path} lacks the columns {', '.join(missing)}; allowed values: a "
                          f"CSV of benchmarks/calibrate_gpu.py (columns {', '.join(CALIBRATION_COLUMNS)})")
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
    return rows, f"calibration {path}, device {device}: {len(rows)} measured rows"


def throughput(key: dict, flops_per_token: float, rows: list[dict] | None) -> tuple[float | None, str]:
    """Tokens/s of one GPU for a run's calibration key, and where it comes from: ``measured``, ``scaled from …``,
    or (None, ``FLOP estimate``) — the rule of the module docstring."""
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


# ----------------------------------------------------------------------------------------------- estimate
def estimate(plan) -> dict:
    """Jobs per rule and GPU-hours of the training jobs (measured, scaled or FLOP throughput, as above), with the
    figure used for each training shape."""
    from dape_core.methods import method_label

    assumptions = plan.config["estimate"]
    rate = assumptions["gpu_tflops"] * 1e12 * assumptions["utilisation"]
    rows, note = load_calibration(assumptions)
    flops, hours = 0.0, 0.0
    shapes: dict[tuple, dict] = {}
    sources = {MEASURED: 0, SCALED: 0, FLOPS: 0}
    for name, seed in plan.train_jobs():
        settings = plan.lm_runs[name]["settings"]
        vocab = run_vocab(plan, settings)
        run_flops = training_flops(settings, vocab)
        key = calibration_key(settings, vocab)
        tokens_per_s, source = throughput(key, run_flops / training_tokens(settings), rows)
        run_hours = (run_flops / rate if tokens_per_s is None else training_tokens(settings) / tokens_per_s) / 3600
        flops += run_flops
        hours += run_hours
        sources[source.split(" from ")[0]] += 1
        shape = shapes.setdefault(tuple(key.values()), {**key, "method": method_label(
            settings["encoding"], settings["processor"], settings["kernel_size"]), "jobs": 0, "gpu_hours": 0.0,
            "source": source})
        shape["jobs"] += 1
        shape["gpu_hours"] += run_hours
    jobs = {"tokenize": len(plan.datasets), "train_lm": len(plan.train_jobs()),
            "finetune_lm": len(plan.finetune_jobs()), "evaluate_lm": len(plan.lm_jobs()),
            "attention_maps": len(plan.attention_jobs()), "time_lm": len(plan.timing_runs), "che": len(plan.che_jobs())}
    return {"jobs": jobs, "train_flops": flops, "gpu_hours": hours, "gpu_tflops": assumptions["gpu_tflops"],
            "utilisation": assumptions["utilisation"], "calibration": note, "calibrated": rows is not None,
            "sources": sources,
            "shapes": list(shapes.values())}


def estimate_line(plan, e: dict | None = None) -> str:
    """One line: jobs per rule, training FLOPs and GPU-hours, and which throughput figures they rest on."""
    e = e or estimate(plan)
    jobs = ", ".join(f"{n} {rule}" for rule, n in e["jobs"].items() if n)
    flop_rate = f"{e['gpu_tflops']:g} TFLOP/s × {e['utilisation']:g} utilisation"
    if e["sources"][MEASURED] or e["sources"][SCALED]:
        basis = (f"tokens/s measured for {e['sources'][MEASURED]} jobs, scaled by FLOPs for {e['sources'][SCALED]}, "
                 f"FLOP estimate at {flop_rate} for {e['sources'][FLOPS]}; {e['calibration']}")
    else:
        basis = f"at {flop_rate}; {e['calibration']}"
    return (f"plan: {jobs}; training the LM runs ≈ {e['train_flops']:.3g} FLOPs ≈ {e['gpu_hours']:.1f} GPU-hours "
            f"({basis}; evaluation, fine-tune, timing and CHE jobs not included)")


def estimate_details(e: dict) -> list[str]:
    """One line per training shape: its jobs, GPU-hours and the figure used (measured / scaled from … / FLOP
    estimate)."""
    lines = []
    for s in e["shapes"]:
        width = "" if s["processor"] == "none" else f" D={s['dape_width']}"
        lines.append(f"  {s['size']} {s['method']}{width} T={s['train_len']} B={s['micro_batch']} {s['precision']} "
                     f"{s['attention_impl']}/{s['dape_dtype']}: {s['jobs']} jobs, {s['gpu_hours']:.4g} GPU-hours, "
                     f"{s['source']}")
    return lines
