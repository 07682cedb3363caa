"""The fast path of DAPE attention (``attention_impl: fast``, what ``auto`` runs on a CPU): the score processor in
blocked GEMMs inside :func:`attend_fast`'s chunks of query rows, equal to ``ScoreProcessor.forward`` (outputs and
gradients).

The convolutions are GEMMs over an unfolded key axis, one block of (batch elements × query rows) at a time, so the
hidden map stays in a CPU core's cache and is never stored (:mod:`~dape_core.implementations.fast_autograd`
recomputes it). Exact savings: Conv1's half on a batch-free bias B once per block of rows, or once per distance i − j
for a relative B at contiguous positions; under a causal mask only keys ≤ the last row + halo; tril, A + B + b₂ and
the output layout fused into copies the GEMMs need anyway. ``compute_dtype=torch.bfloat16``: the two GEMMs in bf16,
accumulated in fp32 (perplexity effect: benchmarks/results/README.md, bf16 perplexity).
"""

from __future__ import annotations

import math
import torch
import torch.nn.functional as F

from dape_core.dape import ScoreProcessor
from dape_core.encodings import PositionalEncoding
from dape_core.implementations.fast_autograd import DapeScores, Plan
from dape_core.positions import consecutive

DEFAULT_CHUNK_BYTES = 16 * 2**20  # one chunk's [batch, H, rows, T] fp32 scores on the fast path
MIN_CHUNK_ROWS = 64  # fewer query rows make q·kᵀ a memory-bound, matrix-vector-like product
DEFAULT_BLOCK_BYTES = 2 * 2**20  # hidden map per block: stays in the caches of a CPU core (measured: 2–8 MB)
DEFAULT_BLOCK_ROWS = 16  # query rows per block: the granularity of skipping the masked upper triangle


