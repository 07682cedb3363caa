"""Operator calls of one attention layer's forward and backward pass, per path: what an accelerator pays in launches.

Counted with ``torch.profiler`` on the CPU (counts, not times: the machine's load does not change them). One layer of
the given size's shape (default the paper's 125M: d 768, 12 heads) with a small vocabulary, one forward and backward
pass after a warm-up pass (which fills the geometry caches), for each method × ``attention_impl`` ×
``recompute_scores`` × batch. Columns: ``aten_events`` (every aten:: event), ``top_level`` (those called by the model's
code and the autograd engine, not inside another operator: what dispatch costs), and the calls of the operators the
accelerator path was changed for: ``sdpa`` (attention kernels), ``constant_pad_nd`` (padded copies of the feature
map), ``copy_``, ``convolution``.

    python benchmarks/op_counts.py                                  # the README's table (a few minutes on 2 cores)
    python benchmarks/op_counts.py --size tiny --length 32 --batches 2 --out /tmp/op_counts.csv   # a smoke run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine_info, write_rows  # noqa: E402

from dape_core.methods import parse_method  # noqa: E402
from dape_core.model import GPT, GPTConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "op_counts.csv"
#: (method, attention_impl, recompute_scores): the biased baseline on both CPU and accelerator paths, DAPE1x3-Kerple
#: on the fast path, the paper's plain form and the accelerator path with and without recomputation
CASES = (("Kerple", "fast", None), ("Kerple", "materialized", None),
         ("DAPE1x3-Kerple", "fast", None), ("DAPE1x3-Kerple", "plain", None),
         ("DAPE1x3-Kerple", "materialized", False), ("DAPE1x3-Kerple", "materialized", True))
SDPA_CALL = "aten::scaled_dot_product_attention"


def count(model: GPT, tokens: torch.Tensor) -> dict:
    """Operator calls of one forward and backward pass of ``model`` on ``tokens`` (after a warm-up pass)."""

    def step():
        model.zero_grad(set_to_none=True)
        model(tokens)[0].float().sum().backward()

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    top = [e for e in events if not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))]
    return {"aten_events": len(events), "top_level": len(top),
            "sdpa": sum(e.name == SDPA_CALL for e in events),
            "constant_pad_nd": sum(e.name == "aten::constant_pad_nd" for e in events),
            "copy_": sum(e.name == "aten::copy_" for e in events),
            "convolution": sum(e.name == "aten::convolution" for e in events)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="125M")
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batches", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--vocab-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    info = machine_info()
    rows = []
    for method, impl, recompute in CASES:
        torch.manual_seed(0)
        model = GPT(GPTConfig(size=args.size, vocab_size=args.vocab_size, train_len=args.length, n_layer=1,
                              attention_impl=impl, recompute_scores=recompute, **parse_method(method)))
        for batch in args.batches:
            tokens = torch.randint(0, args.vocab_size, (batch, args.length))
            row = {**info, "size": args.size, "n_layer": 1, "method": method, "attention_impl": impl,
                   "recompute_scores": "default" if recompute is None else recompute, "batch": batch,
                   "length": args.length, "threads": args.threads, **count(model, tokens)}
            rows.append(row)
            write_rows(rows, args.out)
            print(f"{method:15s} {impl:12s} recompute={row['recompute_scores']!s:7s} batch {batch}: "
                  f"{row['aten_events']} aten ({row['top_level']} top-level), sdpa {row['sdpa']}, "
                  f"pad {row['constant_pad_nd']}, copy_ {row['copy_']}, conv {row['convolution']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
