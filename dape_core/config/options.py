"""A job's settings: one spec that a rule hands its command, and the named groups Snakemake compares.

A rule hands its job one :class:`JobSpec` (``dape <stage> --spec JSON``): every setting the job reads, named as the
dataclass fields that declare them, read back into those dataclasses (:func:`dape_core.settings.fields.apply_spec`),
never formatted as text and parsed again. The same settings enter the rule's ``params:`` in named groups, one
:class:`CliOptions` each (``--name value …`` in a shell), whose ``repr`` Snakemake compares to decide reruns, so a
changed setting reruns exactly the jobs it reaches; that format is fixed so finished results stay valid. A spec holds
exactly its groups' settings and wildcard values (tested). The groups follow the declaring dataclasses: ``attention``
(:class:`~dape_core.settings.AttentionSettings`), ``shape`` and ``training`` (``GPTConfig``, ``TrainSettings``),
``evaluation`` (``EvalSettings``), ``timing``, ``che``, ``corpus`` (``TokenizeSettings``), ``finetune_model``
(``FinetuneSettings``) and ``finetune_training`` (``TrainSettings`` without the multi-process options)."""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from typing import Any, Iterable

from dape_core.io import spec_digest  # noqa: F401  (re-exported: one definition, in the seals' module)
from dape_core.settings import AttentionSettings, field_names
from dape_core.settings.che import NOT_CHE_OPTIONS, CHESettings
from dape_core.settings.corpus import TokenizeSettings
from dape_core.settings.evaluation import EvalSettings
from dape_core.settings.finetune import NOT_FINETUNE_OPTIONS, FinetuneSettings
from dape_core.settings.model import GPTConfig
from dape_core.settings.timing import TIMED_SHAPE, TimingSettings
from dape_core.settings.training import NOT_TRAIN_OPTIONS, TrainSettings

# Job-level options that a rule passes itself (wildcards, resources, paths), never from a run's settings.
JOB_OPTIONS = ("seed", "threads", "distributed", "micro_batch_size")
#: how many replicate jobs time a timing job's cells: no setting of one replicate (its merge reads it)
REPLICATE_OPTIONS = ("replicates",)
#: the ``bool | None`` settings; the fingerprint spells their values as earlier versions' finished results recorded them
TRISTATE_SETTINGS = ("encoding_shared", "recompute_scores")
RECORDED_SPELLING = {None: "default", True: "true", False: "false"}
# EvalSettings fields that only an attention-map job passes (from the run's length and ``attention`` block).
ATTENTION_MAP_OPTIONS = ("heatmap_len", "sink_sequences")


class CliOptions(dict):
    """Settings that format as command-line options: ``--name value`` (lists as several values, booleans as
    ``--x`` / ``--no-x``, None left out: an unset ``bool | None`` gives no option)."""

    def __repr__(self) -> str:
        """The fingerprint Snakemake records and compares: the mapping's repr, each ``bool | None`` setting spelled as
        recorded (:data:`RECORDED_SPELLING`), so earlier results rerun only where a setting changed."""
        return repr({name: RECORDED_SPELLING[value] if name in TRISTATE_SETTINGS and value in RECORDED_SPELLING
                     else value for name, value in self.items()})

    def __str__(self) -> str:
        tokens: list[str] = []
        for name, value in self.items():
            option = "--" + name.replace("_", "-")
            if value is None or value == [] or value == ():
                continue
            if isinstance(value, bool):
                tokens.append(option if value else "--no-" + option[2:])
            elif isinstance(value, (list, tuple)):
                tokens += [option, *map(_format_value, value)]
            else:
                tokens += [option, _format_value(value)]
        return " ".join(shlex.quote(t) for t in tokens)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class JobSpec:
    """Every setting one job reads (its groups and job values such as the seed) as one quoted JSON ``--spec`` argument.
    Snakemake's params trigger skips it (no builtin type): the group params are the fingerprint."""

    def __init__(self, *groups: dict, **job_values: Any):
        self.settings: dict[str, Any] = {}
        for values in (*groups, job_values):
            for name, value in values.items():
                if name in self.settings and self.settings[name] != value:
                    raise ValueError(f"{name}: two values in one job's spec ({self.settings[name]!r}, {value!r})")
                self.settings[name] = value

    def json(self) -> str:
        return json.dumps(self.settings, separators=(",", ":"))

    def __str__(self) -> str:
        return shlex.quote(self.json())

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"JobSpec({self.json()})"


