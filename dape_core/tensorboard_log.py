"""TensorBoard event files of a training job: loss, learning rate, gradient norm, throughput and memory.

Rank 0 writes them into ``<out-dir>/tensorboard/`` (``tensorboard --logdir results/`` shows every run of a DAG). A
resumed job opens the writer with ``purge_step`` at its first step, so the events a killed job wrote after its last
checkpoint are hidden and each step shows once (a job trained again from step 0 hides every earlier event).
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

import torch

def memory_mb(device: torch.device) -> tuple[str, float]:
    """(name, MiB): the peak CUDA memory allocated on a GPU, the process's resident set size on a CPU."""
    if device.type == "cuda":
        return "cuda_max_allocated_mb", torch.cuda.max_memory_allocated(device) / 2**20
    try:
        with open("/proc/self/statm") as f:
            return "rss_mb", int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: the peak resident set size (bytes on macOS, KiB elsewhere)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return "rss_mb", peak / (2**20 if sys.platform == "darwin" else 2**10)


class TrainingLog:
    """The event writer of one job; a no-op where ``enabled`` is false (processes other than rank 0)."""

    def __init__(self, directory: str | Path, *, first_step: int, enabled: bool = True):
        self.writer = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(directory), purge_step=first_step)

    def step(self, step: int, *, loss: float, lr: float, grad_norm: float | None = None) -> None:
        """The values of one optimiser step (``grad_norm``: ``clip_grad_norm_``'s total norm before clipping)."""
        if self.writer is None:
            return
        self.writer.add_scalar("train/loss", loss, step)
        self.writer.add_scalar("train/lr", lr, step)
        if grad_norm is not None:
            self.writer.add_scalar("train/grad_norm", grad_norm, step)

    def window(self, step: int, *, tokens_per_s: float, device: torch.device) -> None:
        """Throughput over the steps since the previous call, and memory now."""
        if self.writer is None:
            return
        self.writer.add_scalar("train/tokens_per_s", tokens_per_s, step)
        name, value = memory_mb(device)
        self.writer.add_scalar(f"memory/{name}", value, step)

    def flush(self) -> None:
        """Events so far to disk (before a checkpoint, so a killed job loses none that its resume keeps)."""
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
