"""Positional encodings: NoPE, RoPE, YaRN, randomized RoPE, T5 bias, ALiBi, Kerple (log), FIRE, CoPE and
Transformer-XL.

Every encoding works at any length (no maximum-length assertion, nothing cached by length) and offers two
hooks that the score pipeline (``dape_core.attention``) calls:

* ``rotate(q, k, q_pos, k_pos)`` — a rotation of queries and keys (RoPE, YaRN, randomized RoPE); identity for
  the others;
* ``bias(q, k, scores, q_pos, k_pos)`` — the additive bias B of paper eq. (1): ``None`` (NoPE, the RoPE family),
  ``[H, Tq, Tk]`` (ALiBi, Kerple, FIRE, T5) or ``[batch, H, Tq, Tk]`` when it depends on the query (CoPE, XL).

``q_pos``/``k_pos`` are 1-D position vectors; ``scores`` is q·kᵀ/√d of the same rows. Decoder (causal) biases
are those of the public code, built on tril(i − j): keys right of the query see the bias of distance 0 (the
causal mask hides them; only a processor without tril, the §4.5 ablation, reads them). With ``causal=False``
(the CHE encoder) each encoding tells left from right; the choice per encoding is written in its docstring.
An encoding with ``randomized_positions`` is trained and evaluated at sorted random positions drawn by
``dape_core.positions``. A new encoding is one entry in ``dape_core.encoding_facts`` and one class decorated with
``@register("name")``; it then joins the tests and configs by name.

What does not change within a forward pass and has no parameters — distances, T5's buckets, masks, XL's
sinusoids, ALiBi's whole bias — is built once per pair of position tensors and reused by every layer
(``geometry``; under ``torch.compile`` built inside the graph, which shares it); anything that depends on a parameter
is recomputed at every call, so it follows its parameters.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable

import torch
from torch import nn

from dape_core.encoding_facts import (COPE_NPOS_MAX, FIRE_WIDTH, T5_BUCKETS, T5_MAX_DISTANCE, display_name,
                                      facts)
from dape_core.errors import ConfigError, require_choice

ENCODINGS: dict[str, type["PositionalEncoding"]] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make an encoding available by ``name`` (config key), with the facts
    :mod:`dape_core.encoding_facts` declares for it (display name, bias, sharing, random positions)."""
    info = facts(name)

    def wrap(cls: type) -> type:
        cls.name = name
        cls.has_bias = info.has_bias
        cls.randomized_positions = info.randomized_positions
        cls.shared_by_default = info.shared_by_default
        ENCODINGS[name] = cls
        return cls

    return wrap


