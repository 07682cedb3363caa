"""The device a timing process runs on (CUDA when a GPU is present, the CPU otherwise), what a row records of it,
how its queued work is waited for, and what a timed pass runs under there: the autocast of its precision and the
attention path ``attention_impl`` resolves to."""

from __future__ import annotations

import torch

from dape_core.implementations import resolve_attention_impl
from dape_core.settings.model import GPTConfig, layer_sizes

AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # precision → autocast dtype


def timing_device() -> torch.device:
    """The device of a timing process: CUDA when a GPU is present, the CPU otherwise (chosen once per process)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(device: torch.device) -> str:
    """What a row records as its device: the GPU's name, or ``cpu``."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; the CPU has nothing to wait for)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pass_autocast(device: torch.device, dtype: torch.dtype | None):
    """The autocast a timed pass runs under (``dtype`` None: none)."""
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


def pass_path(cfg: GPTConfig, device: torch.device, mode: str, dtype: torch.dtype | None) -> str:
    """The path a timed pass of ``mode`` runs on (``auto`` resolved under the pass's gradient mode and autocast)."""
    with torch.set_grad_enabled(mode == "train_step"), pass_autocast(device, dtype):
        return resolve_attention_impl(cfg.attention_impl, device, layer_sizes(cfg))
