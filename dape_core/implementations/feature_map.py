"""DAPE's feature map f = Conv2(LeakyReLU(Conv1(x))) (paper eq. 5, appendix L; DAPE V1's MLP as k = 1) in Triton
kernels over a channels-last map (:mod:`dape_core.implementations.feature_map_kernel`): the chunked paths'
``feature_map="triton"``, in place of :func:`~dape_core.implementations.materialized.padded_feature_map`'s two
``conv2d`` calls, whose cuDNN convolutions, copies and backward take about half of the compiled layer on a GPU
(measured: docs/performance.md, "The Triton feature map").

Each pass streams the map once (shifts as shifted loads, LeakyReLU and padding in registers); the backward stores one
map, dPre, and reduces per-program partial sums of the weights' gradients here (deterministic). Given a causal map's
diagonal (``first``) the kernels compute f left of it only and skip the tiles right of it (about half a decoder's map).
Same function as :func:`padded_feature_map` on its first K key columns (``same`` and ``causal`` padding; tril and the
causal mask are the caller's), outputs and gradients of x and both layers, as the tests prove under Triton's CPU
interpreter. The passes are custom operators (``dape::feature_map``, ``dape::feature_map_backward``), so a
``torch.compile`` graph calls them as they are.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dape_core.dape import ScoreProcessor
from dape_core.errors import ConfigError
from dape_core.implementations.fast import gemm_weights
from dape_core.implementations.triton_support import (DOT_DTYPES, MIN_DOT, dot_settings, dot_size, kernels_run_on,
                                                       persistent_programs)


@dataclass(frozen=True)
class FeatureTiles:
    """The kernels' tiles: ``rows`` map rows × ``keys`` keys per tile (powers of two; a tile's products are
    [rows·keys, channels] × [channels, channels]), ``warps`` per program (Triton's ``num_warps``), ``programs``
    persistent programs (None: four per streaming multiprocessor on CUDA, at most 8 elsewhere). The defaults: the
    largest tile for sm_90 (bf16, the 125M shape) whose kernels spill no registers under Triton 3.6 and 3.9
    (docs/performance.md, "Compiled without a GPU"); speed not yet measured on a GPU (``benchmarks/feature_map.py``)."""

    rows: int = 8
    keys: int = 16
    warps: int = 8
    programs: int | None = None

    def __post_init__(self):
        for name in ("rows", "keys", "warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ConfigError(f"{name}: {value} is not allowed; allowed values: powers of two")
        if self.rows * self.keys < MIN_DOT:
            raise ConfigError(f"rows × keys: {self.rows * self.keys} is not allowed; allowed values: at least "
                              f"{MIN_DOT} (a tile's pixels are a product's rows)")

    def spec(self) -> str:
        """``rows.keys.warps``, the form ``parse`` reads."""
        return f"{self.rows}.{self.keys}.{self.warps}"

    @classmethod
    def parse(cls, spec: str) -> FeatureTiles:
        """The tiles of ``rows.keys.warps`` (three powers of two)."""
        values = spec.split(".")
        if len(values) != 3 or not all(v.isdigit() for v in values):
            raise ConfigError(f"feature tiles: {spec!r} is not allowed; allowed: three powers of two rows.keys.warps")
        return cls(*map(int, values))


@functools.lru_cache(maxsize=1)
def _triton():
    """The kernel module, imported on first use (Triton is the ``gpu`` extra)."""
    try:
        from dape_core.implementations import feature_map_kernel
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise ConfigError("feature_map: triton needs Triton (pip install -e '.[gpu]'); allowed without it: conv") \
            from err
    return feature_map_kernel


def feature_weights(processor: ScoreProcessor):
    """(W1 [k, CP, DP], b1 [DP], W2 [k, DP, HP], b2 [HP]) in fp32, zero-padded, differentiable views of the layer's
    parameters: tap t of Conv1 maps x's C channels to D_DAPE, tap t of Conv2 D_DAPE to H (DAPE V1: k = 1)."""
    k, width, heads = processor.kernel_size, processor.dape_width, processor.n_head
    w1, b1, w2, b2 = gemm_weights(processor)  # W1 [D, k·C] (tap, channel); W2 [k·H, D] (tap, head)
    channels = w1.shape[1] // k
    cp, dp, hp = dot_size(channels), dot_size(width), dot_size(heads)
    w1 = F.pad(w1.float().reshape(width, k, channels).permute(1, 2, 0), (0, dp - width, 0, cp - channels))
    w2 = F.pad(w2.float().reshape(k, heads, width).permute(0, 2, 1), (0, hp - heads, 0, dp - width))
    return w1, F.pad(b1.float(), (0, dp - width)), w2, F.pad(b2.float(), (0, hp - heads))


def triton_feature_map(processor: ScoreProcessor, x: torch.Tensor, tiles: FeatureTiles | None = None, *,
                       first: int | None = None) -> torch.Tensor:
    """f of :func:`~dape_core.implementations.materialized.padded_feature_map` (eq. 5) on its first K key columns:
    x [batch, C, rows, K] (best channels-last, as the materialized path writes it) → [batch, H, rows, K], a
    channels-last view, in x's dtype. With ``first`` (a causal map: row r is the query at key position first + r) f
    and its gradient are zero right of each row's diagonal (j > first + r), where the causal mask drops them; the
    kernels skip the tiles wholly right of it."""
    tiles = tiles or FeatureTiles()
    batch, channels, rows, keys = x.shape
    if first is not None and first < 0:
        raise ConfigError(f"first: {first} is not allowed; allowed values: a key position ≥ 0, or None")
    w1, b1, w2, b2 = feature_weights(processor)
    pixels = x.permute(0, 2, 3, 1).reshape(batch * rows, keys, channels)  # a view where x is channels-last
    programs = tiles.programs or 0
    f = torch.ops.dape.feature_map(pixels, w1, b1, w2, b2, processor.n_head, processor.left_padding,
                                   -1 if first is None else first, rows, tiles.rows, tiles.keys, tiles.warps, programs)
    return f.view(batch, rows, keys, processor.n_head).permute(0, 3, 1, 2)


def check_input(x: torch.Tensor) -> None:
    """Raise ConfigError where the kernels cannot take x (dtype, device); checked when the operator runs, also
    inside a compiled graph."""
    if x.dtype not in DOT_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in DOT_DTYPES)
        raise ConfigError(f"feature_map: triton does not take {x.dtype}; allowed dtypes: {names}")
    if not kernels_run_on(x.device, _triton):
        raise ConfigError(f"feature_map: triton runs on CUDA (or on a CPU under TRITON_INTERPRET=1), not on "
                          f"{x.device}; allowed here: conv")


