"""Train a decoder language model (paper §4, appendix I) with checkpoints, resume and divergence detection.

AdamW β (0.9, 0.95), cosine decay to ``min_lr_ratio``·lr after a linear warm-up, weight decay, gradient clipping
(public-code values: warm-up 1 %, decay to 10 %, weight decay 0.1, clip 1.0). The data order is a function of
(seed, step), so a resumed run draws exactly the batches the uninterrupted run would have drawn.

Outputs in ``--out-dir``: ``model.pt`` (a plain full state dict in every ``distributed`` mode; restore with
:func:`dape_core.model_file.load_model`), ``summary.json`` (status ``ok`` or ``diverged``, provenance, throughput),
``metrics.jsonl`` (step, loss, lr, gradient norm, tokens/s) and ``tensorboard/`` (:mod:`dape_core.tensorboard_log`).
Periodic checkpoints go to ``--checkpoint-dir`` (:mod:`dape_core.checkpoints`; the newest two are kept): keep it
outside a workflow rule's declared outputs so a failed job's clean-up keeps them. ``--distributed ddp`` or ``fsdp``
under torchrun splits the batch across processes (:mod:`dape_core.distributed`). ``--compile`` trains under
``torch.compile(fullgraph=True)`` (one graph per shape; evaluation stays eager).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from dape_core import io, settings as fields
from dape_core.checkpoints import checkpoints_for
from dape_core.distributed import Distributed, full_value
from dape_core.encodings import ENCODINGS, Kerple
from dape_core.errors import ConfigError, require_positive
from dape_core.methods import method_label
from dape_core.model import GPT, GPTConfig
from dape_core.positions import training_positions
from dape_core.provenance import config_hash, provenance
from dape_core.settings.training import NOT_HASHED, NOT_TRAIN_OPTIONS, TrainSettings, require_training_steps
from dape_core.tensorboard_log import TrainingLog


def learning_rate(step: int, s: TrainSettings) -> float:
    """Linear warm-up, then cosine decay from lr to min_lr_ratio·lr at the last step."""
    warmup = int(s.warmup_ratio * s.steps)
    if step < warmup:
        return s.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, s.steps - warmup)
    floor = s.lr * s.min_lr_ratio
    return floor + 0.5 * (s.lr - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def micro_batch_pieces(per_rank: int, micro_batch_size: int | None) -> list[tuple[int, int]]:
    """(first, last) sequences of each piece a process runs a micro-batch of ``per_rank`` sequences in: one piece,
    or equal pieces of ``micro_batch_size`` (which must divide ``per_rank``: equal pieces weigh equally)."""
    size = per_rank if micro_batch_size is None else micro_batch_size
    if per_rank % size:
        raise ConfigError(f"micro_batch_size: {micro_batch_size} does not divide the {per_rank} sequences of a "
                          "micro-batch on one process; allowed values: a divisor of batch_size / processes")
    return [(first, first + size) for first in range(0, per_rank, size)]


def batch_starts(step: int, micro: int, seed: int, n_tokens: int, length: int, batch_size: int) -> np.ndarray:
    """Start offsets of the training windows of one micro-batch: a function of (seed, step, micro) only."""
    return np.random.default_rng([seed, step, micro]).integers(0, n_tokens - length - 1, size=batch_size)


def get_batch(tokens: np.ndarray, starts: np.ndarray, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.from_numpy(np.stack([np.asarray(tokens[s : s + length + 1], dtype=np.int64) for s in starts]))
    return data[:, :-1], data[:, 1:]


def optimizer_for(model: torch.nn.Module, s: TrainSettings) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices (linear and conv weights, embeddings), none on biases, norms and scalars."""
    params = [param for param in model.parameters() if param.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": s.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2))


def constrain_parameters(model: torch.nn.Module) -> None:
    """Kerple's r1, r2 ≥ 0.01 (Chi et al., 2022) on the stored parameters, after every optimiser step: Kerple's own
    clamp in its forward reaches only FSDP's gathered copy, not the shard the optimiser updates."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, Kerple):
                for param in (module.r1, module.r2):
                    param.clamp_(min=module.min_value)


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float) -> float:
    """Clip the global gradient norm to ``grad_clip``, step, apply the parameter constraints; returns the norm
    before clipping (over every shard under FSDP)."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    constrain_parameters(model)
    return full_value(norm)


def hashed_model_config(model: GPT, device) -> dict:
    """The model settings a resume checkpoint must match: what runs, not how it was asked for. ``auto`` becomes the
    path it selects on ``device``; ``max_position`` counts only for an encoding that draws positions from it (older
    checkpoints still resume); ``recompute_scores`` is left out like ``activation_checkpointing`` (bitwise equal
    gradients)."""
    config = dataclasses.asdict(model.cfg)
    config["attention_impl"] = model.resolved_attention_impl(device)
    config.pop("recompute_scores")
    if not ENCODINGS[model.cfg.encoding].randomized_positions:
        config.pop("max_position")
    return config


def fit(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    settings: TrainSettings,
    tokens: np.ndarray,
    loss_of: Callable[[torch.Tensor, torch.Tensor, int, int], torch.Tensor],
    *,
    save: Callable[[str, dict], None],
    describe: Callable[[], dict],
    config_hash: str,
    out_dir: Path,
    checkpoints,
    dist: Distributed,
    wrapped: torch.nn.Module | None = None,
    label: str = "train",
    progress: bool = True,
    stop_after: int | None = None,
) -> dict:
    """The training loop of ``dape train`` and ``dape finetune`` (resume, divergence, logging, checkpoints, outputs);
    returns the summary. ``loss_of(x, y, step, micro)``: one micro-batch's mean next-token loss (CPU tensors; it moves
    them). ``wrapped``: the module that runs it (DDP/FSDP reduce gradients with the last micro-batch only; default
    ``model``). A finished run (all steps, or diverged) calls ``save(status, summary)`` on every process (a collective
    under FSDP), then rank 0 writes ``metrics.jsonl`` and ``summary.json`` and the resume checkpoints are removed.
    ``describe()``: the summary's model fields. ``stop_after`` ends early without outputs (resume tests)."""
    wrapped = model if wrapped is None else wrapped
    per_rank = settings.batch_size // dist.world
    pieces = micro_batch_pieces(per_rank, settings.micro_batch_size)
    restored = checkpoints.load(model, optimizer, config_hash)
    step, history = (0, []) if restored is None else (restored["step"], restored["history"])
    log = TrainingLog(out_dir / "tensorboard", first_step=step + 1, enabled=dist.rank == 0)
    autocast = torch.autocast(dist.device.type, dtype=torch.bfloat16, enabled=settings.precision == "bf16")
    bar = None
    if progress and dist.rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=settings.steps, initial=step, desc=label, mininterval=5, file=sys.stderr)
    status, started, tokens_seen = "ok", time.perf_counter(), 0
    window_start, window_tokens = time.perf_counter(), 0
    model.train()
    while step < settings.steps:
        lr = learning_rate(step, settings)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for micro in range(settings.grad_accum):
            starts = batch_starts(step, micro, settings.seed, len(tokens), settings.train_len, settings.batch_size)
            starts = starts[dist.rank * per_rank : (dist.rank + 1) * per_rank]
            x, y = get_batch(tokens, starts, settings.train_len)
            for piece, (first, last) in enumerate(pieces):  # equal pieces: the micro-batch's mean loss and gradient
                weight = (last - first) / per_rank  # 1.0 for one piece: the loss as it was
                final = micro == settings.grad_accum - 1 and piece == len(pieces) - 1
                with dist.accumulating(wrapped, last=final):
                    with autocast:
                        loss = loss_of(x[first:last], y[first:last], step, micro)
                    (loss * weight / settings.grad_accum).backward()
                loss_sum += float(loss.detach()) * weight / settings.grad_accum
        loss_value = dist.mean(loss_sum)
        if not math.isfinite(loss_value):
            status = "diverged"
            history.append({"step": step + 1, "loss": loss_value, "lr": lr, "tokens_per_s": 0.0})
            log.step(step + 1, loss=loss_value, lr=lr)
            print(f"loss became {loss_value} at step {step + 1}: stopping, status diverged", file=sys.stderr)
            break
        grad_norm = optimizer_step(model, optimizer, settings.grad_clip)
        step += 1
        log.step(step, loss=loss_value, lr=lr, grad_norm=grad_norm)
        n_tok = settings.batch_size * settings.grad_accum * settings.train_len
        tokens_seen += n_tok
        window_tokens += n_tok
        if step % settings.log_every == 0 or step == settings.steps:
            now = time.perf_counter()
            tokens_per_s = window_tokens / max(now - window_start, 1e-9)
            history.append({"step": step, "loss": loss_value, "lr": lr, "grad_norm": grad_norm,
                            "tokens_per_s": tokens_per_s})
            log.window(step, tokens_per_s=tokens_per_s, device=dist.device)
            window_start, window_tokens = now, 0
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}", refresh=False)
        if step % settings.checkpoint_every == 0 and step < settings.steps:
            log.flush()  # the events up to this checkpoint are on disk before a resume could start from it
            checkpoints.save(model, optimizer, step, history, config_hash)
        if stop_after is not None and step >= stop_after:
            break
    if bar is not None:
        bar.close()
    elapsed = time.perf_counter() - started
    finished = status == "diverged" or step >= settings.steps
    summary = {
        "status": status if finished else "incomplete",
        "steps_done": step,
        "final_loss": history[-1]["loss"] if history else float("nan"),
        "tokens_per_s": tokens_seen / elapsed if elapsed > 0 and tokens_seen else float("nan"),
        "wall_s": elapsed,
        **describe(),
        "config_hash": config_hash,
        **provenance(settings.threads),
    }
    log.close()
    if finished:
        save(status, summary)
        if dist.rank == 0:
            io.write_text(out_dir / "metrics.jsonl", "".join(json.dumps(h) + "\n" for h in history))
            io.write_json(out_dir / "summary.json", summary, seal=True)
        # the run is complete: a forced rerun (e.g. after a code change) must train from step 0, not resume
        checkpoints.remove()
    return summary


