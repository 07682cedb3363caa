"""The score product A = q·kᵀ of the materialized and compiled paths (paper eq. 1) with its fp32 products, forward
and backward, on TF32 tensor cores: their ``tf32_scores`` option.

Those paths keep the scores in fp32 under bf16 autocast (A = q·kᵀ, dQ = dA·k, dK = dAᵀ·q), by CUDA's default on the
FFMA units, not the tensor cores (measured: docs/performance.md, "TF32 score products"). On TF32 tensor cores (11
significant bits) the forward is exact up to the order of the sums where q and k hold 16-bit values (bf16 8 bits,
fp16 11), as bf16 autocast's linear layers give them, so the paths take the option only then; the backward rounds dA
to 2⁻¹¹ relative (the bf16 feature map beside it: 2⁻⁸).

TF32 is CUDA's process-wide switch, read by cuBLAS at each call: on for a whole step it would reach every fp32
product, around the forward product alone it would miss the backward. So :func:`tf32_matmul` is a custom operator
(``dape::tf32_matmul``) whose forward and backward each set the switch around their own products and restore it, also
inside a ``torch.compile`` graph. On a CPU it is ``torch.matmul``, which the tests prove with its gradients.
"""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def tf32_products():
    """CUDA's fp32 matrix products on TF32 tensor cores inside, the switch restored after: the per-backend
    ``fp32_precision`` (torch ≥ 2.9; readable whichever of torch's two interfaces set the switch, where reading the
    older ``allow_tf32`` after the newer one fails), else ``allow_tf32``."""
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
    """a · b (``torch.matmul``, same batch dimensions) with fp32 products on TF32 tensor cores on CUDA."""
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
