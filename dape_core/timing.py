"""Forward time, training-step time and peak memory per method × size × length (Table 7, §4.2 step times).

Each (method, length) is measured in a fresh Python process, because CPU peak memory is a process-wide
high-water mark. Times are medians over ``repeats`` after ``warmup`` runs. Paper widths that do not fit a
machine can be timed at reduced depth (``--n-layer``): rows carry the depth and a per-layer time.
``--equal-tokens N`` sets the batch to N / T for every length, as §4.2 compares lengths at equal tokens.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import pandas as pd
import torch

from dape_core import io
from dape_core.errors import ConfigError, require_choice, require_positive
from dape_core.model import ATTENTION_IMPLS, DAPE_DTYPES, GPT, GPTConfig, method_label

MODES = ("forward", "train_step")


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def timed_method(cfg: GPTConfig) -> str:
    """The paper's label, qualified when the case runs another path than the default (so tables keep them apart)."""
    label = method_label(cfg.encoding, cfg.processor, cfg.kernel_size)
    qualifiers = [getattr(cfg, key) for key in ("attention_impl", "dape_dtype")
                  if getattr(cfg, key) != getattr(GPTConfig, key)]  # the dataclass default
    return f"{label} ({', '.join(qualifiers)})" if qualifiers else label


def measure(case: dict) -> dict:
    """Time one case in this process; ``case`` holds the model settings, seq_len, batch_size, mode, repeats…"""
    torch.set_num_threads(case["threads"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    baseline = _rss_mb()
    cfg = GPTConfig(vocab_size=case["vocab_size"], size=case["size"], n_layer=case.get("n_layer"),
                    encoding=case["encoding"], processor=case["processor"], kernel_size=case["kernel_size"],
                    dape_width=case["dape_width"], train_len=case["seq_len"], query_chunk_size=case.get("query_chunk_size"),
                    attention_impl=case.get("attention_impl", "fast"), dape_dtype=case.get("dape_dtype", "float32"))
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


def cases_from_args(args) -> list[dict]:
    require_choice("mode", args.mode, MODES)
    for name in ("repeats", "threads"):
        require_positive(name, getattr(args, name))
    if (args.batch_size is None) == (args.equal_tokens is None):
        raise ConfigError("batch_size: give exactly one of --batch-size and --equal-tokens; allowed values: a positive integer")
    cases = []
    for n in args.seq_lens:
        require_positive("seq_lens", n)
        batch = args.batch_size if args.batch_size is not None else args.equal_tokens // n
        if batch < 1:
            raise ConfigError(f"equal_tokens: {args.equal_tokens} is smaller than seq_len {n}; allowed values: ≥ the longest seq_len")
        cases.append({"encoding": args.encoding, "processor": args.processor, "kernel_size": args.kernel_size,
                      "dape_width": args.dape_width, "size": args.size, "n_layer": args.n_layer,
                      "vocab_size": args.vocab_size, "seq_len": n, "batch_size": batch, "mode": args.mode,
                      "repeats": args.repeats, "warmup": args.warmup, "threads": args.threads,
                      "query_chunk_size": args.query_chunk_size, "attention_impl": args.attention_impl,
                      "dape_dtype": args.dape_dtype})
    GPTConfig(size=args.size, n_layer=args.n_layer, encoding=args.encoding, attention_impl=args.attention_impl,
              dape_dtype=args.dape_dtype)  # validates names before any process starts
    return cases


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--encoding", default="kerple")
    p.add_argument("--processor", default="none")
    p.add_argument("--kernel-size", type=int, default=1)
    p.add_argument("--dape-width", type=int, default=32)
    p.add_argument("--size", default="small")
    p.add_argument("--n-layer", type=int, default=None, help="reduced depth for shapes that do not fit")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--seq-lens", type=int, nargs="+", required=True)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--equal-tokens", type=int, default=None, help="batch = EQUAL_TOKENS / seq_len (§4.2)")
    p.add_argument("--mode", default="forward", help=f"one of: {', '.join(MODES)}")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--query-chunk-size", type=int, default=None)
    p.add_argument("--attention-impl", default="fast", help=f"one of: {', '.join(ATTENTION_IMPLS)}")
    p.add_argument("--dape-dtype", default="float32", help=f"one of: {', '.join(DAPE_DTYPES)}")
    p.add_argument("--out", required=True)


def run(args) -> int:
    rows = [measure_in_fresh_process(case) for case in cases_from_args(args)]
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
