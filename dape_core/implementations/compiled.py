"""The materialized path compiled (``attention_impl: compiled``): :func:`attend_materialized`'s chunks of query rows,
each one graph compiled by ``torch.compile`` (TorchInductor): the same arithmetic and precision (eq. 5).

The materialized path runs a chunk as separate operators — A, B, the channels-last copy of tril([A; B]), Conv1,
LeakyReLU, Conv2, A + B + f, the causal mask, softmax, ·V — each streaming [batch, channels, rows, keys] maps
through memory. Compiled, the elementwise steps between the products and the convolutions fuse into a few kernels
(the products and convolutions stay the vendor libraries'), in the forward pass and in the backward pass, which
AOTAutograd traces from the same graph. The recomputation (``recompute_scores``) is the materialized path's; the
chunks are larger (:data:`CHUNK_BYTES`, 4 GiB: one chunk per layer for the 125M model at 16,384 tokens and
T 512): fewer, larger kernels and fewer graphs to compile. The memory model (:mod:`dape_core.memory`) reads the
same budget.

One compiled function serves every layer: the chunk's function takes its modules as arguments, whose parameters
are graph inputs, so every layer reuses the first one's graph. Shapes are static: each distinct chunk shape (the
chunks of one length, a new length, each of ``causal_chunks``' chunks) and option mix compiles once. Dynamo counts
all of them against one function's recompilation limit (8 by default), and with ``fullgraph`` a compilation past it
fails: a process that evaluates at several lengths, or a benchmark that mixes options, meets more. So the limit is
raised to Dynamo's accumulated limit (``accumulated_recompile_limit``, 256 by default), past which compiling
again fails loudly. Inside a graph that ``torch.compile`` already traces (``training.compile``) the chunks
are traced into it uncompiled. With attention dropout the chunks run uncompiled (the materialized path itself):
the compiled graph's random numbers would not repeat those of the recomputation in the backward pass.
"""

from __future__ import annotations

import functools

import torch

from dape_core.implementations.materialized import (attend_materialized, causal_chunk, chunk_attention, chunk_rows,
                                                    feature_itemsize)

BACKEND = "inductor"  # torch.compile's backend for the chunks (the tests trace with others)
CHUNK_BYTES = 4 * 2**30  # one chunk's temporaries (materialized.chunk_bytes), the compiled path's budget


@functools.cache
def compiled_chunk(backend=BACKEND):
    """:func:`chunk_attention` under ``torch.compile(fullgraph=True, dynamic=False)`` with ``backend``, once per
    process and backend."""
    return torch.compile(chunk_attention, fullgraph=True, dynamic=False, backend=backend)


def attend_compiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, processor, causal: bool,
                    chunk: int | None = None, dropout_p: float = 0.0, dape_dtype: torch.dtype | None = None,
                    causal_chunks: int = 1, **kwargs) -> torch.Tensor:
    """:func:`attend_materialized` (eq. 5; its arguments and result) with each chunk compiled, chunks of ``chunk``
    rows (default: :func:`compiled_chunk_rows`; under the causal mask at least ``causal_chunks`` of them)."""
    if chunk is None:
        chunk = compiled_chunk_rows(processor, q.shape[0], k.shape[2], feature_itemsize=feature_itemsize(q, dape_dtype))
    chunk = causal_chunk(chunk, q.shape[2], causal=causal, causal_chunks=causal_chunks)
    options = dict(processor=processor, causal=causal, chunk=chunk, dropout_p=dropout_p, dape_dtype=dape_dtype,
                   **kwargs)
    if dropout_p > 0 or torch.compiler.is_compiling():
        return attend_materialized(q, k, v, **options)
    from torch import _dynamo  # here: importing it costs every process ~1.5 s, and most never compile

    limit = max(_dynamo.config.recompile_limit, _dynamo.config.accumulated_recompile_limit)  # module docstring
    with _dynamo.config.patch(recompile_limit=limit):
        return attend_materialized(q, k, v, chunk_fn=compiled_chunk(BACKEND), **options)


def compiled_chunk_rows(processor, batch: int, n: int, *, feature_itemsize: int = 4) -> int:
    """Query rows per chunk on this path: :func:`chunk_rows` within :data:`CHUNK_BYTES`."""
    return chunk_rows(processor, batch, n, budget=CHUNK_BYTES, feature_itemsize=feature_itemsize)
