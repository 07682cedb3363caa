"""Host cost of one operator call: what a training step of a small model pays per call whatever its FLOPs.

The GPU-hour estimate's dispatch bound (:mod:`dape_core.config.dispatch`) is operator calls per step
(top-level aten calls, ``benchmarks/op_counts.py --training-step``) × the host time of one such call. This script
measures that time on this machine's CPU, one thread, each case a loop timed ``--repeats`` times (interleaved, after
a warm-up), the median per call kept with its quartiles:

* ``tiny_step`` — the figure the estimate reads: a whole ``dape train`` step (forward with the loss, backward, the
  loss read back, clip and AdamW with ``foreach``, ``zero_grad``) of the tiny preset (d 64, 2 layers, Kerple) at
  T 4, batch 1 — tensors so small that the kernels' arithmetic is negligible (T 16 × batch 2 or d 128 take the
  same time per call) — divided by its top-level calls as ``torch.profiler`` counts them. What is left is what each
  counted call costs the host: Python and the module around it, the dispatcher, its nested aten calls, the
  autograd engine.
* single operators from Python on 4 × 4 tensors (``add``, ``mul``, ``matmul``, ``softmax``, a view ``transpose``,
  an in-place ``add_``) and ``ops_mix`` (the six in turn): the floor of one bare call. The printed ratio
  ``tiny_step`` / ``ops_mix`` is how much more a counted call of a real step costs than a bare operator.

The CSV has the machine columns of ``benchmarks/harness.py`` (cpu, cores, torch, python) so a reader knows which
host the figure describes; on a GPU node the same call also pays a kernel launch, so the figure there is a lower
bound until ``benchmarks/calibrate_gpu.py`` measures the GPU's steps.

    python benchmarks/dispatch_cost.py              # → dape_core/config/measured/dispatch_cost.csv (about a minute)
    python benchmarks/dispatch_cost.py --calls 200 --repeats 5 --out /tmp/dispatch_cost.csv   # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import machine_info, write_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "dape_core" / "config" / "measured" / "dispatch_cost.csv"
ESTIMATE_CASE = "tiny_step"  # the row dape_core.config.dispatch reads


def operator_cases() -> dict:
    """Name → one call on tiny tensors (the kernels' work is negligible: what is left is the host's cost)."""
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    c = torch.randn(4, 4)
    single = {"add": lambda: torch.add(a, b), "mul": lambda: torch.mul(a, b), "matmul": lambda: torch.matmul(a, b),
              "softmax": lambda: torch.softmax(a, dim=-1), "transpose": lambda: a.transpose(0, 1),
              "add_": lambda: c.add_(b, alpha=0.0)}
    ops = list(single.values())

    def mix():
        for op in ops:
            op()

    return {**{name: (op, 1) for name, op in single.items()}, "ops_mix": (mix, len(ops))}


def tiny_step():
    """A whole training step of the tiny preset (op_counts.training_step_counts' step) and its top-level calls."""
    from benchmarks.op_counts import top_level_calls
    from dape_core.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(size="tiny", vocab_size=64, train_len=4, attention_impl="materialized"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randint(0, 64, (1, 4))

    def step():
        loss = model(x, x)[1]
        loss.backward()
        float(loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    calls, _ = top_level_calls(step)
    return step, calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop")
    parser.add_argument("--repeats", type=int, default=41, help="timed loops per case (median kept)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cases = operator_cases()
    step, step_calls = tiny_step()
    step_loops = max(1, args.calls // step_calls * 4)
    cases["tiny_step"] = (step, step_calls)
    per_call: dict[str, list[float]] = {name: [] for name in cases}
    for name, (fn, n) in cases.items():  # warm-up
        for _ in range(10):
            fn()
    for _ in range(args.repeats):  # interleaved: a burst of load spreads over every case
        for name, (fn, n) in cases.items():
            loops = step_loops if name == "tiny_step" else max(1, args.calls // n)
            start = time.perf_counter()
            for _ in range(loops):
                fn()
            per_call[name].append((time.perf_counter() - start) / (loops * n) * 1e6)
    info = machine_info()
    rows = []
    for name, (fn, n) in cases.items():
        q = statistics.quantiles(per_call[name], n=4) if len(per_call[name]) > 1 else [per_call[name][0]] * 3
        rows.append({**info, "threads": 1, "case": name, "calls_per_loop": n, "repeats": args.repeats,
                     "median_us_per_call": statistics.median(per_call[name]), "q25_us": q[0], "q75_us": q[2]})
        print(f"{name:10s} {rows[-1]['median_us_per_call']:8.2f} µs per call (quartiles {q[0]:.2f}–{q[2]:.2f})")
    write_rows(rows, args.out)
    by = {row["case"]: row["median_us_per_call"] for row in rows}
    print(f"per-call host cost for the estimate ({ESTIMATE_CASE}): {by[ESTIMATE_CASE]:.2f} µs per top-level call of a "
          f"tiny training step ({step_calls} calls) on {info['cpu']} ({info['cores']} cores, torch {info['torch']}); "
          f"a bare tiny-tensor operator call (ops_mix) costs {by['ops_mix']:.2f} µs, so a counted call of a real step "
          f"costs {by[ESTIMATE_CASE] / by['ops_mix']:.2f}× a bare one (the module, nested aten calls and autograd "
          f"around it) → {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
