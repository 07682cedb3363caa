"""The fused path of DAPE attention (``attention_impl: fused``): softmax(mask(A + B + f(tril([A; B])))) · V (eq. 5)
in one Triton kernel per pass (:mod:`dape_core.implementations.fused_kernel`), no [batch, H, T, T] tensor in either
pass. Equals the reference (``ScoreProcessor.forward`` inside the plain path) on outputs and on the gradients of q, k,
v, the encoding's parameters and both processor layers, as the tests prove under Triton's CPU interpreter
(``TRITON_INTERPRET=1``). No attention dropout: with ``dropout_p`` > 0 the registry runs the materialized path.

The encoding's bias reaches the kernel in one of three forms (:func:`bias_form`):

* ``none`` — no bias (NoPE, RoPE): C = H (eq. 4);
* ``table`` — a relative bias (ALiBi, Kerple, T5) at consecutive positions, B[i, j] = φ(i − j): a [H, 2·Tk − 1] table
  computed through the encoding's own ``bias`` (so autograd reaches its parameters); the kernel returns the table's
  gradient, dB summed along diagonals;
* ``tensor`` — any other bias (FIRE's [H, T, T], CoPE's and Transformer-XL's [batch, H, T, T], a relative bias at
  other positions), read per tile; its gradient has the bias's size, so memory stays quadratic in T, as the bias is.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dape_core.dape import ScoreProcessor
from dape_core.encodings import PositionalEncoding
from dape_core.errors import ConfigError
from dape_core.implementations.fast import gemm_weights
from dape_core.implementations.precision import autocast_off
from dape_core.implementations.triton_support import (DOT_DTYPES, dot_settings, dot_size, kernels_run_on,
                                                       persistent_programs, pow2)
from dape_core.positions import consecutive

@dataclass(frozen=True)
class FusedTiles:
    """The kernels' tile sizes: ``block_rows`` query rows per program item (BM); the forward's ``key_tile`` columns
    per wide key tile (W, a power of two, raised to fit 2·(k − 1) + 8 columns) and ``warps`` per program (Triton's
    ``num_warps``); the backward kernels' ``backward_key_tile`` (raised to fit 4·(k − 1) + 8) and ``backward_warps``;
    ``programs`` persistent programs (None: four per streaming multiprocessor on CUDA, at most 8 elsewhere);
    ``cap_registers``: pass ptxas :func:`register_ceiling`. The defaults measured fastest of the settings that fit the
    125M layer on a GPU (benchmarks/results/README.md, "Fused kernel profile")."""

    block_rows: int = 16
    key_tile: int = 32
    warps: int = 16
    backward_key_tile: int = 32
    backward_warps: int = 8
    programs: int | None = None
    cap_registers: bool = True

    def __post_init__(self):
        for name in ("block_rows", "key_tile", "warps", "backward_key_tile", "backward_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ConfigError(f"{name}: {value} is not allowed; allowed values: powers of two")

    def wide_tile(self, kernel_size: int, backward: bool = False) -> int:
        """W of the forward (``key_tile``, raised to leave 8 exact columns: 2·(k − 1) + 8) or of the backward
        (``backward_key_tile``, raised to 4·(k − 1) + 8)."""
        if backward:
            return max(self.backward_key_tile, pow2(4 * (kernel_size - 1) + 8))
        return max(self.key_tile, pow2(2 * (kernel_size - 1) + 8))


# the padded layer sizes (heads, head size, D_DAPE) up to which this path measured faster than the materialized one
# for gradient-free passes; beyond, its forward kernel spills far more or needs more shared memory than a block has
# (docs/performance.md, "Measured on an H200")
MEASURED_SIZES = (16, 64, 32)


def measured_at(heads: int, head_dim: int, dape_width: int) -> bool:
    """Whether a layer's sizes, padded as the kernel pads them, are at most :data:`MEASURED_SIZES`."""
    return all(dot_size(n) <= limit for n, limit in zip((heads, head_dim, dape_width), MEASURED_SIZES))


@functools.lru_cache(maxsize=1)
def _triton():
    """The kernel module, imported on first use (Triton is the ``gpu`` extra)."""
    try:
        from dape_core.implementations import fused_kernel
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise ConfigError("attention_impl: fused needs Triton (pip install -e '.[gpu]'); allowed without it: auto, "
                          "fast, plain, materialized") from err
    return fused_kernel


def fused_runs_on(device: torch.device | str) -> bool:
    """Whether the fused kernel can run on ``device`` (:func:`kernels_run_on`)."""
    return kernels_run_on(device, _triton)


def bias_form(encoding: PositionalEncoding, processor: ScoreProcessor, positions: torch.Tensor) -> str:
    """How the encoding's bias reaches the kernel (module docstring): none, table or tensor."""
    if not processor.bias_channels:
        return "none"
    if encoding.relative_bias and not encoding.needs_scores and positions.numel() > 1 and consecutive(positions):
        return "table"
    return "tensor"


