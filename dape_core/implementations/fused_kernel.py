"""Triton kernels of the fused DAPE attention (``attention_impl: fused``; Python side:
:mod:`dape_core.implementations.fused`): softmax(mask(A + B + f(tril([A; B])))) · V (paper eq. 5, appendix L) tile by
tile, in the manner of FlashAttention-2.

A program takes one batch element × ``BM`` query rows × every head and walks the keys in *wide tiles* of ``W``
columns, computing on chip in fp32 accumulators: A = q·kᵀ/√d for every head (one batched product), B (a per-distance
table, or a bias tensor read per tile), X = [A; B] cut by tril and the key range; Conv1 as ``k`` products W1[t]·X
shifted by t − left (2H → D_DAPE, [D, C] × [C, BM·W]), LeakyReLU, Conv2 as ``k`` products W2[t]·hidden shifted
(D_DAPE → H), each shift a reload of a per-program scratch slab (Triton's only way to move a register tile along an
axis; it stays in L1/L2); S = A + B + f, the causal mask, an online softmax per head, · V.

Each 1×k convolution reads k − 1 columns beyond the tile, so a wide tile is exact on W − 2(k − 1) columns of f (the
forward's stride) and W − 4(k − 1) of X's gradients (the backward's: the chain crosses both convolutions twice). The
halo columns feed the convolutions and are masked out of the softmax, ·V and every accumulation, so exactly one tile
counts each (row, key) pair.

No [batch, H, T, T] tensor exists: the forward saves O and the per-row log-sum-exp; the backward recomputes each tile
(δ = rowsum(dO ⊙ O) from the caller) in two kernels, as FlashAttention-2: key-major for dK, dV (in registers over the
row blocks); row-major for dQ and the weights' (dW1, db1, dW2, db2) and bias's gradients as per-program partial sums
the caller reduces (deterministic: no atomics). A per-distance table's gradient sums dB along diagonals i − j: a
tile's dB is written skewed into scratch ((r, c) → (r, r − c)) and read back as columns, a plain reduction.

``NPROG`` persistent programs loop over the (batch element, block) items, so scratch and partial sums are sized by
the programs. The caller zero-pads the weights' channels (heads to HP, D_DAPE to DP, head size to DHP: powers of two
≥ 16, as ``tl.dot`` needs); padded heads and rows are computed and never stored.
"""

from __future__ import annotations

import triton
import triton.language as tl

NEGATIVE_SLOPE = tl.constexpr(0.01)  # LeakyReLU of appendix L (dape_core.dape's); Triton reads globals as constexprs
BIAS_NONE, BIAS_TABLE, BIAS_FULL = 0, 1, 2  # no bias (eq. 4), B[i, j] = table[h, i − j], B read per element


@triton.jit
def _rows(ptr, b, start, T, H, DH, HP: tl.constexpr, R: tl.constexpr, DHP: tl.constexpr):
    """[HP, R, DHP] of a contiguous [batch, H, T, DH] tensor: batch b, rows start … start + R − 1 (zero outside)."""
    h = tl.arange(0, HP)[:, None, None]
    r = (start + tl.arange(0, R))[None, :, None]
    d = tl.arange(0, DHP)[None, None, :]
    mask = (h < H) & (r >= 0) & (r < T) & (d < DH)
    return tl.load(ptr + ((b * H + h) * T + r) * DH + d, mask=mask, other=0.0)


@triton.jit
def _stash(scr, x, CH: tl.constexpr, BM: tl.constexpr, W: tl.constexpr):
    """Writes x [CH, BM, W] to the program's scratch slab (after every earlier read of it)."""
    ch = tl.arange(0, CH)[:, None, None]
    r = tl.arange(0, BM)[None, :, None]
    c = tl.arange(0, W)[None, None, :]
    tl.debug_barrier()
    tl.store(scr + (ch * BM + r) * W + c, x)
    tl.debug_barrier()


