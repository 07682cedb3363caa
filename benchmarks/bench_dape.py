"""Kerple, DAPE1×3-Kerple and DAPE-Kerple on the plain and the fast path, side by side (paper Table 7, §4.2).

Each group (a shape, a length, a mode) is timed in one fresh process that builds every method's model from the
same seed and runs them round-robin, so that all methods see the same machine load; a method's time is the
median over rounds and its ratio the median of its per-round ratios to the fastest Kerple variant of the group
(Kerple on its own fastest path: SDPA with a float mask, whole or in query chunks). Peak memory is measured
per method in another fresh process (the process-wide high-water mark of the resident set, and its rise above
the resident set right after building the model).

``--compile`` adds Kerple and DAPE1×3-Kerple's plain path under ``torch.compile`` (inductor): timed after
their compilation (``warmup_s`` holds the first calls, compilation included), against the same eager Kerple
reference, without a memory figure (compilation's own memory would swamp it); a variant that does not compile
here (no C++ compiler, an unsupported operation) is left out and the reason printed.

Modes: ``train`` — one optimiser step of the whole model (AdamW); ``layer`` — forward and backward of one
decoder layer alone (attention with its encoding and processor, MLP), the per-layer cost; ``eval`` — forward
without gradients, logits of the last 256 positions (as the evaluation stage scores them).

Each suite stands for a configuration and takes its model settings from it through ``dape_core.config``: the
vocabulary (``estimate.vocab_size``, or the dataset's ``vocab_size``: 320 for ``config.yaml``, GPT-2's 50257 for
``configs/paper.yaml``), the size preset unless the suite names one, ``dape_width``, ``tril``, ``padding``,
``encoding_shared``, ``tie_embeddings`` and ``dropout`` of its ``defaults.lm``. The suite sets what it measures:
mode, batch, length, depth (reduced for CPU) and the methods.

    python benchmarks/bench_dape.py --suite default 125m eval --out benchmarks/results/dape_paths.csv
    python benchmarks/bench_dape.py --suite default 125m --compile --out benchmarks/results/dape_paths_compile.csv
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

import torch

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import machine_info, rss_mb, run_worker, write_rows  # noqa: E402
from dape_core.model import GPT, GPTConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

KERPLE = dict(encoding="kerple", processor="none", kernel_size=1)
DAPE_V2 = dict(encoding="kerple", processor="dape_v2", kernel_size=3)
DAPE_V1 = dict(encoding="kerple", processor="dape_v1", kernel_size=1)


def group_methods(group: dict, compiled: bool = False) -> list[dict]:
    """The methods of ``group``: :func:`methods`, restricted to the group's ``methods`` labels when it names some."""
    out = methods(group["seq_len"], group["mode"], compiled)
    keep = group.get("methods")
    return out if keep is None else [m for m in out if m["label"] in keep or m["label"].removesuffix(" compiled") in keep]


def methods(n: int, mode: str, compiled: bool = False) -> list[dict]:
    """The methods of a group at length ``n``: Kerple whole and chunked, DAPE on the plain and fast paths, and with
    ``compiled`` Kerple and DAPE1×3's plain path under ``torch.compile``. The fast path is not offered compiled:
    it made the default preset slower (×1.29–2.20 against ×1.24–1.49 eager) and dynamo, tracing its Python loop over
    row blocks, had not finished compiling the 125M-shape layer after 36 minutes."""
    out = [dict(label="Kerple", **KERPLE)]  # the default: query chunks sized by memory at long lengths
    if n <= 2048:  # one chunk: the whole [H, T, T] mask (gigabytes at 8192)
        out.append(dict(label="Kerple (whole mask)", query_chunk_size=n, **KERPLE))
    for chunk in (64, 128, 256):
        if chunk < n:
            out.append(dict(label=f"Kerple (query chunks of {chunk})", query_chunk_size=chunk, **KERPLE))
    plain_chunk = 256 if mode == "eval" and n > 512 else None
    if mode != "eval" or n <= 2048:
        out.append(dict(label="DAPE1x3-Kerple plain", attention_impl="plain", query_chunk_size=plain_chunk, **DAPE_V2))
    out.append(dict(label="DAPE1x3-Kerple fast", attention_impl="fast", **DAPE_V2))
    out.append(dict(label="DAPE1x3-Kerple fast bf16", attention_impl="fast", dape_dtype="bfloat16", **DAPE_V2))
    if mode != "eval" or n <= 2048:
        out.append(dict(label="DAPE-Kerple plain", attention_impl="plain", query_chunk_size=plain_chunk, **DAPE_V1))
    out.append(dict(label="DAPE-Kerple fast", attention_impl="fast", **DAPE_V1))
    if compiled:
        out += [dict(m, label=m["label"] + " compiled", torch_compile=True) for m in out
                if m["label"] in ("Kerple", "DAPE1x3-Kerple plain")]
    return out


