"""Compiles the fused kernel's three Triton kernels (and the Triton feature map's three, ``--kernels feature``)
ahead of time for a CUDA target without a GPU (Triton's own ptxas), and prints each one's registers, spills, shared
memory, its tensor-core instructions and the widths of its global memory accesses in its SASS (pointers aligned
as a launch specialises them): what a change to the tile sizes costs in resources, read at no device time.

    python benchmarks/fused_compile.py                      # sm_90, DAPE1x3-Kerple, BM 16, W 64, 4 warps
    python benchmarks/fused_compile.py --block-rows 32 --key-tile 64 --dtype bf16 --warps 8
    python benchmarks/fused_compile.py --kernels feature --feature-tiles 2.64.4 4.64.8

Needs only Triton (no torch, no GPU): the kernel module is imported by path.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget

ROOT = Path(__file__).resolve().parents[1]
KERNEL_FILE = ROOT / "dape_core" / "implementations" / "fused_kernel.py"
FEATURE_KERNEL_FILE = ROOT / "dape_core" / "implementations" / "feature_map_kernel.py"
FP32_POINTERS = {"LSE", "DELTA", "W1A", "W1B", "W1", "B1", "W2", "B2", "SCR", "PART", "DBIAS", "bias_ptr"}
TENSOR_POINTERS = {"Q", "Kp", "V", "O", "DO", "DQ", "DK", "DV", "X", "F", "DF", "DPRE", "DX"}
FLOATS = {"scale"}


def kernel_module(path: Path = KERNEL_FILE):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def signature(fn, dtype: str, constants: dict) -> tuple[dict, dict]:
    """(signature, constexprs) of ``fn`` for Triton's ASTSource: tensors in ``dtype``, fp32 scratch and weights;
    ``constants`` fix the kernel's own ``tl.constexpr`` parameters (an integer the kernel takes at run time stays
    one, as a launch passes it)."""
    sig, const = {}, {}
    for param in fn.params:
        name = param.name
        if name in constants and param.is_constexpr:
            sig[name] = "constexpr"
            const[name] = constants[name]
        elif name in TENSOR_POINTERS:
            sig[name] = f"*{dtype}"
        elif name in FP32_POINTERS:
            sig[name] = "*fp32"
        elif name in FLOATS:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig, const


def launch_attrs(fn, sig: dict) -> dict:
    """Triton's specialisation of a launch that ASTSource does not make by itself: every pointer 16-byte aligned,
    as a fresh torch allocation is (what lets the compiler use vector loads)."""
    return {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names) if sig[name].startswith("*")}


def sass_summary(cubin: bytes, cuobjdump: Path) -> dict:
    """The cubin's resources (registers, stack frame, shared memory) and counts of tensor-core (HMMA/HGMMA),
    local-memory (LDL/STL), shared-memory and global-memory instructions in its SASS, and of the global ones those
    moving 128 bits (vector loads and stores) and 16 bits (one bf16 element) per thread."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", f.name], capture_output=True,
                               text=True).stdout
        sass = subprocess.run([str(cuobjdump), "--dump-sass", f.name], capture_output=True, text=True).stdout
    count = lambda pattern: len(re.findall(pattern, sass))  # noqa: E731
    field = lambda key: (re.findall(key + r":(\d+)", usage) or ["?"])[0]  # noqa: E731
    return dict(registers=field("REG"), stack=field("STACK"), shared=field("SHARED"), local=field("LOCAL"),
                instructions=count(r"/\*[0-9a-f]{4,}\*/"), hmma=count(r"\bHMMA"), hgmma=count(r"\bHGMMA"),
                ldl_stl=count(r"\b(LDL|STL)"), lds_sts=count(r"\b(LDS|STS)"), ldg_stg=count(r"\b(LDG|STG)"),
                ldg_stg_128=count(r"\b(LDG|STG)\.E\.128\b"), ldg_stg_16=count(r"\b(LDG|STG)\.E\.[US]?16\b"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability × 10 (default 90, Hopper)")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    parser.add_argument("--heads", type=int, default=16, help="HP, heads padded (12 → 16)")
    parser.add_argument("--width", type=int, default=32, help="DP, D_DAPE padded")
    parser.add_argument("--head-dim", type=int, default=64, help="DHP, head size padded")
    parser.add_argument("--kernel-size", type=int, default=3)
    parser.add_argument("--block-rows", type=int, default=16)
    parser.add_argument("--key-tile", type=int, default=64)
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--stages", type=int, default=None)
    parser.add_argument("--maxnreg", type=int, default=None, help="Triton's maxnreg (ptxas's register ceiling)")
    parser.add_argument("--bias", type=int, default=1, help="0 none, 1 table, 2 tensor")
    parser.add_argument("--kernels", nargs="+", default=("forward", "backward_kv", "backward_q"),
                        choices=("forward", "backward_kv", "backward_q", "backward_dq", "backward_weights", "feature"),
                        help="the fused kernel's; feature: the Triton feature map's three at each --feature-tiles")
    parser.add_argument("--channels", type=int, default=32, help="the feature map's CP, input channels padded (2H)")
    parser.add_argument("--map-channels", type=int, default=24,
                        help="the feature map's C, its input channels (the scores and the bias: 2H)")
    parser.add_argument("--map-heads", type=int, default=12, help="the feature map's H, its output channels")
    parser.add_argument("--feature-tiles", nargs="+", default=["8.16.8"], metavar="ROWS.KEYS.WARPS",
                        help="the feature map's tiles (rows × keys per tile, warps)")
    parser.add_argument("--two-sided", action="store_true",
                        help="the feature map without a diagonal (the encoder's; default: the causal decoder's)")
    args = parser.parse_args(argv)
    for real, padded in (("map_channels", "channels"), ("map_heads", "heads")):
        if getattr(args, real) > getattr(args, padded):
            parser.error(f"--{real.replace('_', '-')}: {getattr(args, real)} is not allowed; allowed values: at most "
                         f"--{padded} ({getattr(args, padded)}), the count padded")

    kt = kernel_module()
    tl = kt.tl
    dot = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32}[args.dtype]
    precision = "ieee" if args.dtype == "fp32" else "tf32"
    k = args.kernel_size
    wide = max(args.key_tile, 1 << (4 * (k - 1) + 8 - 1).bit_length())
    common = dict(HP=args.heads, DP=args.width, DHP=args.head_dim, BM=args.block_rows, W=wide, K=k, LEFT=(k - 1) // 2,
                  TRIL=True, CAUSAL=True, BIAS=args.bias, DOT=dot, PRECISION=precision)
    extent = 1 << (args.block_rows + wide - 1 - 1).bit_length()
    kernels = {"forward": (kt.dape_forward_kernel, {}),
               "backward_kv": (kt.dape_backward_kv_kernel, {}),
               "backward_q": (kt.dape_backward_q_kernel, dict(E=extent, BIAS_GRAD=args.bias != 0, Q_GRAD=True,
                                                              WEIGHT_GRADS=True)),
               "backward_dq": (kt.dape_backward_q_kernel, dict(E=extent, BIAS_GRAD=args.bias != 0, Q_GRAD=True,
                                                               WEIGHT_GRADS=False)),
               "backward_weights": (kt.dape_backward_q_kernel, dict(E=extent, BIAS_GRAD=False, Q_GRAD=False,
                                                                    WEIGHT_GRADS=True))}
    options = dict(num_warps=args.warps)
    if args.stages is not None:
        options["num_stages"] = args.stages
    if args.maxnreg is not None:
        options["maxnreg"] = args.maxnreg
    jobs = [(name, *kernels[name], common, options) for name in args.kernels if name != "feature"]
    if jobs:
        print(f"triton {triton.__version__}, sm_{args.arch}, {args.dtype}, HP {args.heads} DP {args.width} "
              f"DHP {args.head_dim} k {k} BM {args.block_rows} W {wide} warps {args.warps}")
    if "feature" in args.kernels:
        fk = kernel_module(FEATURE_KERNEL_FILE)
        for spec in args.feature_tiles:
            rows, keys, warps = (int(v) for v in spec.split("."))
            constants = dict(RB=rows, BJ=keys, CP=args.channels, DP=args.width, HP=args.heads, K=k,
                             LEFT=(k - 1) // 2, CAUSAL=not args.two_sided, DOT=dot, PRECISION=precision,
                             C=args.map_channels, H=args.map_heads, D=args.width)
            feature_options = {**options, "num_warps": warps}
            jobs += [(f"feature {name} {spec}", fn, {}, constants, feature_options) for name, fn in (
                ("forward", fk.feature_map_forward_kernel), ("backward_hidden", fk.feature_map_backward_hidden_kernel),
                ("backward_input", fk.feature_map_backward_input_kernel))]
        print(f"triton {triton.__version__}, sm_{args.arch}, {args.dtype}, feature map CP {args.channels} "
              f"DP {args.width} HP {args.heads} k {k} {'two-sided' if args.two_sided else 'causal'}")
    target = GPUTarget("cuda", args.arch, 32)
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    failed = 0
    for name, fn, extra, constants, opts in jobs:
        sig, const = signature(fn, args.dtype, {**constants, **extra})
        try:
            source = triton.compiler.ASTSource(fn, sig, const, launch_attrs(fn, sig))
            compiled = triton.compile(source, target=target, options=opts)
        except Exception as err:  # report every kernel, then fail
            failed += 1
            while err.__cause__ is not None:  # the innermost error names the line that failed
                err = err.__cause__
            print(f"{name}: FAILED to compile: {type(err).__name__}: {str(err)[-3000:]}")
            continue
        summary = sass_summary(compiled.asm["cubin"], cuobjdump)
        summary["shared"] = compiled.metadata.shared  # static + dynamic, what the launch asks for
        print(f"{name}: " + ", ".join(f"{key} {value}" for key, value in summary.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
