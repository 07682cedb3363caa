"""The materialized path compiled (``attention_impl: compiled``): :func:`attend_materialized`'s chunks of query rows,
each one ``torch.compile`` (TorchInductor) graph, with the same arithmetic, precision and recomputation (eq. 5).

The elementwise steps between the products and convolutions (the channels-last copy of tril([A; B]), LeakyReLU,
A + B + f, the mask, softmax) fuse into a few kernels, forward and backward; products and convolutions stay the
vendor libraries'. Chunks are larger (:data:`CHUNK_BYTES`, 4 GiB: one per layer for the 125M model at 16,384 tokens
and T 512), so fewer kernels and graphs; the memory model (:mod:`dape_core.memory`) reads the same budget.

One compiled function serves every layer (modules as arguments, parameters as graph inputs). Shapes are static: each
chunk shape and option mix compiles once, all counted against one function's recompilation limit (8 by default, past
which ``fullgraph`` fails), so the limit is raised to ``accumulated_recompile_limit`` (256 by default). Inside a graph
``torch.compile`` already traces (``training.compile``) the chunks are traced uncompiled; under attention dropout they
run uncompiled, since a compiled graph's random numbers would not repeat in the backward's recomputation.
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
    """:func:`chunk_attention` under ``torch.compile(fullgraph=True, dynamic=False)``, once per ``backend``."""
    return torch.compile(chunk_attention, fullgraph=True, dynamic=False, backend=backend)


def attend_compiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, processor, causal: bool,
                    chunk: int | None = None, dropout_p: float = 0.0, dape_dtype: torch.dtype | None = None,
                    causal_chunks: int = 1, **kwargs) -> torch.Tensor:
    """:func:`attend_materialized` (eq. 5; its arguments and result) with each chunk compiled, of ``chunk`` rows
    (default: :func:`compiled_chunk_rows`; under the causal mask at least ``causal_chunks`` chunks)."""
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
