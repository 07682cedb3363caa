"""Where the fused kernel's time goes: one layer's forward + backward (benchmarks/fused_layer.py's DAPE1x3-Kerple)
under the CUDA profiler, per tile setting, as the device time of each of its three kernels (forward, backward dK/dV,
backward dQ and the weights) and of everything else; a setting ``…+frozen`` has the encoding's parameters frozen,
so the backward skips the bias table's gradient; ``…+uncapped`` passes ptxas no register ceiling.
``--forward-only`` adds evaluation's pass (no gradients) of the
layer on the materialized and fused paths, round robin.

    python benchmarks/fused_profile.py --tiles 16.32.16.32.8 16.32.16.16.8 16.32.16.16.8+frozen
    python benchmarks/fused_profile.py --warm-only --tiles 16.32.16.32.16     # compile only (fills Triton's cache)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_layer import Layer, autocast, parse_tiles, sync  # noqa: E402
from harness import machine_info, write_rows  # noqa: E402

from dape_core.attention import attend  # noqa: E402
from dape_core.implementations.fused import attend_fused  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "fused_profile.csv"
KERNELS = {"dape_forward_kernel": "forward", "dape_backward_kv_kernel": "backward_kv",
           "dape_backward_q_kernel": "backward_q"}


def step(layer: Layer, tiles, grad: bool = True):
    q, k, v = layer.qkv
    for t in layer.qkv:
        t.grad = None
    with autocast(layer.device), torch.set_grad_enabled(grad):
        out = attend_fused(q, k, v, encoding=layer.encoding, processor=layer.processor, positions=layer.positions,
                           causal=True, tiles=tiles)
        if grad:
            out.float().square().mean().backward()


def profile(layer: Layer, tiles, reps: int) -> dict:
    """Device ms per step of each kernel (and of the rest), from the profiler's per-kernel totals."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step(layer, tiles)
        sync(layer.device)
    times = {name: 0.0 for name in KERNELS.values()}
    times["other"] = 0.0
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "self_cuda_time_total", 0.0)
        key = next((short for name, short in KERNELS.items() if name in event.key), "other")
        times[key] += device_us / 1000 / reps
    return times


def wall(layer: Layer, run, warmup: int, reps: int) -> float:
    times = []
    for i in range(warmup + reps):
        sync(layer.device)
        start = time.perf_counter()
        run()
        sync(layer.device)
        if i >= warmup:
            times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default="32x512", help="BATCHxT")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dape-width", type=int, default=32)
    parser.add_argument("--tiles", nargs="+", default=["16.32.16.32.8"],
                        metavar="BM.W.WARPS.WB.WARPSB[+uncapped][+frozen]")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warm-only", action="store_true", help="run each setting once (compile) and stop")
    parser.add_argument("--forward-only", action="store_true", help="add evaluation's pass, materialized and fused")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    batch, n = (int(x) for x in args.shape.split("x"))
    info = machine_info(args.device)
    rows = []
    for spec in args.tiles:
        tiles = parse_tiles("fused-" + spec.replace("+frozen", ""))
        layer = Layer(batch, n, args.heads, args.head_dim, args.dape_width, device, dtype)
        layer.encoding.requires_grad_("+frozen" not in spec)
        try:
            step(layer, tiles)
        except Exception as err:  # a setting that does not fit (OutOfResources) is named and skipped
            print(f"B{batch} T{n} {spec:<22} failed: {type(err).__name__}: {str(err)[:200]}", flush=True)
            rows.append({**info, "batch": batch, "train_len": n, "tiles": spec, "error": type(err).__name__})
            continue
        if args.warm_only:
            continue
        ms = wall(layer, lambda: step(layer, tiles), 1, args.reps)
        kernels = profile(layer, tiles, args.reps) if device.type == "cuda" else {}
        rows.append({**info, "batch": batch, "train_len": n, "tiles": spec, "wall_ms": ms,
                     **{f"{name}_ms": value for name, value in kernels.items()}})
        print(f"B{batch} T{n} {spec:<22} wall {ms:8.2f} ms  " + "  ".join(f"{name} {value:7.2f}"
                                                                        for name, value in kernels.items()), flush=True)
        write_rows(rows, args.out)
    if args.forward_only and not args.warm_only:
        tiles = parse_tiles("fused-" + args.tiles[0].replace("+frozen", ""))
        layer = Layer(batch, n, args.heads, args.head_dim, args.dape_width, device, dtype)
        q, k, v = layer.qkv

        def materialized():
            with autocast(device), torch.no_grad():
                attend(q, k, v, encoding=layer.encoding, processor=layer.processor, positions=layer.positions,
                       causal=True, attention_impl="materialized")
        medians = {"materialized": [], "fused": []}
        for _ in range(5):  # round robin
            medians["materialized"].append(wall(layer, materialized, 1, 3))
            medians["fused"].append(wall(layer, lambda: step(layer, tiles, grad=False), 1, 3))
        for path, values in medians.items():
            ms = statistics.median(values)
            rows.append({**info, "batch": batch, "train_len": n, "tiles": f"forward-only {path}", "wall_ms": ms})
            print(f"B{batch} T{n} forward only, {path:<13} {ms:8.2f} ms", flush=True)
        write_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
