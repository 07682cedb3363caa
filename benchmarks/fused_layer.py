"""One attention layer's forward + backward, every path of DAPE1x3-Kerple side by side (round robin, medians), its
arithmetic and byte floors, and the fused path's bf16 error against the fp32 reference.

Rows (q, k, v, Kerple's r1, r2 and both convolutions learnable; bf16 autocast on CUDA):

* ``sdpa``: flash SDPA, causal, no bias (the floor of attention itself);
* ``sdpa-bias``: SDPA with a learnable Kerple bias (the project's path without a processor);
* ``materialized``: ``attend_materialized`` (recompute on, the default), ``materialized-keep`` (recompute off);
* ``paper``: the paper's materialised form (the ``plain`` path: [batch, 2H, T, T], ``nn.Conv2d``);
  ``paper-compiled``: that form under ``torch.compile``;
* ``compiled``: the ``compiled`` path (the materialized path's chunks under ``torch.compile``, recompute on),
  ``compiled-keep`` (recompute off);
* ``fused``: the fused Triton kernel (``attention_impl: fused``) at its default tiles; ``--fused-tiles`` adds a row
  per tile setting, ``fused-BM.W.warps.Wb.warpsb`` (block rows, the forward's key tile and warps, the backward's);
* ``materialized-triton``, ``compiled-triton``, ``compiled-triton-keep``: those paths with ``feature_map="triton"``
  (the convolutions replaced by the Triton feature map's kernels, :mod:`dape_core.implementations.feature_map`);
* any materialized or compiled row with ``-tf32`` (``compiled-keep-tf32``): that path with its fp32 score products
  (A = q·kᵀ and its backward) on TF32 tensor cores (``tf32_scores``, :mod:`dape_core.implementations.score_product`);
* any materialized or compiled row (or ``-tf32`` row) with ``-cN`` (``compiled-keep-c4``): that path with at least
  N causal chunks per layer (``causal_chunks``: each chunk reads only the keys its rows reach, so N chunks compute
  (N + 1)/2N of the T × T maps).

Each case is built once and warmed up, then the cases take turns, one timed forward + backward each per round; on
CUDA each is bracketed by ``torch.cuda.synchronize`` and its peak memory is ``torch.cuda.max_memory_allocated``
above what the inputs hold. ``--check`` adds the error rows: the fused path (and the compiled and materialized
paths and their ``-triton`` forms, each where its rows run) in the benchmark's dtype against the plain path in fp32
on the same inputs (output and q, k, v gradients, max |difference| / max |reference|).

``--profile`` adds, per shape, where each named row's device time goes: its kernels under ``torch.profiler``
(``--profile-reps`` steps after the timed rounds), the largest ``--profile-top`` by device time per step, the rest
summed (rows ``profile-ROW``, one per kernel, with ``kernel``, ``ms`` per step and ``share`` of the row's total).

``--eval-size`` adds evaluation's forward pass (no gradients, bf16 autocast on CUDA) of a whole DAPE1x3-Kerple model
at ``--eval-length``, batch 1, on the ``materialized`` path, that path with the Triton feature map
(``materialized-triton``) and the ``fused`` path, round robin (the rows ``eval-…``).

    python benchmarks/fused_layer.py --eval-size 350M       # on a GPU: the layer rows and evaluation at T 8192
    TRITON_INTERPRET=1 python benchmarks/fused_layer.py --device cpu --shapes 2x40 --heads 4 --head-dim 8 \\
        --rounds 2 --rows sdpa-bias materialized fused --check --out /tmp/fused_layer.csv   # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import machine_info, path_options, path_variant, write_rows  # noqa: E402

from dape_core.attention import attend  # noqa: E402
from dape_core.dape import build_processor  # noqa: E402
from dape_core.encodings import build_encoding  # noqa: E402
from dape_core.implementations.compiled import attend_compiled  # noqa: E402
from dape_core.implementations.fused import FusedTiles, attend_fused  # noqa: E402
from dape_core.implementations.materialized import attend_materialized  # noqa: E402
from dape_core.methods import parse_method  # noqa: E402
from dape_core.model import GPT, GPTConfig  # noqa: E402
from dape_core.settings import AttentionSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "fused_layer.csv"
ROWS = ("sdpa", "sdpa-bias", "materialized", "materialized-keep", "paper", "paper-compiled", "compiled",
        "compiled-keep", "fused", "materialized-triton", "compiled-triton", "compiled-triton-keep")


def floors(batch: int, n: int, heads: int, head_dim: int, width: int, kernel_size: int, itemsize: int = 2) -> dict:
    """Arithmetic (FLOPs over the causal half of the (i, j) pairs) and bytes (q, k, v, O and their gradients once)
    of one DAPE layer, forward and backward (eq. 5): q·kᵀ and P·V at 2·H·d per pair each, Conv1 at 2·k·2H·D,
    Conv2 at 2·k·D·H; the backward recomputes the forward and doubles every product (dQ, dK, dV, dP; dX, dW1,
    dHidden, dW2)."""
    pairs = batch * n * (n + 1) / 2
    attention = 2 * 2 * heads * head_dim
    processor = 2 * kernel_size * (2 * heads) * width + 2 * kernel_size * width * heads
    forward = pairs * (attention + processor)
    backward = forward + pairs * 2 * (attention + processor)
    tensor = batch * n * heads * head_dim * itemsize
    return dict(forward_gflop=forward / 1e9, backward_gflop=backward / 1e9, forward_mb=4 * tensor / 1e6,
                backward_mb=8 * tensor / 1e6)


class Layer:
    """One layer's learnable inputs and modules on ``device``."""

    def __init__(self, batch, n, heads, head_dim, width, device, dtype):
        torch.manual_seed(0)
        self.encoding = build_encoding("kerple", heads, head_dim, causal=True, train_len=n).to(device)
        self.processor = build_processor(heads, AttentionSettings(processor="dape_v2", kernel_size=3,
                                                                  dape_width=width), bias_channels=True).to(device)
        self.qkv = [torch.randn(batch, heads, n, head_dim, device=device, dtype=dtype, requires_grad=True)
                    for _ in range(3)]
        self.positions = torch.arange(n, device=device)
        self.device = device

    def step(self, row: str, compiled=None) -> torch.Tensor:
        q, k, v = self.qkv
        if row == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif row == "paper-compiled":
            out = compiled(q, k, v)
        elif row.startswith("fused-"):  # Kerple rotates nothing: the fused path's own call at these tiles
            out = attend_fused(q, k, v, encoding=self.encoding, processor=self.processor,
                               positions=self.positions, causal=True, tiles=parse_tiles(row))
        else:
            out = path_call(row, q, k, v, self.encoding, self.processor, self.positions)
        out.float().square().mean().backward()
        return out

    def paper_function(self):
        return lambda q, k, v: attend(q, k, v, encoding=self.encoding, processor=self.processor,
                                      positions=self.positions, causal=True, attention_impl="plain")


