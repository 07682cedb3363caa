"""The fast path's autograd function (:mod:`dape_core.implementations.fast`): :class:`DapeScores`, DAPE's processor as
blocked GEMMs (weights from ``fast.gemm_weights``, a :class:`Plan` of static settings), block by block so the hidden
map is never stored: :class:`Blocks` builds each block's unfolded input and hidden map (again in the backward),
:class:`RelativeBiasHalf` Conv1's bias half once per distance i − j (relative bias, tril, causal).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dape_core.dape import NEGATIVE_SLOPE


@dataclass(frozen=True)
class Plan:
    """Static settings of one ``DapeScores`` call."""

    kernel_size: int
    left: int  # zero columns left of key 0 (tap t reads key j + t − left)
    mode: str  # none (eq. 4) | shared, relative (bias [H, Tq, Tk]) | batched (bias [batch, H, Tq, Tk])
    tril: bool
    row_offset: int
    halo: int | None  # None: every key of every row; else rows ≤ R need keys ≤ R + halo
    keys_out: int
    compute_dtype: torch.dtype
    block_bytes: int
    block_rows: int

    def row_blocks(self, n_rows: int, n_keys: int, width: int, itemsize: int):
        """(first row, end row, keys read) per block: at most ``block_rows`` rows, one batch element's hidden map
        within ``block_bytes``, under a causal mask no keys beyond the last row + halo."""
        blocks, r0 = [], 0
        while r0 < n_rows:
            rows = min(n_rows - r0, self.block_rows)
            while rows > 1 and rows * self.keys_for(r0 + rows, n_keys) * width * itemsize > self.block_bytes:
                rows = (rows + 1) // 2
            blocks.append((r0, r0 + rows, self.keys_for(r0 + rows, n_keys)))
            r0 += rows
        return blocks

    def keys_for(self, rows_end: int, n_keys: int) -> int:
        if self.halo is None:
            return n_keys
        return min(n_keys, self.row_offset + rows_end + self.halo)

    def batch_groups(self, batch: int, pairs: int, width: int, itemsize: int):
        per_item = max(1, pairs * width * itemsize)
        step = max(1, min(batch, self.block_bytes // per_item))
        return [(b0, min(batch, b0 + step)) for b0 in range(0, batch, step)]


def _masks(plan: Plan, n_rows: int, n_keys: int, device, dtype):
    """(tril as 0/1 [rows, keys] or None, the additive causal mask [rows, keys_out] or None): keys ≤ row kept."""
    if not plan.tril and plan.halo is None:
        return None, None
    rows = torch.arange(plan.row_offset, plan.row_offset + n_rows, device=device)[:, None]
    keep = torch.arange(n_keys, device=device)[None, :] <= rows
    tril = keep.to(dtype) if plan.tril else None
    causal = None
    if plan.halo is not None:
        causal = torch.zeros((), dtype=dtype, device=device).masked_fill(~keep[:, : plan.keys_out], float("-inf"))
    return tril, causal


def _padded(sources, mask, left: int, right: int, dtype) -> torch.Tensor:
    """The sources ([..., C_s, rows, keys], concatenated along channels), tril-masked, zero-padded along keys."""
    first = sources[0]
    channels = sum(s.shape[-3] for s in sources)
    out = first.new_empty(*first.shape[:-3], channels, first.shape[-2], left + first.shape[-1] + right, dtype=dtype)
    c0 = 0
    for src in sources:
        dst = out[..., c0 : c0 + src.shape[-3], :, left : left + src.shape[-1]]
        if mask is None:
            dst.copy_(src)
        elif torch.compiler.is_compiling():  # the compiler takes no strided out= (and fuses the product into the copy)
            dst.copy_(src * mask)
        else:
            torch.mul(src, mask, out=dst)
        c0 += src.shape[-3]
    out[..., :left].zero_()
    out[..., left + first.shape[-1] :].zero_()
    return out


def _windows(padded: torch.Tensor, keys: int, taps: int) -> torch.Tensor:
    """[..., C, rows, ≥ keys + taps − 1] → the view [..., taps, C, rows, keys] whose tap t starts at column t."""
    view = padded[..., : keys + taps - 1].unfold(-1, keys, 1)  # [..., C, rows, taps, keys]
    return view.movedim(-2, -4)


class Blocks:
    """The blocks of one call and Conv1 on each, for the forward pass and the recomputing backward pass.

    ``x`` is Conv1's input [batch, C, Tq, left + Tk + right], tril-masked and zero-padded once per call, so a block's
    unfolded input (tap t = columns t … t + keys − 1) is one strided copy. In ``shared`` mode the bias channels are
    padded apart, ``b`` [H, Tq, …], their Conv1 half computed once per block of rows.
    """

    def __init__(self, plan: Plan, x, b, w1a, w1b, b1):
        self.x, self.b = x, b
        self.batch, self.channels = x.shape[0], x.shape[1]
        cd = plan.compute_dtype
        self.itemsize = torch.finfo(cd).bits // 8
        self.width, self.taps = w1a.shape[0], plan.kernel_size
        self.b1 = b1.to(cd)
        if plan.mode in ("shared", "relative"):  # b1 comes with the bias half
            self.w1, self.w1b = w1a.to(cd), w1b.to(cd)
        else:  # b1 enters the GEMM as the weight of a constant input channel
            self.w1, self.w1b = torch.cat([w1a.to(cd), self.b1[:, None]], 1), None
        self.rows = plan.row_blocks(x.shape[2], x.shape[3] - plan.kernel_size + 1, self.width, self.itemsize)
        self.groups_of = {(r0, r1, keys): plan.batch_groups(self.batch, (r1 - r0) * keys, self.width, self.itemsize)
                          for r0, r1, keys in self.rows}
        # one input buffer for all blocks (a block uses its leading part, rows padded to the largest block);
        # without a shared bias half, its last channel is the constant 1 that carries b1 through the GEMM
        kc, ones = self.taps * self.channels, plan.mode not in ("shared", "relative")
        n_max = max(g1 - g0 for groups in self.groups_of.values() for g0, g1 in groups)
        pairs_max = max((r1 - r0) * keys for r0, r1, keys in self.rows)
        self.x_buffer = torch.empty(n_max, kc + ones, pairs_max, dtype=cd, device=x.device)
        if ones:
            self.x_buffer[:, kc].fill_(1)

    def groups(self, r0, r1, keys):
        return self.groups_of[(r0, r1, keys)]

    def bias_half(self, r0, r1, keys):
        """Shared mode: the bias channels unfolded [k·H, P] and Conv1 of them plus b1 [1, D, P], batch-free."""
        unf = _windows(self.b[:, r0:r1], keys, self.taps).contiguous().view(-1, (r1 - r0) * keys)
        return unf, torch.addmm(self.b1[:, None], self.w1b, unf)[None]

    def conv1(self, g0, g1, r0, r1, keys, hidden_bias=None):
        """(Conv1 input unfolded [n, k·C (+1), P], LeakyReLU(Conv1) [n, D, P]) for batch elements g0…g1−1.
        A batch-free ``hidden_bias`` is added in place when it serves a single batch element."""
        n, pairs, kc = g1 - g0, (r1 - r0) * keys, self.taps * self.channels
        x = self.x_buffer[:n, :, :pairs]
        x[:, :kc].view(n, self.taps, self.channels, r1 - r0, keys).copy_(
            _windows(self.x[g0:g1, :, r0:r1], keys, self.taps))
        if hidden_bias is None:
            hidden = torch.bmm(self.w1.expand(n, -1, -1), x)
        elif self.batch == 1:
            hidden = hidden_bias.baddbmm_(self.w1[None], x)
        else:
            hidden = torch.baddbmm(hidden_bias, self.w1.expand(n, -1, -1), x)
        return x, F.leaky_relu_(hidden, NEGATIVE_SLOPE)


class RelativeBiasHalf:
    """Conv1 on the bias channels when B[i, j] = φ(i − j) (ALiBi, Kerple, T5 at contiguous positions).

    Under tril the bias input is φ̃(i − j) = φ(i − j)·[j ≤ i], so wherever no tap reads left of key 0 (j ≥ left)
    Conv1's bias half is a function of d = i − j alone, G(d) = b1 + Σ_t W1B_t·φ̃(d − t + left): one small GEMM
    over the ≤ T distances instead of one over every (query, key) pair, gathered per block. The first ``left``
    key columns, whose taps read the zero padding, are computed apart (E_j). Keys right of a row are masked and
    their φ̃ is 0, so the right edge needs nothing. φ is read off the last row: B[R, j] = φ(R − j), j = 0…R.
    """

    def __init__(self, plan: Plan, last_row, w1b, b1, n_rows: int, grad_dtype=None):
        k, left, cd = plan.kernel_size, plan.left, plan.compute_dtype
        self.plan, self.n_rows, self.k, self.left = plan, n_rows, k, left
        heads, width = last_row.shape[0], w1b.shape[0]
        last = plan.row_offset + n_rows - 1
        self.w1b = w1b.to(cd).view(width, k, heads)
        self.w1b_rev = self.w1b.flip(1).reshape(width, k * heads)
        # φ̃(e − k) at e = 0 … last + k: k zeros, then φ(0 … last)
        self.phi = F.pad(last_row[:, : last + 1].flip(-1).to(cd), (k, 0))
        self.n_table = last + 2  # distances −left−1 (G = b1: every tap reads φ̃ < 0) … last − left
        self.windows = self.phi.unfold(-1, self.n_table, 1).transpose(0, 1).reshape(k * heads, self.n_table)
        self.table = torch.addmm(b1.to(cd)[:, None], self.w1b_rev, self.windows)  # G [D, n_table]
        self.edges = []  # per column j < left: (taps, φ̃ values [taps·H, rows], E_j [D, rows])
        for j in range(left):
            taps = list(range(left - j, k))
            starts = [plan.row_offset - j - t + left + k for t in taps]
            values = torch.stack([self.phi[:, s : s + n_rows] for s in starts]).reshape(-1, n_rows)
            weight = self.w1b[:, taps].reshape(width, -1)
            self.edges.append((taps, starts, values, weight, torch.addmm(b1.to(cd)[:, None], weight, values)))
        if grad_dtype is not None:
            self.grad_table = torch.zeros(self.table.shape, dtype=grad_dtype, device=self.table.device)
            self.grad_edges = [torch.zeros(e[-1].shape, dtype=grad_dtype, device=self.table.device) for e in self.edges]

    def hidden(self, r0: int, r1: int, keys: int):
        """(Conv1's bias half [1, D, rows·keys] for rows r0…r1−1, the table index of every pair)."""
        rows = torch.arange(self.plan.row_offset + r0, self.plan.row_offset + r1, device=self.table.device)
        index = (rows[:, None] - torch.arange(keys, device=rows.device)[None, :] + self.left + 1)
        index = index.clamp_(0, self.n_table - 1).view(-1)
        hidden = self.table.index_select(1, index).view(-1, r1 - r0, keys)
        for j, (*_, edge) in enumerate(self.edges[:keys]):
            hidden[:, :, j] = edge[:, r0:r1]
        return hidden.view(1, -1, (r1 - r0) * keys), index

    def backward_block(self, grad, r0: int, r1: int, index) -> None:
        """Accumulate the gradient of one block's bias half [D, rows, keys] (summed over the batch)."""
        for j, grad_edge in enumerate(self.grad_edges[: grad.shape[-1]]):
            grad_edge[:, r0:r1] += grad[:, :, j]
            grad[:, :, j] = 0
        self.grad_table.index_add_(1, index, grad.reshape(grad.shape[0], -1))

    def finish(self):
        """(∂/∂W1B [D, k·H] in (tap, head) order, ∂/∂b1, ∂/∂ last row of B) from the accumulated gradients."""
        k, heads = self.k, self.w1b.shape[2]
        grad_table = self.grad_table.to(self.table.dtype)
        acc = self.grad_table.dtype
        grad_w1b = torch.mm(grad_table, self.windows.t()).view(-1, k, heads).flip(1).to(acc)
        grad_b1 = self.grad_table.sum(1)
        grad_phi = torch.zeros(self.phi.shape, dtype=self.grad_table.dtype, device=self.phi.device)
        grad_windows = torch.mm(self.w1b_rev.t(), grad_table).view(k, heads, self.n_table)
        for s in range(k):
            grad_phi[:, s : s + self.n_table] += grad_windows[s]
        for (taps, starts, values, weight, _), grad_edge in zip(self.edges, self.grad_edges):
            grad_b1 += grad_edge.sum(1)
            grad_w1b[:, taps] += torch.mm(grad_edge.to(values.dtype), values.t()).view(-1, len(taps), heads).to(acc)
            grad_values = torch.mm(weight.t(), grad_edge.to(weight.dtype)).view(len(taps), heads, self.n_rows)
            for s, g in zip(starts, grad_values):
                grad_phi[:, s : s + self.n_rows] += g
        return grad_w1b.reshape(-1, k * heads), grad_b1, grad_phi[:, k:].flip(-1)  # φ(d) = B[R, R − d], d = 0…R


class DapeScores(torch.autograd.Function):
    """A + B + f(tril([A; B])) block by block, the hidden map recomputed in the backward pass.

    Under a causal mask (``plan.halo`` set) the output carries it: −inf right of each row, added with the batch-free
    base B + b₂, so no separate masking pass over [batch, H, Tq, Tk] is needed.
    """

    @staticmethod
    def forward(ctx, scores, bias, w1a, w1b, b1, w2, b2, plan: Plan):
        heads, n_rows, n_keys = scores.shape[1:]
        taps, kout, cd, left = plan.kernel_size, plan.keys_out, plan.compute_dtype, plan.left
        mask, causal = _masks(plan, n_rows, n_keys, scores.device, scores.dtype)
        x = _padded([scores] if plan.mode != "batched" else [scores, bias], mask, left, taps - 1 - left, cd)
        b = _padded([bias], mask, left, taps - 1 - left, cd) if plan.mode == "shared" else None
        blocks = Blocks(plan, x, b, w1a, w1b, b1)
        last_row = bias[:, -1].clone() if plan.mode == "relative" else None
        relative = RelativeBiasHalf(plan, last_row, w1b, b1, n_rows) if plan.mode == "relative" else None
        w2_c = w2.to(cd)
        base = b2.to(scores.dtype).view(heads, 1, 1)
        if causal is not None:  # the causal mask, additive
            base = base + causal
        if bias is not None:
            base = bias[..., :kout] + base
        out = scores[..., :kout] + base
        for r0, r1, keys in blocks.rows:
            hidden_bias = None
            if plan.mode == "shared":
                hidden_bias = blocks.bias_half(r0, r1, keys)[1]
            elif plan.mode == "relative":
                hidden_bias = relative.hidden(r0, r1, keys)[0]
            for g0, g1 in blocks.groups(r0, r1, keys):
                _, hidden = blocks.conv1(g0, g1, r0, r1, keys, hidden_bias)
                z = torch.bmm(w2_c.expand(g1 - g0, -1, -1), hidden).view(g1 - g0, taps, heads, r1 - r0, keys)
                dst = out[g0:g1, :, r0:r1]
                for t in range(taps):  # f(j) = Σ_t z_t(j + t − left), zero outside the keys
                    lo, hi = max(0, left - t), min(kout, keys + left - t)
                    if lo < hi:
                        dst[..., lo:hi].add_(z[:, t, ..., lo + t - left : hi + t - left])
        ctx.plan, ctx.heads, ctx.has_bias = plan, heads, bias is not None
        ctx.save_for_backward(x, b, last_row, mask, w1a, w1b, b1, w2)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        plan, heads = ctx.plan, ctx.heads
        x, b, last_row, mask, w1a, w1b, b1, w2 = ctx.saved_tensors
        blocks = Blocks(plan, x, b, w1a, w1b, b1)
        taps, width, kout, cd, left = plan.kernel_size, blocks.width, plan.keys_out, plan.compute_dtype, plan.left
        batch, channels, n_rows, padded_keys = x.shape
        n_keys, kc, dev = padded_keys - taps + 1, taps * channels, x.device
        acc = torch.promote_types(cd, torch.float32)  # gradients accumulate in at least fp32
        # One buffer in Conv1's padded input layout (plus k−1 zero columns on the right) holds grad_out in every
        # channel and receives Conv1's input gradient tap by tap. Before a block adds to its rows it reads them
        # as Conv2's output gradient: tap t of it is grad_out shifted by left − t, i.e. window s = k−1−t starting
        # at column 2·left − (k−1); the windows come in reverse tap order, so W2's taps are reversed to match.
        grad_in = _padded([grad_out] * (channels // heads), None, left, n_keys - kout + taps - 1, acc)
        first = 2 * left - (taps - 1)
        w2_rev = w2.to(cd).view(taps, heads, width).flip(0).reshape(taps * heads, width)
        w1_t = blocks.w1[:, :kc].t()
        grad_b = None
        if plan.mode == "shared":
            grad_b = _padded([grad_out.sum(0)], None, left, n_keys - kout + taps - 1, acc)
        relative = RelativeBiasHalf(plan, last_row, w1b, b1, n_rows, acc) if plan.mode == "relative" else None
        n_max = max(g1 - g0 for r0, r1, keys in blocks.rows for g0, g1 in blocks.groups(r0, r1, keys))
        grad_w1 = torch.zeros(n_max, *blocks.w1.shape, dtype=acc, device=dev)  # [n, D, k·C (+1 for b1)]
        grad_w2_rev = torch.zeros(n_max, *w2.shape, dtype=acc, device=dev)
        grad_w1b = None if w1b is None else torch.zeros(w1b.shape, dtype=acc, device=dev)
        grad_b1 = torch.zeros(width, dtype=acc, device=dev)
        for r0, r1, keys in blocks.rows:
            rows, pairs = r1 - r0, (r1 - r0) * keys
            hidden_bias = None
            if plan.mode == "shared":
                bias_unf, hidden_bias = blocks.bias_half(r0, r1, keys)
            elif plan.mode == "relative":
                hidden_bias, index = relative.hidden(r0, r1, keys)
            if hidden_bias is not None:
                grad_hidden_bias = torch.zeros(width, pairs, dtype=acc, device=dev)
            for g0, g1 in blocks.groups(r0, r1, keys):
                n = g1 - g0
                x_unf, hidden = blocks.conv1(g0, g1, r0, r1, keys, hidden_bias)
                dst = grad_in[g0:g1, :, r0:r1]
                grad_z = _windows(dst[:, :heads, :, first:], keys, taps).to(cd).reshape(n, taps * heads, pairs)
                _accumulate_bmm(grad_w2_rev[:n], grad_z, hidden.transpose(1, 2))
                grad_hidden = torch.bmm(w2_rev.t().expand(n, -1, -1), grad_z)
                grad_hidden = torch.ops.aten.leaky_relu_backward(grad_hidden, hidden, NEGATIVE_SLOPE, True)
                del hidden, grad_z
                if hidden_bias is not None:
                    grad_hidden_bias += grad_hidden.sum(0)
                _accumulate_bmm(grad_w1[:n], grad_hidden, x_unf.transpose(1, 2))
                grad_unf = torch.bmm(w1_t.expand(n, -1, -1), grad_hidden).view(n, taps, channels, rows, keys)
                for t in range(taps):
                    dst[..., t : t + keys].add_(grad_unf[:, t])
            if plan.mode == "relative":
                relative.backward_block(grad_hidden_bias.view(width, rows, keys), r0, r1, index)
            if plan.mode == "shared":
                grad_b1 += grad_hidden_bias.sum(1)
                grad_w1b += torch.mm(grad_hidden_bias.to(cd), bias_unf.t())
                grad_unf = torch.mm(blocks.w1b.t(), grad_hidden_bias.to(cd)).view(taps, heads, rows, keys)
                dst = grad_b[:, r0:r1]
                for t in range(taps):
                    dst[..., t : t + keys].add_(grad_unf[t])
        grad_w1 = grad_w1.sum(0)
        if plan.mode == "relative":
            grad_w1b_rel, grad_b1_rel, grad_last_row = relative.finish()
            grad_w1b += grad_w1b_rel
            grad_b1 += grad_b1_rel
        elif plan.mode != "shared":
            grad_b1 += grad_w1[:, kc]
        inner = slice(left, left + n_keys)
        grad_in = _through_tril(grad_in[..., inner], mask, plan, [grad_out] * (channels // heads))
        grad_bias = None
        if ctx.has_bias and ctx.needs_input_grad[1]:
            if plan.mode == "shared":
                grad_bias = _through_tril(grad_b[..., inner], mask, plan, [grad_out.sum(0)])
            elif plan.mode == "relative":  # the direct term, and Conv1's through φ = the last row
                grad_bias = _padded([grad_out.sum(0)], None, 0, n_keys - kout, acc).mul_(mask)
                grad_bias[:, -1, : grad_last_row.shape[-1]] += grad_last_row
            else:
                grad_bias = grad_in[:, heads:]
        grad_w2 = grad_w2_rev.sum(0).view(taps, heads, width).flip(0).reshape(taps * heads, width)
        return (
            grad_in[:, :heads] if ctx.needs_input_grad[0] else None,
            grad_bias,
            grad_w1[:, :kc].to(w1a.dtype),
            None if grad_w1b is None else grad_w1b.to(w1b.dtype),
            grad_b1.to(b1.dtype),
            grad_w2.to(w2.dtype),
            grad_out.sum((0, 2, 3)).to(w2.dtype),
            None,
        )


def _accumulate_bmm(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """acc += a @ b (batched), accumulating in acc's dtype."""
    if acc.dtype == a.dtype:
        torch.baddbmm(acc, a, b, out=acc)
    else:
        acc += torch.bmm(a, b)


def _through_tril(grad: torch.Tensor, mask, plan: Plan, grad_out: list) -> torch.Tensor:
    """grad_out (per channel block) + Conv1's input gradient masked by tril, from ``grad`` = their unmasked sum.
    Under the causal mask the masked positions output −inf, so their gradient is zero altogether."""
    if mask is None:
        return grad
    if plan.halo is not None:
        return grad.mul_(mask)
    direct = _padded(grad_out, None, 0, grad.shape[-1] - grad_out[0].shape[-1], grad.dtype)
    return torch.where(mask.bool(), grad, direct)
