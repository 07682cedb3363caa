"""Forward time, training-step time and peak memory per method × size × length (Table 7, §4.2 step times).

Each (method, length) is measured in a fresh Python process, because CPU peak memory is a process-wide
high-water mark. The process runs on CUDA when a GPU is present and on the CPU otherwise (:func:`timing_device`,
chosen once); on CUDA every timed region is bracketed by ``torch.cuda.synchronize`` and the peak memory is
``torch.cuda.max_memory_allocated`` over the timed runs, on the CPU it is the resident set's high-water mark.
Each row names its device and the path ``attention_impl`` resolved to there (``attention_path``). Times are
medians over ``repeats`` after ``warmup`` runs. ``precision`` runs the model under autocast in bf16 or fp16 (the
paper timed fp16, appendix I Table 8) or in fp32; a training step in fp16 scales its loss
(``torch.amp.GradScaler``) as fp16 training does. A case that does not fit the GPU's memory gives a row with
status ``out_of_memory`` and no time. Paper widths that do not fit a machine can be timed at reduced depth
(``--n-layer``): rows carry the depth and a per-layer time. ``--equal-tokens N`` sets the batch to N / T for every
length, as §4.2 compares lengths at equal tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import pandas as pd
import torch

from dape_core import io, settings as fields
from dape_core.errors import ConfigError, require_positive
from dape_core.implementations import resolve_attention_impl
from dape_core.methods import method_label
from dape_core.model import GPT, SIZE_PRESETS, GPTConfig
from dape_core.settings import AttentionSettings, setting

MODES = ("forward", "train_step")
PRECISIONS = ("fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # precision → autocast dtype


@dataclass(kw_only=True)
class TimingSettings(AttentionSettings):
    """One timing run: the attention settings, the timed shape and the protocol (Table 7, §4.2)."""

    size: str = setting("small", choices=tuple(SIZE_PRESETS), help="shape preset of the timed model")
    n_layer: int | None = setting(None, help="reduced depth for shapes that do not fit")
    vocab_size: int = setting(50257, help="vocabulary of the timed model (GPT-2's for Table 7)")
    seq_lens: list[int] = setting(default_factory=lambda: [512], help="lengths, each timed in a fresh process")
    batch_size: int | None = setting(1, help="sequences per forward (replaced by equal_tokens / seq_len)")
    equal_tokens: int | None = setting(None, help="batch = EQUAL_TOKENS / seq_len (§4.2)")
    mode: str = setting("forward", choices=MODES, help="forward, or a training step (forward, backward, AdamW)")
    repeats: int = setting(10, help="timed runs per length (the median is reported)")
    warmup: int = setting(2, help="untimed runs first")
    query_chunk_size: int | None = setting(None, help="exact query-chunked attention beyond this many rows")
    precision: str = setting("fp32", choices=PRECISIONS,
                             help="fp32, or bf16 / fp16 autocast (the paper timed fp16, appendix I Table 8)")
    threads: int = setting(2, help="CPU threads")

    def __post_init__(self):
        super().__post_init__()
        fields.check_choices(self, TimingSettings)
        for name in ("repeats", "threads", *(("n_layer",) if self.n_layer is not None else ())):
            require_positive(name, getattr(self, name))
        for n in self.seq_lens:
            require_positive("seq_lens", n)
        if self.equal_tokens is not None:
            require_positive("equal_tokens", self.equal_tokens)
            self.batch_size = None  # equal tokens replace the batch size
        elif self.batch_size is None:
            raise ConfigError("batch_size: give --batch-size or --equal-tokens; allowed values: a positive integer")
        else:
            require_positive("batch_size", self.batch_size)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def timing_device() -> torch.device:
    """The device of a timing process: CUDA when a GPU is present, the CPU otherwise (chosen once per process)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(device: torch.device) -> str:
    """What a row records as its device: the GPU's name, or ``cpu``."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; the CPU has nothing to wait for)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_method(cfg: AttentionSettings, precision: str = TimingSettings.precision) -> str:
    """The paper's label, qualified when the case runs another path or precision than the default (so tables keep
    them apart): "DAPE1x3-Kerple (plain, fp16)"."""
    label = method_label(cfg.encoding, cfg.processor, cfg.kernel_size)
    qualifiers = [getattr(cfg, key) for key in ("attention_impl", "dape_dtype")
                  if getattr(cfg, key) != getattr(AttentionSettings, key)]  # the one default
    if precision != TimingSettings.precision:
        qualifiers.append(precision)
    return f"{label} ({', '.join(qualifiers)})" if qualifiers else label


def measure(case: dict) -> dict:
    """Time one case in this process; ``case`` holds the model settings, seq_len, batch_size, mode, precision,
    repeats…"""
    torch.set_num_threads(case["threads"])
    device = timing_device()
    precision = case.get("precision", TimingSettings.precision)
    dtype = AUTOCAST_DTYPES[precision]
    baseline = torch.cuda.memory_allocated(device) / 2**20 if device.type == "cuda" else _rss_mb()
    attention = {name: case[name] for name in fields.field_names(AttentionSettings) if name in case}
    cfg = GPTConfig(vocab_size=case["vocab_size"], size=case["size"], n_layer=case.get("n_layer"),
                    train_len=case["seq_len"], query_chunk_size=case.get("query_chunk_size"), **attention)
    row = {
        "method": timed_method(cfg, precision), "encoding": cfg.encoding, "processor": cfg.processor,
        "kernel_size": cfg.kernel_size, "dape_width": cfg.dape_width, "size": case["size"], "n_layer": cfg.n_layer,
        "d_model": cfg.d_model, "n_head": cfg.n_head, "vocab_size": cfg.vocab_size, "seq_len": case["seq_len"],
        "batch_size": case["batch_size"], "mode": case["mode"], "repeats": case["repeats"],
        "device": device_name(device), "device_type": device.type, "threads": case["threads"],
        "attention_impl": cfg.attention_impl, "attention_path": resolve_attention_impl(cfg.attention_impl, device),
        "dape_dtype": cfg.dape_dtype, "precision": precision,
    }
    try:
        times, peak = _timed_runs(cfg, case, device, dtype)
    except torch.cuda.OutOfMemoryError:  # the case does not fit this GPU: a row that says so, no time
        return {**row, "status": "out_of_memory", "median_ms": float("nan"), "min_ms": float("nan"),
                "per_layer_ms": float("nan"), "tokens_per_s": float("nan"), "peak_mem_mb": float("nan"),
                "peak_mem_over_baseline_mb": float("nan")}
    median = statistics.median(times)
    return {**row, "status": "ok", "median_ms": median, "min_ms": min(times), "per_layer_ms": median / cfg.n_layer,
            "tokens_per_s": case["batch_size"] * case["seq_len"] / (median / 1000), "peak_mem_mb": peak,
            "peak_mem_over_baseline_mb": peak - baseline}


def _timed_runs(cfg: GPTConfig, case: dict, device: torch.device, dtype) -> tuple[list[float], float]:
    """``warmup`` untimed then ``repeats`` timed runs (ms, each bracketed by a device synchronisation) and the peak
    memory in MB (CUDA: allocated over the timed runs; CPU: the process's resident high-water mark)."""
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    x = torch.randint(0, cfg.vocab_size, (case["batch_size"], case["seq_len"]), device=device)
    train_step = case["mode"] == "train_step"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if train_step else None
    scaler = torch.amp.GradScaler(device.type) if train_step and dtype == torch.float16 else None
    autocast = torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)
    model.train(train_step)

    def once():
        if optimizer is None:
            with torch.no_grad(), autocast:
                model(x)
            return
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            _, loss = model(x, x)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    for _ in range(case["warmup"]):
        once()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(case["repeats"]):
        synchronize(device)
        start = time.perf_counter()
        once()
        synchronize(device)
        times.append((time.perf_counter() - start) * 1000)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else _rss_mb()
    return times, peak


def measure_in_fresh_process(case: dict) -> dict:
    out = subprocess.run([sys.executable, "-m", "dape_core.timing", "--worker", json.dumps(case)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"timing worker failed for {case}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    fields.add_arguments(p, TimingSettings)
    p.add_argument("--out", required=True)


def run(args) -> int:
    rows = [measure_in_fresh_process(case) for case in cases(fields.from_args(TimingSettings, args))]
    io.write_csv(args.out, pd.DataFrame(rows))
    for row in rows:
        print(f"{row['method']} {row['mode']} T={row['seq_len']} B={row['batch_size']} on {row['device']}: "
              + (f"{row['median_ms']:.1f} ms, {row['peak_mem_mb']:.0f} MB" if row["status"] == "ok" else row["status"]),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(measure(json.loads(sys.argv[2]))))
    else:
        sys.exit("usage: python -m dape_core.timing --worker CASE_JSON (use `dape time` for measurements)")
