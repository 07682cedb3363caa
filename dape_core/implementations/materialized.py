"""The accelerator path of DAPE attention (``attention_impl: materialized``): the paper's materialised form
(eq. 5, appendix L) one chunk of query rows at a time, with operator calls that do not depend on the batch.

Per chunk of query rows r0 … r1−1 (rows are independent under DAPE's key-axis convolution): A = q·kᵀ/√d on the
keys the rows reach (under the causal mask keys ≤ r1 − 1 plus the ``ScoreProcessor.needed_halo()`` columns the
convolutions read with ``same`` padding), + B, tril([A; B]) written once, channels-last, in the convolutions'
dtype, the layer's own convolution weights applied with the convolutions' own zero padding (no separate padded
copy; ``causal`` padding convolves both sides and keeps the first K columns, which read only the left zeros), the
MLP for DAPE V1, A + B + f, the causal mask, softmax, ·V. Each step is one operator over the whole batch, so a
layer makes the same calls at any batch size; the Python loop runs over chunks of rows only (the CPU path,
:mod:`dape_core.implementations.fast`, loops over batch elements × 16 rows to stay in a core's caches, which on
an accelerator means kernel launches growing with the batch). There are no device branches: the same arithmetic
runs on a CPU, where the tests prove it equal to the reference, and on a GPU, where the channels-last layout lets
cuDNN run the convolutions without layout copies.

Recomputation (``recompute_scores``, on by default on this path whenever gradients are recorded): each chunk's
score pipeline runs under ``torch.utils.checkpoint``, so the backward pass recomputes the chunk's A, B, feature map
and probabilities instead of keeping them. What a layer keeps for its backward pass is then its inputs (q, k in
fp32, v) and its output, linear in T; the [batch, rows, keys, channels] tensors of one chunk at a time exist, in
the forward pass and again in the backward pass. Off, every chunk keeps what its backward pass reads (the
convolutions' inputs and the probabilities: about b · R · K · (s · (C + D) + 4H) bytes per chunk), so training
memory grows with T².

Precision: A, B, the processed scores and the softmax are fp32 even under bf16 autocast (q and k are upcast);
the convolutions run in ``dape_dtype`` when given, else in the autocast dtype, else in the scores' dtype; ·V in
v's dtype.

Memory: a chunk of R rows reading K keys at batch b holds at its peak (forward) A and B in fp32 (C channels: 2H,
or H for an encoding without a bias) and either x = tril([A; B]) with the feature map's outputs in the convolution
dtype of s bytes (D = D_DAPE; x, Conv1's output, LeakyReLU in place, Conv2's output: C + D + H channels over at
most K' columns: K with ``same`` padding, K + 2·(k − 1) with ``causal``; DAPE V1's MLP: C + max(2D, D + H), its
LeakyReLU being a new tensor), or, after the feature map, f and the fp32 sum A + B + f:

    bytes(b, R, K) = b · R · (4 · C · K + max(s · (C + D + H) · K', (s + 4) · H · K'))

(a batch-free B counted per batch element: an upper bound; not counted: the [R, K] boolean mask, cuDNN's
workspace, and what an encoding allocates while computing B — FIRE's MLP over [R, K, 32], CoPE's gates — which
every path pays). The rows per chunk are the most whose bytes at K = T (the last chunk reads every key) fit
``DEFAULT_CHUNK_BYTES`` (1 GiB). The 350M shape (H 16, D_DAPE 32, Kerple: C = 32), DAPE1×3, fp32, T = 8192,
batch 1: 3,670,016 bytes per row (1,048,576 for A and B, 2,621,440 for the feature map), so 292 rows per chunk,
29 chunks per layer, and one chunk's temporaries peak at 1,071,644,672 bytes (0.998 GiB); beside them an
evaluation forward pass holds the weights (1.62 GB in fp32 with a GPT-2 vocabulary), [batch, T, d_model]-sized
activations and the logits of the positions it scores. The chunks get fewer rows only once one chunk of the whole
batch would exceed the budget, so the number of chunks, and of operator calls, grows with the batch only where
each operator already works on hundreds of megabytes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from dape_core.dape import NEGATIVE_SLOPE, ScoreProcessor
from dape_core.encodings import PositionalEncoding
from dape_core.errors import require_choice, require_positive
from dape_core.implementations.precision import autocast_dtype, autocast_off, has_autocast
from dape_core.implementations.score_product import score_product
from dape_core.settings.attention import FEATURE_MAPS

DEFAULT_CHUNK_BYTES = 2**30  # one chunk's temporaries (module docstring: the bound and the 350M figure)
SIXTEEN_BIT = {torch.bfloat16, torch.float16}  # q, k dtypes whose products TF32 (11 bits) holds exactly


def feature_columns(processor: ScoreProcessor, keys: int) -> int:
    """K': the widest key axis of the feature map for K keys — K with ``same`` padding, K + 2(k − 1) with
    ``causal`` (both convolutions pad k − 1 on each side; the first K columns are f)."""
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
    """Rows per chunk under a causal mask split into at least ``causal_chunks`` chunks (at most ``chunk`` rows
    each): each chunk reads only the keys its rows reach, so k equal chunks compute (k + 1)/2k of the T × T maps
    instead of all of them, in k times the operator calls. Without the mask, ``chunk``."""
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
    ``chunk`` query rows (default: :func:`chunk_rows`); ``recompute_scores`` (default: whenever gradients are
    recorded) recomputes each chunk in the backward pass; ``chunk_fn``: the function of one chunk, with the arguments
    of :func:`chunk_attention` (default: it); ``feature_map``: how f is computed (:data:`FEATURE_MAPS`);
    ``causal_chunks``: under the causal mask, at least this many chunks (:func:`causal_chunk`); ``tf32_scores``:
    A = q·kᵀ and its backward on TF32 tensor cores on CUDA where q and k hold 16-bit values (bf16 autocast's; TF32
    holds their products exactly: :mod:`~dape_core.implementations.score_product`), else off.
    Returns [batch, H, Tq, d_head]."""
    require_choice("feature_map", feature_map, FEATURE_MAPS)
    device_type, n, n_keys = q.device.type, q.shape[2], k.shape[2]
    chunk_fn = chunk_fn or chunk_attention
    feature_dtype = dape_dtype or autocast_dtype(device_type)
    score_dtype = torch.promote_types(q.dtype, torch.float32)  # fp32 scores under bf16 autocast (fp64 stays)
    chunk = chunk or chunk_rows(processor, q.shape[0], n_keys, feature_itemsize=feature_itemsize(q, dape_dtype))
    chunk = causal_chunk(chunk, n, causal=causal, causal_chunks=causal_chunks)
    if recompute_scores is None:
        recompute_scores = True
    recompute_scores = recompute_scores and torch.is_grad_enabled()
    outputs = {}
    tf32_scores = tf32_scores and {q.dtype, k.dtype} <= SIXTEEN_BIT  # where each product of A is exact in TF32
    q_s, k_s = q.to(score_dtype), k.to(score_dtype)
    options = dict(encoding=encoding, processor=processor, causal=causal, dropout_p=dropout_p,
                   feature_dtype=feature_dtype, feature_map=feature_map, tf32_scores=tf32_scores)
    halo = processor.needed_halo()
    for r0 in reversed(range(0, n, chunk)):  # largest chunk first: later chunks reuse its memory
        rows_end = min(n, r0 + chunk)
        first, last = row_offset + r0, row_offset + rows_end
        keys_read, keys_kept = (min(n_keys, last + halo), last) if causal else (n_keys, n_keys)
        args = (q_s[:, :, r0:rows_end], k_s[:, :, :keys_read], v[:, :, :keys_kept])
        rows = dict(q_positions=positions[first:last], k_positions=positions[:keys_read], first=first, **options)
        if recompute_scores:  # (positions as keywords: the checkpoint keeps no reference of its own to them)
            outputs[r0] = checkpoint(chunk_fn, *args, use_reentrant=False, **rows)
        else:
            outputs[r0] = chunk_fn(*args, **rows)
    return outputs[0] if len(outputs) == 1 else torch.cat([outputs[r0] for r0 in sorted(outputs)], dim=2)


