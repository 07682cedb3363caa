"""A Hugging Face Llama with DAPE1×3 in every attention layer against the same model unpatched: time and memory.

The original model runs transformers' default attention (SDPA); the patched one the same weights plus a DAPE V2
processor (kernel 1×3, D_DAPE 32, ``encoding: nope``: eq. 4 on the model's RoPE scores) through
:func:`dape_core.hf.add_processor`, on the path ``attention_impl: auto`` picks for the device. Each group (model,
mode, length, batch) is timed in one fresh process that builds both models from the same seed and runs them
round-robin, so both see the same machine load: a variant's time is the median over rounds, the ratio the median
of the per-round ratios patched / original. Peak memory is measured per variant in another fresh process: the
process-wide high-water mark of the resident set on a CPU (and its rise above the resident set right after
building the model), ``torch.cuda.max_memory_allocated`` on a GPU.

Modes: ``forward`` — no gradients, the logits of every position; ``forward_backward`` — the next-token loss and
its backward pass (no optimiser step). Models: ``tiny`` (configs/smoke.yaml's base model, d 32) and ``small``
(configs/hf.yaml's, d 128, 2 layers, 4 heads, 2 key/value heads), each with its configuration's vocabulary.

    python benchmarks/bench_hf.py --out benchmarks/results/hf_patch.csv
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models are built here, never downloaded

import torch
import torch.nn.functional as F

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import machine_info, rss_mb, run_worker, write_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"tiny": ROOT / "configs" / "smoke.yaml", "small": ROOT / "configs" / "hf.yaml"}
DAPE1X3 = dict(processor="dape_v2", kernel_size=3, encoding="nope", dape_width=32)
VARIANTS = ("original", "DAPE1x3")
#: (model, mode, batch, lengths, rounds)
SUITES = {
    "default": [("tiny", "forward", 1, [64, 256, 1024], 10), ("tiny", "forward_backward", 8, [64, 256], 10),
                ("small", "forward", 1, [64, 256, 1024], 10), ("small", "forward_backward", 8, [64, 256], 10)],
    "check": [("tiny", "forward", 1, [32], 2), ("tiny", "forward_backward", 2, [32], 2)],
}


def model_spec(model: str) -> dict:
    """The base_config of a configuration's finetune defaults, with its dataset's vocabulary."""
    from dape_core.config import build_plan, load_yaml

    plan = build_plan(load_yaml(MODELS[model]))
    settings = plan.config["defaults"]["finetune"]
    return {**settings["base_config"], "vocab_size": plan.datasets[settings["dataset"]]["vocab_size"]}


def build(spec: dict, variant: str, device: torch.device):
    from dape_core.hf import add_processor, build_causal_lm

    model = build_causal_lm(spec, seed=0).float()
    if variant == "DAPE1x3":
        add_processor(model, DAPE1X3)
    return model.to(device)


def step(model, mode: str, batch: int, length: int, vocab: int, device: torch.device):
    """One unit of work as a callable, on fixed random tokens."""
    ids = torch.randint(0, vocab, (batch, length + 1), generator=torch.Generator().manual_seed(0)).to(device)
    x, y = ids[:, :-1], ids[:, 1:]
    if mode == "forward":
        model.eval()

        def run():
            with torch.no_grad():
                model(input_ids=x, use_cache=False)
    else:
        model.train()

        def run():
            model.zero_grad(set_to_none=True)
            logits = model(input_ids=x, use_cache=False).logits
            F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
    return run


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_group(group: dict) -> dict:
    """Both variants in this process, round-robin: raw times (ms) per variant, and the path the patch ran."""
    from dape_core.implementations import resolve_attention_impl

    torch.set_num_threads(group["threads"])
    device = torch.device(group["device"])
    runs = [step(build(group["spec"], v, device), group["mode"], group["batch"], group["seq_len"],
                 group["spec"]["vocab_size"], device) for v in VARIANTS]
    for run in runs:  # warm-up: allocator, caches
        run()
    synchronize(device)
    times = [[] for _ in runs]
    for _ in range(group["rounds"]):
        for i, run in enumerate(runs):
            start = time.perf_counter()
            run()
            synchronize(device)
            times[i].append((time.perf_counter() - start) * 1000)
    return {"times_ms": times, "dape_path": resolve_attention_impl("auto", device)}


def memory_case(group: dict, variant: str) -> dict:
    """Peak memory of one variant in this (fresh) process: a warm-up and one measured unit of work."""
    torch.set_num_threads(group["threads"])
    device = torch.device(group["device"])
    run = step(build(group["spec"], variant, device), group["mode"], group["batch"], group["seq_len"],
               group["spec"]["vocab_size"], device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        run()
        run()
        peak = torch.cuda.max_memory_allocated(device) / 2**20
        return {"peak_mb": peak, "peak_over_model_mb": peak - base / 2**20}
    after_build = rss_mb()
    run()
    run()
    return {"peak_mb": rss_mb(), "peak_over_model_mb": rss_mb() - after_build}


def run_group(group: dict, memory: bool) -> dict:
    """One row: both variants side by side, medians and the median per-round ratio."""
    load_before = os.getloadavg()[0]
    timed = run_worker(__file__, "time", group)
    load_after = os.getloadavg()[0]
    original, patched = timed["times_ms"]
    spec = group["spec"]
    row = dict(model=group["model"], hidden_size=spec["hidden_size"], layers=spec["num_hidden_layers"],
               heads=spec["num_attention_heads"], kv_heads=spec["num_key_value_heads"], vocab_size=spec["vocab_size"],
               mode=group["mode"], batch=group["batch"], seq_len=group["seq_len"], device=group["device"],
               dape_path=timed["dape_path"], original_ms=statistics.median(original),
               dape1x3_ms=statistics.median(patched),
               time_ratio=statistics.median(b / a for a, b in zip(original, patched)),
               rounds=group["rounds"], threads=group["threads"], load_before=load_before, load_after=load_after)
    if memory:
        mem = {v: run_worker(__file__, "memory", dict(group, variant=v)) for v in VARIANTS}
        row.update(original_peak_mb=mem["original"]["peak_mb"], dape1x3_peak_mb=mem["DAPE1x3"]["peak_mb"],
                   original_over_model_mb=mem["original"]["peak_over_model_mb"],
                   dape1x3_over_model_mb=mem["DAPE1x3"]["peak_over_model_mb"])
        row["peak_ratio"] = row["dape1x3_peak_mb"] / row["original_peak_mb"]
        row["over_model_ratio"] = row["dape1x3_over_model_mb"] / max(row["original_over_model_mb"], 1.0)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="default", choices=sorted(SUITES))
    p.add_argument("--out", required=True, help="CSV path (benchmarks/results/hf_patch.csv)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=None, help="rounds per group (default: the suite's)")
    p.add_argument("--no-memory", action="store_true", help="skip the per-variant peak-memory processes")
    p.add_argument("--models", nargs="+", default=None, choices=sorted(MODELS), help="only these models")
    p.add_argument("--modes", nargs="+", default=None, choices=("forward", "forward_backward"), help="only these modes")
    p.add_argument("--seq-lens", type=int, nargs="+", default=None, help="only these lengths")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    machine = machine_info(device)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for model, mode, batch, lengths, rounds in SUITES[args.suite]:
        if (args.models and model not in args.models) or (args.modes and mode not in args.modes):
            continue
        spec = model_spec(model)
        for length in (n for n in lengths if not args.seq_lens or n in args.seq_lens):
            group = dict(model=model, spec=spec, mode=mode, batch=batch, seq_len=length, device=device,
                         rounds=args.rounds or rounds, threads=args.threads)
            row = run_group(group, memory=not args.no_memory)
            rows.append(dict(row, **machine, timestamp=stamp))
            mem = f", peak ×{row['peak_ratio']:.2f} (+{row['dape1x3_over_model_mb']:.0f} MB vs " \
                  f"+{row['original_over_model_mb']:.0f})" if "peak_ratio" in row else ""
            print(f"{model} {mode} B={batch} T={length}: original {row['original_ms']:.1f} ms, DAPE1x3 "
                  f"{row['dape1x3_ms']:.1f} ms ×{row['time_ratio']:.2f}{mem}", file=sys.stderr, flush=True)
            write_rows(rows, out)  # every finished group kept
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        payload = json.loads(sys.argv[3])
        result = time_group(payload) if sys.argv[2] == "time" else memory_case(payload, payload["variant"])
        print(json.dumps(result))
    else:
        sys.exit(main())