@triton.jit
def _shifted(scr, shift, CH: tl.constexpr, BM: tl.constexpr, W: tl.constexpr):
    """y[ch, r, c] = x[ch, r, c + shift] of the stashed x, 0 where c + shift leaves the tile; as [CH, BM·W]."""
    ch = tl.arange(0, CH)[:, None, None]
    r = tl.arange(0, BM)[None, :, None]
    c = tl.arange(0, W)[None, None, :] + shift
    y = tl.load(scr + (ch * BM + r) * W + c, mask=(c >= 0) & (c < W) & (ch >= 0) & (r >= 0), other=0.0)
    return tl.reshape(y, (CH, BM * W))


@triton.jit
def _matrix(ptr, M: tl.constexpr, N: tl.constexpr):
    """A contiguous [M, N] matrix (the caller's padded weights)."""
    return tl.load(ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])


@triton.jit
def _vector(ptr, N: tl.constexpr):
    return tl.load(ptr + tl.arange(0, N))


@triton.jit
def _add_to(ptr, x, M: tl.constexpr, N: tl.constexpr):
    """ptr[M, N] += x: a program's own partial sum (no other program writes it)."""
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(ptr + offs, tl.load(ptr + offs) + x)


@triton.jit
def _pipeline(q, kw, b, m0, w0, scale, bias_ptr, s_bb, s_bh, s_bi, s_bj, table_len, W1A, W1B, B1, W2, B2, scr,
              ROW_OFF, Tq, Tk, H,
              HP: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr, W: tl.constexpr, K: tl.constexpr,
              LEFT: tl.constexpr, TRIL: tl.constexpr, CAUSAL: tl.constexpr, BIAS: tl.constexpr,
              DOT: tl.constexpr, PRECISION: tl.constexpr):
    """One wide tile's forward (eq. 5): A, B, the cut mask of X, Conv1's output before and after LeakyReLU, and
    S = A + B + f with −inf where softmax must not look (outside the keys, right of the row under the causal
    mask); f is exact on columns [2·left, W − 2·reach). X is left stashed in ``scr`` (A half, then B half) and the
    hidden map in ``scr`` + 2·HP·BM·W."""
    r = tl.arange(0, BM)[None, :, None]
    c = tl.arange(0, W)[None, None, :]
    h = tl.arange(0, HP)[:, None, None]
    i = m0 + r
    ia = ROW_OFF + i
    j = w0 + c
    in_keys = (j >= 0) & (j < Tk)
    a = tl.dot(q, tl.permute(kw, (0, 2, 1)), input_precision=PRECISION) * scale  # A = q·kᵀ/√d, [HP, BM, W]
    cut = in_keys & (i < Tq)
    if TRIL:
        cut = cut & (j <= ia)
    xa = tl.where(cut, a, 0.0)
    hid_map = scr + 2 * HP * BM * W
    _stash(scr, xa, HP, BM, W)
    if BIAS == 1:
        u = ia - j + Tk - 1
        bias = tl.load(bias_ptr + h * table_len + u, mask=(h < H) & in_keys & (i < Tq) & (u >= 0) & (u < table_len),
                       other=0.0).to(tl.float32)
    elif BIAS == 2:
        bias = tl.load(bias_ptr + b * s_bb + h * s_bh + i * s_bi + j * s_bj, mask=(h < H) & in_keys & (i < Tq),
                       other=0.0).to(tl.float32)
    else:
        bias = tl.zeros((HP, BM, W), tl.float32)
    if BIAS != 0:
        _stash(scr + HP * BM * W, tl.where(cut, bias, 0.0), HP, BM, W)
    pre = tl.zeros((DP, BM * W), tl.float32) + _vector(B1, DP)[:, None]
    for t in tl.static_range(K):  # Conv1: Σ_t W1[t]·X[c + t − left]
        pre += tl.dot(_matrix(W1A + t * DP * HP, DP, HP).to(DOT), _shifted(scr, t - LEFT, HP, BM, W).to(DOT),
                      input_precision=PRECISION)
        if BIAS != 0:
            pre += tl.dot(_matrix(W1B + t * DP * HP, DP, HP).to(DOT),
                          _shifted(scr + HP * BM * W, t - LEFT, HP, BM, W).to(DOT), input_precision=PRECISION)
    pre = tl.reshape(pre, (DP, BM, W))
    hid = tl.where(in_keys, tl.where(pre > 0, pre, NEGATIVE_SLOPE * pre), 0.0)  # Conv2 pads with zeros
    _stash(hid_map, hid, DP, BM, W)
    f = tl.zeros((HP, BM * W), tl.float32) + _vector(B2, HP)[:, None]
    for t in tl.static_range(K):  # Conv2: Σ_t W2[t]·hidden[c + t − left]
        f += tl.dot(_matrix(W2 + t * HP * DP, HP, DP).to(DOT), _shifted(hid_map, t - LEFT, DP, BM, W).to(DOT),
                    input_precision=PRECISION)
    s = a + bias + tl.reshape(f, (HP, BM, W))
    seen = in_keys & (c >= 0)
    if CAUSAL:
        seen = seen & (j <= ia)
    s = tl.where(seen, s, float("-inf"))
    return a, bias, cut, pre, s


