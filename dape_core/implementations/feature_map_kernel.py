"""Triton kernels of DAPE's feature map f = Conv2(LeakyReLU(Conv1(x))), 1×k kernels along the keys (paper eq. 5,
appendix L; DAPE V1's MLP is k = 1), streamed over a channels-last map in one pass (``feature_map="triton"``; Python
side: :mod:`dape_core.implementations.feature_map`).

x is [rows, keys, C] (each query row of each batch element one row; the convolutions never mix rows), f is
[rows, keys, H], both contiguous. A program takes tiles of ``RB`` rows × ``BJ`` keys (M = RB·BJ pixels); a shift along
the keys is a load at shifted key offsets, so nothing moves between registers and scratch:

* forward: for each of Conv2's k taps (offset o₂ = t₂ − left), pre = b1 + Σ_{t₁} x[j + o₂ + t₁ − left] · W1[t₁]
  ([M, C] × [C, D]), LeakyReLU, zero outside the keys (Conv2's padding), f += hidden · W2[t₂] ([M, D] × [D, H]):
  Conv1 recomputed k times (small arithmetic), the hidden map never stored;
* backward pass 1 (``feature_map_backward_hidden_kernel``): dPre = (Σ_{t₂} df[j − o₂] · W2[t₂]ᵀ) ⊙ LeakyReLU′(pre),
  stored [rows, keys, D]; partial sums of dW2[t₂] = Σ hidden[j]ᵀ · df[j − o₂] and db2;
* backward pass 2 (``feature_map_backward_input_kernel``): dx = Σ_{t₁} dPre[j − o₁] · W1[t₁]ᵀ; partial sums of
  dW1[t₁] = Σ x[j + o₁]ᵀ · dPre[j] and db1.

With ``CAUSAL`` (map row r of each batch element's ``ROWS`` is query ``FIRST`` + r mod ``ROWS``) the kernels compute
f̂ = f ⊙ [j ≤ query], zero where the caller masks the scores anyway, and its exact gradient (df read through the same
mask); a tile wholly right of its rows' diagonals by more than the gradient reaches (f: 0; dPre: r = k − 1 − left;
dx: 2r) is only written with zeros, about half a causal map's tiles.

C, H and D are compile-time constants (one compilation per model shape): as run-time integers the compiler could not
prove a pixel's channels aligned and moved one element per instruction (docs/performance.md, "Compiled without a
GPU"). Persistent programs (``NPROG``) loop over the tiles, each adding its weight gradients to its own slot of
``PART``, which the caller sums (deterministic: no atomics). The caller zero-pads the weights' channels (C to CP,
D_DAPE to DP, H to HP: powers of two ≥ 16, as ``tl.dot`` needs).
"""

from __future__ import annotations

import triton
import triton.language as tl

NEGATIVE_SLOPE = tl.constexpr(0.01)  # LeakyReLU of appendix L (dape_core.dape's); Triton reads globals as constexprs


@triton.jit
def _pixels(ptr, r0, j0, shift, n_rows, n_keys, CH: tl.constexpr, RB: tl.constexpr, BJ: tl.constexpr,
            CHP: tl.constexpr):
    """[RB·BJ, CHP] of a contiguous [rows, keys, CH] map: rows r0 …, keys j0 + shift … (zero outside)."""
    r = (r0 + tl.arange(0, RB))[:, None, None].to(tl.int64)
    j = (j0 + shift + tl.arange(0, BJ))[None, :, None]
    c = tl.arange(0, CHP)[None, None, :]
    mask = (r < n_rows) & (j >= 0) & (j < n_keys) & (c < CH)
    x = tl.load(ptr + (r * n_keys + j) * CH + c, mask=mask, other=0.0)
    return tl.reshape(x, (RB * BJ, CHP))


@triton.jit
def _inside(r0, j0, shift, n_rows, n_keys, RB: tl.constexpr, BJ: tl.constexpr):
    """[RB·BJ, 1]: whether pixel (r, j + shift) of the tile lies in the map."""
    r = (r0 + tl.arange(0, RB))[:, None]
    j = (j0 + shift + tl.arange(0, BJ))[None, :]
    return tl.reshape((r < n_rows) & (j >= 0) & (j < n_keys), (RB * BJ, 1))


