"""Faster implementations of the score processor, one module each, each with one contract: it equals
``ScoreProcessor.forward`` (:mod:`dape_core.dape`, the paper's materialised form and the reference) on outputs and
gradients, which the tests prove (``tests/test_performance_paths.py``, ``tests/test_attention.py``,
``tests/test_gpu_path.py``).

``attention_impl`` (:class:`~dape_core.settings.AttentionSettings`) chooses the path of a model; each resolved path
is a row of :data:`~dape_core.implementations.registry.PATHS` (its entry, devices and options), and each but
``plain`` the module here of its name:

* ``auto`` (the default) — resolved where the model runs, by :func:`resolve_attention_impl`: ``fast`` on a CPU;
  on CUDA ``fused`` for a pass without gradients under bf16 or fp16 autocast where Triton is installed, at layer
  sizes up to those it was measured at (a forward pass: measured 0.66× ``materialized``'s time for a 350M model
  at T 8192 on an H200, with memory linear in T), else ``compiled`` where ``torch.compile`` can compile for the
  GPU (Triton importable; training: a 125M DAPE1×3-Kerple step measured 0.67× ``materialized``'s at T 512 and
  0.57× at T 2048 on an H200, the fused step 1.27–1.32×), else ``materialized``; ``materialized`` on any other
  non-CPU device;
* ``plain`` — the reference itself (materialised [batch, 2H, T, T], ``nn.Conv2d``); kept selectable because the
  paper's timing table measured it;
* ``fast`` — :mod:`dape_core.implementations.fast`: blocked GEMMs shaped for a CPU core's caches, with the
  hidden map recomputed in the backward pass; its Python loop over batch elements × row blocks makes operator
  calls grow with the batch;
* ``materialized`` — :mod:`dape_core.implementations.materialized`: the reference's arithmetic per chunk of query
  rows (the layer's own ``nn.Conv2d``, channels-last, fp32 scores and softmax), chunks sized by a memory budget;
  its operator calls do not depend on the batch, which on a GPU means kernel launches;
* ``compiled`` — :mod:`dape_core.implementations.compiled`: the materialized path with each chunk one graph
  compiled by ``torch.compile`` (its elementwise steps fused into few kernels), larger chunks;
* ``fused`` — :mod:`dape_core.implementations.fused`: one Triton kernel per pass (FlashAttention-2's tiling with
  the processor on chip), no [batch, H, T, T] tensor; CUDA with Triton (the ``gpu`` extra), or Triton's CPU
  interpreter in the tests. ``auto`` picks it where it measured faster, for gradient-free passes on CUDA
  (``benchmarks/fused_layer.py``, ``docs/performance.md``).

The materialized and compiled paths compute f with the layer's own convolutions (cuDNN on a GPU) or, with
``feature_map="triton"``, with the kernels of :mod:`dape_core.implementations.feature_map` (one streaming pass each
way over the channels-last map, proven equal by the tests). On CUDA the compiled path takes its options from
:func:`path_options`, ``CUDA_COMPILED_OPTIONS`` (:mod:`dape_core.settings.attention`): the kernels, causal chunks
and TF32 score products (:mod:`dape_core.implementations.score_product`) are off there until a GPU measures them
faster (``benchmarks/fused_device.sh``, docs/performance.md).

Where the fused path is asked for but cannot run the case, what runs instead is the registry's (attention
dropout: the materialized path) and ``dape_core.attention``'s (without a processor SDPA, as on the materialized
path; under a host model's key mask the plain path).

A new implementation is a module here whose entry takes the arguments of the registry's entries (module docstring of
:mod:`~dape_core.implementations.registry`), its row in ``PATHS``, its name in ``ATTENTION_IMPLS`` and an exactness
test.
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
    """The path that ``attention_impl`` ``name`` runs on ``device`` now: ``auto`` → ``fast`` on a CPU; on CUDA with
    Triton installed ``fused`` for a gradient-free pass under 16-bit autocast of layers whose ``sizes`` (heads, head
    size, D_DAPE: :func:`~dape_core.settings.model.layer_sizes`) are at most those it was measured faster at
    (:func:`~dape_core.implementations.fused.measured_at`; unknown sizes: not), else ``compiled``;
    ``materialized`` on CUDA without Triton and on other devices; every other name is itself."""
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
    """The path ``attention_impl`` ``name`` trains with on a GPU (``auto``: :data:`TRAINING_PATH`, the path of a
    CUDA machine with Triton)."""
    require_choice("attention_impl", name, ATTENTION_IMPLS)
    return TRAINING_PATH if name == "auto" else name


def path_options(impl: str, device_type: str) -> dict:
    """The options of the materialized or compiled path ``impl`` running now on ``device_type`` (``feature_map``,
    ``causal_chunks``, ``tf32_scores`` of :func:`~dape_core.implementations.materialized.attend_materialized`): on
    CUDA under bf16 or fp16 autocast, where they are measured,
    :data:`~dape_core.settings.attention.CUDA_COMPILED_OPTIONS` for a path whose row takes them (``cuda_options``:
    the compiled path); else none (the functions' defaults: an fp32 pass
    would run the Triton feature map's kernels in fp32, which spill registers on sm_90, and has no 16-bit q and k
    for TF32). On ``meta`` (shapes without data: the memory model's trace) the options of the pass the trace stands
    for, :func:`options_on_meta`'s."""
    from dape_core.implementations.registry import attention_path

    if device_type == "meta":
        return dict(_META_OPTIONS.get() or {})
    on = attention_path(impl).cuda_options and device_type == "cuda" and half_autocast(device_type)
    return dict(CUDA_COMPILED_OPTIONS) if on else {}


@contextlib.contextmanager
def options_on_meta(options: dict):
    """Inside, a pass on ``meta`` runs the materialized path with ``options`` (:func:`path_options`): a trace of the
    memory model stands for a CUDA pass under 16-bit autocast, which ``meta`` has no autocast to show."""
    token = _META_OPTIONS.set(dict(options))
    try:
        yield
    finally:
        _META_OPTIONS.reset(token)


def half_autocast(device_type: str) -> bool:
    """Whether the pass now running runs under bf16 or fp16 autocast on ``device_type``."""
    return torch.is_autocast_enabled(device_type) and torch.get_autocast_dtype(device_type) in HALF_DTYPES


def inference_pass(device_type: str) -> bool:
    """Whether the pass now running takes no gradients and runs under bf16 or fp16 autocast on ``device_type`` (the
    case where the fused kernel measured faster than the materialized path)."""
    return not torch.is_grad_enabled() and half_autocast(device_type)


def _fused_available() -> bool:
    """Whether the path ``auto`` runs for gradient-free passes can run on CUDA here."""
    from dape_core.implementations.registry import attention_path
    return attention_path(INFERENCE_PATH).runs_on("cuda")


def _fused_measured(sizes: tuple[int, int, int]) -> bool:
    """Whether the fused kernel runs on CUDA here and was measured faster at layers of ``sizes``."""
    from dape_core.implementations.fused import measured_at
    return measured_at(*sizes) and _fused_available()
