"""Measured training throughput for the GPU-hour estimate: tokens/s of whole training steps, one row per
device × size × method × train_len × micro-batch × precision × path of a configuration's LM runs.

A training step is what ``dape train`` does per optimiser step (appendix I): ``grad_accum`` micro-batches of
``batch_size`` sequences of ``train_len`` tokens, forward and backward under the run's ``precision`` (autocast),
the global gradient-norm clip and one AdamW step (``dape_core.train.optimizer_for``). Each case runs in a fresh
process on one device (``--device``; on CUDA every timed step is bracketed by ``torch.cuda.synchronize``), from
random tokens of the run's vocabulary: tokens/s = grad_accum × batch_size × train_len / median step time. Where
the configuration gives the job its GPU's memory (``resources.train_lm.gpu_mem_gb``) the case runs as that job does:
each micro-batch in the memory model's pieces, and a DAPE model with the memory model's ``recompute_scores``
(columns ``pieces``, ``recompute_scores``; :func:`dape_core.memory.micro_batch_for`), and the materialized or
compiled path with the options the job's path takes there (column ``path_options``: on CUDA the compiled path's
``CUDA_COMPILED_OPTIONS``, or with ``--path-options`` those given, as a device run's ``benchmarks/cuda_options.py``
names them before they are written into the settings). A case that does not fit the GPU's memory is recorded with status ``out_of_memory`` and
no throughput.

The CSV (default ``benchmarks/results/gpu_calibration.csv``) keeps the rows of other devices, so one file can hold
several GPU models; ``estimate.calibration`` in a configuration points ``python -m dape_core.config`` at it
(``dape_core/config/estimate.py`` uses a row as is for the same shape, scales the nearest row of the same method
by FLOPs per token otherwise).

    python benchmarks/calibrate_gpu.py --config configs/paper.yaml                  # on a GPU node
    python benchmarks/calibrate_gpu.py --config configs/paper.yaml --sizes 125M --train-lens 512
    python benchmarks/calibrate_gpu.py --config configs/smoke.yaml --device cpu --out /tmp/cpu_calibration.csv
    python benchmarks/calibrate_gpu.py --sizes 125M --train-lens 512 \
        --path-options "feature_map=triton causal_chunks=4 tf32_scores=True"
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu_calibration.csv"
# model settings of a run that the timed model takes besides its calibration key
MODEL_EXTRAS = ("tril", "padding", "encoding_shared", "dropout", "tie_embeddings")
# training settings of a run that the timed step takes
TRAIN_EXTRAS = ("grad_accum", "lr", "weight_decay", "beta1", "beta2", "grad_clip")


def cases(config_path: str | Path, *, sizes=None, methods=None, train_lens=None, max_cases=None) -> list[dict]:
    """One case per distinct calibration key among the configuration's LM runs (in plan order), filtered."""
    from dape_core.config import build_plan, load_yaml
    from dape_core.config.estimate import calibration_key, run_vocab
    from dape_core.methods import method_label

    plan = build_plan(load_yaml(config_path))
    out: dict[tuple, dict] = {}
    for run in plan.lm_runs.values():
        s = run["settings"]
        key = calibration_key(s, run_vocab(plan, s))
        label = method_label(s["encoding"], s["processor"], s["kernel_size"])
        if (sizes and s["size"] not in sizes) or (methods and label not in methods) or (
                train_lens and s["train_len"] not in train_lens):
            continue
        job = plan.resources("train_lm", s["size"])
        out.setdefault(tuple(key.values()), {**key, "method": label, **{k: s[k] for k in (*MODEL_EXTRAS,
                                                                                           *TRAIN_EXTRAS)},
                                             "gpu_mem_gb": job.get("gpu_mem_gb")})
    return list(out.values())[:max_cases]


def case_model(case: dict):
    """The GPTConfig of a case (:func:`cases`)."""
    from dape_core.model import GPTConfig

    return GPTConfig(vocab_size=case["vocab_size"], size=case["size"], n_layer=case["n_layer"], n_head=case["n_head"],
                     d_model=case["d_model"], train_len=case["train_len"],
                     **{k: case[k] for k in ("encoding", "processor", "kernel_size", "dape_width", "attention_impl",
                                             "dape_dtype", *MODEL_EXTRAS)})


