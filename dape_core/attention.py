"""Attention with the paper's score pipeline in one place (paper §3, eq. 1–5).

    scores = q·kᵀ/√d  →  + encoding bias B  →  DAPE processor  →  causal mask  →  softmax  →  ·V

``attention_impl`` is a resolved path (``plain``, ``fast`` or ``materialized``;
:func:`dape_core.implementations.resolve_attention_impl` turns ``auto`` into one of them by device). Five ways to
run it, all computing the same function:
* the plain path (``attention_impl="plain"``, ``_attend_rows`` on all rows): the readable reference, materialises
  [batch, H, T, T] and the processor's [batch, 2H, T, T] input and [batch, D_DAPE, T, T] hidden map;
* without a processor on the fast and materialized paths, ``scaled_dot_product_attention`` (B as a float mask, in
  query chunks at long lengths: each chunk reads only the keys its rows can reach, and the mask is never
  [H, T, T] whole);
* with a processor on the fast path (``_attend_processed``, the CPU's): query rows in chunks, the processor's
  blocked GEMM form (:mod:`dape_core.implementations.blocked`), each chunk reading only the keys its rows reach;
* with a processor on the materialized path (the accelerator's): the reference's arithmetic per chunk of query
  rows with operator calls independent of the batch (:mod:`dape_core.implementations.materialized`);
* an exact query-chunked plain path (``query_chunk_size`` with ``attention_impl="plain"``): the 1×k convolution runs
  along keys only, so query rows are independent. A chunk of rows r0…r1−1 needs its row offset (for tril and
  the causal mask) and, with ``same`` padding, the key columns right of its last row that the convolutions
  read (``ScoreProcessor.needed_halo``); keys beyond are never read. Peak memory then grows with
  chunk × T × dape_width instead of T² × dape_width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dape_core.dape import ScoreProcessor
from dape_core.encodings import PositionalEncoding
from dape_core.errors import require_choice
from dape_core.implementations.blocked import blocked_scores
from dape_core.implementations.materialized import attend_materialized

DEFAULT_CHUNK_BYTES = 16 * 2**20  # one chunk's [batch, H, rows, T] fp32 scores on the fast path
MIN_CHUNK_ROWS = 64  # fewer query rows make q·kᵀ a memory-bound, matrix-vector-like product
PATHS = ("plain", "fast", "materialized")  # the resolved values of ``attention_impl``


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    encoding: PositionalEncoding,
    processor: ScoreProcessor | None,
    positions: torch.Tensor,
    causal: bool,
    dropout_p: float = 0.0,
    query_chunk_size: int | None = None,
    attention_impl: str = "fast",
    dape_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Self-attention of q, k, v [batch, H, T, d_head] at ``positions`` [T] on the path ``attention_impl``;
    returns [batch, H, T, d_head]."""
    require_choice("attention_impl", attention_impl, PATHS)
    q, k = encoding.rotate(q, k, positions, positions)
    n = q.shape[2]
    if processor is not None and attention_impl == "materialized":
        return attend_materialized(
            q, k, v, encoding=encoding, processor=processor, positions=positions, causal=causal,
            dropout_p=dropout_p, chunk=query_chunk_size, dape_dtype=dape_dtype,
        )
    fast_path = attention_impl != "plain"
    if processor is not None and fast_path:
        return _attend_processed(
            q, k, v, encoding=encoding, processor=processor, positions=positions, causal=causal,
            dropout_p=dropout_p, chunk=query_chunk_size or auto_chunk_rows(q.shape[0], q.shape[1], n),
            dape_dtype=dape_dtype,
        )
    kwargs = dict(
        encoding=encoding, processor=processor, positions=positions, causal=causal, dropout_p=dropout_p,
        fast_path=fast_path,
    )
    if fast_path and processor is None and encoding.has_bias and not query_chunk_size:
        query_chunk_size = auto_chunk_rows(q.shape[0], q.shape[1], n)  # SDPA with a float mask: rows ≤ keys only
    if not query_chunk_size or n <= query_chunk_size:
        return _attend_rows(q, k, v, 0, **kwargs)
    starts = range(0, n, query_chunk_size)
    chunks = {r0: _attend_rows(q[:, :, r0 : r0 + query_chunk_size], k, v, r0, **kwargs) for r0 in _longest_first(starts)}
    return torch.cat([chunks[r0] for r0 in starts], dim=2)


def _longest_first(starts: range) -> list[int]:
    """Chunks in reverse order: each chunk's [.., rows, keys] temporaries are then no larger than the previous
    chunk's, so the allocator reuses their memory instead of growing the heap (peak memory at long lengths)."""
    return list(reversed(starts))


