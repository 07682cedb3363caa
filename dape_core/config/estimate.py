"""Jobs per rule and the training jobs' GPU-hours, with the lines that report them.

A ``dape train`` job takes the calibration's measured throughput where it has the job's row (bound ``measured``,
:mod:`~dape_core.config.calibration`); otherwise the larger of its FLOP time (:mod:`~dape_core.config.flops`' FLOPs at a
scaled row's FLOP/s or the FLOP estimate's, one GPU's throughput per GPU) and its dispatch time on each of its GPUs
(:mod:`dape_core.config.dispatch`). Models this small are bound by dispatch: the 3-layer model's step makes about a
thousand calls whatever its FLOPs. The deciding bound (``flops``, ``dispatch`` or ``measured``) is reported per job,
shape and family.

A ``finetune`` job (``dape finetune``, a Hugging Face decoder) always takes the FLOP estimate: the calibration and the
operator counts describe ``dape train``'s models only. Without transformers they are left out (the line says so). Only
``python -m dape_core.config`` counts a micro-batch's pieces (``gpu_mem_gb``; the memory model needs torch,
:func:`~dape_core.config.memory_plan.fit_micro_batches`); the workflow's parse counts one and says so."""

from __future__ import annotations

from dape_core.config import dispatch
from dape_core.config.calibration import FLOPS, MEASURED, SCALED, calibration_key, load_calibration, throughput
from dape_core.config.flops import (finetune_flops_per_token, finetune_model, finetune_shape, flops_per_token,
                                    run_vocab, training_tokens, transformers_available)
from dape_core.methods import hf_method_label, method_label
from dape_core.settings.finetune import is_finetuned

# re-exported: the benchmarks and tests import these from here (defined in calibration and flops)
from dape_core.config.calibration import CALIBRATION_COLUMNS, CALIBRATION_KEY  # noqa: F401
from dape_core.config.flops import finetune_flops, training_flops  # noqa: F401

NO_TRANSFORMERS = "fine-tune jobs not counted: transformers not installed (pip install -e '.[hf]')"


def estimate(plan) -> dict:
    """Jobs per rule and the training jobs' GPU-hours (module docstring), with the figure used per training shape.
    ``gpu_hours``: ``lm_gpu_hours`` + ``finetune_gpu_hours``; ``flop_gpu_hours``: the LM jobs' FLOP time alone;
    ``bounds``: jobs per deciding bound; ``family_hours``: family → {gpu_hours, bounds} (a shared job counts in each
    family); ``finetune_note``: why fine-tunes were left out (None: counted)."""
    assumptions = plan.config["estimate"]
    rate = assumptions["gpu_tflops"] * 1e12 * assumptions["utilisation"]
    rows, note = load_calibration(assumptions)
    cost = dispatch.per_call_cost(rows, device=assumptions.get("calibration_device"))
    flops, hours, flop_hours = 0.0, 0.0, 0.0
    shapes: dict[tuple, dict] = {}
    sources = {MEASURED: 0, SCALED: 0, FLOPS: 0}
    bounds = {dispatch.FLOPS: 0, dispatch.DISPATCH: 0, dispatch.MEASURED: 0}
    per_job: dict[str, tuple[float, str]] = {}
    uncounted = 0  # jobs without an operator count (a CPU path, or a method the count CSV lacks): the FLOP bound
    for name, seed in plan.train_jobs():
        settings = plan.lm_runs[name]["settings"]
        vocab = run_vocab(plan, settings)
        per_token = flops_per_token(settings, vocab, settings["train_len"])
        run_flops = per_token * training_tokens(settings)
        key = calibration_key(settings, vocab)
        tokens_per_s, source = throughput(key, per_token, rows)
        if name not in per_job:
            per_job[name] = job_hours(plan, name, key, per_token, tokens_per_s, source, cost)
        run_hours, bound = per_job[name]
        uncounted += source != MEASURED and dispatch.method_calls(settings) is None
        flops += run_flops
        hours += run_hours
        flop_hours += run_flops / rate / 3600
        sources[source.split(" from ")[0]] += 1
        bounds[bound] += 1
        shape = shapes.setdefault(tuple(key.values()), {**key, "method": method_label(
            settings["encoding"], settings["processor"], settings["kernel_size"]), "jobs": 0, "gpu_hours": 0.0,
            "source": source, "bound": bound})
        shape["jobs"] += 1
        shape["gpu_hours"] += run_hours
    family_hours: dict[str, dict] = {}
    for member in plan.lm_members:
        if member["run"] in per_job:
            entry = family_hours.setdefault(member["family"], {"gpu_hours": 0.0, "bounds": {}})
            run_hours, bound = per_job[member["run"]]
            entry["gpu_hours"] += run_hours
            entry["bounds"][bound] = entry["bounds"].get(bound, 0) + 1
    finetunes = finetune_estimate(plan, rate)
    jobs = {"tokenize": len(plan.datasets), "train_lm": len(plan.train_jobs()),
            "finetune_lm": len(plan.finetune_jobs()), "evaluate_lm": len(plan.lm_jobs()),
            "attention_maps": len(plan.attention_jobs()),
            "time_lm": sum(int(job["settings"]["replicates"]) for job in plan.timing_jobs.values()),
            "che": len(plan.che_jobs())}
    return {"jobs": jobs, "train_flops": flops, "lm_gpu_hours": hours, "flop_gpu_hours": flop_hours, **finetunes,
            "gpu_hours": hours + finetunes["finetune_gpu_hours"], "gpu_tflops": assumptions["gpu_tflops"],
            "utilisation": assumptions["utilisation"], "calibration": note, "calibrated": rows is not None,
            "sources": sources, "bounds": bounds, "uncounted": uncounted, "per_call": cost,
            "family_hours": family_hours, "pieces_uncounted": pieces_uncounted(plan),
            "shapes": list(shapes.values())}


