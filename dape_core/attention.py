"""Attention with the paper's score pipeline in one place (paper §3, eq. 1–5).

    scores = q·kᵀ/√d  →  + encoding bias B  →  DAPE processor  →  causal mask  →  softmax  →  ·V

``attention_impl`` is a resolved path (:func:`dape_core.implementations.resolve_attention_impl` resolves ``auto``),
a row of :data:`dape_core.implementations.registry.PATHS`; every path computes the same function. ``plain``
(``_attend_rows``) is the readable reference, materialising [batch, H, T, T] and the processor's input and hidden map;
exactly chunked by ``query_chunk_size``, since the 1×k convolution runs along keys only, a chunk of rows needs just
its row offset (tril, causal mask) and, with ``same`` padding, the halo right of its last row
(``ScoreProcessor.needed_halo``), so memory grows with chunk × T × dape_width, not T² × dape_width. Without a processor
every other path runs ``scaled_dot_product_attention`` (B as a float mask, in query chunks at long lengths, each
reading only the keys its rows reach); with one, the path's entry in :mod:`dape_core.implementations`.

:func:`attend_causal` is a host model's entry (``dape_core.hf``): Tq query rows against Tk ≥ Tq keys, row r being key
Tk − Tq + r (a KV cache), optionally under the host's key mask (padding, a sliding window). A mask that removes keys
sends the rows to the plain path (no other form takes one), where the processor treats a removed key as its zero
padding (``ScoreProcessor.forward``'s ``key_mask``) before the causal and the host's masks apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dape_core.dape import ScoreProcessor
from dape_core.encodings import PositionalEncoding
from dape_core.implementations import path_options
from dape_core.implementations.fast import MIN_CHUNK_ROWS, auto_chunk_rows, by_row_chunks, key_range
from dape_core.implementations.precision import autocast_dtype
from dape_core.implementations.registry import AttentionImpl, attention_path

ACCELERATOR_SCORE_BYTES = 2**30  # one SDPA call's [batch, H, rows, T] scores on the accelerator path


@dataclass(frozen=True)
class AttentionPath:
    """How a model's layers compute attention, never what (every path computes §3, eq. 1–5). ``impl``: a resolved
    path (a row of :data:`~dape_core.implementations.registry.PATHS`); ``query_chunk_size``: query rows per chunk
    (None: chosen per path); ``dape_dtype``: DAPE's feature-map dtype (None: the path's); ``recompute_scores``: the
    chunked paths' per-chunk recomputation (None: on)."""

    impl: str = "fast"
    query_chunk_size: int | None = None
    dape_dtype: torch.dtype | None = None
    recompute_scores: bool | None = None

    def __post_init__(self):
        attention_path(self.impl)

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
    """Self-attention of q, k, v [batch, H, T, d_head] at ``positions`` [T] on path ``attention_impl``."""
    path = attention_path(attention_impl, dropout=dropout_p > 0)
    q, k = encoding.rotate(q, k, positions, positions)
    return _attend_rotated(q, k, v, 0, path=path, encoding=encoding, processor=processor, positions=positions,
                           causal=causal, dropout_p=dropout_p, query_chunk_size=query_chunk_size,
                           dape_dtype=dape_dtype, recompute_scores=recompute_scores)


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
    """Causal attention of q [batch, H, Tq, d_head] against k, v [batch, H, Tk, d_head], Tk ≥ Tq, query row r at key
    Tk − Tq + r (a KV cache), keys at ``positions`` [Tk]; ``key_mask`` (bool, broadcastable to [batch, 1, Tq, Tk], True
    where a key may be attended): a host model's mask on top of the causal one. Returns [batch, H, Tq, d_head];
    raises ValueError when Tq > Tk."""
    path = attention_path(attention_impl, dropout=dropout_p > 0)
    n, n_keys = q.shape[2], k.shape[2]
    if n > n_keys:
        raise ValueError(f"queries: {n} rows against {n_keys} keys; allowed: at most as many rows as keys")
    row_offset = n_keys - n
    if key_mask is not None and not removes_past_keys(key_mask, row_offset, n_keys):
        key_mask = None  # the causal mask alone: the unmasked paths
    q, k = encoding.rotate(q, k, positions[row_offset:], positions)
    return _attend_rotated(q, k, v, row_offset, path=path, encoding=encoding, processor=processor,
                           positions=positions, causal=True, key_mask=key_mask, dropout_p=dropout_p,
                           query_chunk_size=query_chunk_size, dape_dtype=dape_dtype, recompute_scores=None)


def _attend_rotated(q, k, v, row_offset, *, path: AttentionImpl, encoding, processor, positions, causal,
                    dropout_p, query_chunk_size, dape_dtype, recompute_scores, key_mask=None):
    """Attention of rotated q [batch, H, Tq, d_head] (query row r at key ``row_offset`` + r) against k, v on ``path``:
    under a host's ``key_mask`` the plain path, with a processor the path's entry, else the reference's rows (plain)
    or SDPA (every other path)."""
    n, n_keys = q.shape[2], k.shape[2]
    rows = dict(encoding=encoding, processor=processor, positions=positions, dropout_p=dropout_p)
    if key_mask is not None:
        chunk = query_chunk_size or auto_chunk_rows(q.shape[0], q.shape[1], n_keys)
        return by_row_chunks(lambda r0, r1: _attend_rows(q[:, :, r0:r1], k, v, row_offset + r0, causal=True,
                                                          key_mask=key_mask[..., r0:r1, :], **rows), n, chunk)
    if processor is not None and path.attend is not None:
        given = dict(dropout_p=dropout_p, chunk=query_chunk_size, dape_dtype=dape_dtype,
                     recompute_scores=recompute_scores)
        options = {name: given[name] for name in path.options}
        if path.device_options:
            options.update(path_options(path.name, q.device.type))
        return path.attend(q, k, v, encoding=encoding, processor=processor, positions=positions, causal=causal,
                           row_offset=row_offset, **options)
    fast_path = path.attend is not None  # SDPA without a processor on every path but the reference itself
    chunk = query_chunk_size
    if fast_path and encoding.has_bias and not chunk and row_offset == 0:
        if path.accelerator:  # one call per layer where its scores fit
            chunk = accelerator_chunk_rows(q.shape[0], q.shape[1], n, _compute_itemsize(q))
        else:  # the CPU's: chunks within a core's caches, each reading only the keys its rows reach
            chunk = auto_chunk_rows(q.shape[0], q.shape[1], n)
    return by_row_chunks(lambda r0, r1: _attend_rows(q[:, :, r0:r1], k, v, row_offset + r0, causal=causal,
                                                      fast_path=fast_path, **rows), n, chunk or n)