def auto_chunk_rows(batch: int, heads: int, n: int, budget: int = DEFAULT_CHUNK_BYTES) -> int:
    """Query rows per chunk on the fast path: one chunk's fp32 scores within ``budget``, at least 64 rows."""
    return max(MIN_CHUNK_ROWS, budget // max(1, batch * heads * n * 4))


def _key_range(processor, causal, rows_end, n):
    """(keys read, keys kept): the processor reads up to its halo right of the last row, the mask keeps ≤ row."""
    if not causal:
        return n, n
    halo = processor.needed_halo() if processor is not None else 0
    return min(n, rows_end + halo), rows_end


def _causal_allowed(row_offset, rows_end, keys_kept, device):
    row_index = torch.arange(row_offset, rows_end, device=device)[:, None]
    return torch.arange(keys_kept, device=device)[None, :] <= row_index


def _attend_processed(q, k, v, *, encoding, processor, positions, causal, dropout_p, chunk, dape_dtype):
    """The fast path with a processor: per chunk of query rows, q·kᵀ/√d on the keys the rows reach, B, the
    processor's blocked form (A + B + f with the causal mask), softmax, ·V."""
    n, scale = q.shape[2], 1.0 / math.sqrt(q.shape[-1])
    relative = encoding.relative_bias and n > 1 and bool((positions[1:] - positions[:-1] == 1).all())
    outputs = {}
    for r0 in _longest_first(range(0, n, chunk)):
        rows_end = min(n, r0 + chunk)
        keys_read, keys_kept = _key_range(processor, causal, rows_end, n)
        q_rows, k_read = q[:, :, r0:rows_end], k[:, :, :keys_read]
        scores = torch.matmul(q_rows, k_read.transpose(-2, -1)).mul_(scale)  # A = q·kᵀ/√d
        bias = encoding.bias(q_rows, k_read, scores, positions[r0:rows_end], positions[:keys_read]) if encoding.has_bias else None
        scores = blocked_scores(
            processor, scores, bias, r0, causal=causal, keys_out=keys_kept, compute_dtype=dape_dtype,
            relative_bias=relative,
        )
        probs = torch.softmax(scores, dim=-1)
        if dropout_p > 0:
            probs = F.dropout(probs, p=dropout_p)
        outputs[r0] = torch.matmul(probs, v[:, :, :keys_kept])
    return outputs[0] if len(outputs) == 1 else torch.cat([outputs[r0] for r0 in sorted(outputs)], dim=2)


def _attend_rows(q, k, v, row_offset, *, encoding, processor, positions, causal, dropout_p, fast_path):
    """Attention output for query rows ``row_offset … row_offset + len(q) − 1`` against the keys they can reach."""
    rows_end = row_offset + q.shape[2]
    q_pos = positions[row_offset:rows_end]
    keys_read, keys_kept = _key_range(processor, causal, rows_end, k.shape[2])
    k_read, k_pos = k[:, :, :keys_read], positions[:keys_read]
    allowed = _causal_allowed(row_offset, rows_end, keys_kept, q.device) if causal else None

    if processor is None and fast_path and not encoding.needs_scores:
        bias = encoding.bias(q, k_read, None, q_pos, k_pos) if encoding.has_bias else None
        if bias is None and causal and row_offset == 0 and keys_kept == q.shape[2]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        mask = allowed if bias is None else bias
        if bias is not None and allowed is not None:
            mask = bias[..., :keys_kept].masked_fill(~allowed, float("-inf"))
        return F.scaled_dot_product_attention(q, k[:, :, :keys_kept], v[:, :, :keys_kept], attn_mask=mask, dropout_p=dropout_p)

    scores = torch.matmul(q, k_read.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # A = q·kᵀ/√d
    bias = encoding.bias(q, k_read, scores, q_pos, k_pos) if encoding.has_bias else None  # B
    if processor is not None:
        scores = processor(scores, bias, row_offset)  # A + B + f(tril([A; B]))
    elif bias is not None:
        scores = scores + bias
    scores = scores[..., :keys_kept]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0:
        probs = F.dropout(probs, p=dropout_p)
    return torch.matmul(probs, v[:, :, :keys_kept])


class SelfAttention(nn.Module):
    """Multi-head self-attention whose scores go through ``attend``; one processor per layer."""

    def __init__(self, d_model: int, n_head: int, *, causal: bool, dropout: float = 0.0):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model: {d_model} is not divisible by n_head {n_head}; allowed values: multiples of n_head")
        self.n_head = n_head
        self.head_dim = d_model // n_head
        self.causal = causal
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, *, encoding, processor, positions, query_chunk_size=None, attention_impl="fast",
                dape_dtype=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        y = attend(
            q, k, v,
            encoding=encoding,
            processor=processor,
            positions=positions,
            causal=self.causal,
            dropout_p=self.dropout if self.training else 0.0,
            query_chunk_size=query_chunk_size,
            attention_impl=attention_impl,
            dape_dtype=dape_dtype,
        )
        return self.out(y.transpose(1, 2).reshape(b, t, c))
