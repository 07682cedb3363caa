"""Training-step time and peak memory of the paper's methods side by side, in one process, round robin.

NoPE, RoPE, ALiBi, T5, Kerple, FIRE, DAPE-Kerple and DAPE1x3-Kerple at one size (default the paper's 125M with
GPT-2's vocabulary), at training lengths 512 / 1024 / 2048 with equal tokens per micro-batch (default 16384: 32 × 512,
16 × 1024, 8 × 2048), eager and ``torch.compile``d: one step is forward, backward and a fused AdamW step under the
precision's autocast (bf16 by default), as ``dape train`` runs it. Every case is built once and warmed up, then the
cases take turns, one timed step each per round (``--rounds``), so that drift of the machine spreads over all of
them; on CUDA each step is bracketed by ``torch.cuda.synchronize`` and the peak is ``torch.cuda.max_memory_allocated``
since the case's last reset. A case that does not fit is recorded ``out_of_memory``. Printed and written (CSV): the
median step ms, its ratio to NoPE's at the same length and mode (the issue's "× NoPE"), DAPE's ratio to Kerple's,
the peak GiB (every case of a length stays resident while each is timed: ``benchmarks/memory_fit.py`` takes the
others' states off), the vocabulary and the path options the case ran with (``path_options``). ``--dape-impls``
times each DAPE method on each named ``attention_impl`` (default on CUDA: ``materialized``, ``compiled`` and
``fused``), as the row ``DAPE1x3-Kerple (fused)``; an impl ending in ``-keep``
(``compiled-keep``) runs that path with ``recompute_scores: false``, one with ``-triton`` (``compiled-triton``,
``compiled-triton-keep``, ``materialized-triton``) with the Triton feature map (``feature_map="triton"``), one with
``-tf32`` (``compiled-keep-tf32``) with the fp32 score products on TF32 tensor cores, one with ``-cN``
(``compiled-keep-c4``) with at least N causal chunks per layer (``causal_chunks``). A named impl's step runs inside
a scope that gives the paths exactly the options its name says (``harness.path_options``), whatever the compiled
path's options on CUDA (``CUDA_COMPILED_OPTIONS``); a method without one runs as ``dape train`` runs it.

    python benchmarks/gpu_step.py                                   # on a GPU: the full table
    python benchmarks/gpu_step.py --device cpu --size tiny --vocab-size 512 --tokens 1024 --lengths 64 128 \\
        --rounds 2 --modes eager --out /tmp/gpu_step_cpu.csv           # a smoke run anywhere
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
import time
from pathlib import Path

import torch

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import machine_info, path_options, path_variant, write_rows  # noqa: E402

from dape_core.methods import parse_method  # noqa: E402
from dape_core.model import GPT, GPTConfig  # noqa: E402
from dape_core.settings.attention import compiled_options_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu_step.csv"
METHODS = ("NoPE", "RoPE", "ALiBi", "T5", "Kerple", "FIRE", "DAPE-Kerple", "DAPE1x3-Kerple")


def case_settings(method: str) -> tuple[dict, dict, str]:
    """(model settings, path options, impl) of a case named ``method`` or ``method (impl)``: on ``attention_impl``
    impl, named as :func:`harness.path_variant` reads it (``-keep`` without recomputation, ``-triton`` with the
    Triton feature map, ``-tf32`` with TF32 score products, ``-cN`` with N causal chunks)."""
    method, _, impl = method.partition(" (")
    impl = impl.rstrip(")")
    settings = parse_method(method)
    path, options = path_variant(impl)
    if "recompute_scores" in options:
        settings["recompute_scores"] = options.pop("recompute_scores")
    if path:
        settings["attention_impl"] = path
    return settings, options, impl


def build_case(method: str, size: str, length: int, vocab_size: int, device: torch.device, compiled: bool):
    """(model, optimizer, forward, scope) of one case: a fresh model of ``method`` on ``device``
    (:func:`case_settings`); ``scope()``: the context its whole step runs in, the impl's options
    (:func:`harness.path_options`; none without an impl: the step as training runs it)."""
    settings, options, impl = case_settings(method)
    model = GPT(GPTConfig(size=size, vocab_size=vocab_size, train_len=length, **settings)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    forward = torch.compile(model) if compiled else model
    scope = functools.partial(path_options, **options) if impl else contextlib.nullcontext
    return model, optimizer, forward, scope


def case_options(method: str, device: torch.device, precision: str) -> dict:
    """The options of the materialized and compiled paths a case's step runs with (``feature_map``,
    ``causal_chunks``, ``tf32_scores``): those its impl names, or for a method without one those of the path
    training takes on ``device`` under the precision's autocast (none without a processor)."""
    from dape_core.implementations import path_options as training_options, resolve_attention_impl

    settings, options, impl = case_settings(method)
    if settings["processor"] == "none":
        return {}
    if impl:
        return options
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        return training_options(resolve_attention_impl("auto", device), device.type)


