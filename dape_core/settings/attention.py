"""The attention settings shared by every stage (paper §3, eq. 1–5), torch-free.

:class:`AttentionSettings` declares the encoding, the DAPE processor and the path that computes them, with defaults,
allowed values and checks, once: ``GPTConfig``, ``EncoderConfig``, ``TimingSettings``, ``CHESettings`` and
``FinetuneSettings`` extend it, so a setting keeps one name and default from ``config.yaml`` to the constructor.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass

from dape_core import measured
from dape_core.encoding_facts import ENCODING_FACTS
from dape_core.errors import ConfigError, require_odd_kernel, require_positive
from dape_core.settings.fields import check_choices, setting

PROCESSORS = ("none", "dape_v1", "dape_v2")
PADDINGS = ("same", "causal")
ATTENTION_IMPLS = ("auto", "fast", "plain", "materialized", "compiled", "fused")
CUDA_TRAINING_PATH = "compiled"  # what auto trains with on CUDA where Triton is importable (dape_core.implementations)
# how the materialized and compiled paths compute f: ``conv`` the layer's own convolutions (cuDNN on a GPU);
# ``triton`` dape_core.implementations.feature_map's kernels (one streaming pass each way; tests prove them equal)
FEATURE_MAPS = ("conv", "triton")
# the materialized and compiled paths' options (attend_materialized's and attend_compiled's arguments: how f is
# computed, the least chunks under the causal mask, A = q·kᵀ on TF32 tensor cores), each off as the functions' defaults
COMPILED_OPTIONS_OFF = types.MappingProxyType({"feature_map": "conv", "causal_chunks": 1, "tf32_scores": False})
DAPE_DTYPES = ("float32", "bfloat16")


def compiled_options_text(options) -> str:
    """``name=value`` of every option of :data:`COMPILED_OPTIONS_OFF` as ``options`` set it (the rest off), as a
    calibration row records its compiled path's options (column ``path_options``)."""
    return " ".join(f"{name}={options.get(name, off)}" for name, off in COMPILED_OPTIONS_OFF.items())


def parse_compiled_options(text: str, field: str = "path_options") -> dict:
    """The options in ``name=value …`` as :func:`compiled_options_text` writes them (the rest off), each checked
    (``feature_map`` in :data:`FEATURE_MAPS`, ``causal_chunks`` ≥ 1, ``tf32_scores`` True/False); ``field`` names the
    input in an error."""
    options = {}
    for token in text.split():
        name, _, value = token.partition("=")
        if name not in COMPILED_OPTIONS_OFF or name in options:
            raise ConfigError(f"{field}: {token!r} is not allowed; allowed values: each of "
                              f"{', '.join(COMPILED_OPTIONS_OFF)} at most once, as name=value")
        if name == "feature_map" and value in FEATURE_MAPS:
            options[name] = value
        elif name == "causal_chunks" and value.isdigit() and int(value) >= 1:
            options[name] = int(value)
        elif name == "tf32_scores" and value in ("True", "False"):
            options[name] = value == "True"
        else:
            allowed = {"feature_map": ", ".join(FEATURE_MAPS), "causal_chunks": "a whole number ≥ 1",
                       "tf32_scores": "True, False"}[name]
            raise ConfigError(f"{field}: {name}={value} is not allowed; allowed values: {allowed}")
    return {**COMPILED_OPTIONS_OFF, **options}


def measured_compiled_options(data: dict, field: str) -> dict:
    """The compiled path's options a device run decided (``cuda_compiled_options``, :mod:`dape_core.measured`), each
    named and checked as :func:`parse_compiled_options` does."""
    options = data["cuda_compiled_options"]
    if set(options) != set(COMPILED_OPTIONS_OFF):
        raise ConfigError(f"{field}: options {sorted(options)} are not allowed; allowed values: each of "
                          f"{', '.join(COMPILED_OPTIONS_OFF)} once")
    return parse_compiled_options(" ".join(f"{k}={v}" for k, v in options.items()), field)