def path_call(row: str, q, k, v, encoding, processor, positions):
    """The attention of a path's row (its name as :func:`harness.path_variant` reads it: ``-keep`` recompute off,
    ``-triton`` the Triton feature map, ``-tf32`` TF32 score products, ``-cN`` N causal chunks)."""
    name, options = path_variant(row)
    common = dict(encoding=encoding, positions=positions, causal=True,
                  recompute_scores=options.pop("recompute_scores", None))
    if name in ("materialized", "compiled"):  # the path's own entry point, with exactly the row's options
        path = attend_compiled if name == "compiled" else attend_materialized
        return path(q, k, v, processor=processor, **options, **common)
    impl = {"sdpa-bias": "materialized", "paper": "plain"}.get(name, name)
    return attend(q, k, v, processor=None if row == "sdpa-bias" else processor, attention_impl=impl, **common)


def row_name(row: str) -> str:
    """A row of :data:`ROWS`, or one of its materialized and compiled rows with ``-tf32`` (TF32 score products)
    and then ``-cN`` (N ≥ 1 causal chunks)."""
    base, variant = row, False
    head, _, last = base.rpartition("-")
    if head and last[:1] == "c" and last[1:].isdigit() and int(last[1:]) >= 1:
        base, variant = head, True
    if base.endswith("-tf32"):
        base, variant = base.removesuffix("-tf32"), True
    if base in ROWS and (not variant or base.startswith(("materialized", "compiled"))):
        return row
    raise argparse.ArgumentTypeError(f"{row!r} is not allowed; allowed: {', '.join(ROWS)}, and a materialized or "
                                     "compiled row with -tf32 (TF32 score products) and then -cN (N ≥ 1 causal "
                                     "chunks)")