@functools.lru_cache(maxsize=32)
def _distance_positions(n_keys: int, device: torch.device, dtype: torch.dtype):
    """(query position [1], key positions [2·n − 1]) whose i − j at index u is u − (n − 1): a per-distance table's
    canonical positions (cached, so the geometry cache never sees their address reused)."""
    q_pos = torch.full((1,), n_keys - 1, device=device, dtype=dtype)
    k_pos = torch.arange(2 * n_keys - 2, -1, -1, device=device, dtype=dtype)
    return q_pos, k_pos


def relative_table(encoding: PositionalEncoding, q: torch.Tensor, k: torch.Tensor, n_keys: int,
                   position_dtype: torch.dtype) -> torch.Tensor:
    """φ(d) for d = −(n − 1) … n − 1 as [H, 2·n − 1] (index u = d + n − 1), through the encoding's own bias: a
    relative encoding's B[i, j] at consecutive positions (ALiBi, Kerple, T5; §3, eq. 5's B)."""
    q_pos, k_pos = _distance_positions(n_keys, q.device, position_dtype)
    return encoding.bias(q[:, :, :1], k[:, :, :1], None, q_pos, k_pos)[:, 0, :]


def kernel_weights(processor: ScoreProcessor, heads_padded: int, width_padded: int):
    """(W1's A half [k, DP, HP], its B half (or None), b1 [DP], W2 [k, HP, DP], b2 [HP]) in fp32, zero-padded,
    differentiable views of the layer's parameters (Conv1 over [A; B], Conv2; DAPE V1's MLP as k = 1)."""
    k, heads, width = processor.kernel_size, processor.n_head, processor.dape_width
    w1, b1, w2, b2 = gemm_weights(processor)  # W1 [D, k·C] (tap, channel); W2 [k·H, D] (tap, head)
    channels = 2 if processor.bias_channels else 1
    w1 = w1.float().reshape(width, k, channels, heads).permute(2, 1, 0, 3)  # [halves, k, D, H]
    w1 = F.pad(w1, (0, heads_padded - heads, 0, width_padded - width))
    w2 = F.pad(w2.float().reshape(k, heads, width), (0, width_padded - width, 0, heads_padded - heads))
    b1 = F.pad(b1.float(), (0, width_padded - width))
    b2 = F.pad(b2.float(), (0, heads_padded - heads))
    return w1[0], (w1[1] if channels == 2 else None), b1, w2, b2


def attend_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    encoding: PositionalEncoding,
    processor: ScoreProcessor,
    positions: torch.Tensor,
    causal: bool,
    row_offset: int = 0,
    tiles: FusedTiles | None = None,
) -> torch.Tensor:
    """softmax(mask(A + B + f(tril([A; B])))) · V (eq. 5) for q [batch, H, Tq, d_head] and k, v [batch, H, Tk,
    d_head] (already rotated; query row r is key ``row_offset`` + r, ``positions`` [Tk] are the keys'), in the
    fused kernel. Returns [batch, H, Tq, d_head] in v's dtype."""
    check_dtype(q.dtype, q.device.type)
    if not fused_runs_on(q.device):
        raise ConfigError(f"attention_impl: fused runs on CUDA (or on a CPU under TRITON_INTERPRET=1), not on "
                          f"{q.device}; allowed here: auto, fast, plain, materialized, compiled")
    tiles = tiles or FusedTiles()
    form = bias_form(encoding, processor, positions)
    with autocast_off(q.device.type):  # B in fp32 under bf16 autocast, as on the other paths
        bias = _kernel_bias(form, encoding, q, k, positions, row_offset)
    heads_padded, width_padded = dot_size(processor.n_head), dot_size(processor.dape_width)
    w1a, w1b, b1, w2, b2 = kernel_weights(processor, heads_padded, width_padded)
    plan = _Plan(form=form, kernel_size=processor.kernel_size, left=processor.left_padding, tril=processor.tril,
                 causal=causal, row_offset=row_offset, heads_padded=heads_padded, width_padded=width_padded,
                 tiles=tiles)
    return _FusedDape.apply(q, k, v, bias, w1a, w1b, b1, w2, b2, plan)


def check_dtype(dtype: torch.dtype, device_type: str) -> None:
    """Raise ConfigError unless the kernel takes ``dtype``: bf16 and fp16 everywhere, float32 only in the interpreter
    (compiled for a GPU, its fp32 backward needs more shared memory than a Hopper block has)."""
    allowed = DOT_DTYPES if device_type == "cpu" else DOT_DTYPES[1:]
    if dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise ConfigError(f"attention_impl: fused does not take {dtype} inputs on {device_type}; allowed dtypes: "
                          f"{names} (precision: bf16; or attention_impl plain, materialized or compiled)")