@contextlib.contextmanager
def cuda_compiled_options(options: dict | None):
    """The compiled path's options on CUDA as ``options`` inside (None: ``CUDA_COMPILED_OPTIONS`` as they are)."""
    import types

    import dape_core.implementations as implementations

    kept = implementations.CUDA_COMPILED_OPTIONS
    if options is not None:
        implementations.CUDA_COMPILED_OPTIONS = types.MappingProxyType(dict(options))
    try:
        yield
    finally:
        implementations.CUDA_COMPILED_OPTIONS = kept


def measure(case: dict, device_name: str, steps: int, warmup: int, threads: int | None = None,
            cuda_options: dict | None = None) -> dict:
    """Time ``warmup`` + ``steps`` training steps of one case in this process, the compiled path's options on CUDA
    ``cuda_options`` (None: as they are); the row of the calibration CSV."""
    with cuda_compiled_options(cuda_options):
        return _measure(case, device_name, steps, warmup, threads)


def _measure(case: dict, device_name: str, steps: int, warmup: int, threads: int | None) -> dict:
    from dape_core.implementations import path_options, resolve_attention_impl
    from dape_core.settings.attention import compiled_options_text
    from dape_core.model import GPT
    from dape_core.timing import AUTOCAST_DTYPES, device_name as name_of, synchronize
    from dape_core.train import TrainSettings, optimizer_for

    if threads:
        torch.set_num_threads(threads)
    device = torch.device(device_name)
    cfg = case_model(case)
    pieces = case["micro_batch"]
    if case.get("gpu_mem_gb"):  # as the job runs it: the memory model's pieces and recomputation
        from dape_core.memory import micro_batch_for

        memory = micro_batch_for(cfg, case["micro_batch"], case["gpu_mem_gb"], precision=case["precision"])
        pieces = memory.micro_batch
        if memory.recompute_scores is not None:
            cfg = dataclasses.replace(cfg, recompute_scores=memory.recompute_scores)
    row = {"device": name_of(device), "device_type": device.type, **{k: case[k] for k in case if k not in (
        *MODEL_EXTRAS, *TRAIN_EXTRAS)}, "grad_accum": case["grad_accum"],
           "attention_path": resolve_attention_impl(cfg.attention_impl, device), "pieces": pieces,
           "recompute_scores": cfg.recompute_scores, "steps_timed": steps, "warmup": warmup}
    dtype = AUTOCAST_DTYPES[case["precision"]]
    try:
        torch.manual_seed(0)
        model = GPT(cfg).to(device)
        flops_per_token = model.flops_per_token(case["train_len"])
        optimizer = optimizer_for(model, TrainSettings(train_len=case["train_len"], batch_size=case["micro_batch"],
                                                        **{k: case[k] for k in TRAIN_EXTRAS}))
        autocast = torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)
        if row["attention_path"] in ("materialized", "compiled"):  # the options that path runs with, under autocast
            with autocast:
                row["path_options"] = compiled_options_text(path_options(row["attention_path"], device.type))
        tokens = torch.randint(0, cfg.vocab_size, (case["grad_accum"], case["micro_batch"], case["train_len"] + 1),
                               device=device)
        model.train()

        def step():
            optimizer.zero_grad(set_to_none=True)
            for micro in tokens:
                for piece in micro.split(pieces):
                    with autocast:
                        _, loss = model(piece[:, :-1], piece[:, 1:])
                    (loss * len(piece) / (case["micro_batch"] * case["grad_accum"])).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), case["grad_clip"])
            optimizer.step()

        for _ in range(warmup):
            step()
        synchronize(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times = []
        for _ in range(steps):
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            times.append(time.perf_counter() - start)
    except torch.cuda.OutOfMemoryError:
        return {**row, "status": "out_of_memory", "median_step_ms": float("nan"), "tokens_per_s": float("nan"),
                "flops_per_token": float("nan"), "achieved_tflops": float("nan"), "peak_mem_mb": float("nan")}
    median = statistics.median(times)
    tokens_per_s = case["grad_accum"] * case["micro_batch"] * case["train_len"] / median
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")
    return {**row, "status": "ok", "median_step_ms": median * 1000, "tokens_per_s": tokens_per_s,
            "flops_per_token": flops_per_token, "achieved_tflops": tokens_per_s * flops_per_token / 1e12,
            "peak_mem_mb": peak}


def measure_in_fresh_process(case: dict, device: str, steps: int, warmup: int, threads: int | None,
                             cuda_options: dict | None = None) -> dict:
    payload = json.dumps({"case": case, "device": device, "steps": steps, "warmup": warmup, "threads": threads,
                          "cuda_options": cuda_options})
    out = subprocess.run([sys.executable, __file__, "--worker", payload], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"calibration worker failed for {case}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def merge(existing: Path, rows: list[dict]) -> pd.DataFrame:
    """The new rows, plus the CSV's rows of other devices and of keys not measured now."""
    from dape_core.config.estimate import CALIBRATION_KEY

    new = pd.DataFrame(rows)
    if not existing.is_file():
        return new
    old = pd.read_csv(existing, comment="#")
    measured = {tuple(str(r[k]) for k in ("device", *CALIBRATION_KEY)) for r in rows}
    keep = [tuple(str(v) for v in r) not in measured for r in old[["device", *CALIBRATION_KEY]].itertuples(index=False)]
    return pd.concat([old[keep], new], ignore_index=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "paper.yaml"), help="configuration whose LM runs to time")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cuda (a GPU node), or cpu (tests)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="calibration CSV (rows of other devices are kept)")
    p.add_argument("--sizes", nargs="+", default=None, help="only these size presets")
    p.add_argument("--methods", nargs="+", default=None, help="only these methods (paper labels)")
    p.add_argument("--train-lens", type=int, nargs="+", default=None, help="only these training lengths")
    p.add_argument("--max-cases", type=int, default=None, help="at most this many cases")
    p.add_argument("--steps", type=int, default=10, help="timed training steps per case (the median is kept)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--threads", type=int, default=None, help="CPU threads per case (default: torch's)")
    p.add_argument("--path-options", default=None,
                   help="the compiled path's options on CUDA for these cases, 'name=value …' as "
                        "benchmarks/cuda_options.py --text prints them (default: CUDA_COMPILED_OPTIONS)")
    args = p.parse_args(argv)
    cuda_options = None
    if args.path_options is not None:
        from dape_core.errors import ConfigError
        from dape_core.settings.attention import parse_compiled_options

        try:
            cuda_options = parse_compiled_options(args.path_options, field="--path-options")
        except ConfigError as error:
            p.error(str(error))
    if args.device == "cuda" and not torch.cuda.is_available():
        p.exit(2, "calibrate_gpu: no CUDA device here; run it on a GPU node (or pass --device cpu for a test)\n")
    todo = cases(args.config, sizes=args.sizes, methods=args.methods, train_lens=args.train_lens,
                 max_cases=args.max_cases)
    if not todo:
        p.exit(2, "calibrate_gpu: no LM run of the configuration matches --sizes / --methods / --train-lens\n")
    from dape_core import io

    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = []
    for i, case in enumerate(todo, 1):
        row = measure_in_fresh_process(case, args.device, args.steps, args.warmup, args.threads, cuda_options)
        rows.append(dict(row, torch=torch.__version__, timestamp=stamp, config=str(args.config)))
        rate = f"{row['tokens_per_s']:.0f} tokens/s" if row["status"] == "ok" else row["status"]
        print(f"[{i}/{len(todo)}] {case['size']} {case['method']} T={case['train_len']} B={case['micro_batch']} "
              f"{case['precision']} {case['attention_impl']}: {rate}", file=sys.stderr, flush=True)
        io.write_csv(args.out, merge(Path(args.out), rows[-1:]))  # every finished case kept
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        payload = json.loads(sys.argv[2])
        print(json.dumps(measure(payload["case"], payload["device"], payload["steps"], payload["warmup"],
                                 payload["threads"], payload["cuda_options"])))
    else:
        sys.exit(main())