def relative_distance(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """i − j for every (query i, key j) pair: positive for keys to the left of the query."""
    return q_pos[:, None] - k_pos[None, :]


GEOMETRY_CACHE_BYTES = 32 * 2**20


def _position_key(pos: torch.Tensor):
    try:
        version = pos._version
    except RuntimeError:  # inference tensors carry no version counter (and are not modified in place)
        version = None
    return pos.device, pos.dtype, pos.data_ptr(), tuple(pos.shape), tuple(pos.stride()), version


class GeometryCache:
    """Parameter-free tensors derived from a pair of position vectors, shared by every layer of a forward pass.

    Keyed by what is built and by the identity (device, address, shape, strides, version counter) of the two
    position tensors; an entry holds on to those tensors, so their memory cannot be reused by other positions
    while the entry lives. Least recently used entries go first once ``max_bytes`` is exceeded; an entry larger
    than the budget is built and returned but not kept, so memory stays bounded at any length.
    """

    def __init__(self, max_bytes: int = GEOMETRY_CACHE_BYTES):
        self.max_bytes = max_bytes
        self.entries: OrderedDict = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0

    def get(self, what: tuple, q_pos: torch.Tensor, k_pos: torch.Tensor, build: Callable[[], torch.Tensor]):
        """The entry ``what`` of (``q_pos``, ``k_pos``), built by ``build()`` on a miss; under ``torch.compile``
        always built (the compiler keys nothing by tensor addresses and shares the built tensors itself)."""
        if torch.compiler.is_compiling():
            return build()
        key = (what, _position_key(q_pos), _position_key(k_pos))
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
            self.hits += 1
            return entry[0]
        self.misses += 1
        value = build()
        size = value.numel() * value.element_size()
        if size <= self.max_bytes:
            self.entries[key] = (value, q_pos, k_pos, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                self.bytes -= self.entries.popitem(last=False)[1][3]
        return value

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0


geometry = GeometryCache()


class PositionalEncoding(nn.Module):
    """Base class; subclasses override ``bias`` and/or ``rotate``."""

    name = "base"
    # set by ``register`` from dape_core.encoding_facts
    has_bias = True  # False: the DAPE processor sees the score channels alone (paper eq. 4)
    needs_scores = False  # True: the bias is a function of q·kᵀ (CoPE's gates)
    relative_bias = False  # True: B[i, j] depends on pos_i − pos_j alone (lets DAPE's Conv1 work per distance)
    shared_by_default = False  # one instance for all layers (public code: only the T5 table)
    randomized_positions = False  # True: trained and evaluated at random positions (dape_core.positions)

    def __init__(self, n_head: int, head_dim: int, *, causal: bool = True, train_len: int = 512, **_: object):
        super().__init__()
        self.n_head = n_head
        self.head_dim = head_dim
        self.causal = causal
        self.train_len = train_len

    def rotate(self, q, k, q_pos, k_pos):
        return q, k

    def bias(self, q, k, scores, q_pos, k_pos):  # pragma: no cover - overridden
        return None


def build_encoding(name: str, n_head: int, head_dim: int, **kwargs) -> PositionalEncoding:
    require_choice("encoding", name, ENCODINGS)
    return ENCODINGS[name](n_head, head_dim, **kwargs)


@register("nope")
class NoPE(PositionalEncoding):
    """No positional encoding (Kazemnejad et al., 2023): B = 0."""


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
    """YaRN (Peng et al., 2023): RoPE whose frequencies are interpolated "NTK-by-parts" and whose logits get a
    temperature, applied without fine-tuning at the scale s = max(1, L′/L) of each forward pass (the paper's
    dynamic scaling, §3.3; eq. 11): L = ``train_len``, L′ = the number of key positions (the evaluation length),
    so a model trained as RoPE at L is plain RoPE up to L and YaRN beyond.

    Per RoPE frequency θ_d: wavelength λ_d = 2π/θ_d (eq. 13), ratio r(d) = L/λ_d (eq. 17), ramp γ(r) = 0 below α,
    1 above β and (r − α)/(β − α) between (eq. 18; α = 1, β = 32, the paper's values for Llama), interpolated
    θ′_d = (1 − γ)·θ_d/s + γ·θ_d (eq. 20); q and k are both multiplied by √(1/t) = 0.1·ln s + 1 (eqs. 21–22),
    the logits by 1/t. The reference code (jquesnelle/yarn) ramps linearly in the dimension index between the
    dimensions where r = β and r = α (rounded outwards) rather than linearly in r; this follows the paper.
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
    """Randomized RoPE (Ruoss et al., 2023): RoPE at sorted positions drawn without replacement from
    [0, max_position), max_position ≥ the longest evaluation length — a new draw for every training micro-batch,
    a function of (seed, step, micro-batch) so that a resumed run draws the same positions.

    Evaluation draws too, as Ruoss et al. do at test time: one draw per evaluation window, seeded by (seed,
    length, window), so that a perplexity is deterministic and does not depend on batching (at length
    max_position the draw is 0 … T−1). Positions 0 … T−1 at evaluation would put neighbouring tokens one
    position apart, a spacing training shows only when max_position = train_len. The draws are made by
    ``dape_core.positions``; this class is RoPE at the positions it is given (in the CHE encoder, the runner's
    ``randomized_positions`` decides them, as for every encoding there).
    """



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

    Init r1 ~ 2·U(0, 1), r2 ~ U(0, 1) per head; the parameters are clamped to ≥ 0.01 in place at every forward,
    as the reference does (under torch.compile the bias reads the clamped values, :meth:`clamped_parameters`). Decoder: the public code's kernel of tril(i − j), so keys right of the query get 0.
    Encoder (two-sided): −r1·log(1 + r2·|i − j|) with separate (r1, r2) for keys left and right of the query.
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
            for param in (self.r1, self.r2):
                if param.device.type == "meta":  # no values to clamp (a memory estimate's model)
                    continue
                if bool((param < self.min_value).any()):
                    param.clamp_(min=self.min_value)

    def clamped_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(r1, r2) ≥ 0.01 as the bias reads them: eagerly the parameters after :meth:`clamp_parameters`; under
        torch.compile the in-place clamp's values and gradients without mutating the parameters inside the graph
        (the check would read values on the host, and a graph that clamps in place at every call bumps the
        parameters' versions under the tensors an earlier call saved); training clamps the stored parameters
        after every optimiser step (``train.constrain_parameters``)."""
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

    f_θ = Linear(1, 32)–ReLU–Linear(32, H); c learnable (init 0.1); L = |L_multiplier·L_init| with L_multiplier
    learnable (init 1) and L_init = train_len / 2 fixed; eps 1e-6 on the denominator. Decoder: the distance is
    the public code's tril(i − j), so keys right of the query get f_θ(0). Encoder (two-sided): the signed
    normalised distance sign(i − j)·ψ(i − j)/ψ(max(L, i, j)) goes into f_θ.
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
    """T5 relative bias (Raffel et al., 2020) as the public code has it: b(i, j) = √d_head · w[bucket(i − j), h],
    32 buckets of i − j, max distance 128; w [buckets, H] initialised Xavier-normal (std √(2/(buckets + H))).

    The public code (GPT-NeoX's ParallelRelativePositionBias, ``pos_emb: rpe``) builds one table for all layers,
    multiplies it by √d_head and initialises it with ``xavier_normal_``; this follows it. Decoder: causal buckets
    of max(i − j, 0), so keys right of the query get bucket 0. Encoder: T5's bidirectional buckets (left and right
    apart). A table saved before the √d_head scale was adopted (no ``scale`` in its state dict) was trained
    unscaled and loads with scale 1, so it gives the results it was trained and evaluated with.
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
        buckets = geometry.get(
            ("t5_buckets", self.causal, self.num_buckets, self.max_distance),
            q_pos,
            k_pos,
            lambda: t5_bucket(
                relative_distance(q_pos, k_pos),
                bidirectional=not self.causal,
                num_buckets=self.num_buckets,
                max_distance=self.max_distance,
            ),
        )
        return (self.table(buckets) * self.scale).permute(2, 0, 1).to(q.dtype)


def _unscaled_legacy_t5_table(module, state_dict, prefix, *_):
    """A T5 table saved without ``scale`` (an earlier version, trained unscaled) loads with scale 1."""
    if prefix + "table.weight" in state_dict:
        state_dict.setdefault(prefix + "scale", torch.ones((), dtype=module.scale.dtype))


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
        left = geometry.get(("left_or_self", q.dtype), q_pos, k_pos, lambda: (k_pos[None, :] <= q_pos[:, None]).to(q.dtype))
        gates = torch.sigmoid(scores)
        pos_left = (gates * left).flip(-1).cumsum(-1).flip(-1) * left
        out = self._interpolate(q, pos_left, 0)
        if self.causal:
            return out
        right = geometry.get(("right_or_self", q.dtype), q_pos, k_pos, lambda: (k_pos[None, :] >= q_pos[:, None]).to(q.dtype))
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
        """The table's distances under ``torch.compile``, from the shapes alone: |i − j| ≤ Tk − 1, every distance
        of consecutive positions whose queries are among the keys (what every attention path passes). The eager
        range (min … max of the distances) would need their values on the host: a graph break and a device sync.
        Positions farther apart (random ones) fail an assertion in the graph instead of reading a wrong row."""
        lo, hi = (0 if self.causal else 1 - n_keys), n_keys - 1
        torch._assert_async(((dist >= lo) & (dist <= hi)).all(),
                            "Transformer-XL under torch.compile: a distance exceeds the number of keys − 1 "
                            "(positions that are not consecutive); allowed: consecutive positions, or run eagerly")
        return lo, hi

    def bias(self, q, k, scores, q_pos, k_pos):
        index = geometry.get(("xl_index", self.causal), q_pos, k_pos, lambda: self._geometry(q_pos, k_pos)[0])
        table = geometry.get(
            ("xl_sinusoids", self.causal, self.rel_dim), q_pos, k_pos, lambda: self._geometry(q_pos, k_pos)[1]
        )
        r = self.w_r(table.to(q.dtype)).view(-1, self.n_head, self.head_dim)
        pos_term = torch.einsum("bhqd,nhd->bhqn", q + self.v[None, :, None, :].to(q.dtype), r)
        pos_term = pos_term.gather(-1, index.expand(q.shape[0], self.n_head, -1, -1))
        content_term = torch.einsum("hd,bhkd->bhk", self.u.to(k.dtype), k)[:, :, None, :]
        return (pos_term + content_term) / math.sqrt(self.head_dim)


__all__ = [
    "ENCODINGS",
    "PositionalEncoding",
    "register",
    "build_encoding",
    "relative_distance",
    "GeometryCache",
    "geometry",
    "YaRN",
    "RandomizedRoPE",
    "alibi_slopes",
    "t5_bucket",
    "sinusoid",
    "display_name",
]
