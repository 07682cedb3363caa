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

``--training-step`` counts what the GPU-hour estimate's dispatch bound needs (:mod:`dape_core.config.dispatch`):
the top-level operator calls of a whole ``dape train`` step on the path a GPU takes (``attention_impl`` auto →
``materialized``), split into its two parts — one micro-batch (the batch's slicing and transfer, forward with the
loss, the scaled backward, the loss read back) and the optimiser step (``clip_grad_norm_`` and AdamW with
``foreach=True``, the CUDA default, then the parameter constraints and ``zero_grad``) — for every distinct method ×
precision of the LM runs of the given configurations, at n_layer 1, 2 and 3 of a small shape (counts do not depend
on the width, the batch or the length while one query chunk holds all rows). The estimate fits calls = constant +
per_layer × n_layer on n_layer 1 and 2 and checks the fit on n_layer 3 (a held-out depth).

    python benchmarks/op_counts.py --training-step --configs config.yaml configs/gpu.yaml configs/paper.yaml
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import machine_info, write_rows  # noqa: E402

from dape_core.methods import parse_method  # noqa: E402
from dape_core.model import GPT, GPTConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "op_counts.csv"
STEP_OUT = ROOT / "dape_core" / "config" / "measured" / "step_op_counts.csv"  # --training-step (dape_core.config.dispatch)
#: the settings of a run that its step's operator calls depend on (dape_core.config.dispatch.STEP_KEY)
STEP_METHOD = ("encoding", "processor", "kernel_size", "tril", "padding", "encoding_shared", "precision")
STEP_DEPTHS = (1, 2, 3)  # 1 and 2 fit constant + per_layer × n_layer; 3 checks the fit
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


def top_level_calls(fn) -> tuple[int, int]:
    """(top-level aten calls, all aten events) of ``fn()`` under ``torch.profiler``."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    top = [e for e in events if not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))]
    return len(top), len(events)


def training_step_counts(settings: dict, *, n_layer: int, size: str = "tiny", length: int = 16, batch: int = 2,
                         vocab_size: int = 64, grad_accum: int = 1) -> dict:
    """Top-level aten calls of one ``dape train`` step of a run's method (``settings``: :data:`STEP_METHOD` and
    ``attention_impl``/``recompute_scores``; auto is counted as ``materialized``, the GPU's path), as
    ``dape_core.train.fit`` makes them: per micro-batch and for the optimiser step (after one warm-up step)."""
    from dape_core.positions import training_positions
    from dape_core.train import constrain_parameters, get_batch

    impl = settings.get("attention_impl", "auto")
    model_settings = {k: settings[k] for k in STEP_METHOD if k != "precision"}
    cfg = GPTConfig(size=size, vocab_size=vocab_size, train_len=length, n_layer=n_layer,
                    attention_impl="materialized" if impl == "auto" else impl,
                    recompute_scores=settings.get("recompute_scores"), **model_settings)
    torch.manual_seed(0)
    model = GPT(cfg)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-3, betas=(0.9, 0.95), foreach=True)  # foreach: the CUDA default
    tokens = torch.randint(0, vocab_size, (4 * length * batch,)).numpy()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=settings["precision"] != "fp32")

    def micro_batch(micro=0):
        x, y = get_batch(tokens, [length * i for i in range(batch)], length)
        x, y = x[0:batch], y[0:batch]
        positions = training_positions(cfg, 0, 0, micro, length)
        with autocast:
            loss = model(x.to("cpu"), y.to("cpu"), positions=positions)[1]
        (loss * 1.0 / grad_accum).backward()
        float(loss.detach())

    def optimizer_step():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        constrain_parameters(model)
        optimizer.zero_grad(set_to_none=True)

    micro_batch()
    optimizer_step()  # warm-up: geometry caches filled, optimiser state created
    micro_calls, micro_events = top_level_calls(micro_batch)
    optimizer_calls, optimizer_events = top_level_calls(optimizer_step)
    return {"micro_batch_calls": micro_calls, "optimizer_calls": optimizer_calls,
            "micro_batch_events": micro_events, "optimizer_events": optimizer_events}


def config_methods(paths: list[str]) -> list[dict]:
    """The distinct :data:`STEP_METHOD` × (attention_impl, recompute_scores) of the LM runs of configurations."""
    from dape_core.config import build_plan, load_yaml

    out: dict[tuple, dict] = {}
    for path in paths:
        plan = build_plan(load_yaml(path))
        for run in plan.lm_runs.values():
            s = run["settings"]
            key = {k: s[k] for k in (*STEP_METHOD, "attention_impl", "recompute_scores")}
            out.setdefault(tuple(map(str, key.values())), key)
    return list(out.values())


def step_main(args) -> int:
    """``--training-step``: one row per method × depth (module docstring) to ``args.out`` (default STEP_OUT)."""
    out = args.out if args.out != DEFAULT_OUT else STEP_OUT
    info = machine_info()
    rows = []
    for settings in config_methods(args.configs):
        if settings["attention_impl"] not in ("auto", "materialized"):
            continue  # a GPU runs auto as materialized; the CPU paths are not a GPU's
        for n_layer in STEP_DEPTHS:
            counts = training_step_counts(settings, n_layer=n_layer, size=args.size if args.size != "125M" else "tiny",
                                          length=args.length if args.length != 512 else 16)
            row = {**info, **{k: settings[k] for k in STEP_METHOD}, "attention_impl": "materialized",
                   "recompute_scores": ("default" if settings["recompute_scores"] is None
                                        else settings["recompute_scores"]),
                   "n_layer": n_layer, "threads": args.threads, **counts}
            rows.append(row)
            write_rows(rows, out)
        method = " ".join(f"{k}={settings[k]}" for k in STEP_METHOD)
        print(f"{method}: micro-batch {rows[-3]['micro_batch_calls']}/{rows[-2]['micro_batch_calls']}/"
              f"{rows[-1]['micro_batch_calls']}, optimiser {rows[-3]['optimizer_calls']}/{rows[-2]['optimizer_calls']}/"
              f"{rows[-1]['optimizer_calls']} top-level calls at n_layer 1/2/3", flush=True)
    print(f"{len(rows)} rows → {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="125M")
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batches", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--vocab-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--training-step", action="store_true",
                        help="count whole training steps of the configurations' methods → "
                             f"{STEP_OUT.relative_to(ROOT)}")
    parser.add_argument("--configs", nargs="+", default=["config.yaml", "configs/gpu.yaml", "configs/paper.yaml"],
                        help="with --training-step: the configurations whose methods are counted")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.training_step:
        return step_main(args)
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