SUITES = {
    # the default preset (2 layers, width 128, 4 heads), batch 16: the DAG's training runs (T 32; 64 and 128 in
    # equal_tokens) and one longer length
    "default": [dict(config="config.yaml", mode="train", batch=16, seq_len=n, repeats=7) for n in (32, 64, 128, 256)],
    # the 125M shape (width 768, 12 heads) at T = 512: one layer, and the model at reduced depth
    "125m": [
        dict(config="configs/paper.yaml", mode="layer", n_layer=1, batch=4, seq_len=512, repeats=5),
        # every method's model and AdamW state live in one process (round-robin): at GPT-2's vocabulary each holds
        # about 1.7 GB, so this group times the methods of the README's table only (all ten needed about 20 GB)
        dict(config="configs/paper.yaml", mode="train", n_layer=4, batch=4, seq_len=512, repeats=3,
             methods=("Kerple", "Kerple (whole mask)", "DAPE1x3-Kerple plain", "DAPE1x3-Kerple fast",
                      "DAPE-Kerple fast")),
    ],
    # long-context evaluation at batch 1 on the 125M shape, reduced depth
    "eval": [dict(config="configs/paper.yaml", mode="eval", n_layer=2, batch=1, seq_len=n, repeats=3)
             for n in (2048, 8192)],
    # a fast check of the script itself
    "quick": [dict(config="config.yaml", mode="train", size="tiny", batch=4, seq_len=64, repeats=3)],
}
# model settings a suite takes from the defaults.lm of the configuration it stands for
CONFIG_MODEL_SETTINGS = ("size", "dape_width", "tril", "padding", "encoding_shared", "tie_embeddings", "dropout")


def config_model_settings(config: str) -> dict:
    """The model settings of a configuration's default LM run: its vocabulary (as the GPU-hour estimate reads it)
    and :data:`CONFIG_MODEL_SETTINGS` (``config`` relative to the repository)."""
    from dape_core.config import build_plan, load_yaml
    from dape_core.config.estimate import run_vocab

    plan = build_plan(load_yaml(ROOT / config))
    lm = plan.config["defaults"]["lm"]
    return {"vocab_size": run_vocab(plan, lm), **{k: lm[k] for k in CONFIG_MODEL_SETTINGS}}


def _build(group: dict, method: dict):
    settings = {k: v for k, v in method.items() if k not in ("label", "torch_compile")}
    model = {k: group[k] for k in CONFIG_MODEL_SETTINGS if k in group}
    cfg = GPTConfig(vocab_size=group["vocab_size"], n_layer=group.get("n_layer"), train_len=group["seq_len"],
                    **model, **settings)
    torch.manual_seed(0)
    model = GPT(cfg)
    model.train(group["mode"] != "eval")
    return model


