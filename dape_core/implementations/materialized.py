"""The accelerator path of DAPE attention (``attention_impl: materialized``): the paper's materialised form
(eq. 5, appendix L) one chunk of query rows at a time, with operator calls that do not depend on the batch.

Per chunk of query rows r0 … r1−1 (rows are independent under DAPE's key-axis convolution): A = q·kᵀ/√d on the
keys the rows reach (under the causal mask keys ≤ r1 − 1 plus the ``ScoreProcessor.needed_halo()`` columns the
convolutions read with ``same`` padding), + B, tril([A; B]) laid out channels-last, the layer's own ``nn.Conv2d``
modules (``ScoreProcessor.feature_map``; the MLP for DAPE V1), A + B + f, the causal mask, softmax, ·V. Each step
is one operator over the whole batch, so a layer makes the same calls at any batch size; the Python loop runs
over chunks of rows only (the CPU path, :mod:`dape_core.implementations.blocked`, loops over batch elements × 16
rows to stay in a core's caches, which on an accelerator means kernel launches growing with the batch). There are
no device branches: the same arithmetic runs on a CPU, where the tests prove it equal to the reference, and on a
GPU, where the channels-last layout lets cuDNN run the convolutions without layout copies.

Precision: A, B, the processed scores and the softmax are fp32 even under bf16 autocast (q and k are upcast);
the convolutions run in ``dape_dtype`` when given, else in the autocast dtype, else in the scores' dtype; ·V in
v's dtype.

Memory: a chunk of R rows reading K keys (K' = K + k − 1 columns once padded) at batch b holds at its peak
(forward) A and B in fp32 (C channels: 2H, or H for an encoding without a bias) and either x = tril([A; B]) with
the feature map's intermediates in the convolution dtype of s bytes (D = D_DAPE; the padded input and Conv1's
output: C + D, or Conv1's output and the LeakyReLU: 2D, or the LeakyReLU, its padded copy and Conv2's output:
2D + H), or, after the feature map, f and the fp32 sum A + B + f:

    bytes(b, R, K) = b · R · (4 · C · K + max(s · (C + max(C + D, 2D, 2D + H)) · K', (s + 4) · H · K))

(a batch-free B counted per batch element: an upper bound; not counted: the [R, K] boolean mask, cuDNN's
workspace, and what an encoding allocates while computing B — FIRE's MLP over [R, K, 32], CoPE's gates — which
every path pays). The rows per chunk are the most whose bytes at K = T (the last chunk reads every key) fit
``DEFAULT_CHUNK_BYTES`` (1 GiB). The 350M shape (H 16, D_DAPE 32, Kerple: C = 32), DAPE1×3, fp32, T = 8192,
batch 1: 4,719,488 bytes per row (1,048,576 for A and B, 3,670,912 for the feature map), so 227 rows per chunk,
37 chunks per layer, and one chunk's temporaries peak at 1,071,323,776 bytes (0.998 GiB); beside them an
evaluation forward pass holds the weights (1.62 GB in fp32 with a GPT-2 vocabulary), [batch, T, d_model]-sized
activations and the logits of the positions it scores. With gradients each chunk keeps what its backward pass
reads (the padded Conv1 input, Conv1's output, the padded LeakyReLU and the probabilities: about
b · R · K · (s · (C + 2D) + 4H) bytes), so training memory is that summed over the chunks (unless the block is
recomputed in the backward pass). The chunks get fewer rows only once one chunk of the whole batch would exceed
the budget, so the number of chunks, and of operator calls, grows with the batch only where each operator
already works on hundreds of megabytes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from dape_core.dape import ScoreProcessor
from dape_core.encodings import PositionalEncoding

DEFAULT_CHUNK_BYTES = 2**30  # one chunk's temporaries (module docstring: the bound and the 350M figure)


def chunk_bytes(processor: ScoreProcessor, batch: int, rows: int, keys: int, feature_itemsize: int = 4) -> int:
    """Peak bytes of one chunk's temporaries, b·R·(4·C·K + max(s·(C + max(C + D, 2D, 2D + H))·K', (s + 4)·H·K))
    (module docstring)."""
    h, d, s = processor.n_head, processor.dape_width, feature_itemsize
    c = 2 * h if processor.bias_channels else h
    padded = keys + processor.kernel_size - 1
    features = s * (c + max(c + d, 2 * d, 2 * d + h)) * padded
    return batch * rows * (4 * c * keys + max(features, (s + 4) * h * keys))


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
) -> torch.Tensor:
    """softmax(mask(A + B + f(tril([A; B])))) · V (eq. 5) for q, k, v [batch, H, T, d_head] (already rotated),
    in chunks of ``chunk`` query rows (default: :func:`chunk_rows`); returns [batch, H, T, d_head]."""
    device_type, n = q.device.type, q.shape[2]
    feature_dtype = dape_dtype
    if feature_dtype is None and torch.is_autocast_enabled(device_type):
        feature_dtype = torch.get_autocast_dtype(device_type)
    score_dtype = torch.promote_types(q.dtype, torch.float32)  # fp32 scores under bf16 autocast (fp64 stays)
    feature_itemsize = (feature_dtype or score_dtype).itemsize
    chunk = chunk or chunk_rows(processor, q.shape[0], n, feature_itemsize=feature_itemsize)
    scale = 1.0 / math.sqrt(q.shape[-1])
    halo = processor.needed_halo()
    outputs = {}
    with torch.autocast(device_type, enabled=False):
        q_s, k_s = q.to(score_dtype), k.to(score_dtype)
        for r0 in reversed(range(0, n, chunk)):  # largest chunk first: later chunks reuse its memory
            rows_end = min(n, r0 + chunk)
            keys_read, keys_kept = (min(n, rows_end + halo), rows_end) if causal else (n, n)
            q_rows, k_read = q_s[:, :, r0:rows_end], k_s[:, :, :keys_read]
            scores = torch.matmul(q_rows, k_read.transpose(-2, -1)).mul_(scale)  # A = q·kᵀ/√d
            bias = None
            if encoding.has_bias:
                bias = encoding.bias(q_rows, k_read, scores, positions[r0:rows_end], positions[:keys_read])
            scores = materialized_scores(processor, scores, bias, r0, causal=causal, keys_out=keys_kept,
                                         compute_dtype=feature_dtype)
            probs = torch.softmax(scores, dim=-1)
            if dropout_p > 0:
                probs = F.dropout(probs, p=dropout_p)
            outputs[r0] = torch.matmul(probs.to(v.dtype), v[:, :, :keys_kept])
    return outputs[0] if len(outputs) == 1 else torch.cat([outputs[r0] for r0 in sorted(outputs)], dim=2)


def materialized_scores(
    processor: ScoreProcessor,
    scores: torch.Tensor,
    bias: torch.Tensor | None,
    row_offset: int = 0,
    *,
    causal: bool = False,
    keys_out: int | None = None,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Equals ``processor(scores, bias, row_offset)`` (eq. 5, ``ScoreProcessor.forward``) for the first
    ``keys_out`` keys, in the scores' dtype; the feature map runs in ``compute_dtype`` (default: the scores').

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
    # [A; B] as [batch, rows, keys, C]: its NCHW view is channels-last, the layout cuDNN convolves without copies
    x = torch.cat([s.to(dtype).expand(batch, heads, rows, keys).permute(0, 2, 3, 1) for s in sources], dim=-1)
    if processor.tril:
        x = x.masked_fill_(future[..., None], 0)
    with _feature_precision(scores.device.type, dtype):
        feature = processor.feature_map(x.permute(0, 3, 1, 2))
    del x
    if processor.bias_channels:  # A + B + f in the scores' dtype, one new tensor
        out = (scores[..., :kout] + bias[..., :kout]).add_(feature[..., :kout])
    else:
        out = scores[..., :kout] + feature[..., :kout]
    if causal:
        out = out.masked_fill_(future[:, :kout], float("-inf"))
    return out


def _feature_precision(device_type: str, dtype: torch.dtype):
    """The feature map's precision: autocast to ``dtype`` below fp32, else autocast off (the weights' dtype)."""
    if dtype.itemsize >= 4:
        return torch.autocast(device_type, enabled=False)
    return torch.autocast(device_type, dtype=dtype)
