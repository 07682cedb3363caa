"""The table of attention paths (:data:`PATHS`): one row per resolved value of ``attention_impl``, each with its
entry, the devices it runs on and its options. :mod:`dape_core.attention` looks a path up here.

Each path but ``plain`` is the module of this package of the same name, whose entry ``attend_<name>`` computes eq. 5
with a processor on rotated q, k: ``attend(q, k, v, *, encoding, processor, positions, causal, row_offset,
**options)``, causal or not, query row r being key ``row_offset`` + r (a KV cache's rows). ``plain`` is the
reference itself, the rows of :mod:`dape_core.attention`; without a processor every other path runs
``scaled_dot_product_attention`` there.
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
    (module docstring; None: the reference rows of :mod:`dape_core.attention`); ``runs_on(device)``: whether it can
    run there; ``options``: the keyword options its entry takes, of ``dropout_p``, ``chunk`` (query rows per chunk),
    ``dape_dtype`` and ``recompute_scores``; ``device_options``: its entry takes those
    :func:`~dape_core.implementations.path_options` names for the device too (``feature_map``, ``causal_chunks``,
    ``tf32_scores``); ``cuda_options``: on CUDA under 16-bit autocast they are ``CUDA_COMPILED_OPTIONS``;
    ``accelerator``: made for an accelerator (without a processor, SDPA in as few calls as its scores fit; else in
    chunks within a CPU core's caches); ``with_dropout``: the path that runs in its place under attention dropout
    (None: itself)."""

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
    """The row of the path ``name`` (a resolved ``attention_impl``); with ``dropout`` (attention dropout on), the row
    of the path that runs in its place."""
    path = PATHS[require_choice("attention_impl", name, PATHS)]
    return PATHS[path.with_dropout] if dropout and path.with_dropout else path
