"""Forward time, training-step time and peak memory per method × size × length (Table 7, §4.2 step times).

Each (method, length) is measured in a fresh Python process, because CPU peak memory is a process-wide
high-water mark. Times are medians over ``repeats`` after ``warmup`` runs. Paper widths that do not fit a
machine can be timed at reduced depth (``--n-layer``): rows carry the depth and a per-layer time.
``--equal-tokens N`` sets the batch to N / T for every length, as §4.2 compares lengths at equal tokens.
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
from dape_core.methods import method_label
from dape_core.model import GPT, SIZE_PRESETS, GPTConfig
from dape_core.settings import AttentionSettings, setting

MODES = ("forward", "train_step")


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


def timed_method(cfg: AttentionSettings) -> str:
    """The paper's label, qualified when the case runs another path than the default (so tables keep them apart)."""
    label = method_label(cfg.encoding, cfg.processor, cfg.kernel_size)
    qualifiers = [getattr(cfg, key) for key in ("attention_impl", "dape_dtype")
                  if getattr(cfg, key) != getattr(AttentionSettings, key)]  # the one default
    return f"{label} ({', '.join(qualifiers)})" if qualifiers else label


def measure(case: dict) -> dict:
    """Time one case in this process; ``case`` holds the model settings, seq_len, batch_size, mode, repeats…"""
    torch.set_num_threads(case["threads"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    baseline = _rss_mb()
    attention = {name: case[name] for name in fields.field_names(AttentionSettings) if name in case}
    cfg = GPTConfig(vocab_size=case["vocab_size"], size=case["size"], n_layer=case.get("n_layer"),
                    train_len=case["seq_len"], query_chunk_size=case.get("query_chunk_size"), **attention)
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    x = torch.randint(0, cfg.vocab_size, (case["batch_size"], case["seq_len"]), device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if case["mode"] == "train_step" else None
    model.train(case["mode"] == "train_step")

    def once():
        if optimizer is None:
            with torch.no_grad():
                model(x)
        else:
            optimizer.zero_grad(set_to_none=True)
            _, loss = model(x, x)
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(case["warmup"]):
        once()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(case["repeats"]):
        start = time.perf_counter()
        once()
        times.append((time.perf_counter() - start) * 1000)
    median = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else _rss_mb()
    return {
        "method": timed_method(cfg), "encoding": cfg.encoding,
        "processor": cfg.processor, "kernel_size": cfg.kernel_size, "dape_width": cfg.dape_width, "size": case["size"],
        "n_layer": cfg.n_layer, "d_model": cfg.d_model, "n_head": cfg.n_head, "seq_len": case["seq_len"],
        "batch_size": case["batch_size"], "mode": case["mode"], "repeats": case["repeats"], "median_ms": median,
        "min_ms": min(times), "per_layer_ms": median / cfg.n_layer, "peak_mem_mb": peak,
        "peak_mem_over_baseline_mb": peak - (0.0 if device.type == "cuda" else baseline),
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu", "threads": case["threads"],
        "attention_impl": cfg.attention_impl, "dape_dtype": cfg.dape_dtype,
    }


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
        print(f"{row['method']} {row['mode']} T={row['seq_len']} B={row['batch_size']}: {row['median_ms']:.1f} ms, "
              f"{row['peak_mem_mb']:.0f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(measure(json.loads(sys.argv[2]))))
    else:
        sys.exit("usage: python -m dape_core.timing --worker CASE_JSON (use `dape time` for measurements)")
