"""The accelerator path of DAPE attention (``attention_impl: materialized``): the paper's materialised form (eq. 5,
appendix L) one chunk of query rows at a time (rows are independent under the key-axis convolution), each step one
operator over the whole batch, so a layer makes the same calls at any batch size.

Per chunk: A = q·kᵀ/√d on the keys the rows reach (causal: up to the last row plus ``needed_halo()``), + B,
tril([A; B]) written once channels-last in the convolutions' dtype (so cuDNN convolves without layout copies), the
layer's own convolutions with their own zero padding (``causal`` padding convolves both sides and keeps the first K
columns, which read only the left zeros), or V1's MLP, A + B + f, the causal mask, softmax, ·V. No device branches:
the tests prove the same arithmetic equal to the reference on a CPU.

``recompute_scores`` (on by default whenever gradients are recorded) runs each chunk under ``torch.utils.checkpoint``:
a layer keeps only q, k (fp32), v and its output, linear in T. Off, every chunk keeps what its backward reads (the
convolutions' inputs and the probabilities: about b · R · K · (s · (C + D) + 4H) bytes), so memory grows with T².
Precision: A, B, the processed scores and the softmax in fp32 even under bf16 autocast; the convolutions in
``dape_dtype``, else the autocast dtype, else the scores'; ·V in v's dtype.

Memory: a chunk of R rows reading K keys at batch b peaks (forward) at A and B in fp32 (C channels: 2H, or H without a
bias) plus either x = tril([A; B]) and the feature map's outputs in the convolution dtype of s bytes (C + D + H
channels, D = D_DAPE, LeakyReLU in place, over K' columns: K with ``same`` padding, K + 2·(k − 1) with ``causal``; V1's
MLP: C + max(2D, D + H), its LeakyReLU a new tensor) or, after it, f and the fp32 sum A + B + f:

    bytes(b, R, K) = b · R · (4 · C · K + max(s · (C + D + H) · K', (s + 4) · H · K'))

(a batch-free B counted per batch element, an upper bound; not counted: the [R, K] boolean mask, cuDNN's workspace and
an encoding's own temporaries, which every path pays). A chunk takes the most rows whose bytes at K = T fit
``DEFAULT_CHUNK_BYTES`` (1 GiB): for 350M DAPE1×3-Kerple (H 16, D_DAPE 32, C = 32), fp32, T = 8192, batch 1, 3,670,016
bytes per row, so 292 rows per chunk, 29 chunks per layer, 0.998 GiB at the peak. Chunks get fewer rows only once one
chunk of the whole batch exceeds the budget, so calls grow with the batch only where each operator already works on
hundreds of megabytes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from dape_core.dape import NEGATIVE_SLOPE, ScoreProcessor
from dape_core.encodings import PositionalEncoding
from dape_core.errors import require_choice, require_positive
from dape_core.implementations.fast import by_row_chunks, key_range
from dape_core.implementations.precision import autocast_dtype, autocast_off, has_autocast
from dape_core.implementations.score_product import score_product
from dape_core.settings.attention import FEATURE_MAPS

DEFAULT_CHUNK_BYTES = 2**30  # one chunk's temporaries (module docstring: the bound and the 350M figure)
SIXTEEN_BIT = {torch.bfloat16, torch.float16}  # q, k dtypes whose products TF32 (11 bits) holds exactly


def feature_columns(processor: ScoreProcessor, keys: int) -> int:
    """K': the feature map's widest key axis for K keys: K with ``same`` padding, K + 2(k − 1) with ``causal`` (both
    convolutions pad k − 1 on each side; the first K columns are f)."""
    return keys if processor.padding == "same" else keys + 2 * (processor.kernel_size - 1)


def chunk_bytes(processor: ScoreProcessor, batch: int, rows: int, keys: int, feature_itemsize: int = 4) -> int:
    """Peak bytes of one chunk's temporaries, b·R·(4·C·K + max(s·(C + D + H)·K', (s + 4)·H·K')), C + max(2D, D + H)
    for DAPE V1's MLP (module docstring)."""
    h, d, s = processor.n_head, processor.dape_width, feature_itemsize
    c = 2 * h if processor.bias_channels else h
    wide = feature_columns(processor, keys)
    hidden = d + h if processor.processor == "dape_v2" else max(2 * d, d + h)  # the MLP's LeakyReLU is a new tensor
    return batch * rows * (4 * c * keys + max(s * (c + hidden) * wide, (s + 4) * h * wide))


