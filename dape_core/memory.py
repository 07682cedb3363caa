"""Training memory of a decoder on one accelerator, and the micro-batch that fits a device's memory.

A training job's peak on one device is modelled as

    peak(b) = states + saved(b) + max(transient(b)) + reserve

* ``states``: fp32 weights, gradients and AdamW's two moments, 16 bytes per parameter (divided by the processes under
  FSDP), plus under ``precision: bf16`` autocast's bf16 copies of the matrices (2 bytes per parameter);
* ``saved(b)``: what the forward pass of b sequences keeps for the backward pass, counted on ``meta`` under
  ``saved_tensors_hooks`` (distinct storages summed). Affine in b and in the layers, so four traces (1 and 2 layers at
  b = 1 and 2) give any batch and depth (:func:`model_saved_bytes`). The trace stands for the job's CUDA pass (bf16
  feature map, the compiled path's CUDA options: :func:`job_path_options`), kept compiled scores scaled by
  :data:`COMPILED_KEPT_SCALE`; SDPA as the memory-efficient operator (``attention_kernel="efficient"``: q, k, v, mask,
  output, log-sum-exp) or a CPU's math kernel, which also keeps the probabilities (``"math"``);
* ``transient(b)``: one backward step's largest working set beyond the saved tensors: the loss's gradient (b·T·V fp32
  values twice) or one layer's attention: a DAPE chunk recomputed with its gradients (2 ×
  :func:`~dape_core.implementations.materialized.chunk_bytes`), or SDPA's bias gradient [b, H, rows, T] in the compute
  dtype and its fp32 reduction to [H, rows, T];
* ``reserve``: CUDA context, library workspaces and fragmentation: ``RESERVE_BYTES`` plus ``RESERVE_SHARE`` of the rest.

:func:`micro_batch_for` picks the largest divisor of each process's share of a micro-batch whose peak fits
``gpu_mem_gb``; the job runs the micro-batch in pieces of it (``dape train --micro-batch-size``), which changes the
memory, not the gradient. Where a DAPE model leaves ``recompute_scores`` unset on ``materialized`` or ``compiled``, it
keeps the scores if the whole share fits that way (faster: docs/performance.md, "Keeping the scores where they fit"),
else recomputes them; recomputation never changes the gradients (``tests/test_accelerator_memory.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.autograd.graph import saved_tensors_hooks
from torch.overrides import TorchFunctionMode

from dape_core import measured
from dape_core.errors import ConfigError, require_choice
from dape_core.implementations import training_path
from dape_core.model_arithmetic import CPU_RESERVE_BYTES, loss_bytes

KERNELS = ("efficient", "math")
RESERVE_BYTES = 2 * 2**30  # CUDA context and library workspaces
RESERVE_SHARE = 0.10  # the caching allocator's fragmentation, of the modelled bytes
GIB = 2**30
#: the compiled graphs' kept scores over the eager trace's: the largest scale a measured peak needs, rounded up to
#: 0.05 (benchmarks/memory_fit.py; package data of :mod:`dape_core.measured`, written by benchmarks/adopt_device_run.py)
COMPILED_KEPT_SCALE = float(measured.compiled_path()["compiled_kept_scale"])


@dataclass(frozen=True)
class TrainingMemory:
    """The terms of one job's modelled peak, in bytes (module docstring)."""

    micro_batch: int
    states: int
    saved: int
    transient: int
    reserve: int
    #: the memory model's choice for a DAPE model that leaves ``recompute_scores`` unset (None: not its choice)
    recompute_scores: bool | None = None

    @property
    def peak(self) -> int:
        return self.states + self.saved + self.transient + self.reserve

    def describe(self) -> str:
        return (f"micro-batch {self.micro_batch}: {self.peak / GIB:.1f} GiB (states {self.states / GIB:.1f}, saved "
                f"{self.saved / GIB:.1f}, transient {self.transient / GIB:.1f}, reserve {self.reserve / GIB:.1f})"
                + {None: "", True: ", scores recomputed", False: ", scores kept"}[self.recompute_scores])