def one_step(forward, optimizer, idx, precision: str, device: torch.device, scope=contextlib.nullcontext) -> None:
    """One training step (forward, backward, AdamW) inside the case's ``scope``."""
    with scope():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = forward(idx, idx)[1]
        loss.backward()
        optimizer.step()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", default="125M")
    parser.add_argument("--vocab-size", type=int, default=50304)
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per micro-batch (batch = tokens / length)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--dape-impls", nargs="+", default=None,
                        help="attention_impl of each DAPE method, one row each (default: materialized, compiled and "
                             "fused on CUDA, the resolved auto elsewhere)")
    parser.add_argument("--modes", nargs="+", choices=("eager", "compiled"), default=["eager", "compiled"])
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    info = machine_info(args.device)
    impls = args.dape_impls or (["materialized", "compiled", "fused"] if device.type == "cuda" else [])
    args.methods = [f"{m} ({impl})" if impl else m for m in args.methods
                    for impl in (impls if parse_method(m)["processor"] != "none" else [""]) or [""]]
    rows = []
    for length in args.lengths:
        batch = args.tokens // length
        idx = torch.randint(0, args.vocab_size, (batch, length), device=device)
        cases, times, peaks, status = {}, {}, {}, {}
        for mode in args.modes:
            for method in args.methods:
                key = (method, mode)
                try:
                    model, optimizer, forward, scope = build_case(method, args.size, length, args.vocab_size,
                                                                  device, mode == "compiled")
                    for _ in range(args.warmup):
                        one_step(forward, optimizer, idx, args.precision, device, scope)
                    synchronize(device)
                    cases[key], times[key], status[key] = (forward, optimizer, scope), [], "ok"
                except torch.OutOfMemoryError:
                    status[key] = "out_of_memory"
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
        for _ in range(args.rounds):  # round robin: one timed step per case per round
            for key, (forward, optimizer, scope) in cases.items():
                if status[key] != "ok":
                    continue
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                synchronize(device)
                start = time.perf_counter()
                try:
                    one_step(forward, optimizer, idx, args.precision, device, scope)
                    synchronize(device)
                except torch.OutOfMemoryError:
                    status[key] = "out_of_memory"
                    continue
                times[key].append(1000 * (time.perf_counter() - start))
                if device.type == "cuda":
                    peaks[key] = max(peaks.get(key, 0), torch.cuda.max_memory_allocated(device))
        for mode in args.modes:
            medians = {m: statistics.median(times[(m, mode)]) for m in args.methods
                       if status.get((m, mode)) == "ok" and times[(m, mode)]}
            for method in args.methods:
                key = (method, mode)
                ms = medians.get(method)
                rows.append({**info, "size": args.size, "vocab_size": args.vocab_size, "method": method, "mode": mode,
                             "train_len": length, "micro_batch": batch, "precision": args.precision,
                             "path_options": compiled_options_text(case_options(method, device, args.precision)),
                             "status": status.get(key, "skipped"),
                             "step_ms": ms, "x_nope": ms / medians["NoPE"] if ms and "NoPE" in medians else None,
                             "x_kerple": ms / medians["Kerple"] if ms and "Kerple" in medians else None,
                             "peak_gib": peaks[key] / 2**30 if key in peaks else None, "rounds": len(times.get(key, []))})
                r = rows[-1]
                fmt = lambda v, f: "–" if v is None else format(v, f)  # noqa: E731
                print(f"T{length:<5} {mode:<8} {method:<28} {r['status']:<13} {fmt(ms, '8.1f')} ms  "
                      f"×NoPE {fmt(r['x_nope'], '.2f')}  ×Kerple {fmt(r['x_kerple'], '.2f')}  "
                      f"peak {fmt(r['peak_gib'], '.1f')} GiB", flush=True)
        write_rows(rows, args.out)  # after every length: a long run keeps what it measured
    return 0


if __name__ == "__main__":
    sys.exit(main())
