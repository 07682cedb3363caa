"""Faster implementations of the score processor, one module each, each equal to ``ScoreProcessor.forward``
(:mod:`dape_core.dape`, the paper's materialised form and the reference) on outputs and gradients, as the tests prove
(``tests/test_performance_paths.py``, ``tests/test_attention.py``, ``tests/test_gpu_path.py``).

``attention_impl`` (:class:`~dape_core.settings.AttentionSettings`) names a path: a row of
:data:`~dape_core.implementations.registry.PATHS` and, but ``plain``, the module here of that name (measured figures:
docs/performance.md):

* ``auto`` (the default): resolved where the model runs by :func:`resolve_attention_impl`;
* ``plain``: the reference itself, materialising [batch, 2H, T, T]; selectable because the paper's timing table
  measured it;
* ``fast`` (``auto`` on a CPU): blocked GEMMs within a CPU core's caches, the hidden map recomputed in the backward
  pass; its Python loop over batch elements × row blocks makes operator calls grow with the batch;
* ``materialized`` (``auto`` on CUDA without Triton and other accelerators): the reference's arithmetic (fp32 scores
  and softmax, the layer's ``nn.Conv2d``) per chunk of query rows within a memory budget; its operator calls (on a
  GPU, kernel launches) do not grow with the batch;
* ``compiled`` (``auto`` on CUDA with Triton): the materialized path, each chunk one ``torch.compile`` graph;
* ``fused`` (``auto`` on CUDA for gradient-free bf16/fp16 passes at the layer sizes it measured faster at): one Triton
  kernel per pass (FlashAttention-2's tiling, the processor on chip), no [batch, H, T, T] tensor; Triton's CPU
  interpreter in the tests.

On CUDA the compiled path takes :func:`path_options` (``CUDA_COMPILED_OPTIONS``: the Triton feature map of
:mod:`~dape_core.implementations.feature_map`, causal chunks, TF32 score products of
:mod:`~dape_core.implementations.score_product`), each off until a GPU measures it faster. Where the fused path
cannot run a case, the registry (attention dropout: materialized) or ``dape_core.attention`` (no processor: SDPA; a
host model's key mask: plain) says what runs instead. A new implementation: a module here whose entry takes the
registry's arguments, a row in ``PATHS``, a name in ``ATTENTION_IMPLS``, an exactness test.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util

import torch

from dape_core.errors import require_choice
from dape_core.settings import ATTENTION_IMPLS
from dape_core.settings.attention import CUDA_COMPILED_OPTIONS, CUDA_TRAINING_PATH

CPU_PATH = "fast"  # what ``auto`` runs on a CPU
ACCELERATOR_PATH = "materialized"  # what ``auto`` runs on any other device
TRAINING_PATH = CUDA_TRAINING_PATH  # what ``auto`` runs on CUDA for the other passes (training), where it can compile
INFERENCE_PATH = "fused"  # what ``auto`` runs on CUDA for a pass without gradients under 16-bit autocast
HALF_DTYPES = (torch.bfloat16, torch.float16)
# TorchInductor compiles GPU kernels with Triton (CUDA builds of torch ship it); looked up once, not imported
TRITON_IMPORTABLE = importlib.util.find_spec("triton") is not None
# the options of a pass traced on ``meta`` (:func:`options_on_meta`): none unless a trace says which pass it stands for
_META_OPTIONS = contextvars.ContextVar("meta_path_options", default=None)


def resolve_attention_impl(name: str, device: torch.device | str, sizes: tuple[int, int, int] | None = None) -> str:
    """The path ``attention_impl`` ``name`` runs on ``device`` now; ``auto`` as the module docstring says, ``fused``
    only where ``sizes`` (heads, head size, D_DAPE: :func:`~dape_core.settings.model.layer_sizes`; ``None``: not)
    pass :func:`~dape_core.implementations.fused.measured_at`. Every other name is itself."""
    require_choice("attention_impl", name, ATTENTION_IMPLS)
    if name != "auto":
        return name
    kind = torch.device(device).type
    if kind == "cpu":
        return CPU_PATH
    if kind == "cuda" and inference_pass(kind) and sizes is not None and _fused_measured(sizes):
        return INFERENCE_PATH
    if kind == "cuda" and TRITON_IMPORTABLE:
        return TRAINING_PATH
    return ACCELERATOR_PATH


def training_path(name: str) -> str:
    """The path ``attention_impl`` ``name`` trains with on CUDA with Triton (``auto``: :data:`TRAINING_PATH`)."""
    require_choice("attention_impl", name, ATTENTION_IMPLS)
    return TRAINING_PATH if name == "auto" else name


def path_options(impl: str, device_type: str) -> dict:
    """The options (``feature_map``, ``causal_chunks``, ``tf32_scores``) of path ``impl`` running now on
    ``device_type``: :data:`~dape_core.settings.attention.CUDA_COMPILED_OPTIONS` on CUDA under bf16 or fp16 autocast
    for a row with ``cuda_options``; else none (in fp32 the Triton feature map's kernels spill registers on sm_90, and
    TF32 needs 16-bit q and k). On ``meta`` (the memory model's trace): :func:`options_on_meta`'s."""
    from dape_core.implementations.registry import attention_path

    if device_type == "meta":
        return dict(_META_OPTIONS.get() or {})
    on = attention_path(impl).cuda_options and device_type == "cuda" and half_autocast(device_type)
    return dict(CUDA_COMPILED_OPTIONS) if on else {}


@contextlib.contextmanager
def options_on_meta(options: dict):
    """Inside, a pass on ``meta`` runs the materialized path with ``options``: the memory model's trace stands for a
    CUDA pass under 16-bit autocast, which ``meta`` cannot show."""
    token = _META_OPTIONS.set(dict(options))
    try:
        yield
    finally:
        _META_OPTIONS.reset(token)


def half_autocast(device_type: str) -> bool:
    """Whether the pass now running runs under bf16 or fp16 autocast on ``device_type``."""
    return torch.is_autocast_enabled(device_type) and torch.get_autocast_dtype(device_type) in HALF_DTYPES


def inference_pass(device_type: str) -> bool:
    """Whether the pass now running is gradient-free under bf16 or fp16 autocast on ``device_type`` (fused's case)."""
    return not torch.is_grad_enabled() and half_autocast(device_type)


def _fused_available() -> bool:
    """Whether the path ``auto`` runs for gradient-free passes can run on CUDA here."""
    from dape_core.implementations.registry import attention_path
    return attention_path(INFERENCE_PATH).runs_on("cuda")


def _fused_measured(sizes: tuple[int, int, int]) -> bool:
    """Whether the fused kernel runs on CUDA here and was measured faster at layers of ``sizes``."""
    from dape_core.implementations.fused import measured_at
    return measured_at(*sizes) and _fused_available()