def parse_tiles(row: str) -> FusedTiles:
    """The tiles of a row ``fused-BM.W.warps.Wb.warpsb[+uncapped]`` (``+uncapped``: no register ceiling)."""
    fields = ("block_rows", "key_tile", "warps", "backward_key_tile", "backward_warps")
    spec = row.removeprefix("fused-")
    uncapped = spec.endswith("+uncapped")
    values = spec.removesuffix("+uncapped").split(".")
    if len(values) != len(fields) or not all(v.isdigit() for v in values):
        raise SystemExit(f"--fused-tiles: {row.removeprefix('fused-')!r} is not allowed; allowed: five integers "
                         "BM.W.warps.Wb.warpsb (block rows, forward key tile and warps, backward key tile and warps)")
    return FusedTiles(**dict(zip(fields, map(int, values))), cap_registers=not uncapped)


def autocast(device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def error_row(layer: Layer, device, impl: str = "fused") -> dict:
    """Path ``impl`` in the benchmark's precision against the plain path in fp32 on the same inputs."""
    def run(impl, dtype, cast):
        for t in layer.qkv:
            t.grad = None
        q, k, v = (t.detach().to(dtype).requires_grad_() for t in layer.qkv)
        with autocast(device) if cast else torch.autocast(device.type, enabled=False):
            out = path_call(impl, q, k, v, layer.encoding, layer.processor, layer.positions)
            out.float().square().mean().backward()
        return [out.detach().float(), *(t.grad.float() for t in (q, k, v))]

    reference = run("plain", torch.float32, False)
    fused = run(impl, layer.qkv[0].dtype, True)
    errors = [float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip(fused, reference)]
    return dict(zip(("error_output", "error_grad_q", "error_grad_k", "error_grad_v"), errors))


def evaluation_rows(size: str, length: int, vocab_size: int, device, warmup: int, rounds: int) -> dict:
    """Median ms of one evaluation forward pass (batch 1, no gradients) per path, round robin."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(size=size, vocab_size=vocab_size, train_len=length, **parse_method("DAPE1x3-Kerple")))
    model = model.to(device).eval()
    tokens = torch.randint(0, vocab_size, (1, length), device=device)
    times = {impl: [] for impl in ("materialized", "materialized-triton", "fused")}
    for round_ in range(warmup + rounds):
        for impl in times:
            model.cfg.attention_impl = path_variant(impl)[0]
            sync(device)
            start = time.perf_counter()
            with torch.no_grad(), autocast(device), path_options(**path_variant(impl)[1]):
                model(tokens)
            sync(device)
            if round_ >= warmup:
                times[impl].append(1000 * (time.perf_counter() - start))
    return {impl: statistics.median(ms) for impl, ms in times.items()}


def kernel_profile(layer: Layer, row: str, compiled, device, reps: int, top: int) -> list[tuple[str, float]]:
    """(kernel, device ms per step) of ``row``'s forward + backward: the ``top`` largest by device time, then
    ``(other)`` for the rest; from ``torch.profiler``'s per-kernel totals over ``reps`` steps."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(reps):
            for t in layer.qkv:
                t.grad = None
            with autocast(device):
                layer.step(row, compiled)
        sync(device)
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        if device.type == "cuda":
            us = getattr(event, "self_device_time_total", None)
            us = getattr(event, "self_cuda_time_total", 0.0) if us is None else us
        else:  # a CPU smoke run: the aten operators' own time stands for kernels
            us = event.self_cpu_time_total if event.key.startswith("aten::") else 0.0
        if us > 0:
            totals[event.key] = totals.get(event.key, 0.0) + us / 1000 / reps
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])
    rest = sum(ms for _, ms in ranked[top:])
    return ranked[:top] + ([("(other)", rest)] if rest else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", nargs="*", default=["32x512", "8x2048"], help="BATCHxT (none: only --eval-size)")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dape-width", type=int, default=32)
    parser.add_argument("--rows", nargs="+", type=row_name, default=list(ROWS), metavar="ROW")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--fused-tiles", nargs="+", default=[], metavar="BM.W.WARPS.WB.WARPSB",
                        help="a fused row per tile setting (block rows, forward key tile and warps, backward's)")
    parser.add_argument("--check", action="store_true",
                        help="add the timed fused, compiled and materialized paths' errors against fp32 plain")
    parser.add_argument("--profile", nargs="+", type=row_name, default=[], metavar="ROW",
                        help="add each named row's kernels and their device time per step (torch.profiler)")
    parser.add_argument("--profile-reps", type=int, default=3)
    parser.add_argument("--profile-top", type=int, default=20)
    parser.add_argument("--eval-size", default=None, help="add evaluation's forward pass of a model of this size")
    parser.add_argument("--eval-length", type=int, default=8192)
    parser.add_argument("--vocab-size", type=int, default=50304)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for option in ("profile_reps", "profile_top"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')}: {getattr(args, option)} is not allowed; allowed values: a "
                         "whole number ≥ 1")
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    info = machine_info(args.device)
    args.rows += [f"fused-{spec}" for spec in args.fused_tiles]
    unwarmed = [row for row in args.profile if row not in args.rows]
    if unwarmed:  # a row is profiled after its timed rounds, so that no compilation is counted
        raise SystemExit(f"--profile: {' '.join(unwarmed)} not among --rows; allowed: {' '.join(args.rows)}")
    for row in args.rows:
        if row.startswith("fused-"):
            parse_tiles(row)
    rows = []
    for shape in args.shapes:
        batch, n = (int(x) for x in shape.split("x"))
        layer = Layer(batch, n, args.heads, args.head_dim, args.dape_width, device, dtype)
        compiled = torch.compile(layer.paper_function()) if "paper-compiled" in args.rows else None
        base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        times, peaks = {row: [] for row in args.rows}, {}
        for round_ in range(args.warmup + args.rounds):
            for row in args.rows:
                for t in layer.qkv:
                    t.grad = None
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                sync(device)
                start = time.perf_counter()
                with autocast(device):
                    layer.step(row, compiled)
                sync(device)
                if round_ >= args.warmup:
                    times[row].append(1000 * (time.perf_counter() - start))
                    if device.type == "cuda":
                        peaks[row] = max(peaks.get(row, 0), torch.cuda.max_memory_allocated(device) - base)
        floor = floors(batch, n, args.heads, args.head_dim, args.dape_width, 3, torch.finfo(dtype).bits // 8)
        medians = {row: statistics.median(times[row]) for row in args.rows}
        reference = medians.get("sdpa-bias")
        for row in args.rows:
            rows.append({**info, "batch": batch, "train_len": n, "heads": args.heads, "head_dim": args.head_dim,
                         "dape_width": args.dape_width, "dtype": str(dtype).removeprefix("torch."), "row": row,
                         "ms": medians[row], "x_sdpa_bias": medians[row] / reference if reference else None,
                         "peak_gib": peaks[row] / 2**30 if row in peaks else None, "rounds": len(times[row]),
                         **floor})
            ratio = rows[-1]["x_sdpa_bias"]
            print(f"B{batch:<3} T{n:<5} {row:<22} {medians[row]:9.2f} ms  ×SDPA+bias "
                  f"{'–' if ratio is None else format(ratio, '.2f')}", flush=True)
        print(f"floors B{batch} T{n}: forward {floor['forward_gflop']:.1f} GFLOP / {floor['forward_mb']:.0f} MB, "
              f"backward {floor['backward_gflop']:.1f} GFLOP / {floor['backward_mb']:.0f} MB")
        checked = ["fused"] + [row for row in args.rows if row.startswith(("materialized", "compiled"))]
        for impl in checked if args.check else ():
            if impl in args.rows or (impl == "fused" and any(row.startswith("fused-") for row in args.rows)):
                errors = error_row(layer, device, impl)
                rows.append({**info, "batch": batch, "train_len": n, "row": f"{impl}-error",
                             "dtype": str(dtype).removeprefix("torch."), **errors})
                print(f"{impl} vs fp32 plain: " + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()), flush=True)
        for row in args.profile:
            kernels = kernel_profile(layer, row, compiled, device, args.profile_reps, args.profile_top)
            total = sum(ms for _, ms in kernels)
            print(f"profile B{batch} T{n} {row}: {total:.2f} ms of kernels per step", flush=True)
            for kernel, ms in kernels:
                rows.append({**info, "batch": batch, "train_len": n, "dtype": str(dtype).removeprefix("torch."),
                             "row": f"profile-{row}", "kernel": kernel[:160], "ms": ms, "share": ms / total,
                             "rounds": args.profile_reps})
                print(f"  {ms:8.3f} ms {100 * ms / total:5.1f} %  {kernel[:110]}", flush=True)
        write_rows(rows, args.out)
    if args.eval_size:
        medians = evaluation_rows(args.eval_size, args.eval_length, args.vocab_size, device, args.warmup, args.rounds)
        for impl, ms in medians.items():
            rows.append({**info, "batch": 1, "train_len": args.eval_length, "dtype": str(dtype).removeprefix("torch."),
                         "row": f"eval-{args.eval_size}-{impl}", "ms": ms,
                         "x_materialized": ms / medians["materialized"], "rounds": args.rounds})
            print(f"evaluation {args.eval_size} T{args.eval_length} {impl:<13} {ms:9.2f} ms  ×materialized "
                  f"{ms / medians['materialized']:.2f}", flush=True)
        write_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