class _EfficientSDPA(TorchFunctionMode):
    """F.scaled_dot_product_attention as an accelerator runs it: the memory-efficient kernel, which keeps q, k, v, the
    mask, the output and the log-sum-exp (the flash kernel's, without a mask)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            return efficient_sdpa(*args, **kwargs)
        return func(*args, **kwargs)


def efficient_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **_):
    """Attention through ``aten._scaled_dot_product_efficient_attention`` (a boolean mask becomes a float one)."""
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device).masked_fill(~attn_mask, -math.inf)
        attn_mask = attn_mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, True, dropout_p, is_causal)[0]


_SAVED: dict[tuple, int] = {}


def saved_bytes(cfg, micro_batch: int, *, precision: str = "fp32", attention_kernel: str = "efficient",
                path_options: dict | None = None) -> int:
    """Bytes of the distinct storages a training forward pass of ``micro_batch`` sequences of ``cfg.train_len`` tokens
    keeps for its backward pass, counted on ``meta``, the DAPE path run with ``path_options`` (None: the job's,
    :func:`job_path_options`)."""
    require_choice("attention_kernel", attention_kernel, KERNELS)
    options = job_path_options(cfg, precision) if path_options is None else dict(path_options)
    key = (json.dumps(dataclasses.asdict(cfg), sort_keys=True), micro_batch, precision, attention_kernel,
           json.dumps(options, sort_keys=True))
    if key not in _SAVED:
        _SAVED[key] = _count_saved(cfg, micro_batch, precision, attention_kernel, options)
    return _SAVED[key]


def _count_saved(cfg, micro_batch: int, precision: str, attention_kernel: str, options: dict) -> int:
    from dape_core.implementations import options_on_meta
    from dape_core.model import GPT

    # CUDA's bf16 autocast runs the feature map in bf16, which meta (no autocast) learns from dape_dtype; its
    # convolutions' operands are cast as CUDA's autocast casts them
    traced = dataclasses.replace(cfg, attention_impl=_accelerator_path(cfg.attention_impl),
                                 dape_dtype="bfloat16" if precision == "bf16" else cfg.dape_dtype)
    with torch.device("meta"):
        model = GPT(traced)
    model.train()
    idx = torch.zeros(micro_batch, cfg.train_len, dtype=torch.long, device="meta")
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage._cdata] = storage.nbytes()
        return tensor

    kernel = _EfficientSDPA() if attention_kernel == "efficient" else contextlib.nullcontext()
    with saved_tensors_hooks(pack, lambda tensor: tensor), kernel, _meta_autocast(precision), options_on_meta(options):
        model(idx, idx)
    parameters = {p.untyped_storage()._cdata for p in model.parameters()}
    return sum(size for key, size in storages.items() if key not in parameters)  # weights are in the states


def _accelerator_path(attention_impl: str) -> str:
    """The path traced for ``attention_impl`` training on a GPU: ``compiled`` as ``materialized`` (``meta`` compiles
    nothing), whose chunks it runs and recomputes alike; without recomputation the eager path's saved tensors stand
    for the compiled graph's."""
    path = training_path(attention_impl)
    return "materialized" if path == "compiled" else path


def job_path_options(cfg, precision: str) -> dict:
    """The options a job's DAPE path runs with on CUDA (:func:`dape_core.implementations.path_options`): the compiled
    path's :data:`~dape_core.settings.attention.CUDA_COMPILED_OPTIONS` under bf16 autocast, else none (each off)."""
    from dape_core import implementations

    on = cfg.processor != "none" and training_path(cfg.attention_impl) == "compiled" and precision == "bf16"
    return dict(implementations.CUDA_COMPILED_OPTIONS) if on else {}


class _meta_autocast(TorchFunctionMode):
    """bf16 autocast's effect on what is saved, on ``meta`` (no autocast): the inputs of the linear layers, SDPA and
    the feature map's convolutions in bf16, as CUDA's autocast casts them (fp32: nothing changes; DAPE's
    materialized path turns autocast off for its scores anyway)."""

    LOWER = {F.linear, F.scaled_dot_product_attention, F.conv2d}

    def __init__(self, precision: str):
        super().__init__()
        self.bf16 = precision == "bf16"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.bf16 and func in self.LOWER:
            args = tuple(a.to(torch.bfloat16) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                         for a in args)
        return func(*args, **kwargs)


def state_bytes(cfg, *, precision: str = "fp32", shards: int = 1) -> int:
    """Weights, gradients and AdamW's moments in fp32 (16 bytes a parameter, sharded by FSDP's ``shards``), plus
    autocast's bf16 copies of the matrices under bf16."""
    from dape_core.model import GPT

    with torch.device("meta"):
        model = GPT(cfg)
    parameters = sum(p.numel() for p in model.parameters())
    matrices = sum(p.numel() for p in model.parameters() if p.dim() >= 2)
    return 16 * parameters // shards + (2 * matrices if precision == "bf16" else 0)