def auto_chunk_rows(batch: int, heads: int, n: int, budget: int = DEFAULT_CHUNK_BYTES) -> int:
    """Query rows per chunk on the fast path: one chunk's fp32 scores within ``budget``, at least 64 rows."""
    return max(MIN_CHUNK_ROWS, budget // max(1, batch * heads * n * 4))


def attend_fast(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    encoding: PositionalEncoding,
    processor: ScoreProcessor,
    positions: torch.Tensor,
    causal: bool,
    row_offset: int = 0,
    dropout_p: float = 0.0,
    chunk: int | None = None,
    dape_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """softmax(mask(A + B + f(tril([A; B])))) · V (eq. 5) for q [batch, H, Tq, d_head] and k, v [batch, H, Tk,
    d_head] (already rotated; query row r is key ``row_offset`` + r, ``positions`` [Tk] are the keys'), per chunk of
    ``chunk`` rows (default :func:`auto_chunk_rows`), the processor by :func:`blocked_scores` (GEMMs in
    ``dape_dtype``). Returns [batch, H, Tq, d_head]."""
    n, n_keys, scale = q.shape[2], k.shape[2], 1.0 / math.sqrt(q.shape[-1])
    relative = encoding.relative_bias and n_keys > 1 and consecutive(positions)
    halo = processor.needed_halo()

    def attend_rows(r0, r1):
        first, last = row_offset + r0, row_offset + r1
        keys_read, keys_kept = key_range(halo, causal, last, n_keys)
        q_rows, k_read = q[:, :, r0:r1], k[:, :, :keys_read]
        scores = torch.matmul(q_rows, k_read.transpose(-2, -1)).mul_(scale)  # A = q·kᵀ/√d
        bias = None
        if encoding.has_bias:
            bias = encoding.bias(q_rows, k_read, scores, positions[first:last], positions[:keys_read])  # B
        scores = blocked_scores(processor, scores, bias, first, causal=causal, keys_out=keys_kept,
                                compute_dtype=dape_dtype, relative_bias=relative)
        probs = torch.softmax(scores, dim=-1)
        if dropout_p > 0:
            probs = F.dropout(probs, p=dropout_p)
        return torch.matmul(probs.to(v.dtype), v[:, :, :keys_kept])

    return by_row_chunks(attend_rows, n, chunk or auto_chunk_rows(q.shape[0], q.shape[1], n_keys))


def by_row_chunks(attend_rows, n: int, chunk: int) -> torch.Tensor:
    """``attend_rows(r0, r1)`` for chunks of ``chunk`` query rows, concatenated in order along dim 2; largest chunk
    first, so later chunks reuse its memory."""
    starts = range(0, n, chunk)
    chunks = {r0: attend_rows(r0, min(n, r0 + chunk)) for r0 in reversed(starts)}
    return chunks[0] if len(chunks) == 1 else torch.cat([chunks[r0] for r0 in starts], dim=2)


def key_range(halo: int, causal: bool, rows_end: int, n_keys: int) -> tuple[int, int]:
    """(keys read, keys kept) of the query rows before key ``rows_end``: under the causal mask up to ``halo`` keys
    right of the last row read (the processor's) and the keys ≤ the last row kept; else every key."""
    return (min(n_keys, rows_end + halo), rows_end) if causal else (n_keys, n_keys)


def blocked_scores(
    processor: ScoreProcessor,
    scores: torch.Tensor,
    bias: torch.Tensor | None,
    row_offset: int = 0,
    *,
    causal: bool = False,
    keys_out: int | None = None,
    compute_dtype: torch.dtype | None = None,
    block_bytes: int | None = None,
    block_rows: int | None = None,
    share_bias: bool = True,
    relative_bias: bool = False,
) -> torch.Tensor:
    """Equals ``processor(scores, bias, row_offset)`` (``ScoreProcessor.forward``) on the first ``keys_out`` keys.

    ``causal=True`` applies the causal mask too (−inf right of each query row), exact provided ``scores`` holds the
    keys up to the last row + ``needed_halo()``. ``share_bias``: Conv1's half on a batch-free bias once per block of
    rows (else per batch element); ``relative_bias``: the caller guarantees B[i, j] = φ(i − j) (a relative encoding at
    contiguous positions), so under tril and the causal mask Conv1's bias half is computed once per distance.
    """
    if processor.bias_channels and bias is None:
        raise ValueError("this processor was built for an encoding with a bias, but got none")
    batch, heads, _, tk = scores.shape
    if not processor.bias_channels:
        mode = "none"
    elif bias.dim() == 3 and relative_bias and processor.tril and causal and processor.kernel_size > 1:
        mode = "relative"  # Conv1's bias half once per distance i − j
    elif bias.dim() == 3 and batch > 1 and share_bias:
        mode = "shared"  # Conv1's bias half once per block of rows, not once per batch element
    else:
        mode = "batched"
        bias = bias.expand(batch, -1, -1, -1)  # [H, Tq, Tk] or [batch or 1, H, Tq, Tk]
    w1, b1, w2, b2 = gemm_weights(processor)
    if mode in ("shared", "relative"):  # split W1's (tap, channel) columns into the score and the bias half
        w1 = w1.view(processor.dape_width, processor.kernel_size, 2, heads)
        w1a, w1b = w1[:, :, 0].reshape(processor.dape_width, -1), w1[:, :, 1].reshape(processor.dape_width, -1)
    else:
        w1a, w1b = w1, None
    plan = Plan(
        kernel_size=processor.kernel_size,
        left=processor.left_padding,
        mode=mode,
        tril=processor.tril,
        row_offset=row_offset,
        halo=processor.needed_halo() if causal else None,
        keys_out=tk if keys_out is None else min(keys_out, tk),
        compute_dtype=compute_dtype or scores.dtype,
        block_bytes=block_bytes or DEFAULT_BLOCK_BYTES,
        block_rows=block_rows or DEFAULT_BLOCK_ROWS,
    )
    return DapeScores.apply(scores, bias, w1a, w1b, b1, w2, b2, plan)


def gemm_weights(processor: ScoreProcessor):
    """(W1 [D, k·C] in (tap, channel) order, b1, W2 [k·H, D] in (tap, head) order, b2), differentiable views of the
    layer's parameters: Conv1 is W1 on k shifted copies of its input, Conv2 the sum of W2·hidden's k shifted slices."""
    if processor.processor == "dape_v1":
        first, second = processor.mlp[0], processor.mlp[2]
        return first.weight, first.bias, second.weight, second.bias
    d, k = processor.dape_width, processor.kernel_size
    w1 = processor.conv1.weight[:, :, 0, :].transpose(1, 2).reshape(d, -1)
    w2 = processor.conv2.weight[:, :, 0, :].permute(2, 0, 1).reshape(k * processor.n_head, d)
    return w1, processor.conv1.bias, w2, processor.conv2.bias
