"""DAPE's feature map f = Conv2(LeakyReLU(Conv1(x))) alone, on the map that one chunk of the compiled path holds
(x [batch, 2H, T, T], channels-last): the layer's own convolutions (``padded_feature_map``: cuDNN on a GPU, in the
autocast dtype, as the materialized and compiled paths run them) against the Triton kernels (``triton_feature_map``)
at each tile setting, forward + backward and forward alone, round robin, medians; with each one's error against the
convolutions in fp32 on the same inputs, the bytes each pass must move at least (x, f and their gradients once,
dPre written and read once, over the pixels the decoder needs) and the operations the kernels do on them (channels
padded as their products take them), so that a time reads as a bandwidth and as a rate.

The map is a causal decoder's, as the training path's chunk holds it: df is zero right of the diagonal (the causal
mask drops those scores) and the kernels get the diagonal (``first`` 0), so they skip the tiles right of it; the
convolutions compute the whole map, as they do in the path. ``--two-sided``: the encoder's map, every pixel needed.

Rows: ``conv``, ``triton-ROWS.KEYS.WARPS`` per ``--tiles`` (the first is the default's); ``mode`` ``train``
(forward + backward, df a fixed random map) or ``forward`` (no gradients).

    python benchmarks/feature_map.py                      # on a GPU: the 125M layer's map at B 32 × T 512, B 8 × T 2048
    TRITON_INTERPRET=1 python benchmarks/feature_map.py --device cpu --shapes 1x24 --heads 4 --dape-width 6 \\
        --rounds 2 --tiles 2.8.4 --out /tmp/feature_map.csv   # a smoke run in Triton's CPU interpreter
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import machine_info, write_rows  # noqa: E402

from dape_core.dape import build_processor  # noqa: E402
from dape_core.errors import ConfigError  # noqa: E402
from dape_core.implementations.feature_map import FeatureTiles, triton_feature_map  # noqa: E402
from dape_core.implementations.materialized import padded_feature_map  # noqa: E402
from dape_core.implementations.triton_support import dot_size  # noqa: E402
from dape_core.settings import AttentionSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "feature_map.csv"


def needed_pixels(batch: int, n: int, two_sided: bool) -> int:
    """Pixels of a [batch, ·, n, n] map that the attention reads: all of them two-sided, the causal half (with the
    diagonal) in a decoder."""
    return batch * (n * n if two_sided else n * (n + 1) // 2)


def floor_bytes(pixels: int, channels: int, width: int, heads: int, itemsize: int) -> dict:
    """Bytes a pass moves at least: forward x in, f out; backward x and df in, dPre out and in, dx out."""
    return dict(forward_gb=pixels * (channels + heads) * itemsize / 1e9,
                backward_gb=pixels * (2 * channels + heads + 2 * width) * itemsize / 1e9)


def floor_flop(pixels: int, channels: int, width: int, heads: int, kernel_size: int) -> dict:
    """Floating-point operations a pass does (2 per multiply-add) with the channels padded to the products' sizes
    (``dot_size``: C, D_DAPE, H → CP, DP, HP), as the kernels compute them: forward Conv1 k² times (once per Conv2
    tap) and Conv2 once, k·(k·CP·DP + DP·HP) per pixel; backward Conv1 again, dHidden, dW2, dx and dW1,
    k·(2·CP·DP + 2·DP·HP + CP·DP) per pixel."""
    cp, dp, hp, k = dot_size(channels), dot_size(width), dot_size(heads), kernel_size
    return dict(forward_gflop=2 * pixels * k * (k * cp * dp + dp * hp) / 1e9,
                backward_gflop=2 * pixels * k * (3 * cp * dp + 2 * dp * hp) / 1e9)


def function(case: str, two_sided: bool = False):
    """The feature map of a row: the convolutions, or the kernels at the row's tiles (given the diagonal unless
    ``two_sided``)."""
    if case == "conv":
        return padded_feature_map
    tiles = FeatureTiles.parse(case.removeprefix("triton-"))
    first = None if two_sided else 0
    return lambda processor, x: triton_feature_map(processor, x, tiles, first=first)


def decoder_mask(n: int, device) -> torch.Tensor:
    """[n, n]: True right of the diagonal, where a decoder's scores are masked."""
    return torch.ones(n, n, dtype=torch.bool, device=device).triu_(1)


def run(fn, processor, x, grad, device, dtype, train: bool):
    """f (and with ``train`` its backward for df = ``grad``) as the materialized path runs it: under autocast to
    ``dtype`` where that is below fp32."""
    cast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    with torch.set_grad_enabled(train), cast:
        f = fn(processor, x)[..., :grad.shape[-1]]
    if train:
        f.backward(grad)
    return f