def _launch(device: torch.device, n_rows: int, n_keys: int, rows: int, keys: int, programs: int) -> int:
    """Persistent programs over the tiles (:func:`persistent_programs`)."""
    return persistent_programs(device, -(-n_rows // rows) * -(-n_keys // keys), programs)


def _causal_settings(first: int, map_rows: int) -> dict:
    """The kernels' causal arguments: FIRST, ROWS and CAUSAL (``first`` −1: no diagonal)."""
    return dict(FIRST=max(first, 0), ROWS=map_rows, CAUSAL=first >= 0)


@torch.library.custom_op("dape::feature_map", mutates_args=())
def _feature_map(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                 heads: int, left: int, first: int, map_rows: int, rows: int, keys: int, warps: int,
                 programs: int) -> torch.Tensor:
    """f [pixel rows, keys, H] of x [pixel rows, keys, C] (the forward kernel); with ``first`` ≥ 0 zero right of
    the diagonal of the causal maps of ``map_rows`` rows each (:func:`triton_feature_map`)."""
    check_input(x)
    kt = _triton()
    x = x.contiguous()
    n_rows, n_keys, channels = x.shape
    k, cp, dp = w1.shape
    f = torch.empty((n_rows, n_keys, heads), device=x.device, dtype=x.dtype)
    nprog = _launch(x.device, n_rows, n_keys, rows, keys, programs)
    kt.feature_map_forward_kernel[(nprog,)](
        x, f, w1.contiguous(), b1.contiguous(), w2.contiguous(), b2.contiguous(), n_rows, n_keys, nprog,
        C=channels, H=heads, RB=rows, BJ=keys, CP=cp, DP=dp, HP=w2.shape[2], K=k, LEFT=left, num_warps=warps,
        **_causal_settings(first, map_rows), **dot_settings(kt.tl, x.dtype))
    return f


@_feature_map.register_fake
def _(x, w1, b1, w2, b2, heads, left, first, map_rows, rows, keys, warps, programs):
    return x.new_empty((*x.shape[:-1], heads))


@torch.library.custom_op("dape::feature_map_backward", mutates_args=())
def _feature_map_backward(grad: torch.Tensor, x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                          left: int, first: int, map_rows: int, rows: int, keys: int, warps: int,
                          programs: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                  torch.Tensor]:
    """(dx, dW1, db1, dW2, db2) of f given df = ``grad`` (the two backward kernels; dPre kept between them, its
    DP channels padded like the weights: a padded channel's dPre is zero)."""
    kt = _triton()
    x, grad = x.contiguous(), grad.contiguous().to(x.dtype)
    n_rows, n_keys, channels = x.shape
    heads = grad.shape[-1]
    k, cp, dp = w1.shape
    hp = w2.shape[2]
    w1, b1, w2 = w1.contiguous(), b1.contiguous(), w2.contiguous()
    nprog = _launch(x.device, n_rows, n_keys, rows, keys, programs)
    settings = dict(RB=rows, BJ=keys, CP=cp, DP=dp, K=k, LEFT=left, num_warps=warps,
                    **_causal_settings(first, map_rows), **dot_settings(kt.tl, x.dtype))
    d_pre = torch.empty((n_rows, n_keys, dp), device=x.device, dtype=x.dtype)
    part2 = torch.zeros((nprog, k * dp * hp + hp), device=x.device, dtype=torch.float32)
    kt.feature_map_backward_hidden_kernel[(nprog,)](
        x, grad, d_pre, w1, b1, w2, part2, n_rows, n_keys, nprog, C=channels, H=heads, D=dp, HP=hp, **settings)
    dx = torch.empty_like(x)
    part1 = torch.zeros((nprog, k * cp * dp + dp), device=x.device, dtype=torch.float32)
    kt.feature_map_backward_input_kernel[(nprog,)](
        x, d_pre, dx, w1, part1, n_rows, n_keys, nprog, C=channels, D=dp, **settings)
    sums1, sums2 = part1.sum(0), part2.sum(0)  # outputs of a custom operator may not alias: each its own tensor
    return (dx, sums1[:k * cp * dp].view(k, cp, dp).clone(), sums1[k * cp * dp:].clone(),
            sums2[:k * dp * hp].view(k, dp, hp).clone(), sums2[k * dp * hp:].clone())


@_feature_map_backward.register_fake
def _(grad, x, w1, b1, w2, left, first, map_rows, rows, keys, warps, programs):
    return (torch.empty_like(x), torch.empty_like(w1), torch.empty_like(b1), torch.empty_like(w2),
            w2.new_empty(w2.shape[2]))


def _setup_context(ctx, inputs, output):
    x, w1, b1, w2, b2, heads, left, first, map_rows, rows, keys, warps, programs = inputs
    ctx.save_for_backward(x, w1, b1, w2)
    ctx.settings = (left, first, map_rows, rows, keys, warps, programs)


def _backward(ctx, grad):
    x, w1, b1, w2 = ctx.saved_tensors
    dx, dw1, db1, dw2, db2 = _feature_map_backward(grad, x, w1, b1, w2, *ctx.settings)
    return dx, dw1, db1, dw2, db2, *[None] * 8


_feature_map.register_autograd(_backward, setup_context=_setup_context)
