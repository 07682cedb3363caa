"""What the Triton kernels (the fused path's and the feature map's) share: ``tl.dot``'s sizes, their dtypes, and
where they run (CUDA with Triton importable, or the CPU under Triton's interpreter)."""

from __future__ import annotations

import os

import torch

from dape_core.errors import ConfigError

MIN_DOT = 16  # the smallest dimension tl.dot takes: heads, D_DAPE and the head size are padded to it
DOT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # the dtypes the kernels' products take


def pow2(n: int) -> int:
    """The smallest power of two ≥ n (1 for n ≤ 1)."""
    return 1 << max(0, (n - 1).bit_length())


def dot_size(n: int) -> int:
    """n padded to what tl.dot takes: a power of two, at least MIN_DOT."""
    return max(MIN_DOT, pow2(n))


def interpreted() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1`` when it was imported)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def dot_settings(tl, dtype: torch.dtype) -> dict:
    """The kernels' ``DOT`` (the products' operand dtype, of Triton's ``tl``) and ``PRECISION`` for ``dtype`` inputs."""
    dot = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[dtype]
    return dict(DOT=dot, PRECISION="ieee" if dtype == torch.float32 else "tf32")


def persistent_programs(device: torch.device, items: int, programs: int | None = None) -> int:
    """Persistent programs over ``items`` work items: ``programs`` if set, else 4 per streaming multiprocessor on
    CUDA, 8 elsewhere; at most the items, at least 1."""
    if not programs:
        programs = 4 * torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 8
    return max(1, min(items, programs))


def kernels_run_on(device: torch.device | str, load) -> bool:
    """Whether Triton kernels (module imported by ``load``, raising ConfigError without Triton) run on ``device``."""
    kind = torch.device(device).type
    try:
        load()
    except ConfigError:
        return False
    return kind == "cuda" or (kind == "cpu" and interpreted())
