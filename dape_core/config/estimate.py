"""Jobs per rule and the GPU-hours of the training jobs, from the decoder's own FLOP count.

Each run's model is built on the meta device (no memory, no computation), so the count comes from
:meth:`dape_core.model.GPT.flops_per_token` — the formula the training summary reports — rather than a second one.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def _model_on_meta(model_settings: tuple):
    import torch

    from dape_core.model import GPT, GPTConfig

    with torch.device("meta"):
        return GPT(GPTConfig(**dict(model_settings)))


def training_flops(settings: dict, vocab_size: int) -> float:
    """Training FLOPs of one LM run: FLOPs per token (GPT on the meta device) × tokens of all its steps."""
    from dape_core.model import GPTConfig
    from dape_core.settings import field_names

    model = {k: settings[k] for k in field_names(GPTConfig) if k in settings}
    model.update(vocab_size=vocab_size)
    model.pop("train_len", None)  # the length enters the count as flops_per_token's argument
    tokens = settings["steps"] * settings["batch_size"] * settings["grad_accum"] * settings["train_len"]
    return _model_on_meta(tuple(sorted(model.items()))).flops_per_token(settings["train_len"]) * tokens


def estimate(plan) -> dict:
    """Jobs per rule and GPU-hours of the training jobs under ``estimate`` (peak TFLOP/s × utilisation)."""
    assumptions = plan.config["estimate"]
    rate = assumptions["gpu_tflops"] * 1e12 * assumptions["utilisation"]
    flops = 0.0
    for name, seed in plan.lm_jobs():
        settings = plan.lm_runs[name]["settings"]
        vocab = assumptions["vocab_size"] or plan.datasets[settings["dataset"]]["vocab_size"]
        flops += training_flops(settings, vocab)
    jobs = {"tokenize": len(plan.datasets), "train_lm": len(plan.lm_jobs()), "evaluate_lm": len(plan.lm_jobs()),
            "attention_maps": len(plan.attention_jobs()), "time_lm": len(plan.timing_runs), "che": len(plan.che_jobs())}
    return {"jobs": jobs, "train_flops": flops, "gpu_hours": flops / rate / 3600,
            "gpu_tflops": assumptions["gpu_tflops"], "utilisation": assumptions["utilisation"]}


def estimate_line(plan) -> str:
    e = estimate(plan)
    jobs = ", ".join(f"{n} {rule}" for rule, n in e["jobs"].items() if n)
    return (f"plan: {jobs}; training the LM runs ≈ {e['train_flops']:.3g} FLOPs ≈ {e['gpu_hours']:.1f} GPU-hours "
            f"at {e['gpu_tflops']:g} TFLOP/s × {e['utilisation']:g} utilisation (evaluation, timing and CHE jobs "
            "not included)")
