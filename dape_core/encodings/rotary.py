"""Rotations of queries and keys: RoPE, YaRN and randomized RoPE (no additive bias, paper eq. 1 with B = 0)."""

from __future__ import annotations

import math

import torch

from dape_core.encodings.base import PositionalEncoding, register
from dape_core.errors import ConfigError


@register("rope")
class RoPE(PositionalEncoding):
    """Rotary embedding (Su et al., 2024), base 10000, rotate-half layout; angles from positions, any length."""

    def __init__(self, n_head, head_dim, *, rope_base: float = 10000.0, **kw):
        super().__init__(n_head, head_dim, **kw)
        if head_dim % 2:
            raise ValueError(f"head_dim: {head_dim} is not allowed with RoPE; allowed values: even numbers")
        inv_freq = rope_base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def _rotate_one(self, x, pos, inv_freq=None):
        """x rotated by the angles pos·θ_d (θ = ``inv_freq``, RoPE's own frequencies by default)."""
        inv_freq = self.inv_freq if inv_freq is None else inv_freq
        dtype = torch.promote_types(x.dtype, torch.float32)
        angles = pos.to(dtype)[:, None] * inv_freq.to(dtype)[None, :]  # [T, d/2]
        cos = torch.cat([angles.cos(), angles.cos()], -1).to(x.dtype)
        sin = torch.cat([angles.sin(), angles.sin()], -1).to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def rotate(self, q, k, q_pos, k_pos):
        return self._rotate_one(q, q_pos), self._rotate_one(k, k_pos)


@register("yarn")
class YaRN(RoPE):
    """YaRN (Peng et al., 2023): RoPE with "NTK-by-parts" interpolated frequencies and a logit temperature, without
    fine-tuning, at each forward's scale s = max(1, L′/L) (dynamic scaling, §3.3; eq. 11), L = ``train_len``, L′ = the
    number of key positions: RoPE up to L, YaRN beyond.

    λ_d = 2π/θ_d (eq. 13), r(d) = L/λ_d (eq. 17), ramp γ(r) = 0 below α, 1 above β, linear between (eq. 18; α = 1,
    β = 32, the paper's Llama values), θ′_d = (1 − γ)·θ_d/s + γ·θ_d (eq. 20); q and k each scaled by √(1/t) =
    0.1·ln s + 1 (eqs. 21–22). The ramp is linear in r as in the paper; the reference code (jquesnelle/yarn) ramps
    linearly in the dimension index between the dimensions where r = β and r = α (rounded outwards).
    """

    def __init__(self, n_head, head_dim, *, yarn_alpha: float = 1.0, yarn_beta: float = 32.0, **kw):
        super().__init__(n_head, head_dim, **kw)
        if not 0 <= yarn_alpha < yarn_beta:
            raise ConfigError(f"yarn_beta: {yarn_beta!r} is not allowed with yarn_alpha {yarn_alpha!r}; allowed "
                              "values: 0 ≤ yarn_alpha < yarn_beta")
        theta = self.inv_freq.double()
        ratio = self.train_len * theta / (2 * math.pi)  # r(d) = L/λ_d, λ_d = 2π/θ_d (eqs. 13, 17)
        ramp = ((ratio - yarn_alpha) / (yarn_beta - yarn_alpha)).clamp(0, 1)  # γ(r(d)) (eq. 18)
        self.register_buffer("ramp", ramp.float(), persistent=False)

    def scale_factor(self, length: int) -> float:
        """s = max(1, L′/L), L′ = ``length``, L = the training length (YaRN eq. 11, dynamic scaling §3.3)."""
        return max(1.0, length / self.train_len)

    def frequencies(self, s: float) -> torch.Tensor:
        """θ′_d = (1 − γ(r(d)))·θ_d/s + γ(r(d))·θ_d (YaRN eq. 20)."""
        return (1 - self.ramp) * self.inv_freq / s + self.ramp * self.inv_freq

    @staticmethod
    def attention_factor(s: float) -> float:
        """√(1/t) = 0.1·ln s + 1, the factor on q and on k (YaRN eq. 22)."""
        return 0.1 * math.log(s) + 1.0

    def rotate(self, q, k, q_pos, k_pos):
        s = self.scale_factor(k_pos.numel())
        if s == 1.0:
            return super().rotate(q, k, q_pos, k_pos)
        frequencies, factor = self.frequencies(s), self.attention_factor(s)
        return self._rotate_one(q, q_pos, frequencies) * factor, self._rotate_one(k, k_pos, frequencies) * factor


@register("randrope")
class RandomizedRoPE(RoPE):
    """Randomized RoPE (Ruoss et al., 2023): RoPE at the sorted random positions it is given, drawn by
    ``dape_core.positions`` from [0, max_position): per training micro-batch, and per evaluation window as Ruoss et al.
    do at test time (0 … T−1 would space neighbours one apart, which training shows only when max_position =
    train_len). In the CHE encoder the runner's ``randomized_positions`` decides them, as for every encoding there.
    """