def _step(group: dict, model: GPT, data: dict, compiled: bool = False):
    """One measured unit of work: a training step, a layer's forward and backward, or an evaluation forward;
    ``compiled``: the model (the decoder stack in ``layer`` mode) runs under ``torch.compile`` (inductor)."""
    mode = group["mode"]
    target = model.stack if mode == "layer" else model
    forward = torch.compile(target) if compiled else target
    if mode == "train":
        optimizer = data.setdefault(id(model), torch.optim.AdamW(model.parameters(), lr=1e-4))

        def run():
            optimizer.zero_grad(set_to_none=True)
            _, loss = forward(data["tokens"], data["tokens"])
            loss.backward()
            optimizer.step()

    elif mode == "layer":

        def run():
            x = data["hidden"].detach().requires_grad_()
            model.zero_grad(set_to_none=True)
            dtype = torch.bfloat16 if model.cfg.dape_dtype == "bfloat16" else None
            y = forward(x, data["positions"], model.cfg.query_chunk_size, model.resolved_attention_impl(x.device), dtype)
            (y * data["weights"]).sum().backward()

    else:

        def run():
            with torch.no_grad():
                forward(data["tokens"], last=min(256, group["seq_len"]))

    return run


def _inputs(group: dict, d_model: int) -> dict:
    torch.manual_seed(1)
    b, n = group["batch"], group["seq_len"]
    return {
        "tokens": torch.randint(0, group["vocab_size"], (b, n)),
        "hidden": torch.randn(b, n, d_model),
        "weights": torch.randn(b, n, d_model),
        "positions": torch.arange(n),
    }


def time_group(group: dict) -> list[dict]:
    """All methods of a group in this process, round-robin; raw times per method. A compiled variant whose
    compilation fails (no C++ compiler, an unsupported operation) is left out with its reason on stderr."""
    torch.set_num_threads(group["threads"])
    ms = group_methods(group, group.get("compile", False))
    models = [_build(group, m) for m in ms]
    data = _inputs(group, models[0].cfg.d_model)
    runs = [_step(group, model, data, m.get("torch_compile", False)) for m, model in zip(ms, models)]
    kept = []
    for m, run in zip(ms, runs):  # warm-up: allocator, optimiser state, caches, compilation
        start = time.perf_counter()
        try:
            run()
        except Exception as error:  # noqa: BLE001 — only compiled variants are allowed to fail
            if not m.get("torch_compile"):
                raise
            print(f"bench: {m['label']}: torch.compile failed, left out: {type(error).__name__}: {error}", file=sys.stderr)
            continue
        if m.get("torch_compile"):
            run()  # a recompilation may follow the first call
        kept.append((m, run, time.perf_counter() - start))
    ms, runs, warmup_s = [k[0] for k in kept], [k[1] for k in kept], [k[2] for k in kept]
    times = [[] for _ in runs]
    for _ in range(group["repeats"]):
        for i, run in enumerate(runs):
            start = time.perf_counter()
            run()
            times[i].append((time.perf_counter() - start) * 1000)
    return [dict(label=m["label"], times_ms=t, warmup_s=w) for m, t, w in zip(ms, times, warmup_s)]


def memory_case(group: dict, label: str) -> dict:
    """Peak resident memory of one method in this (fresh) process: warm-up and one measured unit of work."""
    torch.set_num_threads(group["threads"])
    method = next(m for m in group_methods(group, True) if m["label"] == label)
    model = _build(group, method)
    data = _inputs(group, model.cfg.d_model)
    run = _step(group, model, data, method.get("torch_compile", False))
    after_build = rss_mb()
    run()
    if group["mode"] == "train":
        run()  # the optimiser state exists from the first step on
    return dict(label=label, peak_rss_mb=rss_mb(), peak_over_model_mb=rss_mb() - after_build)


