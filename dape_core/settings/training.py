"""The settings of a training run (paper appendix I; public-code values where the paper is silent), torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from dape_core.errors import ConfigError, require_positive
from dape_core.settings.fields import check_choices, setting
from dape_core.settings.model import GPTConfig

#: GPTConfig fields that `dape train` does not take as options (the data, the shape rule and the evaluation set them)
NOT_TRAIN_OPTIONS = ("vocab_size", "d_ff", "train_len", "query_chunk_size")
DISTRIBUTED = ("none", "ddp", "fsdp")  # how `dape train` spreads one run over the processes torchrun starts
PRECISIONS = ("fp32", "bf16")
#: settings that change how a run is computed, not its numbers (compile: to fp32 rounding; micro_batch_size: the
#: same gradient in pieces): a checkpoint resumes across them
NOT_HASHED = ("threads", "checkpoint_every", "log_every", "activation_checkpointing", "micro_batch_size", "compile")


@dataclass(kw_only=True)
class TrainSettings:
    """Optimisation settings (appendix I; public-code values where the paper is silent)."""

    train_len: int = setting(GPTConfig.train_len, help="training length")
    batch_size: int = setting(32, help="sequences per optimiser step (global, split across processes)")
    grad_accum: int = setting(1, help="micro-batches per optimiser step")
    steps: int = setting(1000, help="optimiser steps")
    lr: float = setting(6e-4, help="peak learning rate")
    min_lr_ratio: float = setting(0.1, help="cosine decay ends at min_lr_ratio × lr")
    warmup_ratio: float = setting(0.01, help="linear warm-up over this share of the steps")
    weight_decay: float = setting(0.1, help="AdamW weight decay (matrices only)")
    grad_clip: float = setting(1.0, help="global gradient-norm clip")
    beta1: float = setting(0.9, help="AdamW β1")
    beta2: float = setting(0.95, help="AdamW β2")
    precision: str = setting("fp32", choices=PRECISIONS, help="fp32, or bf16 autocast")
    seed: int = setting(0, help="seed of the initialisation and the data order")
    threads: int = setting(2, help="CPU threads")
    checkpoint_every: int = setting(200, help="steps between resume checkpoints")
    log_every: int = setting(10, help="steps between metrics lines")
    distributed: str = setting("none", choices=DISTRIBUTED,
                               help="under torchrun: ddp (a replica per process) or fsdp (FSDP2, parameters, "
                                    "gradients and optimiser state sharded); gloo on CPU, NCCL on GPU")
    activation_checkpointing: bool = setting(False, help="recompute each block's activations in the backward pass "
                                                         "instead of storing them (less memory, more compute)")
    micro_batch_size: int | None = setting(None, help="the most sequences one process runs through the model at "
                                                      "once: each micro-batch runs in equal pieces of this size "
                                                      "(a divisor of its share), the same gradient in less memory; "
                                                      "unset with --gpu-mem-gb (the workflow passes "
                                                      "resources.train_lm.gpu_mem_gb): "
                                                      "the memory model's largest that fits")
    compile: bool = setting(False, help="train the model under torch.compile(fullgraph=True): one graph per shape, "
                                        "the same numbers to fp32 rounding; evaluation stays eager")

    def __post_init__(self):
        check_choices(self, TrainSettings)
        for name in ("train_len", "batch_size", "grad_accum", "threads", "checkpoint_every", "log_every"):
            require_positive(name, getattr(self, name))
        if self.micro_batch_size is not None:
            require_positive("micro_batch_size", self.micro_batch_size)
        if not isinstance(self.steps, int) or isinstance(self.steps, bool) or self.steps < 0:
            raise ConfigError(f"steps: {self.steps!r} is not allowed; allowed values: an integer ≥ 1 (≥ 0 for "
                              "`dape finetune` of a base_model: 0 evaluates the checkpoint as it is)")
        require_positive("lr", self.lr, integer=False)
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"min_lr_ratio: {self.min_lr_ratio!r} is not allowed; allowed values: 0 ≤ x ≤ 1")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio: {self.warmup_ratio!r} is not allowed; allowed values: 0 ≤ x < 1")
        if self.compile and self.distributed == "fsdp":
            raise ConfigError("compile: true is not allowed with distributed fsdp (FSDP2's hooks around each block "
                              "do not trace into one graph); allowed values: false, or distributed none or ddp")


def require_training_steps(settings: TrainSettings) -> None:
    """`dape train` trains a fresh model: at least one step (``steps: 0`` is only `dape finetune`'s export of a
    checkpoint as it is)."""
    if settings.steps < 1:
        raise ConfigError(f"steps: {settings.steps} is not allowed for `dape train`; allowed values: a positive "
                          "integer (0 is `dape finetune`'s export of a checkpoint as it is)")