@triton.jit
def dape_forward_kernel(Q, Kp, V, O, LSE, bias_ptr, s_bb, s_bh, s_bi, s_bj, table_len, W1A, W1B, B1, W2, B2, SCR,
                        scale, ROW_OFF, batch, Tq, Tk, H, DH, NPROG,
                        HP: tl.constexpr, DP: tl.constexpr, DHP: tl.constexpr, BM: tl.constexpr, W: tl.constexpr,
                        K: tl.constexpr, LEFT: tl.constexpr, TRIL: tl.constexpr, CAUSAL: tl.constexpr,
                        BIAS: tl.constexpr, DOT: tl.constexpr, PRECISION: tl.constexpr):
    """O and the per-row log-sum-exp LSE [batch, HP, Tq] of softmax(mask(A + B + f)) · V, online over wide tiles
    whose exact columns [2·left, W − 2·reach) step through the keys."""
    pid = tl.program_id(0)
    scr = SCR + pid * (2 * HP + DP) * BM * W
    stride: tl.constexpr = W - 2 * (K - 1)
    n_blocks = tl.cdiv(Tq, BM)
    for item in range(pid, batch * n_blocks, NPROG):
        b = item // n_blocks
        m0 = (item % n_blocks) * BM
        q = _rows(Q, b, m0, Tq, H, DH, HP, BM, DHP)
        last_key = Tk - 1
        if CAUSAL:
            last_key = tl.minimum(Tk - 1, ROW_OFF + m0 + BM - 1)
        m_i = tl.full((HP, BM), float("-inf"), tl.float32)
        l_i = tl.zeros((HP, BM), tl.float32)
        acc = tl.zeros((HP, BM, DHP), tl.float32)
        c = tl.arange(0, W)[None, None, :]
        owned = (c >= 2 * LEFT) & (c < 2 * LEFT + stride)
        for n0 in range(0, last_key + 1, stride):
            w0 = n0 - 2 * LEFT
            kw = _rows(Kp, b, w0, Tk, H, DH, HP, W, DHP)
            a, bias, cut, pre, s = _pipeline(q, kw, b, m0, w0, scale, bias_ptr, s_bb, s_bh, s_bi, s_bj, table_len,
                                             W1A, W1B, B1, W2, B2, scr, ROW_OFF, Tq, Tk, H, HP, DP, BM, W, K, LEFT,
                                             TRIL, CAUSAL, BIAS, DOT, PRECISION)
            s = tl.where(owned, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 2))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe[:, :, None])
            alpha = tl.exp(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 2)
            vw = _rows(V, b, w0, Tk, H, DH, HP, W, DHP)
            acc = acc * alpha[:, :, None] + tl.dot(p.to(DOT), vw.to(DOT), input_precision=PRECISION)
            m_i = m_new
        out = acc / l_i[:, :, None]
        h = tl.arange(0, HP)[:, None, None]
        r = (m0 + tl.arange(0, BM))[None, :, None]
        d = tl.arange(0, DHP)[None, None, :]
        tl.store(O + ((b * H + h) * Tq + r) * DH + d, out.to(O.dtype.element_ty), mask=(h < H) & (r < Tq) & (d < DH))
        h2 = tl.arange(0, HP)[:, None]
        r2 = (m0 + tl.arange(0, BM))[None, :]
        tl.store(LSE + (b * HP + h2) * Tq + r2, m_i + tl.log(l_i), mask=r2 < Tq)