def _kernel_bias(form: str, encoding: PositionalEncoding, q, k, positions, row_offset: int):
    """The bias in the form the kernel reads (:func:`bias_form`), in fp32 at least: a [H, 2·Tk − 1] table, the
    encoding's bias tensor for the query rows, or None."""
    score_dtype = torch.promote_types(q.dtype, torch.float32)
    n_rows, n_keys = q.shape[2], k.shape[2]
    if form == "table":
        return relative_table(encoding, q[:, :, :1].to(score_dtype), k[:, :, :1].to(score_dtype), n_keys,
                              positions.dtype)
    if form == "tensor":
        q_s, k_s = q.to(score_dtype), k.to(score_dtype)
        scores = None
        if encoding.needs_scores:  # CoPE's gates read q·kᵀ: this encoding's bias is [batch, H, Tq, Tk] anyway
            scores = torch.matmul(q_s, k_s.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return encoding.bias(q_s, k_s, scores, positions[row_offset:row_offset + n_rows], positions)
    return None


@dataclass(frozen=True)
class _Plan:
    """Static settings of one fused call."""

    form: str
    kernel_size: int
    left: int
    tril: bool
    causal: bool
    row_offset: int
    heads_padded: int
    width_padded: int
    tiles: FusedTiles


def _bias_arguments(bias: torch.Tensor | None, form: str, batch: int, placeholder: torch.Tensor):
    """(bias pointer, batch, head, row and key strides, table length) of the kernel's bias arguments; without a
    bias the pointer is ``placeholder`` (never read)."""
    if form == "table":
        return bias, 0, 0, 0, 0, bias.shape[-1]
    if form == "tensor":
        b4 = bias if bias.dim() == 4 else bias.unsqueeze(0)
        sb, sh, si, sj = b4.stride()
        return bias, (sb if b4.shape[0] == batch and batch > 1 else 0), sh, si, sj, 1
    return placeholder, 0, 0, 0, 0, 1


def _weight_arguments(w1a, w1b, b1, w2, b2) -> tuple:
    """The kernel's weight arguments, contiguous; without a bias half, W1's A half stands in (never read)."""
    return tuple(w.contiguous() for w in (w1a, w1b if w1b is not None else w1a, b1, w2, b2))


def register_ceiling(warps: int) -> int:
    """Registers per thread for one program of ``warps`` warps: the register file's 65,536 over its threads, at most
    255. Passed as Triton's ``maxnreg``: without it ptxas held some of these kernels to 32 registers and spilled."""
    return min(255, 65536 // (32 * warps))


def _launch_settings(plan: _Plan, q: torch.Tensor, backward: bool = False):
    """The kernels' compile-time settings (constexprs and ``num_warps``) of the forward or the backward pass."""
    kt = _triton()
    warps = plan.tiles.backward_warps if backward else plan.tiles.warps
    bias_code = {"none": kt.BIAS_NONE, "table": kt.BIAS_TABLE, "tensor": kt.BIAS_FULL}[plan.form]
    return dict(HP=plan.heads_padded, DP=plan.width_padded, DHP=dot_size(q.shape[-1]), BM=plan.tiles.block_rows,
                W=plan.tiles.wide_tile(plan.kernel_size, backward), K=plan.kernel_size, LEFT=plan.left,
                TRIL=plan.tril, CAUSAL=plan.causal, BIAS=bias_code, **dot_settings(kt.tl, q.dtype),
                num_warps=warps, **({"maxnreg": register_ceiling(warps)} if plan.tiles.cap_registers else {}))


def _launch(kernel, programs: int, *args, **meta) -> None:
    """``kernel[(programs,)](*args, **meta)``; where the GPU lacks the shared memory or registers these sizes need,
    a ConfigError names the paths that run them."""
    try:
        kernel[(programs,)](*args, **meta)
    except _triton().triton.runtime.errors.OutOfResources as error:
        raise ConfigError(
            f"attention_impl: fused needs {error.required} of {error.name} per program at heads padded to "
            f"{meta['HP']}, head size {meta['DHP']} and D_DAPE {meta['DP']}, and this GPU has {error.limit}; allowed "
            "here: auto (the compiled path beyond the sizes it measured the fused kernel at), compiled, "
            "materialized") from error


class _FusedDape(torch.autograd.Function):
    """The fused kernel's passes; gradients for q, k, v, the bias (table or tensor) and the padded weights."""

    @staticmethod
    def forward(ctx, q, k, v, bias, w1a, w1b, b1, w2, b2, plan: _Plan):
        kt = _triton()
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        if bias is not None:
            bias = bias.contiguous()
        batch, heads, n_rows, head_dim = q.shape
        n_keys = k.shape[2]
        meta = _launch_settings(plan, q)
        hp, dp, bm, wide = meta["HP"], meta["DP"], meta["BM"], meta["W"]
        out = torch.empty(q.shape, device=q.device, dtype=v.dtype)
        lse = torch.empty((batch, hp, n_rows), device=q.device, dtype=torch.float32)
        nprog = persistent_programs(q.device, batch * -(-n_rows // bm), plan.tiles.programs)
        scratch = torch.empty(nprog * (2 * hp + dp) * bm * wide, device=q.device, dtype=torch.float32)
        _launch(kt.dape_forward_kernel, nprog,
                q, k, v, out, lse, *_bias_arguments(bias, plan.form, batch, q),
                *_weight_arguments(w1a, w1b, b1, w2, b2), scratch, 1.0 / math.sqrt(head_dim), plan.row_offset, batch,
                n_rows, n_keys, heads, head_dim, nprog, **meta)
        ctx.save_for_backward(q, k, v, out, lse, bias, w1a, w1b, b1, w2, b2)
        ctx.plan = plan
        return out

    @staticmethod
    def backward(ctx, grad_out):
        kt = _triton()
        q, k, v, out, lse, bias, w1a, w1b, b1, w2, b2 = ctx.saved_tensors
        plan = ctx.plan
        batch, heads, n_rows, head_dim = q.shape
        n_keys = k.shape[2]
        meta = _launch_settings(plan, q, backward=True)
        hp, dp, bm, wide, ks = meta["HP"], meta["DP"], meta["BM"], meta["W"], meta["K"]
        grad_out = grad_out.contiguous()
        delta = torch.zeros((batch, hp, n_rows), device=q.device, dtype=torch.float32)
        delta[:, :heads] = (grad_out.float() * out.float()).sum(-1)  # δ = rowsum(dO ⊙ O)
        bias_args = _bias_arguments(bias, plan.form, batch, q)
        table_len = bias_args[-1]
        weights = _weight_arguments(w1a, w1b, b1, w2, b2)
        scale = 1.0 / math.sqrt(head_dim)
        slab = (3 * hp + 2 * dp) * bm * wide

        grad_k = torch.empty_like(k)
        grad_v = torch.empty_like(v)
        stride = wide - 4 * (ks - 1)
        nprog_kv = persistent_programs(q.device, batch * -(-n_keys // stride), plan.tiles.programs)
        scratch = torch.empty(nprog_kv * slab, device=q.device, dtype=torch.float32)
        _launch(kt.dape_backward_kv_kernel, nprog_kv,
                q, k, v, grad_out, lse, delta, grad_k, grad_v, *bias_args, *weights, scratch,
                scale, plan.row_offset, batch, n_rows, n_keys, heads, head_dim, nprog_kv, **meta)

        extent = pow2(bm + wide - 1)
        nprog_q = persistent_programs(q.device, batch * -(-n_rows // bm), plan.tiles.programs)
        scratch = torch.empty(nprog_q * (slab + hp * bm * extent), device=q.device, dtype=torch.float32)
        part_size = ks * hp * dp + hp + 2 * ks * dp * hp + dp
        partial = torch.zeros((nprog_q, part_size), device=q.device, dtype=torch.float32)
        bias_grad = bias is not None and ctx.needs_input_grad[3]
        if bias_grad and plan.form == "table":
            grad_bias = torch.zeros((nprog_q, hp, table_len), device=q.device, dtype=torch.float32)
        elif bias_grad:
            grad_bias = torch.zeros((batch, heads, n_rows, n_keys), device=q.device, dtype=torch.float32)
        else:
            grad_bias = partial  # not written
        grad_q = torch.empty_like(q)
        _launch(kt.dape_backward_q_kernel, nprog_q,
                q, k, v, grad_out, lse, delta, grad_q, grad_bias, *bias_args, *weights, scratch,
                partial, part_size, scale, plan.row_offset, batch, n_rows, n_keys, heads, head_dim, nprog_q,
                E=extent, BIAS_GRAD=bias_grad, Q_GRAD=True, WEIGHT_GRADS=True, **meta)

        sums = partial.sum(0)
        sizes = (ks * hp * dp, hp, ks * dp * hp, ks * dp * hp, dp)
        g_w2, g_b2, g_w1a, g_w1b, g_b1 = torch.split(sums, sizes)
        g_bias = None
        if bias_grad and plan.form == "table":
            g_bias = grad_bias.sum(0)[:heads].to(bias.dtype)
        elif bias_grad:
            g_bias = (grad_bias.sum(0) if bias.dim() == 3 else grad_bias).reshape(bias.shape).to(bias.dtype)
        return (grad_q, grad_k, grad_v, g_bias, g_w1a.view(ks, dp, hp), g_w1b.view(ks, dp, hp) if w1b is not None
                else None, g_b1, g_w2.view(ks, hp, dp), g_b2, None)
