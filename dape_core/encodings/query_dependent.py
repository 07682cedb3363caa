"""Biases that depend on the query as well as on the distance, [batch, H, Tq, Tk] (paper eq. 1): CoPE and
Transformer-XL."""

from __future__ import annotations

import math

import torch
from torch import nn

from dape_core.encoding_facts import COPE_NPOS_MAX
from dape_core.encodings.base import PositionalEncoding, geometry, register, relative_distance


@register("cope")
class CoPE(PositionalEncoding):
    """CoPE (Golovneva et al., 2024): gates σ(q·k/√d), position p_ij = Σ_{t=j..i} gate_it clamped to npos_max − 1,
    bias q·e[p] with e interpolated between ⌊p⌋ and ⌈p⌉ (one table per layer, shared by heads).

    Encoder (two-sided): keys right of the query count gates from i to j and use a second table.
    """

    needs_scores = True

    def __init__(self, n_head, head_dim, *, cope_npos_max: int = COPE_NPOS_MAX, **kw):
        super().__init__(n_head, head_dim, **kw)
        self.npos_max = cope_npos_max
        sides = 1 if self.causal else 2
        self.pos_emb = nn.Parameter(torch.zeros(sides, head_dim, cope_npos_max))

    def _interpolate(self, q, pos, side):
        pos = pos.clamp(max=self.npos_max - 1)
        logits = torch.matmul(q, self.pos_emb[side].to(q.dtype))  # [B, H, Tq, npos_max]
        floor = pos.floor()
        w = pos - floor
        lo = logits.gather(-1, floor.long())
        hi = logits.gather(-1, pos.ceil().long())
        return hi * w + lo * (1 - w)

    def bias(self, q, k, scores, q_pos, k_pos):
        left = geometry.get(("left_or_self", q.dtype), q_pos, k_pos,
                            lambda: (k_pos[None, :] <= q_pos[:, None]).to(q.dtype))
        gates = torch.sigmoid(scores)
        pos_left = (gates * left).flip(-1).cumsum(-1).flip(-1) * left
        out = self._interpolate(q, pos_left, 0)
        if self.causal:
            return out
        right = geometry.get(("right_or_self", q.dtype), q_pos, k_pos,
                             lambda: (k_pos[None, :] >= q_pos[:, None]).to(q.dtype))
        pos_right = (gates * right).cumsum(-1) * right
        return torch.where(left.bool(), out, self._interpolate(q, pos_right, 1))


def sinusoid(dist: torch.Tensor, dim: int) -> torch.Tensor:
    """Transformer-XL relative embedding R_d = [sin(d·ω), cos(d·ω)], ω_k = 10000^(−2k/dim)."""
    inv_freq = 10000 ** (-torch.arange(0, dim, 2, device=dist.device, dtype=torch.float32) / dim)
    angles = dist.to(torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], -1)


@register("xl")
class TransformerXL(PositionalEncoding):
    """Transformer-XL relative bias (Dai et al., 2019): b(i, j) = (u·k_j + (q_i + v)·W_R R_{i−j}) / √d.

    u, v are learnable per-head query-side biases; R is sinusoidal in the signed distance i − j (so the encoder
    tells left from right — the "Relative" column of Table 6). Decoder: future distances are masked anyway.
    """

    def __init__(self, n_head, head_dim, **kw):
        super().__init__(n_head, head_dim, **kw)
        self.rel_dim = n_head * head_dim
        self.w_r = nn.Linear(self.rel_dim, n_head * head_dim, bias=False)
        self.u = nn.Parameter(torch.zeros(n_head, head_dim))
        self.v = nn.Parameter(torch.zeros(n_head, head_dim))

    def _geometry(self, q_pos, k_pos):
        """(index of each pair's distance in the table [Tq, Tk], the sinusoids R of the table's distances)."""
        dist = relative_distance(q_pos, k_pos)
        if self.causal:
            dist = dist.clamp(min=0)
        if dist.device.type == "meta":  # no values (a memory estimate's model): the range of positions 0…Tk−1
            lo, hi = (0 if self.causal else 1 - len(k_pos)), len(k_pos) - 1
        elif torch.compiler.is_compiling():
            lo, hi = self._static_range(dist, k_pos.shape[0])
        else:
            lo, hi = int(dist.min()), int(dist.max())
        return dist - lo, sinusoid(torch.arange(lo, hi + 1, device=dist.device), self.rel_dim)

    def _static_range(self, dist, n_keys: int) -> tuple[int, int]:
        """The table's distances under ``torch.compile``, from the shapes alone: |i − j| ≤ Tk − 1, every distance of
        consecutive positions whose queries are among the keys (what every attention path passes); the eager min …
        max would read values on the host (a graph break, a device sync). Positions farther apart (random ones) fail
        an assertion in the graph instead of reading a wrong row."""
        lo, hi = (0 if self.causal else 1 - n_keys), n_keys - 1
        torch._assert_async(((dist >= lo) & (dist <= hi)).all(),
                            "Transformer-XL under torch.compile: a distance exceeds the number of keys − 1 "
                            "(positions that are not consecutive); allowed: consecutive positions, or run eagerly")
        return lo, hi

    def bias(self, q, k, scores, q_pos, k_pos):
        index = geometry.get(("xl_index", self.causal), q_pos, k_pos, lambda: self._geometry(q_pos, k_pos)[0])
        table = geometry.get(("xl_sinusoids", self.causal, self.rel_dim), q_pos, k_pos,
                             lambda: self._geometry(q_pos, k_pos)[1])
        r = self.w_r(table.to(q.dtype)).view(-1, self.n_head, self.head_dim)
        pos_term = torch.einsum("bhqd,nhd->bhqn", q + self.v[None, :, None, :].to(q.dtype), r)
        pos_term = pos_term.gather(-1, index.expand(q.shape[0], self.n_head, -1, -1))
        content_term = torch.einsum("hd,bhkd->bhk", self.u.to(k.dtype), k)[:, :, None, :]
        return (pos_term + content_term) / math.sqrt(self.head_dim)
