"""Attention with the paper's score pipeline in one place (paper §3, eq. 1–5).

    scores = q·kᵀ/√d  →  + encoding bias B  →  DAPE processor  →  causal mask  →  softmax  →  ·V

``attention_impl`` is a resolved path (``plain``, ``fast``, ``materialized``, ``compiled`` or ``fused``;
:func:`dape_core.implementations.resolve_attention_impl` turns ``auto`` into one of them by device). Six ways to
run it, all computing the same function:
* the plain path (``attention_impl="plain"``, ``_attend_rows`` on all rows): the readable reference, materialises
  [batch, H, T, T] and the processor's [batch, 2H, T, T] input and [batch, D_DAPE, T, T] hidden map;
* without a processor on the fast and materialized paths, ``scaled_dot_product_attention`` (B as a float mask, in
  query chunks at long lengths: each chunk reads only the keys its rows can reach, and the mask is never
  [H, T, T] whole);
* with a processor on the fast path (``_attend_processed``, the CPU's): query rows in chunks, the processor's
  blocked GEMM form (:mod:`dape_core.implementations.blocked`), each chunk reading only the keys its rows reach;
* with a processor on the materialized path (the accelerator's): the reference's arithmetic per chunk of query
  rows with operator calls independent of the batch (:mod:`dape_core.implementations.materialized`); on the
  compiled path the same chunks, each compiled by ``torch.compile`` (:mod:`dape_core.implementations.compiled`);
* with a processor on the fused path: one Triton kernel per pass, the processor on chip, no [batch, H, T, T]
  tensor (:mod:`dape_core.implementations.fused`); with attention dropout it takes the materialized path, and
  without a processor it is the materialized path (SDPA);
* an exact query-chunked plain path (``query_chunk_size`` with ``attention_impl="plain"``): the 1×k convolution runs
  along keys only, so query rows are independent. A chunk of rows r0…r1−1 needs its row offset (for tril and
  the causal mask) and, with ``same`` padding, the key columns right of its last row that the convolutions
  read (``ScoreProcessor.needed_halo``); keys beyond are never read. Peak memory then grows with
  chunk × T × dape_width instead of T² × dape_width.

:func:`attend_causal` is the entry for a host model (``dape_core.hf``): Tq query rows against Tk ≥ Tq keys, query
row r being key Tk − Tq + r (a KV cache), optionally under the host's key mask (padding, a sliding window). Without
a mask that removes keys, the rows go through the same paths as above (with Tq = Tk, through :func:`attend`
itself). With one, they take the plain path, by chunks of rows: the blocked, materialized and fused forms take no
key mask. There the processor treats a removed key as its zero padding (``ScoreProcessor.forward``'s ``key_mask``),
then the scores get the causal mask and the host's.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dape_core.dape import ScoreProcessor
from dape_core.encodings import PositionalEncoding
from dape_core.errors import require_choice
from dape_core.implementations import path_options
from dape_core.implementations.blocked import blocked_scores
from dape_core.implementations.compiled import attend_compiled
from dape_core.implementations.fused import attend_fused
from dape_core.implementations.materialized import attend_materialized
from dape_core.implementations.precision import autocast_dtype
from dape_core.positions import consecutive

DEFAULT_CHUNK_BYTES = 16 * 2**20  # one chunk's [batch, H, rows, T] fp32 scores on the fast path
ACCELERATOR_SCORE_BYTES = 2**30  # one SDPA call's [batch, H, rows, T] scores on the accelerator path
MIN_CHUNK_ROWS = 64  # fewer query rows make q·kᵀ a memory-bound, matrix-vector-like product
PATHS = ("plain", "fast", "materialized", "compiled", "fused")  # the resolved values of ``attention_impl``


@dataclass(frozen=True)
class AttentionPath:
    """How a model's layers compute attention — never what: every path computes the same function (§3, eq. 1–5).
    ``impl``: a resolved path (:data:`PATHS`); ``query_chunk_size``: query rows per chunk (None: chosen per path);
    ``dape_dtype``: the DAPE GEMMs' dtype on the fast path (None: the inputs'); ``recompute_scores``: the
    materialized path's per-chunk recomputation (None: on). A model builds it once from its settings per call."""

    impl: str = "fast"
    query_chunk_size: int | None = None
    dape_dtype: torch.dtype | None = None
    recompute_scores: bool | None = None

    def __post_init__(self):
        require_choice("attention_impl", self.impl, PATHS)

    def options(self) -> dict:
        """The keyword arguments of :func:`attend` this path stands for."""
        return dict(attention_impl=self.impl, query_chunk_size=self.query_chunk_size, dape_dtype=self.dape_dtype,
                    recompute_scores=self.recompute_scores)


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
    recompute_scores: bool | None = None,
) -> torch.Tensor:
    """Self-attention of q, k, v [batch, H, T, d_head] at ``positions`` [T] on the path ``attention_impl``;
    ``recompute_scores``: the materialized path's per-chunk recomputation (default on); returns
    [batch, H, T, d_head]."""
    require_choice("attention_impl", attention_impl, PATHS)
    q, k = encoding.rotate(q, k, positions, positions)
    n = q.shape[2]
    attention_impl = _unfused(attention_impl, processor, dropout_p)
    if processor is not None and attention_impl == "fused":
        return attend_fused(q, k, v, encoding=encoding, processor=processor, positions=positions, causal=causal)
    if processor is not None and attention_impl in ("materialized", "compiled"):
        materialized = attend_compiled if attention_impl == "compiled" else attend_materialized
        return materialized(
            q, k, v, encoding=encoding, processor=processor, positions=positions, causal=causal,
            dropout_p=dropout_p, chunk=query_chunk_size, dape_dtype=dape_dtype, recompute_scores=recompute_scores,
            **path_options(attention_impl, q.device.type),
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
        if attention_impl == "materialized":  # the accelerator's: one call per layer where its scores fit
            query_chunk_size = accelerator_chunk_rows(q.shape[0], q.shape[1], n, _compute_itemsize(q))
        else:  # the CPU's: chunks within a core's caches, each reading only the keys its rows reach
            query_chunk_size = auto_chunk_rows(q.shape[0], q.shape[1], n)
    if not query_chunk_size or n <= query_chunk_size:
        return _attend_rows(q, k, v, 0, **kwargs)
    starts = range(0, n, query_chunk_size)
    chunks = {r0: _attend_rows(q[:, :, r0 : r0 + query_chunk_size], k, v, r0, **kwargs) for r0 in _longest_first(starts)}
    return torch.cat([chunks[r0] for r0 in starts], dim=2)


def attend_causal(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    encoding: PositionalEncoding,
    processor: ScoreProcessor | None,
    positions: torch.Tensor,
    key_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    query_chunk_size: int | None = None,
    attention_impl: str = "fast",
    dape_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Causal attention of q [batch, H, Tq, d_head] against k, v [batch, H, Tk, d_head], Tk ≥ Tq, query row r
    at key Tk − Tq + r (a KV cache), keys at ``positions`` [Tk]; ``key_mask`` (bool, broadcastable to
    [batch, 1, Tq, Tk], True where a key may be attended): a host model's mask on top of the causal one.
    Returns [batch, H, Tq, d_head]."""
    require_choice("attention_impl", attention_impl, PATHS)
    n, n_keys = q.shape[2], k.shape[2]
    if n > n_keys:
        raise ValueError(f"queries: {n} rows against {n_keys} keys; allowed: at most as many rows as keys")
    row_offset = n_keys - n
    if key_mask is not None and not removes_past_keys(key_mask, row_offset, n_keys):
        key_mask = None  # the causal mask alone: the unmasked paths
    kwargs = dict(encoding=encoding, processor=processor, positions=positions, dropout_p=dropout_p)
    if key_mask is None and row_offset == 0:
        return attend(q, k, v, causal=True, query_chunk_size=query_chunk_size, attention_impl=attention_impl,
                      dape_dtype=dape_dtype, **kwargs)
    q, k = encoding.rotate(q, k, positions[row_offset:], positions)
    attention_impl = _unfused(attention_impl, processor, dropout_p)
    if key_mask is not None:  # the plain path: the blocked, materialized and fused forms take no key mask
        chunk = query_chunk_size or auto_chunk_rows(q.shape[0], q.shape[1], n_keys)
        return _by_row_chunks(
            lambda r0, r1: _attend_rows_masked(q[:, :, r0:r1], k, v, row_offset + r0, key_mask[..., r0:r1, :],
                                               **kwargs), n, chunk)
    if processor is not None and attention_impl == "fused":
        return attend_fused(q, k, v, encoding=encoding, processor=processor, positions=positions, causal=True,
                            row_offset=row_offset)
    if processor is not None and attention_impl in ("materialized", "compiled"):
        return _attend_materialized_rows(q, k, v, row_offset, chunk=query_chunk_size, dape_dtype=dape_dtype,
                                         compiled=attention_impl == "compiled", **kwargs)
    if processor is not None and attention_impl == "fast":
        chunk = query_chunk_size or auto_chunk_rows(q.shape[0], q.shape[1], n_keys)
        return _attend_processed(q, k, v, causal=True, chunk=chunk, dape_dtype=dape_dtype, row_offset=row_offset,
                                 **kwargs)
    chunk = query_chunk_size or n
    return _by_row_chunks(lambda r0, r1: _attend_rows(q[:, :, r0:r1], k, v, row_offset + r0, causal=True,
                                                      fast_path=attention_impl != "plain", **kwargs), n, chunk)


def _unfused(attention_impl: str, processor, dropout_p: float) -> str:
    """The path that runs for ``fused``: the fused kernel with a processor and no attention dropout, else the
    materialized path (SDPA without a processor; the kernel has no dropout); for ``compiled`` without a processor,
    the materialized path (SDPA)."""
    if attention_impl == "fused" and (processor is None or dropout_p > 0):
        return "materialized"
    if attention_impl == "compiled" and processor is None:
        return "materialized"
    return attention_impl


def removes_past_keys(key_mask: torch.Tensor, row_offset: int, n_keys: int) -> bool:
    """Whether ``key_mask`` [.., Tq, Tk] forbids a key at or left of its query row (row r at key row_offset + r)."""
    past = _causal_allowed(row_offset, row_offset + key_mask.shape[-2], n_keys, key_mask.device)
    return bool((past & ~key_mask).any())


def _by_row_chunks(attend_rows, n: int, chunk: int) -> torch.Tensor:
    """``attend_rows(r0, r1)`` for chunks of query rows, largest chunk first, concatenated in order."""
    starts = range(0, n, chunk)
    chunks = {r0: attend_rows(r0, min(n, r0 + chunk)) for r0 in _longest_first(starts)}
    return chunks[0] if len(chunks) == 1 else torch.cat([chunks[r0] for r0 in starts], dim=2)


def _attend_materialized_rows(q, k, v, row_offset, *, encoding, processor, positions, dropout_p, chunk, dape_dtype,
                              compiled=False):
    """The materialized path (``attend_materialized``, its precision and recomputation; ``compiled``: its chunks
    compiled, ``attend_compiled``) for query rows at ``row_offset``, with the path's options (:func:`path_options`)."""
    impl, attend_chunks = ("compiled", attend_compiled) if compiled else ("materialized", attend_materialized)
    return attend_chunks(q, k, v, encoding=encoding, processor=processor, positions=positions, causal=True,
                         dropout_p=dropout_p, chunk=chunk, dape_dtype=dape_dtype, row_offset=row_offset,
                         **path_options(impl, q.device.type))


def _attend_rows_masked(q, k, v, row_offset, key_mask, *, encoding, processor, positions, dropout_p):
    """The plain path (eq. 5) for query rows ``row_offset …`` under a host's ``key_mask`` [.., rows, Tk]: the
    processor treats a masked key as its zero padding, the scores get the causal mask and the host's. A row whose
    keys are all masked (a padding token's) attends to all its keys instead: a finite placeholder that no unmasked
    row reads (its key is masked wherever it appears)."""
    rows_end = row_offset + q.shape[2]
    keys_read, keys_kept = _key_range(processor, True, rows_end, k.shape[2])
    k_read, mask = k[:, :, :keys_read], key_mask[..., :keys_read]
    past = _causal_allowed(row_offset, rows_end, keys_read, q.device)  # [rows, keys]: keys ≤ row
    scores = torch.matmul(q, k_read.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # A = q·kᵀ/√d
    bias = None
    if encoding.has_bias:
        bias = encoding.bias(q, k_read, scores, positions[row_offset:rows_end], positions[:keys_read])  # B
    if processor is not None:
        scores = processor(scores, bias, row_offset, key_mask=mask | ~past)  # future keys stay tril's
    elif bias is not None:
        scores = scores + bias
    allowed = mask[..., :keys_kept] & past[:, :keys_kept]
    allowed = allowed | ~allowed.any(-1, keepdim=True)
    probs = torch.softmax(scores[..., :keys_kept].masked_fill(~allowed, float("-inf")), dim=-1)
    if dropout_p > 0:
        probs = F.dropout(probs, p=dropout_p)
    return torch.matmul(probs, v[:, :, :keys_kept])


def _longest_first(starts: range) -> list[int]:
    """Chunks in reverse order: each chunk's [.., rows, keys] temporaries are then no larger than the previous
    chunk's, so the allocator reuses their memory instead of growing the heap (peak memory at long lengths)."""
    return list(reversed(starts))


def auto_chunk_rows(batch: int, heads: int, n: int, budget: int = DEFAULT_CHUNK_BYTES) -> int:
    """Query rows per chunk on the fast path: one chunk's fp32 scores within ``budget``, at least 64 rows."""
    return max(MIN_CHUNK_ROWS, budget // max(1, batch * heads * n * 4))


def accelerator_chunk_rows(batch: int, heads: int, n: int, itemsize: int = 4,
                           budget: int = ACCELERATOR_SCORE_BYTES) -> int:
    """Query rows per SDPA call on the accelerator path with a bias: all n rows (one call per layer) while the
    [batch, H, rows, n] scores in the compute dtype — the size of the bias gradient an SDPA kernel writes — fit
    ``budget``; fewer, at least 64, beyond."""
    return max(MIN_CHUNK_ROWS, min(n, budget // max(1, batch * heads * n * itemsize)))


def _compute_itemsize(q: torch.Tensor) -> int:
    """Bytes per element of the attention's compute dtype: the autocast dtype where autocast is on, else q's."""
    return (autocast_dtype(q.device.type) or q.dtype).itemsize


def _key_range(processor, causal, rows_end, n):
    """(keys read, keys kept): the processor reads up to its halo right of the last row, the mask keeps ≤ row."""
    if not causal:
        return n, n
    halo = processor.needed_halo() if processor is not None else 0
    return min(n, rows_end + halo), rows_end


def _causal_allowed(row_offset, rows_end, keys_kept, device):
    row_index = torch.arange(row_offset, rows_end, device=device)[:, None]
    return torch.arange(keys_kept, device=device)[None, :] <= row_index


def _attend_processed(q, k, v, *, encoding, processor, positions, causal, dropout_p, chunk, dape_dtype,
                      row_offset=0, scores_fn=None):
    """The fast path with a processor: per chunk of query rows, q·kᵀ/√d on the keys the rows reach, B, the
    processor's blocked form (A + B + f with the causal mask), softmax, ·V. Query row r is key ``row_offset`` + r
    (``positions`` are the keys'); ``scores_fn``: another implementation's scores function (default: blocked)."""
    n, n_keys, scale = q.shape[2], k.shape[2], 1.0 / math.sqrt(q.shape[-1])
    if scores_fn is None:
        relative = encoding.relative_bias and n_keys > 1 and consecutive(positions)
        scores_fn = functools.partial(blocked_scores, relative_bias=relative)
    outputs = {}
    for r0 in _longest_first(range(0, n, chunk)):
        rows_end = min(n, r0 + chunk)
        first, last = row_offset + r0, row_offset + rows_end
        keys_read, keys_kept = _key_range(processor, causal, last, n_keys)
        q_rows, k_read = q[:, :, r0:rows_end], k[:, :, :keys_read]
        scores = torch.matmul(q_rows, k_read.transpose(-2, -1)).mul_(scale)  # A = q·kᵀ/√d
        bias = None
        if encoding.has_bias:
            bias = encoding.bias(q_rows, k_read, scores, positions[first:last], positions[:keys_read])  # B
        scores = scores_fn(processor, scores, bias, first, causal=causal, keys_out=keys_kept, compute_dtype=dape_dtype)
        probs = torch.softmax(scores, dim=-1)
        if dropout_p > 0:
            probs = F.dropout(probs, p=dropout_p)
        outputs[r0] = torch.matmul(probs.to(v.dtype), v[:, :, :keys_kept])
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
    """Multi-head self-attention whose scores go through ``attend`` on a model's :class:`AttentionPath`; one
    processor per layer."""

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

    def forward(self, x, *, encoding, processor, positions, path: AttentionPath = AttentionPath()):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        y = attend(
            q, k, v,
            encoding=encoding,
            processor=processor,
            positions=positions,
            causal=self.causal,
            dropout_p=self.dropout if self.training else 0.0,
            **path.options(),
        )
        return self.out(y.transpose(1, 2).reshape(b, t, c))