# the compiled path's options on CUDA under 16-bit autocast, each on where a GPU measured it faster with the same bf16
# error (benchmarks/fused_device.sh, benchmarks/cuda_options.py; docs/performance.md): package data that
# benchmarks/adopt_device_run.py writes, with the run it came from (dape_core.measured)
CUDA_COMPILED_OPTIONS = types.MappingProxyType(measured_compiled_options(
    measured.compiled_path(), f"{measured.where(measured.COMPILED_PATH)}: cuda_compiled_options"))


@dataclass(kw_only=True)
class AttentionSettings:
    """How every layer scores its keys (paper §3, eq. 1–5): encoding, processor and the path computing them."""

    encoding: str = setting("kerple", choices=ENCODING_FACTS, help="positional encoding")
    processor: str = setting("none", choices=PROCESSORS,
                             help="DAPE V1 (the MLP, kernel 1) or DAPE V2 (1×k convolution), eq. 5")
    # the processor's own form (ScoreProcessor's): read by nothing else, so a run without a processor ignores them
    kernel_size: int = setting(1, processor_only=True, help="k of DAPE V2's 1×k kernel (odd; dape_v1 requires 1)")
    dape_width: int = setting(32, processor_only=True, help="hidden width D_DAPE of the processor")
    tril: bool = setting(True, processor_only=True,
                         help="zero future keys before the processor (off: the §4.5 leakage ablation)")
    padding: str = setting("same", choices=PADDINGS, processor_only=True,
                           help="same: k//2 each side (appendix L); causal: k−1 on the left (§3.3's text)")
    encoding_shared: bool | None = setting(None, help="one positional module for all layers; default: as the "
                                                       "public code (only T5's table shared)")
    attention_impl: str = setting("auto", choices=ATTENTION_IMPLS,
                                  help="auto: fast on a CPU; on CUDA with Triton fused for gradient-free passes "
                                       "under 16-bit autocast at layer sizes up to heads 16, head size 64, D_DAPE 32 "
                                       "(where it was measured), else compiled; else materialized; fast: the blocked "
                                       "DAPE path (CPU); plain: the paper's materialised form; materialized: that "
                                       "form per chunk of query rows, few kernel launches (GPU); compiled: the "
                                       "materialized path with each chunk compiled by torch.compile (GPU); fused: "
                                       "one Triton kernel per pass, no [batch, H, T, T] tensor (GPU, the gpu extra)")
    dape_dtype: str = setting("float32", choices=DAPE_DTYPES, help="precision of DAPE's GEMMs on the fast path")
    recompute_scores: bool | None = setting(None, help="materialized and compiled paths: recompute each query chunk's "
                                                       "score pipeline in the backward pass instead of keeping its "
                                                       "[batch, rows, keys, channels] tensors (training memory linear "
                                                       "in T); default: a job given its GPU's memory (--gpu-mem-gb) "
                                                       "keeps the scores where its whole micro-batch fits that way "
                                                       "(faster), else on")

    def __post_init__(self):
        check_choices(self, AttentionSettings)
        require_odd_kernel("kernel_size", self.kernel_size)
        require_positive("dape_width", self.dape_width)
        if self.processor == "dape_v1" and self.kernel_size != 1:
            raise ConfigError(f"kernel_size: {self.kernel_size} is not allowed with processor dape_v1; allowed "
                              "values: 1 (use processor dape_v2 for 1×k kernels)")

    def attention_settings(self) -> AttentionSettings:
        """These settings alone (a subclass instance → its AttentionSettings part)."""
        return AttentionSettings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(AttentionSettings)})

    @classmethod
    def processor_settings(cls) -> tuple[str, ...]:
        """The settings only the processor reads in this kind of run (``processor_only``): its form here; in a
        Hugging Face decoder also the encoding and path the patch adds
        (:class:`~dape_core.settings.finetune.FinetuneSettings`)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("processor_only"))

    @classmethod
    def reset_processor_settings(cls, settings: dict, defaults: dict) -> dict:
        """A copy of a run's settings; with processor none, each of :meth:`processor_settings` it has reset to
        ``defaults`` (the stage's block), so runs that build the same model get the same settings and one name."""
        if settings["processor"] != "none":
            return dict(settings)
        return {**settings, **{name: defaults[name] for name in cls.processor_settings() if name in settings}}