def job_hours(plan, name: str, key: dict, per_token: float, tokens_per_s: float | None, source: str,
              cost: dispatch.PerCallCost) -> tuple[float, str]:
    """GPU-hours and deciding bound of one training job of LM run ``name``, dispatch paid on each GPU, a micro-batch in
    the memory model's pieces (:func:`~dape_core.config.dispatch.job_gpu_hours`)."""
    settings = {**plan.lm_runs[name]["settings"], "n_layer": key["n_layer"]}
    if source == MEASURED:
        return dispatch.job_gpu_hours(settings, flops_per_token=per_token, gpu_tflops=0.0, utilisation=0.0,
                                      tokens_per_s=tokens_per_s)
    assumptions = plan.config["estimate"]
    tflops, utilisation = assumptions["gpu_tflops"], assumptions["utilisation"]
    if tokens_per_s is not None:  # scaled: the measured row's FLOP/s
        tflops, utilisation = tokens_per_s * per_token / 1e12, 1.0
    processes = max(1, int(plan.resources("train_lm", settings["size"]).get("gpu") or 0))
    micro = plan.micro_batch_size(name)
    pieces = max(1, settings["batch_size"] // processes // micro) if micro else 1
    return dispatch.job_gpu_hours(settings, flops_per_token=per_token, gpu_tflops=tflops, utilisation=utilisation,
                                  cost=cost, pieces=pieces, gpus=processes)


def pieces_uncounted(plan) -> int:
    """LM runs whose job has ``gpu_mem_gb`` but no modelled micro-batch (``python -m dape_core.config`` models them)."""
    return sum(1 for name, run in plan.lm_runs.items() if name not in plan.memory
               and plan.resources("train_lm", run["settings"]["size"]).get("gpu_mem_gb") is not None)


def finetune_estimate(plan, rate: float) -> dict:
    """FLOPs and GPU-hours of the ``dape finetune`` jobs at ``rate`` FLOP/s (the FLOP estimate), one entry per
    fine-tune shape; nothing counted, with ``finetune_note`` saying so, when transformers cannot be imported."""
    out = {"finetune_flops": 0.0, "finetune_gpu_hours": 0.0, "finetune_shapes": [], "finetune_note": None}
    jobs = plan.finetune_jobs()
    if not jobs:
        return out
    if not transformers_available():
        return {**out, "finetune_note": NO_TRANSFORMERS}
    shapes: dict[tuple, dict] = {}
    for name, seed in jobs:
        settings = plan.finetune_runs[name]["settings"]
        config, attention = finetune_model(plan, name)
        shape = finetune_shape(config, attention)
        run_flops = finetune_flops_per_token(shape, attention, settings["train_len"]) * training_tokens(settings)
        run_hours = run_flops / rate / 3600
        out["finetune_flops"] += run_flops
        out["finetune_gpu_hours"] += run_hours
        finetuned = is_finetuned(settings["base_run"] is not None or settings["base_model"] is not None,
                                 settings["steps"])
        method = hf_method_label(shape["model_type"], attention["encoding"], attention["processor"],
                                 attention["kernel_size"], attention["tril"], finetuned=finetuned)
        width = attention["dape_width"] if attention["processor"] != "none" else None
        key = (shape["model_type"], shape["hidden_size"], shape["n_layer"], shape["vocab_size"], method, width,
               settings["train_len"], settings["batch_size"], settings["precision"])
        entry = shapes.setdefault(key, {
            "model_type": shape["model_type"], "hidden_size": shape["hidden_size"], "n_layer": shape["n_layer"],
            "vocab_size": shape["vocab_size"], "method": method, "dape_width": width,
            "train_len": settings["train_len"], "micro_batch": settings["batch_size"],
            "precision": settings["precision"], "jobs": 0, "gpu_hours": 0.0, "source": FLOPS})
        entry["jobs"] += 1
        entry["gpu_hours"] += run_hours
    return {**out, "finetune_shapes": list(shapes.values())}


def _hours(value: float) -> str:
    """GPU-hours to one decimal, or two significant digits below 0.1 (a miniature plan's hours are not 0.0)."""
    return f"{value:.1f}" if value == 0 or value >= 0.1 else f"{value:.2g}"


def bound_text(bounds: dict) -> str:
    """Which bound decided how many jobs, e.g. ``dispatch for 180 jobs, flops for 20``."""
    return ", ".join(f"{bound} for {n} job{'s' if n != 1 else ''}"
                     for bound, n in sorted(bounds.items(), key=lambda x: -x[1]) if n) or "no jobs"


def estimate_line(plan, e: dict | None = None) -> str:
    """One line: jobs per rule, training FLOPs and GPU-hours of the LM runs (which bound decides: flops, dispatch or
    measured) and of the fine-tunes, and which figures they rest on."""
    e = e or estimate(plan)
    jobs = ", ".join(f"{n} {rule}" for rule, n in e["jobs"].items() if n)
    flop_rate = f"{e['gpu_tflops']:g} TFLOP/s × {e['utilisation']:g} utilisation"
    if e["sources"][MEASURED] or e["sources"][SCALED]:
        flop_basis = (f"tokens/s measured for {e['sources'][MEASURED]} jobs, scaled by FLOPs for "
                      f"{e['sources'][SCALED]}, FLOP estimate at {flop_rate} for {e['sources'][FLOPS]}")
    else:
        flop_basis = f"FLOPs at {flop_rate}"
    line = (f"plan: {jobs}; training the LM runs ≈ {e['train_flops']:.3g} FLOPs ≈ {_hours(e['lm_gpu_hours'])} "
            f"GPU-hours, each job the larger of its FLOP and dispatch time (bound: {bound_text(e['bounds'])}; "
            f"{flop_basis}: ≈ {_hours(e['flop_gpu_hours'])} GPU-hours alone; dispatch at {e['per_call'].source}; "
            f"{e['calibration']})")
    if e.get("uncounted"):
        line += (f"; no operator count for {e['uncounted']} jobs (attention_impl fast/plain, or a method not in "
                 f"{dispatch.STEP_COUNTS.name}: `{dispatch.STEP_COUNTS_COMMAND}`), the FLOP bound")
    if e.get("pieces_uncounted"):
        line += (f"; dispatch of {e['pieces_uncounted']} jobs counted without the pieces their micro-batch may run "
                 "in (gpu_mem_gb; `python -m dape_core.config CONFIG` models them)")
    if e["finetune_note"]:
        line += f"; {e['finetune_note']}"
    elif e["jobs"]["finetune_lm"]:
        line += (f"; fine-tunes ≈ {e['finetune_flops']:.3g} FLOPs ≈ {_hours(e['finetune_gpu_hours'])} GPU-hours "
                 f"({FLOPS} at {flop_rate}, bound flops: the calibration and the operator counts describe `dape "
                 f"train` models only); ≈ {_hours(e['gpu_hours'])} GPU-hours in all")
    line += "; evaluation, timing and CHE jobs not included"
    return line


def family_hours_text(e: dict, family: str) -> str:
    """A family's training GPU-hours and the bounds deciding them (empty for a family without LM training)."""
    entry = e.get("family_hours", {}).get(family)
    if not entry:
        return ""
    return f"; ≈ {_hours(entry['gpu_hours'])} GPU-hours (bound: {bound_text(entry['bounds'])})"


def estimate_details(e: dict) -> list[str]:
    """One line per training shape (jobs, GPU-hours, deciding bound, throughput figure: measured / scaled from … / FLOP
    estimate), then one per fine-tune shape (model_type, hidden size, layers, method; always the FLOP estimate)."""
    lines = []
    for s in e["shapes"]:
        width = "" if s["processor"] == "none" else f" D={s['dape_width']}"
        lines.append(f"  {s['size']} {s['method']}{width} T={s['train_len']} B={s['micro_batch']} {s['precision']} "
                     f"{s['attention_impl']}/{s['dape_dtype']}: {s['jobs']} jobs, {s['gpu_hours']:.4g} GPU-hours "
                     f"(bound {s['bound']}), {s['source']}")
    for s in e.get("finetune_shapes", []):
        width = "" if s["dape_width"] is None else f" D={s['dape_width']}"
        lines.append(f"  {s['model_type']} d={s['hidden_size']} L={s['n_layer']} {s['method']}{width} "
                     f"T={s['train_len']} B={s['micro_batch']} {s['precision']}: {s['jobs']} jobs, "
                     f"{s['gpu_hours']:.4g} GPU-hours, {s['source']}")
    return lines