def removes_past_keys(key_mask: torch.Tensor, row_offset: int, n_keys: int) -> bool:
    """Whether ``key_mask`` [.., Tq, Tk] forbids a key at or left of its query row (row r at key row_offset + r)."""
    past = _causal_allowed(row_offset, row_offset + key_mask.shape[-2], n_keys, key_mask.device)
    return bool((past & ~key_mask).any())


def accelerator_chunk_rows(batch: int, heads: int, n: int, itemsize: int = 4,
                           budget: int = ACCELERATOR_SCORE_BYTES) -> int:
    """Query rows per SDPA call on an accelerator path with a bias: all n (one call per layer) while the
    [batch, H, rows, n] scores in the compute dtype (the bias gradient SDPA writes) fit ``budget``; else fewer, ≥ 64."""
    return max(MIN_CHUNK_ROWS, min(n, budget // max(1, batch * heads * n * itemsize)))


def _compute_itemsize(q: torch.Tensor) -> int:
    """Bytes per element of the attention's compute dtype: the autocast dtype where autocast is on, else q's."""
    return (autocast_dtype(q.device.type) or q.dtype).itemsize


def _causal_allowed(row_offset, rows_end, keys_kept, device):
    row_index = torch.arange(row_offset, rows_end, device=device)[:, None]
    return torch.arange(keys_kept, device=device)[None, :] <= row_index


def _attend_rows(q, k, v, row_offset, *, encoding, processor, positions, causal, dropout_p, fast_path=False,
                 key_mask=None):
    """Attention output for query rows ``row_offset … row_offset + len(q) − 1`` against the keys they can reach. Under
    a host's ``key_mask`` [.., rows, Tk] (causal, the plain path) a row whose keys are all masked (a padding token's)
    attends to all its keys instead: a finite placeholder no unmasked row reads (its key is masked wherever it
    appears)."""
    rows_end = row_offset + q.shape[2]
    q_pos = positions[row_offset:rows_end]
    halo = processor.needed_halo() if processor is not None else 0
    keys_read, keys_kept = key_range(halo, causal, rows_end, k.shape[2])
    k_read, k_pos = k[:, :, :keys_read], positions[:keys_read]
    allowed = _causal_allowed(row_offset, rows_end, keys_kept, q.device) if causal else None

    if processor is None and fast_path and not encoding.needs_scores:
        bias = encoding.bias(q, k_read, None, q_pos, k_pos) if encoding.has_bias else None
        if bias is None and causal and row_offset == 0 and keys_kept == q.shape[2]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        mask = allowed if bias is None else bias
        if bias is not None and allowed is not None:
            mask = bias[..., :keys_kept].masked_fill(~allowed, float("-inf"))
        return F.scaled_dot_product_attention(q, k[:, :, :keys_kept], v[:, :, :keys_kept], attn_mask=mask,
                                              dropout_p=dropout_p)

    scores = torch.matmul(q, k_read.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # A = q·kᵀ/√d
    bias = encoding.bias(q, k_read, scores, q_pos, k_pos) if encoding.has_bias else None  # B
    if processor is not None and key_mask is not None:  # future keys stay tril's
        past = _causal_allowed(row_offset, rows_end, keys_read, q.device)
        scores = processor(scores, bias, row_offset, key_mask=key_mask[..., :keys_read] | ~past)
    elif processor is not None:
        scores = processor(scores, bias, row_offset)  # A + B + f(tril([A; B]))
    elif bias is not None:
        scores = scores + bias
    scores = scores[..., :keys_kept]
    if key_mask is not None:
        allowed = key_mask[..., :keys_kept] & allowed
        allowed = allowed | ~allowed.any(-1, keepdim=True)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0:
        probs = F.dropout(probs, p=dropout_p)
    return torch.matmul(probs, v[:, :, :keys_kept])


class SelfAttention(nn.Module):
    """Multi-head self-attention through ``attend`` on a model's :class:`AttentionPath`; one processor per layer."""

    def __init__(self, d_model: int, n_head: int, *, causal: bool, dropout: float = 0.0):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model: {d_model} is not divisible by n_head {n_head}; "
                             "allowed values: multiples of n_head")
        self.n_head = n_head
        self.head_dim = d_model // n_head
        self.causal = causal
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, *, encoding, processor, positions, path: AttentionPath = AttentionPath()):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        y = attend(q, k, v, encoding=encoding, processor=processor, positions=positions, causal=self.causal,
                   dropout_p=self.dropout if self.training else 0.0, **path.options())
        return self.out(y.transpose(1, 2).reshape(b, t, c))