def run_group(group: dict, memory: bool) -> list[dict]:
    load_before = os.getloadavg()[0]
    timed = run_worker(__file__, "time", dict(group=group))
    load_after = os.getloadavg()[0]
    medians = {t["label"]: statistics.median(t["times_ms"]) for t in timed}
    # the reference: Kerple's fastest path among those the pipeline runs (eager); compiled variants are compared
    # with the same reference
    eager_kerple = [label for label in medians if label.startswith("Kerple") and not label.endswith("compiled")]
    reference = min(eager_kerple, key=medians.get)
    ref_times = next(t["times_ms"] for t in timed if t["label"] == reference)
    n_layer = _build(group, dict(**KERPLE)).cfg.n_layer if group["mode"] != "layer" else 1
    rows = []
    for t in timed:
        row = dict(
            suite=group["suite"], config=group["config"], mode=group["mode"], size=group["size"], n_layer=n_layer,
            vocab_size=group["vocab_size"], seq_len=group["seq_len"], batch=group["batch"], method=t["label"],
            median_ms=medians[t["label"]], min_ms=min(t["times_ms"]),
            per_layer_ms=medians[t["label"]] / n_layer,
            ratio_vs_kerple=statistics.median(a / b for a, b in zip(t["times_ms"], ref_times)),
            warmup_s=t["warmup_s"],  # the first call(s), compilation included for compiled variants
            kerple_reference=reference, repeats=group["repeats"], threads=group["threads"],
            load_before=load_before, load_after=load_after,
        )
        if memory and not t["label"].endswith("compiled"):  # compilation's own memory would swamp the peak
            row.update({k: v for k, v in run_worker(__file__, "memory", dict(group=group, label=t["label"])).items() if k != "label"})
        rows.append(row)
    if memory:
        ref = next(r for r in rows if r["method"] == reference)
        for r in rows:
            if "peak_rss_mb" not in r:
                continue
            r["peak_ratio_vs_kerple"] = r["peak_rss_mb"] / ref["peak_rss_mb"]
            r["peak_over_model_ratio_vs_kerple"] = r["peak_over_model_mb"] / max(ref["peak_over_model_mb"], 1.0)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", nargs="+", default=["default"], choices=sorted(SUITES))
    p.add_argument("--out", required=True, help="CSV path (benchmarks/results/*.csv)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=None, help="rounds per group (default: the suite's)")
    p.add_argument("--seq-lens", type=int, nargs="+", default=None, help="only these lengths")
    p.add_argument("--no-memory", action="store_true", help="skip the per-method peak-memory processes")
    p.add_argument("--compile", action="store_true",
                   help="also time Kerple and DAPE1x3-Kerple's plain path under torch.compile; compilation time "
                        "is excluded, a variant that fails to compile is left out")
    args = p.parse_args(argv)
    machine = machine_info()
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows, configs = [], {}
    for suite in args.suite:
        for group in SUITES[suite]:
            if args.seq_lens and group["seq_len"] not in args.seq_lens:
                continue
            if group["config"] not in configs:
                configs[group["config"]] = config_model_settings(group["config"])
            group = {**configs[group["config"]], **group, "suite": suite, "threads": args.threads,
                     "repeats": args.repeats or group["repeats"], "compile": args.compile}
            print(f"[{suite}] {group['mode']} {group['size']} T={group['seq_len']} B={group['batch']} "
                  f"V={group['vocab_size']} ({group['config']}) …", file=sys.stderr, flush=True)
            for row in run_group(group, memory=not args.no_memory):
                rows.append(dict(row, **machine, timestamp=stamp))
                mem = f", peak {row['peak_rss_mb']:.0f} MB (+{row['peak_over_model_mb']:.0f})" if "peak_rss_mb" in row else ""
                print(f"  {row['method']:36s} {row['median_ms']:10.1f} ms  ×{row['ratio_vs_kerple']:.2f}{mem}", file=sys.stderr, flush=True)
            write_rows(rows, out)  # every finished group kept
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        payload = json.loads(sys.argv[3])
        result = time_group(payload["group"]) if sys.argv[2] == "time" else memory_case(payload["group"], payload["label"])
        print(json.dumps(result))
    else:
        sys.exit(main())