def transient_bytes(cfg, micro_batch: int, *, precision: str = "fp32", path_options: dict | None = None) -> int:
    """The largest working set of one backward step beyond the saved tensors (module docstring), a DAPE chunk's rows
    as the path runs them with ``path_options`` (None: the job's)."""
    from dape_core.attention import accelerator_chunk_rows
    from dape_core.encodings import ENCODINGS
    from dape_core.implementations.materialized import causal_chunk, chunk_bytes

    b, n, heads = micro_batch, cfg.train_len, cfg.n_head
    itemsize = _feature_itemsize(cfg, precision)
    loss = loss_bytes(b, n, cfg.vocab_size)
    attention = 0
    bias = ENCODINGS[cfg.encoding].has_bias
    if cfg.processor != "none":
        processor = _processor(cfg)
        options = job_path_options(cfg, precision) if path_options is None else path_options
        rows = causal_chunk(dape_chunk_rows(cfg, b, precision), n, causal=True,
                            causal_chunks=options.get("causal_chunks", 1))
        attention = 2 * chunk_bytes(processor, b, rows, n, itemsize)
    elif bias:
        rows = accelerator_chunk_rows(b, heads, n, itemsize)
        attention = b * heads * rows * n * itemsize + heads * rows * n * 4
    return max(loss, attention)


def _processor(cfg):
    from dape_core.dape import build_processor
    from dape_core.encodings import ENCODINGS

    return build_processor(cfg.n_head, cfg.attention_settings(), bias_channels=ENCODINGS[cfg.encoding].has_bias)


def _feature_itemsize(cfg, precision: str) -> int:
    """Bytes per element of DAPE's feature map on an accelerator: bf16 under bf16 autocast or ``dape_dtype``."""
    return 2 if precision == "bf16" or cfg.dape_dtype == "bfloat16" else 4


def dape_chunk_rows(cfg, micro_batch: int, precision: str) -> int:
    """Query rows per chunk of the job's DAPE path at ``micro_batch`` sequences, before ``causal_chunks``: within the
    compiled path's 4 GiB, else the materialized path's 1 GiB."""
    from dape_core.implementations.compiled import CHUNK_BYTES as COMPILED_CHUNK_BYTES
    from dape_core.implementations.materialized import chunk_rows

    budget = COMPILED_CHUNK_BYTES if training_path(cfg.attention_impl) == "compiled" else None
    return chunk_rows(_processor(cfg), micro_batch, cfg.train_len, budget=budget,
                      feature_itemsize=_feature_itemsize(cfg, precision))


def model_saved_bytes(cfg, micro_batch: int, *, precision: str = "fp32", attention_kernel: str = "efficient",
                      path_options: dict | None = None) -> int:
    """:func:`saved_bytes` of the whole model from four small traces (1 and 2 layers at batches 1 and 2; affine in
    both). The DAPE path sizes its chunks by the whole batch, so the traces cut ``micro_batch``'s chunks
    (:func:`dape_chunk_rows`), not the fewer a small batch would."""
    if (cfg.processor != "none" and cfg.query_chunk_size is None
            and training_path(cfg.attention_impl) in ("materialized", "compiled")):
        cfg = dataclasses.replace(cfg, query_chunk_size=dape_chunk_rows(cfg, micro_batch, precision))

    def traced(b, layers):
        return saved_bytes(dataclasses.replace(cfg, n_layer=layers), b, precision=precision,
                           attention_kernel=attention_kernel, path_options=path_options)

    def at(b):  # fixed part + n_layer × one block
        one, two = traced(b, 1), traced(b, 2)
        return one + (two - one) * (cfg.n_layer - 1)

    first, second = at(1), at(2)
    return first + (second - first) * (micro_batch - 1)


def training_memory(cfg, micro_batch: int, *, precision: str = "fp32", shards: int = 1,
                    attention_kernel: str = "efficient", reserve_bytes: int = RESERVE_BYTES,
                    path_options: dict | None = None) -> TrainingMemory:
    """The modelled peak of a training step of ``micro_batch`` sequences on one device (module docstring), the DAPE
    path run with ``path_options`` (None: the job's)."""
    saved = model_saved_bytes(cfg, micro_batch, precision=precision, attention_kernel=attention_kernel,
                              path_options=path_options)
    if keeps_compiled_scores(cfg):
        saved = int(COMPILED_KEPT_SCALE * saved)
    states = state_bytes(cfg, precision=precision, shards=shards)
    transient = transient_bytes(cfg, micro_batch, precision=precision, path_options=path_options)
    reserve = reserve_bytes + int(RESERVE_SHARE * (states + saved + transient))
    return TrainingMemory(micro_batch, states, saved, transient, reserve)


def shards_of(processes: int, distributed: str) -> int:
    """How many ways the training states are split: the processes under FSDP (it shards all four), else one."""
    return processes if processes > 1 and distributed == "fsdp" else 1


