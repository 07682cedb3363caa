"""The fused kernel compiled for the device against the reference (the plain path in float64 on the same device):
output and every gradient (q, k, v, the encoding's parameters, both convolutions' weights and biases), fresh random
inputs per case, each case run twice on the same inputs (a result that moves between runs is a race; the kernel's
partial sums are deterministic, so the two runs must agree to the bit). Relative error ‖fused − ref‖ / ‖ref‖ per
tensor (a layer's bias against its weight's gradient norm, :func:`scale`); the materialized path in the same
precision is measured beside it. A case passes when every tensor's error is under the bound of its precision (fp32:
1e-4; bf16 inputs under autocast: 2e-2) or within 2× the materialized path's error on that tensor, and nothing is
NaN. On a GPU the kernel takes bf16 (and fp16) only; fp32 runs in the interpreter
(whose bf16 loads are wrong under Triton 3.9: check bf16 on a GPU only).

    python benchmarks/fused_check.py                          # on a GPU: the cases below, compiled
    TRITON_INTERPRET=1 python benchmarks/fused_check.py --device cpu --length 40 --heads 4 --head-dim 8 \\
        --cases kerple:v2-causal --out /tmp/fused_check.csv      # anywhere, in the interpreter
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import machine_info, write_rows  # noqa: E402

from dape_core.attention import attend  # noqa: E402
from dape_core.dape import build_processor  # noqa: E402
from dape_core.encodings import build_encoding  # noqa: E402
from dape_core.settings import AttentionSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "fused_check.csv"
PROCESSORS = {
    "v1": dict(processor="dape_v1", kernel_size=1),
    "v2-causal": dict(processor="dape_v2", kernel_size=3, padding="causal"),
    "v2-same-no-tril": dict(processor="dape_v2", kernel_size=3, padding="same", tril=False),
    "v2-k5": dict(processor="dape_v2", kernel_size=5, padding="same"),
}
DEFAULT_CASES = ("kerple:v2-causal:bf16", "nope:v1:bf16", "fire:v2-same-no-tril:bf16", "alibi:v2-k5:bf16")
BOUNDS = {"fp32": 1e-4, "bf16": 2e-2}
BASELINE_FACTOR = 2  # an error is allowed up to this many times the materialized path's on the same inputs


def run(encoding, processor, qkv, weight, positions, impl, dtype, cast, device):
    """Output and every gradient of one path, on fresh copies of the modules: q, k, v in ``dtype``; with ``cast``
    (bf16 autocast, as a model's bf16 projections deliver them) the modules stay in fp32."""
    module_dtype = torch.float32 if cast else dtype
    encoding, processor = copy.deepcopy(encoding).to(module_dtype), copy.deepcopy(processor).to(module_dtype)
    params = {**dict(encoding.named_parameters(prefix="encoding")),
              **dict(processor.named_parameters(prefix="processor"))}
    qkv = [t.to(dtype, copy=True).requires_grad_() for t in qkv]
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cast):
        out = attend(*qkv, encoding=encoding, processor=processor, positions=positions, causal=True,
                     attention_impl=impl)
    (out.double() * weight).sum().backward()
    result = {"output": out.detach(), **{f"grad {n}": t.grad for n, t in zip("qkv", qkv)}}
    result.update({f"grad {n}": p.grad for n, p in params.items() if p.grad is not None})
    return {name: t.double() for name, t in result.items()}


def scale(reference: dict, name: str) -> float:
    """‖ref‖, or for a layer's bias the larger of it and its weight's gradient norm: Conv2's bias gets a gradient
    that is zero in exact arithmetic (softmax is blind to a per-head constant), so rounding alone is its size."""
    norm = reference[name].norm()
    if name.endswith(".bias") and name.removesuffix(".bias") + ".weight" in reference:
        norm = torch.maximum(norm, reference[name.removesuffix(".bias") + ".weight"].norm())
    return float(norm.clamp_min(1e-300))


def check(case: str, args, device) -> dict:
    encoding_name, processor_name, *precision = case.split(":")
    precision = precision[0] if precision else "fp32"
    torch.manual_seed(hash(case) % 2**31)
    encoding = build_encoding(encoding_name, args.heads, args.head_dim, causal=True, train_len=args.length // 2)
    with torch.no_grad():  # away from the initial values, so that every parameter's gradient is exercised
        for p in encoding.parameters():
            p.add_(0.1 * torch.randn_like(p))
    processor = build_processor(args.heads, AttentionSettings(dape_width=args.dape_width,
                                                              **PROCESSORS[processor_name]),
                                bias_channels=encoding.has_bias)
    encoding, processor = encoding.to(device), processor.to(device)
    shape = (args.batch, args.heads, args.length, args.head_dim)
    qkv = [torch.randn(shape, device=device) for _ in range(3)]
    weight = torch.randn(shape, device=device, dtype=torch.float64)
    positions = torch.arange(args.length, device=device)
    reference = run(encoding, processor, qkv, weight, positions, "plain", torch.float64, False, device)
    dtype, cast = (torch.float32, False) if precision == "fp32" else (torch.bfloat16, True)
    first = run(encoding, processor, qkv, weight, positions, "fused", dtype, cast, device)
    second = run(encoding, processor, qkv, weight, positions, "fused", dtype, cast, device)
    baseline = run(encoding, processor, qkv, weight, positions, "materialized", dtype, cast, device)
    missing = sorted(set(reference) ^ set(first))
    errors = {name: float((first[name] - ref).norm() / scale(reference, name))
              for name, ref in reference.items() if name in first}
    baseline_errors = {name: float((baseline[name] - ref).norm() / scale(reference, name))
                       for name, ref in reference.items() if name in baseline}
    # a tensor passes under its precision's bound, or within 2× the materialized path's error in the same precision
    allowed = {name: max(BOUNDS[precision], BASELINE_FACTOR * baseline_errors.get(name, 0.0)) for name in errors}
    worst = max(errors, key=lambda name: errors[name] / allowed[name])
    repeatable = all(torch.equal(first[name], second[name]) for name in first)
    nan = any(torch.isnan(t).any() for t in first.values())
    ok = not missing and not nan and repeatable and errors[worst] < allowed[worst]
    return dict(case=case, precision=precision, batch=args.batch, length=args.length, heads=args.heads,
                head_dim=args.head_dim, dape_width=args.dape_width, tensors=len(errors), worst_tensor=worst,
                worst_error=errors[worst], materialized_error=baseline_errors.get(worst), allowed=allowed[worst],
                error_output=errors["output"], materialized_error_output=baseline_errors["output"],
                max_error=max(errors.values()), materialized_max_error=max(baseline_errors.values()),
                repeatable=repeatable, nan=nan, missing=" ".join(missing), bound=BOUNDS[precision], ok=ok)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), help="ENCODING:PROCESSOR[:bf16]")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=300, help="not a multiple of any tile")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dape-width", type=int, default=32)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    info = machine_info(args.device)
    rows = []
    for case in args.cases:
        row = check(case, args, device)
        rows.append({**info, **row})
        print(f"{case:<28} {'ok' if row['ok'] else 'FAILED':<7} worst {row['worst_tensor']:<34} "
              f"{row['worst_error']:.2e} (materialized {row['materialized_error']:.2e}, allowed {row['allowed']:.1e})"
              f"  output {row['error_output']:.2e} (materialized {row['materialized_error_output']:.2e})  "
              f"repeatable {row['repeatable']}{'  missing ' + row['missing'] if row['missing'] else ''}", flush=True)
        write_rows(rows, args.out)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