@triton.jit
def _tile_backward(q, kw, vw, do, lse, delta, b, m0, w0, scale, bias_ptr, s_bb, s_bh, s_bi, s_bj, table_len,
                   W1A, W1B, B1, W2, B2, scr, part, ROW_OFF, Tq, Tk, H,
                   HP: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr, W: tl.constexpr, K: tl.constexpr,
                   LEFT: tl.constexpr, TRIL: tl.constexpr, CAUSAL: tl.constexpr, BIAS: tl.constexpr,
                   DOT: tl.constexpr, PRECISION: tl.constexpr, WEIGHT_GRADS: tl.constexpr):
    """One wide tile's backward on its exact columns [2(k − 1), W − 2(k − 1)) (the others zero): P, dA and dB
    (the gradients of A and B through S and through the processor's input). With ``WEIGHT_GRADS`` it adds the
    tile's dW1 (A and B halves), db1, dW2, db2 to the program's partial sums at ``part``."""
    a, bias, cut, pre, s = _pipeline(q, kw, b, m0, w0, scale, bias_ptr, s_bb, s_bh, s_bi, s_bj, table_len,
                                     W1A, W1B, B1, W2, B2, scr, ROW_OFF, Tq, Tk, H, HP, DP, BM, W, K, LEFT,
                                     TRIL, CAUSAL, BIAS, DOT, PRECISION)
    c = tl.arange(0, W)[None, None, :]
    j = w0 + c
    in_keys = (j >= 0) & (j < Tk)
    f_exact = (c >= 2 * LEFT) & (c < W - 2 * (K - 1 - LEFT))
    owned = (c >= 2 * (K - 1)) & (c < W - 2 * (K - 1)) & in_keys
    p = tl.where(f_exact, tl.exp(s - lse[:, :, None]), 0.0)
    dp = tl.dot(do, tl.permute(vw, (0, 2, 1)), input_precision=PRECISION)  # dO·Vᵀ, [HP, BM, W]
    ds = p * (dp - delta[:, :, None])  # dS = dF: the softmax's backward
    hid_map = scr + 2 * HP * BM * W
    grad_f = scr + (2 * HP + DP) * BM * W
    grad_pre = grad_f + HP * BM * W
    if WEIGHT_GRADS:  # dW2[t] = Σ dF[c]·hidden[c + t − left]ᵀ over the tile's own columns
        ds_own = tl.reshape(tl.where(owned, ds, 0.0), (HP, BM * W))
        for t in tl.static_range(K):
            dw2 = tl.dot(ds_own.to(DOT), tl.trans(_shifted(hid_map, t - LEFT, DP, BM, W)).to(DOT),
                         input_precision=PRECISION)
            _add_to(part + t * HP * DP, dw2, HP, DP)
        db2 = tl.sum(ds_own, 1)
        _add_to(part + K * HP * DP, db2[:, None], HP, 1)
    _stash(grad_f, ds, HP, BM, W)
    d_hid = tl.zeros((DP, BM * W), tl.float32)
    for t in tl.static_range(K):  # Conv2's backward: dHidden[c] = Σ_t W2[t]ᵀ·dF[c − t + left]
        d_hid += tl.dot(tl.trans(_matrix(W2 + t * HP * DP, HP, DP)).to(DOT),
                        _shifted(grad_f, LEFT - t, HP, BM, W).to(DOT), input_precision=PRECISION)
    d_pre = tl.reshape(d_hid, (DP, BM, W)) * tl.where(pre > 0, 1.0, NEGATIVE_SLOPE)
    d_pre = tl.where(in_keys, d_pre, 0.0)
    if WEIGHT_GRADS:  # dW1[t] = Σ dPre[c]·X[c + t − left]ᵀ over the tile's own columns
        pre_base = part + K * HP * DP + HP
        d_pre_own = tl.reshape(tl.where(owned, d_pre, 0.0), (DP, BM * W))
        for t in tl.static_range(K):
            dw1 = tl.dot(d_pre_own.to(DOT), tl.trans(_shifted(scr, t - LEFT, HP, BM, W)).to(DOT),
                         input_precision=PRECISION)
            _add_to(pre_base + t * DP * HP, dw1, DP, HP)
            if BIAS != 0:
                dw1b = tl.dot(d_pre_own.to(DOT), tl.trans(_shifted(scr + HP * BM * W, t - LEFT, HP, BM, W)).to(DOT),
                              input_precision=PRECISION)
                _add_to(pre_base + (K + t) * DP * HP, dw1b, DP, HP)
        db1 = tl.sum(d_pre_own, 1)
        _add_to(pre_base + 2 * K * DP * HP, db1[:, None], DP, 1)
    _stash(grad_pre, d_pre, DP, BM, W)
    dxa = tl.zeros((HP, BM * W), tl.float32)
    dxb = tl.zeros((HP, BM * W), tl.float32)
    for t in tl.static_range(K):  # Conv1's backward: dX[c] = Σ_t W1[t]ᵀ·dPre[c − t + left]
        shifted = _shifted(grad_pre, LEFT - t, DP, BM, W).to(DOT)
        dxa += tl.dot(tl.trans(_matrix(W1A + t * DP * HP, DP, HP)).to(DOT), shifted, input_precision=PRECISION)
        if BIAS != 0:
            dxb += tl.dot(tl.trans(_matrix(W1B + t * DP * HP, DP, HP)).to(DOT), shifted, input_precision=PRECISION)
    da = tl.where(owned, ds + tl.where(cut, tl.reshape(dxa, (HP, BM, W)), 0.0), 0.0)
    db = tl.where(owned, ds + tl.where(cut, tl.reshape(dxb, (HP, BM, W)), 0.0), 0.0)
    p = tl.where(owned, p, 0.0)
    return p, da, db