def feature_itemsize(q: torch.Tensor, dape_dtype: torch.dtype | None = None) -> int:
    """Bytes per element of the feature map: ``dape_dtype``, else the autocast dtype, else the scores' (fp32 at
    least)."""
    dtype = dape_dtype or autocast_dtype(q.device.type) or torch.promote_types(q.dtype, torch.float32)
    return dtype.itemsize


def chunk_attention(q_rows, k_read, v_kept, *, q_positions, k_positions, first, encoding, processor, causal,
                    dropout_p, feature_dtype, feature_map="conv", tf32_scores=False):
    """One chunk of eq. 5: query rows ``first`` … (as keys; q_rows [batch, H, rows, d_head] in the scores' dtype)
    against the keys they read (k_read [batch, H, K, d_head]: under the causal mask those ≤ the last row plus the
    convolutions' halo) and keep (v_kept [batch, H, K_kept, d_head]): A, B, the processor, the causal mask,
    softmax, ·V in v's dtype; ``tf32_scores``: A's products on TF32 tensor cores (:func:`score_product`)."""
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
    """Equals ``processor(scores, bias, row_offset)`` (eq. 5, ``ScoreProcessor.forward``) for the first
    ``keys_out`` keys, in the scores' dtype; the feature map runs in ``compute_dtype`` (default: the scores'), by
    ``feature_map`` (:data:`FEATURE_MAPS`).

    With ``causal=True`` the causal mask is applied too (−inf right of each query row), exact where kept provided
    ``scores`` holds the keys up to the last row + ``needed_halo()``; without it every position is exact.
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
    """f of ``ScoreProcessor.feature_map`` (Conv2 ∘ LeakyReLU ∘ Conv1, eq. 5) with the convolutions' own zero
    padding instead of a padded copy: p = k//2 on each side for ``same`` (the output has K columns), p = k − 1 on
    each side for ``causal`` (its first K columns read the left zeros only, as F.pad(k − 1, 0) does; the rest is
    ignored). DAPE V1 is the processor's MLP."""
    if processor.processor == "dape_v1":
        return processor.feature_map(x)
    pad = (0, processor.left_padding)
    hidden = F.conv2d(x, processor.conv1.weight, processor.conv1.bias, padding=pad)
    hidden = F.leaky_relu(hidden, NEGATIVE_SLOPE, inplace=True)  # its backward reads its output: no extra copy
    return F.conv2d(hidden, processor.conv2.weight, processor.conv2.bias, padding=pad)


def _feature_precision(device_type: str, dtype: torch.dtype):
    """The feature map's precision: autocast to ``dtype`` below fp32, else autocast off (the weights' dtype); on a
    device without autocast (``meta``) the operands' dtypes as they are."""
    if dtype.itemsize >= 4 or not has_autocast(device_type):
        return autocast_off(device_type)
    return torch.autocast(device_type, dtype=dtype)
