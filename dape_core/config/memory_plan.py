"""The memory model's micro-batch for every LM run of a plan (``resources.train_lm.gpu_mem_gb``), for
``python -m dape_core.config``: each training job picks its own when it starts (``dape train --gpu-mem-gb``); this shows
them all, and the runs that do not fit, before anything is submitted. It traces each shape on the meta device with torch
(:mod:`dape_core.memory`), so the workflow's parse never calls it."""

from __future__ import annotations


def fit_micro_batches(plan) -> None:
    """Fill ``plan.memory`` (run → :class:`~dape_core.memory.TrainingMemory`) for the runs whose job has
    ``gpu_mem_gb``; a ConfigError names the first run that does not fit and what to change."""
    from dape_core.config.flops import run_vocab
    from dape_core.memory import micro_batch_for, shards_of
    from dape_core.settings import field_names
    from dape_core.settings.model import GPTConfig

    for name, run in plan.lm_runs.items():
        s = run["settings"]
        job = plan.resources("train_lm", s["size"])
        if job.get("gpu_mem_gb") is None:
            continue
        processes = max(1, job["gpu"])
        model = GPTConfig(**{k: s[k] for k in field_names(GPTConfig) if k in s and k != "vocab_size"},
                          vocab_size=run_vocab(plan, s))
        plan.memory[name] = micro_batch_for(model, s["batch_size"] // processes, job["gpu_mem_gb"],
                                            precision=s["precision"], shards=shards_of(processes, job["distributed"]),
                                            run=f"run {name}")


def micro_batch_lines(plan) -> list[str]:
    """One line per training shape: the micro-batch the memory model chose on one GPU and its modelled peak."""
    lines, seen = [], {}
    for name, memory in plan.memory.items():
        s = plan.lm_runs[name]["settings"]
        job = plan.resources("train_lm", s["size"])
        processes = max(1, job["gpu"])
        key = (job["gpu_mem_gb"], s["size"], s["encoding"], s["processor"], s["kernel_size"], s["train_len"],
               s["batch_size"] // processes, s["precision"], memory.describe())
        seen.setdefault(key, []).append(name)
    for (gpu_mem_gb, size, encoding, processor, kernel, length, share, precision, described), runs in seen.items():
        method = f"{encoding}/{processor}" + (f" k{kernel}" if processor == "dape_v2" else "")
        lines.append(f"  micro-batch on one GPU ({gpu_mem_gb:g} GB): {size} {method} T{length} {precision}, "
                     f"{share} sequences per GPU → {described} — {len(runs)} run(s)")
    return lines