@triton.jit
def _row_block(Q, DO, LSE, DELTA, b, m0, Tq, H, DH, HP: tl.constexpr, BM: tl.constexpr, DHP: tl.constexpr):
    """What the backward reads of a block of query rows: q, dO [HP, BM, DHP], the log-sum-exp and δ [HP, BM]."""
    q = _rows(Q, b, m0, Tq, H, DH, HP, BM, DHP)
    do = _rows(DO, b, m0, Tq, H, DH, HP, BM, DHP)
    h = tl.arange(0, HP)[:, None]
    r = (m0 + tl.arange(0, BM))[None, :]
    lse = tl.load(LSE + (b * HP + h) * Tq + r, mask=r < Tq, other=0.0)
    delta = tl.load(DELTA + (b * HP + h) * Tq + r, mask=r < Tq, other=0.0)
    return q, do, lse, delta


@triton.jit
def dape_backward_kv_kernel(Q, Kp, V, DO, LSE, DELTA, DK, DV, bias_ptr, s_bb, s_bh, s_bi, s_bj, table_len,
                            W1A, W1B, B1, W2, B2, SCR, scale, ROW_OFF, batch, Tq, Tk, H, DH, NPROG,
                            HP: tl.constexpr, DP: tl.constexpr, DHP: tl.constexpr, BM: tl.constexpr,
                            W: tl.constexpr, K: tl.constexpr, LEFT: tl.constexpr, TRIL: tl.constexpr,
                            CAUSAL: tl.constexpr, BIAS: tl.constexpr, DOT: tl.constexpr, PRECISION: tl.constexpr):
    """dK and dV, key-major: a program owns W − 4(k − 1) keys and loops over the row blocks that reach them."""
    pid = tl.program_id(0)
    scr = SCR + pid * (3 * HP + 2 * DP) * BM * W
    stride: tl.constexpr = W - 4 * (K - 1)
    reach: tl.constexpr = K - 1 - LEFT
    n_tiles = tl.cdiv(Tk, stride)
    n_blocks = tl.cdiv(Tq, BM)
    for item in range(pid, batch * n_tiles, NPROG):
        b = item // n_tiles
        n0 = (item % n_tiles) * stride
        w0 = n0 - 2 * (K - 1)
        kw = _rows(Kp, b, w0, Tk, H, DH, HP, W, DHP)
        vw = _rows(V, b, w0, Tk, H, DH, HP, W, DHP)
        first_block = 0
        if CAUSAL:  # rows below the first owned key − 2·reach reach none of them
            first_block = tl.maximum(0, n0 - 2 * reach - ROW_OFF) // BM
        dk = tl.zeros((HP, W, DHP), tl.float32)
        dv = tl.zeros((HP, W, DHP), tl.float32)
        for blk in range(first_block, n_blocks):
            m0 = blk * BM
            q, do, lse, delta = _row_block(Q, DO, LSE, DELTA, b, m0, Tq, H, DH, HP, BM, DHP)
            p, da, db = _tile_backward(q, kw, vw, do, lse, delta, b, m0, w0, scale, bias_ptr, s_bb, s_bh, s_bi,
                                       s_bj, table_len, W1A, W1B, B1, W2, B2, scr, scr, ROW_OFF, Tq, Tk, H, HP, DP,
                                       BM, W, K, LEFT, TRIL, CAUSAL, BIAS, DOT, PRECISION, False)
            dv += tl.dot(tl.permute(p, (0, 2, 1)).to(DOT), do.to(DOT), input_precision=PRECISION)
            dk += tl.dot(tl.permute(da, (0, 2, 1)).to(DOT), q.to(DOT), input_precision=PRECISION)
        h = tl.arange(0, HP)[:, None, None]
        c = tl.arange(0, W)[None, :, None]
        j = w0 + c
        d = tl.arange(0, DHP)[None, None, :]
        mine = (h < H) & (c >= 2 * (K - 1)) & (c < W - 2 * (K - 1)) & (j < Tk) & (d < DH)
        offs = ((b * H + h) * Tk + j) * DH + d
        tl.store(DK + offs, (dk * scale).to(DK.dtype.element_ty), mask=mine)
        tl.store(DV + offs, dv.to(DV.dtype.element_ty), mask=mine)