def causal_chunk(chunk: int, n: int, *, causal: bool, causal_chunks: int = 1) -> int:
    """Rows per chunk under a causal mask split into at least ``causal_chunks`` chunks (at most ``chunk`` rows each):
    a chunk reads only the keys its rows reach, so k equal chunks compute (k + 1)/2k of the T × T maps, in k times the
    operator calls. Without the mask, ``chunk``."""
    require_positive("causal_chunks", causal_chunks)
    return min(chunk, -(-n // causal_chunks)) if causal else chunk


def chunk_rows(processor: ScoreProcessor, batch: int, n: int, *, budget: int | None = None,
               feature_itemsize: int = 4) -> int:
    """Query rows per chunk: the most whose :func:`chunk_bytes` at K = n fit ``budget`` (at least 1, at most n)."""
    per_row = chunk_bytes(processor, batch, 1, n, feature_itemsize)
    return max(1, min(n, (budget or DEFAULT_CHUNK_BYTES) // per_row))


def attend_materialized(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    encoding: PositionalEncoding,
    processor: ScoreProcessor,
    positions: torch.Tensor,
    causal: bool,
    dropout_p: float = 0.0,
    chunk: int | None = None,
    dape_dtype: torch.dtype | None = None,
    row_offset: int = 0,
    recompute_scores: bool | None = None,
    chunk_fn=None,
    feature_map: str = "conv",
    causal_chunks: int = 1,
    tf32_scores: bool = False,
) -> torch.Tensor:
    """softmax(mask(A + B + f(tril([A; B])))) · V (eq. 5) for q [batch, H, Tq, d_head] and k, v [batch, H, Tk,
    d_head] (already rotated; query row r is key ``row_offset`` + r, ``positions`` are the keys'), in chunks of
    ``chunk`` rows (default :func:`chunk_rows`); returns [batch, H, Tq, d_head]. ``recompute_scores`` (default: when
    gradients are recorded); ``chunk_fn``: one chunk's function (default :func:`chunk_attention`); ``feature_map``:
    :data:`FEATURE_MAPS`; ``causal_chunks``: :func:`causal_chunk`; ``tf32_scores``: A's products on TF32 tensor cores
    where q and k hold 16-bit values (:mod:`~dape_core.implementations.score_product`), else off."""
    require_choice("feature_map", feature_map, FEATURE_MAPS)
    device_type, n, n_keys = q.device.type, q.shape[2], k.shape[2]
    chunk_fn = chunk_fn or chunk_attention
    feature_dtype = dape_dtype or autocast_dtype(device_type)
    score_dtype = torch.promote_types(q.dtype, torch.float32)  # fp32 scores under bf16 autocast (fp64 stays)
    chunk = chunk or chunk_rows(processor, q.shape[0], n_keys, feature_itemsize=feature_itemsize(q, dape_dtype))
    chunk = causal_chunk(chunk, n, causal=causal, causal_chunks=causal_chunks)
    recompute_scores = (recompute_scores is None or recompute_scores) and torch.is_grad_enabled()
    tf32_scores = tf32_scores and {q.dtype, k.dtype} <= SIXTEEN_BIT  # where each product of A is exact in TF32
    q_s, k_s = q.to(score_dtype), k.to(score_dtype)
    options = dict(encoding=encoding, processor=processor, causal=causal, dropout_p=dropout_p,
                   feature_dtype=feature_dtype, feature_map=feature_map, tf32_scores=tf32_scores)
    halo = processor.needed_halo()

    def attend_rows(r0, r1):
        first, last = row_offset + r0, row_offset + r1
        keys_read, keys_kept = key_range(halo, causal, last, n_keys)
        args = (q_s[:, :, r0:r1], k_s[:, :, :keys_read], v[:, :, :keys_kept])
        rows = dict(q_positions=positions[first:last], k_positions=positions[:keys_read], first=first, **options)
        if recompute_scores:  # (positions as keywords: the checkpoint keeps no reference of its own to them)
            return checkpoint(chunk_fn, *args, use_reentrant=False, **rows)
        return chunk_fn(*args, **rows)

    return by_row_chunks(attend_rows, n, chunk)


def feature_itemsize(q: torch.Tensor, dape_dtype: torch.dtype | None = None) -> int:
    """Bytes per element of the feature map: ``dape_dtype``, else the autocast dtype, else the scores' (≥ fp32)."""
    dtype = dape_dtype or autocast_dtype(q.device.type) or torch.promote_types(q.dtype, torch.float32)
    return dtype.itemsize


def chunk_attention(q_rows, k_read, v_kept, *, q_positions, k_positions, first, encoding, processor, causal,
                    dropout_p, feature_dtype, feature_map="conv", tf32_scores=False):
    """One chunk of eq. 5: query rows ``first`` … (as keys; q_rows [batch, H, rows, d_head] in the scores' dtype)
    against the keys they read (k_read [batch, H, K, d_head]: under the causal mask those ≤ the last row plus the
    halo) and keep (v_kept [batch, H, K_kept, d_head]): A, B, the processor, the causal mask, softmax, ·V in v's
    dtype; ``tf32_scores``: A's products on TF32 tensor cores (:func:`score_product`)."""
    with autocast_off(q_rows.device.type):
        scores = score_product(q_rows, k_read, tf32_scores=tf32_scores).mul_(1.0 / math.sqrt(q_rows.shape[-1]))  # A
        bias = None
        if encoding.has_bias:
            bias = encoding.bias(q_rows, k_read, scores, q_positions, k_positions)  # B
        scores = materialized_scores(processor, scores, bias, first, causal=causal, keys_out=v_kept.shape[2],
                                     compute_dtype=feature_dtype, feature_map=feature_map)
        probs = torch.softmax(scores, dim=-1)
        if dropout_p > 0:
            probs = F.dropout(probs, p=dropout_p)
        return torch.matmul(probs.to(v_kept.dtype), v_kept)


def materialized_scores(
    processor: ScoreProcessor,
    scores: torch.Tensor,
    bias: torch.Tensor | None,
    row_offset: int = 0,
    *,
    causal: bool = False,
    keys_out: int | None = None,
    compute_dtype: torch.dtype | None = None,
    feature_map: str = "conv",
) -> torch.Tensor:
    """Equals ``processor(scores, bias, row_offset)`` (eq. 5, ``ScoreProcessor.forward``) on the first ``keys_out``
    keys, in the scores' dtype; the feature map runs in ``compute_dtype`` (default: the scores'), by ``feature_map``
    (:data:`FEATURE_MAPS`). ``causal=True`` applies the causal mask too (−inf right of each query row), exact where
    kept provided ``scores`` holds the keys up to the last row + ``needed_halo()``.
    """
    batch, heads, rows, keys = scores.shape
    kout = keys if keys_out is None else min(keys_out, keys)
    dtype = compute_dtype or scores.dtype
    sources = [scores]
    if processor.bias_channels:
        if bias is None:
            raise ValueError("this processor was built for an encoding with a bias, but got none")
        sources.append(bias)
    future = None
    if processor.tril or causal:
        row = torch.arange(row_offset, row_offset + rows, device=scores.device)[:, None]
        future = torch.arange(keys, device=scores.device)[None, :] > row  # [rows, keys]
    # [A; B] written once as [batch, rows, keys, C] in the convolutions' dtype (each copy casts): its NCHW view is
    # channels-last, the layout cuDNN convolves without copies
    x = scores.new_empty((batch, rows, keys, heads * len(sources)), dtype=dtype)
    for i, source in enumerate(sources):
        x[..., i * heads:(i + 1) * heads].copy_(source.expand(batch, heads, rows, keys).permute(0, 2, 3, 1))
    if processor.tril:
        x = x.masked_fill_(future[..., None], 0)
    if feature_map == "triton":  # the kernels take x in its dtype; their products accumulate in fp32
        from dape_core.implementations.feature_map import triton_feature_map

        # under the causal mask f is needed left of the diagonal only: the kernels skip the tiles right of it
        feature = triton_feature_map(processor, x.permute(0, 3, 1, 2), first=row_offset if causal else None)
    else:
        with _feature_precision(scores.device.type, dtype):
            feature = padded_feature_map(processor, x.permute(0, 3, 1, 2))
    del x
    if processor.bias_channels:  # A + B + f in the scores' dtype, one new tensor
        out = (scores[..., :kout] + bias[..., :kout]).add_(feature[..., :kout])
    else:
        out = scores[..., :kout] + feature[..., :kout]
    if causal:
        out = out.masked_fill_(future[:, :kout], float("-inf"))
    return out


def padded_feature_map(processor: ScoreProcessor, x: torch.Tensor) -> torch.Tensor:
    """f of ``ScoreProcessor.feature_map`` (Conv2 ∘ LeakyReLU ∘ Conv1, eq. 5) with the convolutions' own zero padding,
    no padded copy: k//2 each side for ``same`` (K output columns), k − 1 each side for ``causal`` (its first K
    columns read only the left zeros, as F.pad(k − 1, 0) does; the rest is ignored). DAPE V1: the processor's MLP."""
    if processor.processor == "dape_v1":
        return processor.feature_map(x)
    pad = (0, processor.left_padding)
    hidden = F.conv2d(x, processor.conv1.weight, processor.conv1.bias, padding=pad)
    hidden = F.leaky_relu(hidden, NEGATIVE_SLOPE, inplace=True)  # its backward reads its output: no extra copy
    return F.conv2d(hidden, processor.conv2.weight, processor.conv2.bias, padding=pad)


def _feature_precision(device_type: str, dtype: torch.dtype):
    """The feature map's precision: autocast to ``dtype`` below fp32, else autocast off (the weights' dtype); without
    autocast (``meta``) the operands' dtypes."""
    if dtype.itemsize >= 4 or not has_autocast(device_type):
        return autocast_off(device_type)
    return torch.autocast(device_type, dtype=dtype)
