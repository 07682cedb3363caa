"""Additive biases B[h, i, j] of the distance alone (paper eq. 1): ALiBi, Kerple, FIRE and the T5 bias."""

from __future__ import annotations

import math

import torch
from torch import nn

from dape_core.encoding_facts import FIRE_WIDTH, T5_BUCKETS, T5_MAX_DISTANCE
from dape_core.encodings.base import PositionalEncoding, geometry, register, relative_distance


def alibi_slopes(n_head: int) -> torch.Tensor:
    """ALiBi slopes m_h = 2^(−8h/H), h = 1…H; for H not a power of two, the standard interleave (Press et al.)."""

    def power_of_two(n):
        start = 2 ** (-8 / n)
        return [start ** (h + 1) for h in range(n)]

    if math.log2(n_head).is_integer():
        slopes = power_of_two(n_head)
    else:
        closest = 2 ** math.floor(math.log2(n_head))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: n_head - closest]
    return torch.tensor(slopes, dtype=torch.float32)


@register("alibi")
class ALiBi(PositionalEncoding):
    """ALiBi (Press et al., 2022): b(i, j) = −m_h·max(i − j, 0).

    Decoder: the public code's −m_h·tril(i − j), so keys right of the query get 0. Encoder (two-sided):
    b = −m_h·(|i − j| + 0.5·[j < i]), the reference CHE encoder's symmetry break.
    """

    relative_bias = True

    def __init__(self, n_head, head_dim, **kw):
        super().__init__(n_head, head_dim, **kw)
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)

    def bias(self, q, k, scores, q_pos, k_pos):
        """Parameter-free (the slopes are fixed), so built once per forward for all layers."""

        def build():  # in fp32 at least, then in q's dtype (the compute dtype under autocast)
            dtype = torch.promote_types(q.dtype, torch.float32)
            dist = relative_distance(q_pos, k_pos).to(dtype)
            if self.causal:
                dist = dist.clamp(min=0)  # tril(i − j)
            else:
                dist = dist.abs() + 0.5 * (dist > 0).to(dtype)
            return (-self.slopes.to(dtype)[:, None, None] * dist).to(q.dtype)

        return geometry.get(("alibi", self.causal, self.n_head, q.dtype, self.slopes.device), q_pos, k_pos, build)