@triton.jit
def dape_backward_q_kernel(Q, Kp, V, DO, LSE, DELTA, DQ, DBIAS, bias_ptr, s_bb, s_bh, s_bi, s_bj, table_len,
                           W1A, W1B, B1, W2, B2, SCR, PART, part_size, scale, ROW_OFF, batch, Tq, Tk, H, DH, NPROG,
                           HP: tl.constexpr, DP: tl.constexpr, DHP: tl.constexpr, BM: tl.constexpr,
                           W: tl.constexpr, E: tl.constexpr, K: tl.constexpr, LEFT: tl.constexpr,
                           TRIL: tl.constexpr, CAUSAL: tl.constexpr, BIAS: tl.constexpr, BIAS_GRAD: tl.constexpr,
                           DOT: tl.constexpr, PRECISION: tl.constexpr, Q_GRAD: tl.constexpr,
                           WEIGHT_GRADS: tl.constexpr):
    """dQ, row-major, and the program's partial sums of the weights' gradients and of the bias's: per program
    ``part_size`` floats at PART (dW2, db2, dW1's A and B halves, db1) and, for a table, [HP, table_len] at DBIAS
    (for a bias tensor, dB [batch, H, Tq, Tk] at DBIAS, each element written by the one tile that owns it)."""
    pid = tl.program_id(0)
    scr = SCR + pid * ((3 * HP + 2 * DP) * BM * W + HP * BM * E)
    skew = scr + (3 * HP + 2 * DP) * BM * W
    part = PART + pid * part_size
    stride: tl.constexpr = W - 4 * (K - 1)
    reach: tl.constexpr = K - 1 - LEFT
    n_blocks = tl.cdiv(Tq, BM)
    h = tl.arange(0, HP)[:, None, None]
    r = tl.arange(0, BM)[None, :, None]
    c = tl.arange(0, W)[None, None, :]
    for item in range(pid, batch * n_blocks, NPROG):
        b = item // n_blocks
        m0 = (item % n_blocks) * BM
        q, do, lse, delta = _row_block(Q, DO, LSE, DELTA, b, m0, Tq, H, DH, HP, BM, DHP)
        last_key = Tk - 1
        if CAUSAL:  # keys up to 2·reach right of the last row still get a gradient through the processor
            last_key = tl.minimum(Tk - 1, ROW_OFF + m0 + BM - 1 + 2 * reach)
        dq = tl.zeros((HP, BM, DHP), tl.float32)
        for n0 in range(0, last_key + 1, stride):
            w0 = n0 - 2 * (K - 1)
            kw = _rows(Kp, b, w0, Tk, H, DH, HP, W, DHP)
            vw = _rows(V, b, w0, Tk, H, DH, HP, W, DHP)
            p, da, db = _tile_backward(q, kw, vw, do, lse, delta, b, m0, w0, scale, bias_ptr, s_bb, s_bh, s_bi,
                                       s_bj, table_len, W1A, W1B, B1, W2, B2, scr, part, ROW_OFF, Tq, Tk, H, HP, DP,
                                       BM, W, K, LEFT, TRIL, CAUSAL, BIAS, DOT, PRECISION, WEIGHT_GRADS)
            if Q_GRAD:
                dq += tl.dot(da.to(DOT), kw.to(DOT), input_precision=PRECISION)
            if BIAS_GRAD and Q_GRAD:
                if BIAS == 1:  # Σ along diagonals: (r, c) → (r, e = r − c + W − 1), then a sum over r
                    e = tl.arange(0, E)[None, None, :]
                    tl.debug_barrier()
                    tl.store(skew + (h * BM + r) * E + (r - c + W - 1), db)
                    tl.debug_barrier()
                    cc = r - e + W - 1
                    diag = tl.sum(tl.load(skew + (h * BM + r) * E + e, mask=(cc >= 0) & (cc < W) & (h >= 0),
                                          other=0.0), 1)  # [HP, E]
                    u = (ROW_OFF + m0 - w0 - (W - 1) + Tk - 1) + tl.arange(0, E)[None, :]
                    h_e = tl.arange(0, HP)[:, None]
                    ok = (u >= 0) & (u < table_len) & (h_e >= 0)
                    here = DBIAS + (pid * HP + h_e) * table_len + u
                    tl.store(here, tl.load(here, mask=ok, other=0.0) + diag, mask=ok)
                    tl.debug_barrier()
                elif BIAS == 2:
                    i = m0 + r
                    j = w0 + c
                    ok = (h < H) & (i < Tq) & (c >= 2 * (K - 1)) & (c < W - 2 * (K - 1)) & (j >= 0) & (j < Tk)
                    tl.store(DBIAS + ((b * H + h) * Tq + i) * Tk + j, db, mask=ok)
        if Q_GRAD:
            d = tl.arange(0, DHP)[None, None, :]
            rr = m0 + r
            tl.store(DQ + ((b * H + h) * Tq + rr) * DH + d, (dq * scale).to(DQ.dtype.element_ty),
                     mask=(h < H) & (rr < Tq) & (d < DH))
