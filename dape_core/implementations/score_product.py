"""The score product A = q·kᵀ of the materialized and compiled paths (paper eq. 1) with its fp32 products, forward
and backward, on TF32 tensor cores: their ``tf32_scores`` option.

Those paths keep the scores in fp32 under bf16 autocast: q and k are upcast, A = q·kᵀ, and in the backward pass
dQ = dA·k and dK = dAᵀ·q. With CUDA's default these three products run on the FFMA units, not the tensor cores
(on an H200 the forward product alone took 0.41 ms of a 9.72 ms DAPE1×3-Kerple layer at B 32 × T 512,
docs/performance.md). On TF32 tensor cores the forward product is exact up to the order of the sums where q and k
hold 16-bit values (bf16: 8 significant bits, fp16: 11; TF32 holds 11, so each product is exact and the sums are
fp32), as bf16 autocast's linear layers give them; the paths take the option only then (fp32 q and k, which TF32
would round, keep fp32 products). The backward products round dA to 11 bits (2⁻¹¹ relative, against the 2⁻⁸ of
the bf16 feature map beside them).

TF32 is CUDA's process-wide switch, read by cuBLAS at each call. Turning it on for a whole training step would
reach every fp32 product of the step, and turning it on around the forward product alone would miss the backward
pass, which autograd runs later. So :func:`tf32_matmul` is a custom operator (``dape::tf32_matmul``) whose forward
and backward each run their products with the switch on and put it back as it was: a graph that ``torch.compile``
traces calls it as it is, so the switch is set when the product runs, not when the graph is traced. On a CPU the
switch changes nothing and the operator is ``torch.matmul``, which the tests prove with its gradients.
"""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def tf32_products():
    """CUDA's fp32 matrix products on TF32 tensor cores inside, the switch as it was after: the per-backend
    ``fp32_precision`` setting (torch ≥ 2.9; reading it works whichever of torch's two interfaces a process set
    the switch with, where reading the older ``allow_tf32`` after the newer one fails), else ``allow_tf32``."""
    matmul = torch.backends.cuda.matmul
    name, value = ("fp32_precision", "tf32") if hasattr(matmul, "fp32_precision") else ("allow_tf32", True)
    kept = getattr(matmul, name)
    setattr(matmul, name, value)
    try:
        yield
    finally:
        setattr(matmul, name, kept)


@torch.library.custom_op("dape::tf32_matmul", mutates_args=())
def tf32_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a · b (``torch.matmul``, the same batch dimensions on both sides) with fp32 products on TF32 tensor cores on
    CUDA."""
    with tf32_products():
        return torch.matmul(a, b)


@tf32_matmul.register_fake
def _(a, b):
    return a.new_empty((*a.shape[:-1], b.shape[-1]))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a = tf32_matmul(grad, b.transpose(-2, -1)) if ctx.needs_input_grad[0] else None
    grad_b = tf32_matmul(a.transpose(-2, -1), grad) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


tf32_matmul.register_autograd(_backward, setup_context=_setup_context)


def score_product(q: torch.Tensor, k: torch.Tensor, *, tf32_scores: bool = False) -> torch.Tensor:
    """A = q·kᵀ (eq. 1, before the 1/√d scale) of q [.., rows, d] and k [.., keys, d] of the same batch
    dimensions; ``tf32_scores``: its fp32 products, forward and backward, on TF32 tensor cores on CUDA."""
    if tf32_scores:
        return tf32_matmul(q, k.transpose(-2, -1))
    return torch.matmul(q, k.transpose(-2, -1))