def micro_batch_for(cfg, per_device: int, gpu_mem_gb: float, *, precision: str = "fp32", shards: int = 1,
                    run: str = "") -> TrainingMemory:
    """The largest divisor of ``per_device`` (a micro-batch's sequences on one device) whose modelled peak fits
    ``gpu_mem_gb``, with the ``recompute_scores`` choice where it is the memory model's (module docstring). Raises
    ConfigError, naming the run and what to change, when even one sequence does not fit."""
    if chooses_recomputation(cfg):
        kept = training_memory(dataclasses.replace(cfg, recompute_scores=False), per_device, precision=precision,
                               shards=shards)
        if kept.peak <= gpu_mem_gb * 1e9:
            return dataclasses.replace(kept, recompute_scores=False)
        cfg = dataclasses.replace(cfg, recompute_scores=True)
    for micro in [d for d in range(per_device, 0, -1) if per_device % d == 0]:  # its divisors, largest first
        memory = training_memory(cfg, micro, precision=precision, shards=shards)
        if memory.peak <= gpu_mem_gb * 1e9:
            return dataclasses.replace(memory, recompute_scores=cfg.recompute_scores)
    raise ConfigError(
        f"{run or 'training'}: one sequence of {cfg.train_len} tokens needs {memory.peak / 1e9:.1f} GB on one device "
        f"({memory.describe()}), more than resources.train_lm gpu_mem_gb {gpu_mem_gb:g}; allowed: a larger gpu_mem_gb, "
        "more GPUs with distributed: fsdp (resources.train_lm.sizes), activation_checkpointing: true, or a shorter "
        "train_len")


def keeps_compiled_scores(cfg) -> bool:
    """A DAPE model training on the compiled path with its scores kept (:data:`COMPILED_KEPT_SCALE`)."""
    return (cfg.recompute_scores is False and cfg.processor != "none"
            and training_path(cfg.attention_impl) == "compiled")


def chooses_recomputation(cfg) -> bool:
    """Whether ``recompute_scores`` is the memory model's to choose: a DAPE model that leaves it unset and trains on
    a path that recomputes (``materialized``, ``compiled``)."""
    return (cfg.recompute_scores is None and cfg.processor != "none"
            and training_path(cfg.attention_impl) in ("materialized", "compiled"))


def machine_memory_bytes() -> int | None:
    """This machine's memory as a job sees it: the smaller of MemTotal and the cgroup's limit (None: neither read)."""
    limits = []
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            limits += [int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemTotal:")]
    except OSError:  # no /proc (not Linux): the cgroup files below, or no limit at all
        limits = []
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = open(path, encoding="ascii").read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            limits.append(int(text))
    return min(limits) if limits else None


def cpu_preflight(cfg, micro_batch: int, *, precision: str = "fp32", mem_mb: int | None = None,
                  machine_bytes: int | None = None) -> TrainingMemory:
    """The modelled peak of a CPU training job (the math attention kernel, the CPU's reserve); raises ConfigError,
    with the estimate and the settings to change, when it exceeds the machine's memory or the job's ``mem_mb``."""
    machine = machine_memory_bytes() if machine_bytes is None else machine_bytes
    limits = [(f"resources.train_lm.mem_mb {mem_mb}", mem_mb * 2**20)] if mem_mb else []
    limits += [(f"this machine's memory ({machine / GIB:.1f} GiB)", machine)] if machine else []
    name, limit = min(limits, key=lambda item: item[1], default=(None, None))
    # first without the saved activations: the other terms cost no trace, and a job far beyond its memory (whose trace
    # would itself take minutes) is refused from them alone; a CPU runs none of the compiled path's CUDA options
    states = state_bytes(cfg, precision=precision)
    transient = transient_bytes(cfg, micro_batch, precision=precision, path_options={})
    memory = TrainingMemory(micro_batch, states, 0, transient,
                            CPU_RESERVE_BYTES + int(RESERVE_SHARE * (states + transient)))
    if limit is None or memory.peak <= limit:
        memory = training_memory(cfg, micro_batch, precision=precision, attention_kernel="math",
                                 reserve_bytes=CPU_RESERVE_BYTES, path_options={})
    if limit is not None and memory.peak > limit:
        at_least = "at least " if memory.saved == 0 else ""
        raise ConfigError(
            f"train: {micro_batch} sequences of {cfg.train_len} tokens need an estimated {at_least}"
            f"{memory.peak / GIB:.1f} GiB ({memory.describe()}), more than {name}; allowed: a shorter train_len, a "
            "smaller batch_size or micro_batch_size, a smaller size, activation_checkpointing: true, or a larger "
            "resources.train_lm.mem_mb")
    return memory