def train(
    model_config: GPTConfig,
    settings: TrainSettings,
    data_dir: str | Path,
    out_dir: str | Path,
    checkpoint_dir: str | Path | None = None,
    *,
    progress: bool = True,
    stop_after: int | None = None,
    mem_mb: int | None = None,
    gpu_mem_gb: float | None = None,
) -> dict:
    """Train a :class:`GPT` (:func:`fit`), write ``model.pt`` and the outputs; returns the summary. On a CPU a job
    whose modelled peak exceeds the machine's memory or ``mem_mb`` stops before it starts
    (:func:`~dape_core.memory.cpu_preflight`). With ``gpu_mem_gb`` (and no ``micro_batch_size``) each process runs its
    share in the largest pieces that fit (:func:`~dape_core.memory.micro_batch_for`), and a DAPE model with
    ``recompute_scores`` unset keeps its scores where the whole share fits (same gradients, same run hash)."""
    from dape_core.data import load_split

    torch.set_num_threads(settings.threads)
    require_training_steps(settings)
    dist = Distributed(settings.distributed)
    out_dir, checkpoint_dir = Path(out_dir), Path(checkpoint_dir or Path(out_dir) / "checkpoints")
    train_split = load_split(data_dir, "train")
    model_config = dataclasses.replace(model_config, vocab_size=int(train_split.meta["tokenizer"]["vocab_size"]),
                                       train_len=settings.train_len)
    if len(train_split.tokens) < settings.train_len + 2:
        raise ConfigError(f"train_len: {settings.train_len} exceeds the training split "
                          f"({len(train_split.tokens)} tokens)")
    if settings.batch_size % dist.world:
        raise ConfigError(f"batch_size: {settings.batch_size} is not divisible by the {dist.world} processes")
    if gpu_mem_gb is not None and settings.micro_batch_size is None:  # ConfigError when one sequence does not fit
        from dape_core.memory import micro_batch_for, shards_of

        per_rank = settings.batch_size // dist.world
        memory = micro_batch_for(model_config, per_rank, gpu_mem_gb, precision=settings.precision,
                                 shards=shards_of(dist.world, settings.distributed))
        print(f"micro-batch on one GPU ({gpu_mem_gb:g} GB): {per_rank} sequences per process → {memory.describe()}",
              flush=True)
        settings = dataclasses.replace(settings, micro_batch_size=memory.micro_batch)
        if memory.recompute_scores is not None:  # the memory model's choice (not hashed: the same gradients)
            model_config = dataclasses.replace(model_config, recompute_scores=memory.recompute_scores)
    if dist.device.type == "cpu":
        from dape_core.memory import cpu_preflight

        cpu_preflight(model_config, settings.micro_batch_size or settings.batch_size // dist.world,
                      precision=settings.precision, mem_mb=mem_mb)

    torch.manual_seed(settings.seed)
    model = GPT(model_config).to(dist.device)
    for block in model.stack.blocks:
        block.activation_checkpointing = settings.activation_checkpointing
    # DDP calls the compiled model (its hooks stay outside the graph); checkpoints and model.pt hold `model`'s state
    runner = torch.compile(model, fullgraph=True) if settings.compile else model
    wrapped = dist.wrap(runner)  # under fsdp `model` itself is sharded in place: the optimiser is built after
    optimizer = optimizer_for(model, settings)
    full_config = {"model": dataclasses.asdict(model_config), "train": dataclasses.asdict(settings),
                   "data_dir": str(data_dir), "data_sha256": train_split.meta["splits"]["train"].get("tokens_sha256")}
    chash = config_hash({k: v for k, v in full_config.items() if k != "data_dir"} | {
        "model": hashed_model_config(model, dist.device),
        "train": {k: v for k, v in dataclasses.asdict(settings).items() if k not in NOT_HASHED}})
    method = method_label(model_config.encoding, model_config.processor, model_config.kernel_size, model_config.tril)

    def loss_of(x, y, step, micro):
        positions = training_positions(model_config, settings.seed, step, micro, settings.train_len)  # randrope
        return wrapped(x.to(dist.device), y.to(dist.device), positions=positions)[1]

    def describe() -> dict:
        return {"parameters": sum(p.numel() for p in model.parameters()),
                "parameters_per_rank": dist.gather(dist.local_parameters(model)),
                "non_embedding_parameters": model.non_embedding_parameters(),
                "flops_per_token": model.flops_per_token(settings.train_len), "method": method,
                "attention_impl": model.resolved_attention_impl(dist.device),  # the path that ran (`auto` resolved)
                "distributed": dist.mode, "config": full_config, "world_size": dist.world}

    def save(status: str, summary: dict) -> None:
        state = dist.full_state_dict(model)  # a collective under fsdp: every process takes part
        if dist.rank == 0:
            io.torch_save(out_dir / "model.pt", {"model": state, "model_config": dataclasses.asdict(model_config),
                                                  "train_settings": dataclasses.asdict(settings), "status": status,
                                                  "config_hash": chash, "method": method}, seal=True)

    summary = fit(model, optimizer, settings, train_split.tokens, loss_of, save=save, describe=describe,
                  config_hash=chash, out_dir=out_dir, checkpoints=checkpoints_for(checkpoint_dir, dist), dist=dist,
                  wrapped=wrapped, label=f"train {method}", progress=progress, stop_after=stop_after)
    dist.close()
    return summary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", required=True, help="an --out-dir of `dape tokenize`")
    p.add_argument("--out-dir", required=True, help="receives model.pt, summary.json, metrics.jsonl")
    p.add_argument("--checkpoint-dir", default=None, help="periodic checkpoints (default: OUT_DIR/checkpoints)")
    fields.add_arguments(p, GPTConfig, exclude=NOT_TRAIN_OPTIONS)
    fields.add_arguments(p, TrainSettings)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--mem-mb", type=int, default=None,
                   help="the job's memory (resources mem_mb): a CPU job whose estimated peak exceeds it, or the "
                        "machine's memory, stops before it starts")
    p.add_argument("--gpu-mem-gb", type=float, default=None,
                   help="one GPU's memory (resources.train_lm.gpu_mem_gb): without --micro-batch-size, each process "
                        "runs its share of a micro-batch in the largest pieces that fit it (the memory model)")


def run(args) -> int:
    settings = fields.from_args(TrainSettings, args)
    config = fields.from_args(GPTConfig, args, train_len=settings.train_len)
    if args.mem_mb is not None:
        require_positive("mem_mb", args.mem_mb)
    if args.gpu_mem_gb is not None:
        require_positive("gpu_mem_gb", args.gpu_mem_gb, integer=False)
    summary = train(config, settings, args.data_dir, args.out_dir, args.checkpoint_dir, progress=not args.no_progress,
                    mem_mb=args.mem_mb, gpu_mem_gb=args.gpu_mem_gb)
    print(json.dumps({k: summary[k] for k in ("status", "steps_done", "final_loss", "tokens_per_s", "method")}))
    return 0
