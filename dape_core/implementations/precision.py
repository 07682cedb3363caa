"""Autocast as the attention paths read it: whether a device has it, its dtype where it is on, and a context with
it off (the paths keep A, B and the softmax in fp32 under bf16 autocast)."""

from __future__ import annotations

import contextlib

import torch


def has_autocast(device_type: str) -> bool:
    """Whether ``device_type`` has autocast (``meta`` has none). Inside a graph torch.compile traces: yes but on
    ``meta``, without asking torch, since TorchDynamo of torch 2.11 cannot trace ``torch.amp.is_autocast_available``
    on CUDA (graph breaks: benchmarks/results/README.md, gpu_step) and the compiler's devices all have autocast."""
    if torch.compiler.is_compiling():
        return device_type != "meta"
    return torch.amp.is_autocast_available(device_type)


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The autocast dtype where autocast is on for ``device_type``; None otherwise (and on ``meta``)."""
    if has_autocast(device_type) and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


def autocast_off(device_type: str):
    """A context with autocast off on ``device_type`` (nothing to turn off on devices without autocast)."""
    if has_autocast(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()
