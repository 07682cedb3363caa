"""Data parallelism inside one training job under torchrun: DDP (a replica per process) or FSDP2 (sharded).

``ddp`` keeps a full replica per process and averages gradients (``DistributedDataParallel``). ``fsdp`` shards every
parameter, gradient and optimiser state on dim 0 (``torch.distributed.fsdp.fully_shard``): each transformer block is
one all-gather unit, the root (embedding, head, final norm, positional encodings, DAPE processors) another. NCCL on
GPU, gloo on CPU. ``none``, or any mode outside torchrun (``WORLD_SIZE`` unset or 1), trains in one process.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch
from torch import nn


class Distributed:
    """The process group of a training job and the model wrapping of its mode (``none``, ``ddp`` or ``fsdp``)."""

    def __init__(self, mode: str):
        world = int(os.environ.get("WORLD_SIZE", "1"))
        self.mode = mode if mode != "none" and world > 1 else "none"
        self.enabled = self.mode != "none"
        self.rank = int(os.environ.get("RANK", "0")) if self.enabled else 0
        self.world = world if self.enabled else 1
        self.device = torch.device("cpu")
        self.mesh = None
        if self.enabled:
            torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
            if torch.cuda.is_available():
                self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
                torch.cuda.set_device(self.device)
        elif torch.cuda.is_available():
            self.device = torch.device("cuda")

    @property
    def sharded(self) -> bool:
        return self.mode == "fsdp"

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module to call in the training loop. ``fsdp`` shards ``model`` in place (each block, then the root),
        so build the optimiser from ``model.parameters()`` after this call."""
        if self.mode == "ddp":
            ids = [self.device.index] if self.device.type == "cuda" else None
            return nn.parallel.DistributedDataParallel(model, device_ids=ids)
        if self.mode == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            self.mesh = init_device_mesh(self.device.type, (self.world,))
            for block in model.stack.blocks:
                fully_shard(block, mesh=self.mesh)
            fully_shard(model, mesh=self.mesh)
        return model

    @contextlib.contextmanager
    def accumulating(self, wrapped: nn.Module, last: bool) -> Iterator[None]:
        """Backward passes of a micro-batch: gradients are reduced across processes only with the last one."""
        if self.mode == "ddp" and not last:
            with wrapped.no_sync():
                yield
            return
        if self.mode == "fsdp":
            wrapped.set_requires_gradient_sync(last)
        yield

    def mean(self, value: float) -> float:
        if not self.enabled:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t)
        return float(t) / self.world

    def gather(self, value: int) -> list[int]:
        """``value`` of every process, in rank order."""
        if not self.enabled:
            return [value]
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        out = [torch.zeros_like(t) for _ in range(self.world)]
        torch.distributed.all_gather(out, t)
        return [int(x) for x in out]

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier()

    def local_parameters(self, model: nn.Module) -> int:
        """Parameter elements this process stores (its shards under ``fsdp``; every element otherwise)."""
        return sum(local_tensor(p).numel() for p in model.parameters())

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The model's plain state dict (an unwrapped ``GPT``'s keys), gathered on CPU under ``fsdp``: a collective
        that every process calls; ranks other than 0 receive an empty dict."""
        if not self.sharded:
            return model.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def close(self) -> None:
        if self.enabled:
            torch.distributed.destroy_process_group()


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """This process's part of a (possibly sharded) tensor: the local shard of a DTensor, else the tensor."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def full_value(t: torch.Tensor) -> float:
    """A scalar tensor as a float; a DTensor (e.g. ``clip_grad_norm_``'s result under FSDP) is reduced first."""
    from torch.distributed.tensor import DTensor

    return float(t.full_tensor() if isinstance(t, DTensor) else t)