def _format_value(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def select(values: dict, names: Iterable[str]) -> CliOptions:
    return CliOptions((name, values[name]) for name in names)


# ----------------------------------------------------------------------------------------------- groups
@lru_cache(maxsize=None)
def _groups() -> dict[str, tuple[str, ...]]:
    """Field names of every group, read off the (torch-free) settings dataclasses."""
    attention = field_names(AttentionSettings)
    return {
        "attention": attention,
        "shape": tuple(f for f in field_names(GPTConfig) if f not in attention and f not in NOT_TRAIN_OPTIONS),
        "training": tuple(f for f in field_names(TrainSettings) if f not in JOB_OPTIONS),
        "evaluation": tuple(f for f in field_names(EvalSettings) if f not in (*JOB_OPTIONS, *ATTENTION_MAP_OPTIONS)
                            ) + ("seed",),
        "timing": tuple(f for f in field_names(TimingSettings)
                        if f not in (*attention, *JOB_OPTIONS, *TIMED_SHAPE, *REPLICATE_OPTIONS)),
        "timed_method": (*attention, *TIMED_SHAPE),
        "replicates": REPLICATE_OPTIONS,
        "che_attention": tuple(f for f in attention if f not in NOT_CHE_OPTIONS),
        "che": tuple(f for f in field_names(CHESettings) if f not in attention and f not in JOB_OPTIONS),
        "corpus": tuple(f for f in field_names(TokenizeSettings) if f != "out_dir"),
        "finetune_model": field_names(FinetuneSettings),
        "finetune_training": tuple(f for f in field_names(TrainSettings)
                                   if f not in JOB_OPTIONS and f not in NOT_FINETUNE_OPTIONS),
    }


def group(name: str) -> tuple[str, ...]:
    """The settings of one group, in the order they are passed."""
    return _groups()[name]


def corpus_options(settings: dict) -> CliOptions:
    vocab_size = settings["vocab_size"] if settings["tokenizer"] == "bpe" else None
    return select({**settings, "vocab_size": vocab_size}, group("corpus"))


def train_options(settings: dict) -> dict[str, CliOptions]:
    """``attention``, ``shape`` and ``training`` of one LM run."""
    return {name: select(settings, group(name)) for name in ("attention", "shape", "training")}


def eval_options(evaluation: dict) -> CliOptions:
    return select(evaluation, group("evaluation"))


def attention_map_options(evaluation: dict, attention: dict, heatmap_len: int) -> CliOptions:
    """An attention-map job's side evaluation: a few windows at the heat-map length, sink (on ``sink_sequences``
    sequences, App. K) and maps there; the attention block names no run and enters no training hash."""
    values = {**evaluation, "eval_lens": [heatmap_len], "min_scored_tokens": 1, "max_windows": attention["max_windows"],
              "max_windows_within": None, "batch_size": 1, "heatmap_len": heatmap_len,
              "sink_sequences": attention["sink_sequences"]}
    return select(values, (*group("evaluation"), *ATTENTION_MAP_OPTIONS))


def finetune_options(settings: dict, base_model: str | None = None) -> dict[str, CliOptions]:
    """``model`` and ``training`` of one fine-tune run; ``base_model``: the directory it starts from when that is
    another run's output (the workflow knows its path), and ``base_config`` as JSON."""
    s = dict(settings)
    if base_model is not None:
        s["base_model"] = base_model
    if s["base_config"] is not None:
        s["base_config"] = json.dumps(s["base_config"], sort_keys=True, separators=(",", ":"))
    return {"model": select(s, group("finetune_model")), "training": select(s, group("finetune_training"))}


def timing_options(settings: dict) -> dict[str, CliOptions]:
    """``attention`` (with ``size``, ``n_layer``: what a job's methods may differ in) and ``timing`` of a timing run."""
    return {"attention": select(settings, group("timed_method")), "timing": select(settings, group("timing"))}


class MethodsOption(dict):
    """Run name → attention settings of the methods of one timing job: a plain mapping (Snakemake's params trigger
    compares it) that formats as one quoted JSON argument of ``dape time --methods``."""

    def __str__(self) -> str:
        return shlex.quote(json.dumps(self, separators=(",", ":")))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def timing_job_options(job: dict, timing_runs: dict[str, dict]) -> dict:
    """``timing`` (what the job's runs share), ``methods`` (each run's attention settings and shape) and ``replicates``
    (what its merge reads) of one timing job (``Plan.timing_jobs``), whose methods and sizes are timed interleaved."""
    methods = MethodsOption((run, {name: timing_runs[run][name] for name in group("timed_method")})
                            for run in job["runs"])
    return {"timing": select(job["settings"], group("timing")), "methods": methods,
            "replicates": select(job["settings"], group("replicates"))}


def che_options(settings: dict) -> dict[str, CliOptions]:
    """``attention`` and ``che`` (task, model, protocol) of one CHE cell."""
    return {"attention": select(settings, group("che_attention")), "che": select(settings, group("che"))}