@triton.jit
def _last_query(r0, n_rows, FIRST, ROWS, RB: tl.constexpr):
    """The largest query position among the tile's rows r0 … r0 + RB − 1 (row r is query FIRST + r mod ROWS)."""
    r = r0 + tl.arange(0, RB)
    return tl.max(tl.where(r < n_rows, FIRST + r % ROWS, 0), 0)


@triton.jit
def _past(r0, j0, shift, FIRST, ROWS, RB: tl.constexpr, BJ: tl.constexpr):
    """[RB·BJ, 1]: whether key j0 + shift + … of each row lies at or left of the row's diagonal (its query)."""
    r = (r0 + tl.arange(0, RB))[:, None]
    j = (j0 + shift + tl.arange(0, BJ))[None, :]
    return tl.reshape(j <= FIRST + r % ROWS, (RB * BJ, 1))


@triton.jit
def _store_pixels(ptr, x, r0, j0, n_rows, n_keys, CH: tl.constexpr, RB: tl.constexpr, BJ: tl.constexpr,
                  CHP: tl.constexpr):
    """Writes x [RB·BJ, CHP] to a contiguous [rows, keys, CH] map (inside the map and the CH channels only)."""
    x = tl.reshape(x, (RB, BJ, CHP))
    r = (r0 + tl.arange(0, RB))[:, None, None].to(tl.int64)
    j = (j0 + tl.arange(0, BJ))[None, :, None]
    c = tl.arange(0, CHP)[None, None, :]
    tl.store(ptr + (r * n_keys + j) * CH + c, x.to(ptr.dtype.element_ty), mask=(r < n_rows) & (j < n_keys) & (c < CH))


@triton.jit
def _tap(ptr, t, M: tl.constexpr, N: tl.constexpr):
    """Tap t of a contiguous [k, M, N] weight as [M, N]."""
    return tl.load(ptr + t * M * N + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])


@triton.jit
def _tap_transposed(ptr, t, M: tl.constexpr, N: tl.constexpr):
    """Tap t of a contiguous [k, M, N] weight, transposed: [N, M]."""
    return tl.load(ptr + t * M * N + tl.arange(0, M)[None, :] * N + tl.arange(0, N)[:, None])


@triton.jit
def _add_to(ptr, x, M: tl.constexpr, N: tl.constexpr):
    """ptr[M, N] += x: the program's own partial sum (no other program writes it)."""
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(ptr + offs, tl.load(ptr + offs) + x)


@triton.jit
def _conv1(X, W1, b1, r0, j0, shift, n_rows, n_keys, C: tl.constexpr, RB: tl.constexpr, BJ: tl.constexpr,
           CP: tl.constexpr, DP: tl.constexpr, K: tl.constexpr, LEFT: tl.constexpr, DOT: tl.constexpr,
           PRECISION: tl.constexpr):
    """Conv1's output before LeakyReLU at keys j0 + shift … (eq. 5): b1 + Σ_t x[j + t − left] · W1[t], [M, DP]."""
    pre = tl.zeros((RB * BJ, DP), tl.float32) + b1[None, :]
    for t in tl.static_range(K):
        x = _pixels(X, r0, j0, shift + t - LEFT, n_rows, n_keys, C, RB, BJ, CP)
        pre += tl.dot(x.to(DOT), _tap(W1, t, CP, DP).to(DOT), input_precision=PRECISION)
    return pre