@register("kerple")
class Kerple(PositionalEncoding):
    """Kerple, logarithmic variant (Chi et al., 2022): b(i, j) = −r1·log(1 + r2·max(i − j, 0)), r1, r2 ≥ 0.01.

    Init r1 ~ 2·U(0, 1), r2 ~ U(0, 1) per head, clamped to ≥ 0.01 in place at every forward as the reference does
    (under torch.compile: :meth:`clamped_parameters`). Decoder: the public code's kernel of tril(i − j), so keys right
    of the query get 0. Encoder (two-sided): −r1·log(1 + r2·|i − j|), separate (r1, r2) for keys left and right.
    """

    relative_bias = True
    min_value = 0.01

    def __init__(self, n_head, head_dim, **kw):
        super().__init__(n_head, head_dim, **kw)
        sides = 1 if self.causal else 2
        self.r1 = nn.Parameter(2 * torch.rand(sides, n_head))
        self.r2 = nn.Parameter(torch.rand(sides, n_head))

    def clamp_parameters(self) -> None:
        """r1, r2 ≥ 0.01 (the reference's clamp at every forward), in place only when needed, so a table shared by
        layers keeps its autograd version."""
        with torch.no_grad():
            for param in (self.r1, self.r2):  # none on meta: no values to clamp (a memory estimate's model)
                if param.device.type != "meta" and bool((param < self.min_value).any()):
                    param.clamp_(min=self.min_value)

    def clamped_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(r1, r2) ≥ 0.01 as the bias reads them: eagerly the parameters after :meth:`clamp_parameters`; under
        torch.compile the clamp's values and gradients without mutating the parameters in the graph (an in-place clamp
        there bumps their versions under tensors an earlier call saved). Training clamps the stored parameters after
        every optimiser step (``train.constrain_parameters``)."""
        if torch.compiler.is_compiling():
            return tuple(p + (p.clamp(min=self.min_value) - p).detach() for p in (self.r1, self.r2))
        self.clamp_parameters()
        return self.r1, self.r2

    def bias(self, q, k, scores, q_pos, k_pos):
        r1, r2 = self.clamped_parameters()
        dtype = torch.promote_types(q.dtype, torch.float32)  # the kernel in fp32 at least, B in q's dtype
        if self.causal:  # tril(i − j)
            distance = geometry.get(("causal_distance", dtype), q_pos, k_pos,
                                    lambda: relative_distance(q_pos, k_pos).clamp(min=0).to(dtype))
        else:
            distance = geometry.get(("abs_distance", dtype), q_pos, k_pos,
                                    lambda: relative_distance(q_pos, k_pos).abs().to(dtype))
        r1 = r1.to(dtype)[:, :, None, None]
        r2 = r2.to(dtype)[:, :, None, None]
        kernel = -r1 * torch.log1p(r2 * distance)  # [sides, H, Tq, Tk]
        if self.causal:
            return kernel[0].to(q.dtype)
        left = geometry.get(("left_or_self",), q_pos, k_pos, lambda: relative_distance(q_pos, k_pos) >= 0)
        return torch.where(left, kernel[0], kernel[1]).to(q.dtype)


@register("fire")
class FIRE(PositionalEncoding):
    """FIRE (Li et al., 2023): b(i, j) = f_θ(ψ(i − j) / ψ(max(L, i))), ψ(x) = log(|c·x| + 1).

    f_θ = Linear(1, 32)–ReLU–Linear(32, H); c learnable (init 0.1); L = |L_multiplier·L_init|, L_multiplier learnable
    (init 1), L_init = train_len / 2 fixed; eps 1e-6 on the denominator. Decoder: the public code's tril(i − j), so
    keys right of the query get f_θ(0). Encoder (two-sided): f_θ of sign(i − j)·ψ(i − j)/ψ(max(L, i, j)).
    """

    def __init__(self, n_head, head_dim, *, fire_width: int = FIRE_WIDTH, **kw):
        super().__init__(n_head, head_dim, **kw)
        self.mlp = nn.Sequential(nn.Linear(1, fire_width), nn.ReLU(), nn.Linear(fire_width, n_head))
        self.c = nn.Parameter(torch.tensor(0.1))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("L_init", torch.tensor(float(self.train_len) / 2), persistent=True)
        self.eps = 1e-6

    def psi(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.abs(self.c * x) + 1)

    def bias(self, q, k, scores, q_pos, k_pos):
        dtype = torch.promote_types(q.dtype, torch.float32)
        dist = geometry.get(("distance", dtype), q_pos, k_pos, lambda: relative_distance(q_pos, k_pos).to(dtype))
        threshold = torch.abs(self.L_multiplier * self.L_init)
        if self.causal:
            normaliser = torch.maximum(q_pos.to(dtype), threshold)[:, None]
            x = self.psi(dist.clamp(min=0)) / (self.psi(normaliser) + self.eps)  # tril(i − j)
        else:
            far = torch.maximum(q_pos[:, None], k_pos[None, :]).to(dtype)
            normaliser = torch.maximum(far, threshold)
            x = torch.sign(dist) * self.psi(dist) / (self.psi(normaliser) + self.eps)
        return self.mlp(x.unsqueeze(-1)).permute(2, 0, 1).to(q.dtype)  # [H, Tq, Tk]


def t5_bucket(dist: torch.Tensor, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128):
    """T5 relative-position bucket of i − j (Raffel et al., 2020): exact below half the buckets, log-spaced above."""
    buckets = torch.zeros_like(dist)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (dist < 0).long() * num_buckets  # keys right of the query get their own buckets
        n = dist.abs()
    else:
        n = dist.clamp(min=0)
    max_exact = num_buckets // 2
    large = max_exact + (
        torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(n < max_exact, n, large)


@register("t5")
class T5Bias(PositionalEncoding):
    """T5 relative bias (Raffel et al., 2020) as the public code (GPT-NeoX's ParallelRelativePositionBias, ``pos_emb:
    rpe``) has it: b(i, j) = √d_head · w[bucket(i − j), h], 32 buckets, max distance 128, w [buckets, H] Xavier-normal,
    one table for all layers. Decoder: buckets of max(i − j, 0). Encoder: T5's bidirectional buckets. A table saved
    without ``scale`` was trained unscaled and loads with scale 1.
    """

    relative_bias = True

    def __init__(self, n_head, head_dim, *, t5_buckets: int = T5_BUCKETS, t5_max_distance: int = T5_MAX_DISTANCE, **kw):
        super().__init__(n_head, head_dim, **kw)
        self.num_buckets = t5_buckets
        self.max_distance = t5_max_distance
        self.table = nn.Embedding(t5_buckets, n_head)
        nn.init.xavier_normal_(self.table.weight)
        self.register_buffer("scale", torch.tensor(math.sqrt(head_dim)))
        self.register_load_state_dict_pre_hook(_unscaled_legacy_t5_table)

    def bias(self, q, k, scores, q_pos, k_pos):
        buckets = geometry.get(("t5_buckets", self.causal, self.num_buckets, self.max_distance), q_pos, k_pos,
                               lambda: t5_bucket(relative_distance(q_pos, k_pos), bidirectional=not self.causal,
                                                 num_buckets=self.num_buckets, max_distance=self.max_distance))
        return (self.table(buckets) * self.scale).permute(2, 0, 1).to(q.dtype)


def _unscaled_legacy_t5_table(module, state_dict, prefix, *_):
    """A T5 table saved without ``scale`` (an earlier version, trained unscaled) loads with scale 1."""
    if prefix + "table.weight" in state_dict:
        state_dict.setdefault(prefix + "scale", torch.ones((), dtype=module.scale.dtype))
