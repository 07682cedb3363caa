"""The table of attention paths (:data:`PATHS`): one row per resolved ``attention_impl``, with its entry, devices and
options, looked up by :mod:`dape_core.attention`.

Each path but ``plain`` (the reference rows of :mod:`dape_core.attention`) is this package's module of that name,
whose entry computes eq. 5 with a processor on rotated q, k: ``attend_<name>(q, k, v, *, encoding, processor,
positions, causal, row_offset, **options)``, query row r being key ``row_offset`` + r (a KV cache's rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dape_core.errors import require_choice
from dape_core.implementations.compiled import attend_compiled
from dape_core.implementations.fast import attend_fast
from dape_core.implementations.fused import attend_fused, fused_runs_on
from dape_core.implementations.materialized import attend_materialized

CHUNKED_OPTIONS = ("dropout_p", "chunk", "dape_dtype", "recompute_scores")  # the materialized and compiled paths'


def anywhere(device: torch.device | str) -> bool:
    """Every device torch runs on."""
    return True


@dataclass(frozen=True)
class AttentionImpl:
    """One attention path (all compute the same function, §3 eq. 1–5). ``attend``: its entry with a processor
    (None: the reference rows of :mod:`dape_core.attention`); ``runs_on(device)``: whether it can run there;
    ``options``: the keywords its entry takes, of ``dropout_p``, ``chunk`` (query rows per chunk), ``dape_dtype``,
    ``recompute_scores``; ``device_options``: it also takes :func:`~dape_core.implementations.path_options`'s
    (``feature_map``, ``causal_chunks``, ``tf32_scores``); ``cuda_options``: on CUDA under 16-bit autocast those are
    ``CUDA_COMPILED_OPTIONS``; ``accelerator``: without a processor, SDPA in as few calls as its scores fit (else in
    chunks within a CPU core's caches); ``with_dropout``: the path run under attention dropout (None: itself)."""

    name: str
    attend: Callable[..., torch.Tensor] | None
    runs_on: Callable[[torch.device | str], bool] = anywhere
    options: tuple[str, ...] = ()
    device_options: bool = False
    cuda_options: bool = False
    accelerator: bool = False
    with_dropout: str | None = None


PATHS = {
    "plain": AttentionImpl("plain", None),
    "fast": AttentionImpl("fast", attend_fast, options=("dropout_p", "chunk", "dape_dtype")),
    "materialized": AttentionImpl("materialized", attend_materialized, options=CHUNKED_OPTIONS, device_options=True,
                                  accelerator=True),
    "compiled": AttentionImpl("compiled", attend_compiled, options=CHUNKED_OPTIONS, device_options=True,
                              cuda_options=True, accelerator=True),
    # the kernel has no attention dropout
    "fused": AttentionImpl("fused", attend_fused, runs_on=fused_runs_on, accelerator=True,
                           with_dropout="materialized"),
}


def attention_path(name: str, *, dropout: bool = False) -> AttentionImpl:
    """The row of path ``name`` (a resolved ``attention_impl``); with ``dropout``, of the path run in its place."""
    path = PATHS[require_choice("attention_impl", name, PATHS)]
    return PATHS[path.with_dropout] if dropout and path.with_dropout else path