@triton.jit
def feature_map_forward_kernel(X, F, W1, B1, W2, B2, n_rows, n_keys, NPROG, FIRST, ROWS, C: tl.constexpr,
                               H: tl.constexpr, RB: tl.constexpr, BJ: tl.constexpr, CP: tl.constexpr, DP: tl.constexpr,
                               HP: tl.constexpr, K: tl.constexpr, LEFT: tl.constexpr, CAUSAL: tl.constexpr,
                               DOT: tl.constexpr, PRECISION: tl.constexpr):
    """f = b2 + Σ_{t₂} LeakyReLU(Conv1(x))[j + t₂ − left] · W2[t₂] (eq. 5) for every pixel, tile by tile (with
    ``CAUSAL``: zero right of each row's diagonal, and tiles wholly right of it only written)."""
    pid = tl.program_id(0)
    n_key_tiles = tl.cdiv(n_keys, BJ)
    b1 = tl.load(B1 + tl.arange(0, DP))
    b2 = tl.load(B2 + tl.arange(0, HP))
    for item in range(pid, tl.cdiv(n_rows, RB) * n_key_tiles, NPROG):
        r0 = (item // n_key_tiles) * RB
        j0 = (item % n_key_tiles) * BJ
        live = True
        if CAUSAL:
            live = j0 <= _last_query(r0, n_rows, FIRST, ROWS, RB)
        if live:
            f = tl.zeros((RB * BJ, HP), tl.float32) + b2[None, :]
            for t2 in tl.static_range(K):
                shift = t2 - LEFT
                pre = _conv1(X, W1, b1, r0, j0, shift, n_rows, n_keys, C, RB, BJ, CP, DP, K, LEFT, DOT, PRECISION)
                hidden = tl.where(pre > 0, pre, NEGATIVE_SLOPE * pre)
                hidden = tl.where(_inside(r0, j0, shift, n_rows, n_keys, RB, BJ), hidden, 0.0)  # Conv2's padding
                f += tl.dot(hidden.to(DOT), _tap(W2, t2, DP, HP).to(DOT), input_precision=PRECISION)
            if CAUSAL:
                f = tl.where(_past(r0, j0, 0, FIRST, ROWS, RB, BJ), f, 0.0)
            _store_pixels(F, f, r0, j0, n_rows, n_keys, H, RB, BJ, HP)
        else:
            _store_pixels(F, tl.zeros((RB * BJ, HP), tl.float32), r0, j0, n_rows, n_keys, H, RB, BJ, HP)


@triton.jit
def feature_map_backward_hidden_kernel(X, DF, DPRE, W1, B1, W2, PART, n_rows, n_keys, NPROG, FIRST, ROWS,
                                       C: tl.constexpr, H: tl.constexpr, D: tl.constexpr, RB: tl.constexpr,
                                       BJ: tl.constexpr, CP: tl.constexpr, DP: tl.constexpr, HP: tl.constexpr,
                                       K: tl.constexpr, LEFT: tl.constexpr, CAUSAL: tl.constexpr, DOT: tl.constexpr,
                                       PRECISION: tl.constexpr):
    """dPre = (Σ_{t₂} df[j − t₂ + left] · W2[t₂]ᵀ) ⊙ LeakyReLU′(pre) at every pixel (stored in DPRE), and the
    program's partial sums at PART + pid·(k·DP·HP + HP): dW2[t₂] = Σ hidden[j]ᵀ · df[j − t₂ + left], then db2
    (with ``CAUSAL``: df read as zero right of each row's diagonal; dPre is zero beyond the right reach)."""
    pid = tl.program_id(0)
    part = PART + pid * (K * DP * HP + HP)
    n_key_tiles = tl.cdiv(n_keys, BJ)
    b1 = tl.load(B1 + tl.arange(0, DP))
    for item in range(pid, tl.cdiv(n_rows, RB) * n_key_tiles, NPROG):
        r0 = (item // n_key_tiles) * RB
        j0 = (item % n_key_tiles) * BJ
        live = True
        if CAUSAL:
            live = j0 <= _last_query(r0, n_rows, FIRST, ROWS, RB) + (K - 1 - LEFT)
        if live:
            inside = _inside(r0, j0, 0, n_rows, n_keys, RB, BJ)
            pre = _conv1(X, W1, b1, r0, j0, 0, n_rows, n_keys, C, RB, BJ, CP, DP, K, LEFT, DOT, PRECISION)
            hidden = tl.where(inside, tl.where(pre > 0, pre, NEGATIVE_SLOPE * pre), 0.0)
            d_hidden = tl.zeros((RB * BJ, DP), tl.float32)
            for t2 in tl.static_range(K):
                df = _pixels(DF, r0, j0, LEFT - t2, n_rows, n_keys, H, RB, BJ, HP)
                if CAUSAL:
                    df = tl.where(_past(r0, j0, LEFT - t2, FIRST, ROWS, RB, BJ), df, 0.0)
                d_hidden += tl.dot(df.to(DOT), _tap_transposed(W2, t2, DP, HP).to(DOT), input_precision=PRECISION)
                _add_to(part + t2 * DP * HP, tl.dot(tl.trans(hidden).to(DOT), df.to(DOT), input_precision=PRECISION),
                        DP, HP)
            d_pre = tl.where(inside, d_hidden * tl.where(pre > 0, 1.0, NEGATIVE_SLOPE), 0.0)
            _store_pixels(DPRE, d_pre, r0, j0, n_rows, n_keys, D, RB, BJ, DP)
            df_own = _pixels(DF, r0, j0, 0, n_rows, n_keys, H, RB, BJ, HP).to(tl.float32)
            if CAUSAL:
                df_own = tl.where(_past(r0, j0, 0, FIRST, ROWS, RB, BJ), df_own, 0.0)
            _add_to(part + K * DP * HP, tl.sum(df_own, 0)[None, :], 1, HP)
        else:
            _store_pixels(DPRE, tl.zeros((RB * BJ, DP), tl.float32), r0, j0, n_rows, n_keys, D, RB, BJ, DP)


@triton.jit
def feature_map_backward_input_kernel(X, DPRE, DX, W1, PART, n_rows, n_keys, NPROG, FIRST, ROWS, C: tl.constexpr,
                                      D: tl.constexpr, RB: tl.constexpr, BJ: tl.constexpr, CP: tl.constexpr,
                                      DP: tl.constexpr, K: tl.constexpr, LEFT: tl.constexpr, CAUSAL: tl.constexpr,
                                      DOT: tl.constexpr, PRECISION: tl.constexpr):
    """dx = Σ_{t₁} dPre[j − t₁ + left] · W1[t₁]ᵀ at every pixel, and the program's partial sums at
    PART + pid·(k·CP·DP + DP): dW1[t₁] = Σ x[j + t₁ − left]ᵀ · dPre[j], then db1 (with ``CAUSAL``: tiles beyond
    twice the right reach of each row's diagonal, where dPre is zero, only written)."""
    pid = tl.program_id(0)
    part = PART + pid * (K * CP * DP + DP)
    n_key_tiles = tl.cdiv(n_keys, BJ)
    for item in range(pid, tl.cdiv(n_rows, RB) * n_key_tiles, NPROG):
        r0 = (item // n_key_tiles) * RB
        j0 = (item % n_key_tiles) * BJ
        live = True
        if CAUSAL:
            live = j0 <= _last_query(r0, n_rows, FIRST, ROWS, RB) + 2 * (K - 1 - LEFT)
        if live:
            dx = tl.zeros((RB * BJ, CP), tl.float32)
            for t1 in tl.static_range(K):
                d_pre = _pixels(DPRE, r0, j0, LEFT - t1, n_rows, n_keys, D, RB, BJ, DP)
                dx += tl.dot(d_pre.to(DOT), _tap_transposed(W1, t1, CP, DP).to(DOT), input_precision=PRECISION)
            _store_pixels(DX, dx, r0, j0, n_rows, n_keys, C, RB, BJ, CP)
            d_pre = _pixels(DPRE, r0, j0, 0, n_rows, n_keys, D, RB, BJ, DP)
            for t1 in tl.static_range(K):
                x = _pixels(X, r0, j0, t1 - LEFT, n_rows, n_keys, C, RB, BJ, CP)
                _add_to(part + t1 * CP * DP, tl.dot(tl.trans(x).to(DOT), d_pre.to(DOT), input_precision=PRECISION),
                        CP, DP)
            _add_to(part + K * CP * DP, tl.sum(d_pre.to(tl.float32), 0)[None, :], 1, DP)
        else:
            _store_pixels(DX, tl.zeros((RB * BJ, CP), tl.float32), r0, j0, n_rows, n_keys, C, RB, BJ, CP)