def errors(processor, x, grad, device, dtype, cases, two_sided: bool) -> dict:
    """Per row: max |difference| / max |reference| of f (where the attention reads it), dx and every weight's
    gradient, against the convolutions in fp32 on the same inputs."""
    future = None if two_sided else decoder_mask(x.shape[-1], device)

    def outputs(fn, proc, x_in, dt):
        proc = copy.deepcopy(proc).to(torch.float32)
        x_in = x_in.detach().to(dt).requires_grad_()
        f = run(fn, proc, x_in, grad.to(dt), device, dt, True).detach().float()
        if future is not None:
            f = f.masked_fill(future, 0.0)
        return [f, x_in.grad.float(), *(p.grad.float() for p in proc.parameters())]

    reference = outputs(padded_feature_map, processor, x, torch.float32)
    out = {}
    for case in cases:
        result = outputs(function(case, two_sided), processor, x, dtype)
        out[case] = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip(result, reference))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", nargs="+", default=["32x512", "8x2048"], help="BATCHxT: x is [batch, 2H, T, T]")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--dape-width", type=int, default=32)
    parser.add_argument("--kernel-size", type=int, default=3)
    parser.add_argument("--tiles", nargs="+", default=[FeatureTiles().spec(), "4.32.8", "2.64.8", "2.32.4"],
                        metavar="ROWS.KEYS.WARPS", help="a Triton row per tile setting")
    parser.add_argument("--two-sided", action="store_true",
                        help="the encoder's map (every pixel needed; default: a causal decoder's)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for name in ("warmup", "rounds", "heads", "dape_width", "kernel_size"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            parser.error(f"--{name.replace('_', '-')}: {getattr(args, name)} is not allowed; allowed values: a whole "
                         f"number ≥ {0 if name == 'warmup' else 1}")
    cases = ["conv"] + [f"triton-{spec}" for spec in args.tiles]
    try:
        for case in cases[1:]:
            function(case)
    except ConfigError as err:
        parser.error(f"--tiles: {err}")
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    info = machine_info(args.device)
    rows = []
    for shape in args.shapes:
        batch, n = (int(v) for v in shape.split("x"))
        torch.manual_seed(0)
        processor = build_processor(args.heads, AttentionSettings(processor="dape_v2", kernel_size=args.kernel_size,
                                                                  dape_width=args.dape_width),
                                    bias_channels=True).to(device)
        channels = 2 * args.heads
        x = torch.randn(batch, n, n, channels, device=device, dtype=dtype).permute(0, 3, 1, 2).requires_grad_()
        grad = torch.randn(batch, n, n, args.heads, device=device, dtype=dtype).permute(0, 3, 1, 2)
        if not args.two_sided:  # the causal mask drops the scores right of the diagonal: no gradient there
            grad = grad.masked_fill(decoder_mask(n, device), 0.0)
        pixels = needed_pixels(batch, n, args.two_sided)
        floor = floor_bytes(pixels, channels, args.dape_width, args.heads, torch.finfo(dtype).bits // 8)
        flop = floor_flop(pixels, channels, args.dape_width, args.heads, args.kernel_size)
        error = errors(processor, x, grad, device, dtype, cases, args.two_sided)
        for train in (True, False):
            times = {case: [] for case in cases}
            for round_ in range(args.warmup + args.rounds):
                for case in cases:
                    x.grad = None
                    processor.zero_grad()
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    start = time.perf_counter()
                    run(function(case, args.two_sided), processor, x, grad, device, dtype, train)
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    if round_ >= args.warmup:
                        times[case].append(1000 * (time.perf_counter() - start))
            conv = statistics.median(times["conv"])
            moved = floor["forward_gb"] + (floor["backward_gb"] if train else 0.0)
            work = flop["forward_gflop"] + (flop["backward_gflop"] if train else 0.0)
            for case in cases:
                ms = statistics.median(times[case])
                rows.append({**info, "batch": batch, "train_len": n, "heads": args.heads, "dape_width": args.dape_width,
                             "kernel_size": args.kernel_size, "dtype": str(dtype).removeprefix("torch."),
                             "map": "two-sided" if args.two_sided else "causal",
                             "mode": "train" if train else "forward", "row": case, "ms": ms, "x_conv": ms / conv,
                             "floor_gb": moved, "gb_per_s": moved / (ms / 1000), "floor_gflop": work,
                             "tflop_per_s": work / ms, "error": error[case],
                             "rounds": len(times[case])})
                print(f"B{batch:<3} T{n:<5} {rows[-1]['mode']:<8} {case:<18} {ms:9.3f} ms  ×conv {ms / conv:5.2f}  "
                      f"{rows[-1]['gb_per_s']:7.1f} GB/s  {rows[-1]['tflop_per_s']:6.1f} TFLOP/s of the floors  "
                      f"error {error[case]:.2e}", flush=True)
            write_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
