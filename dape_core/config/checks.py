"""Checks across fields, the registries or files: each run's settings are built into the dataclasses that declare them,
then the cross-field rules (evaluation lengths against train_len and max_position, a training job's processes against
its batch, a dataset's local files). Each error is a :class:`~dape_core.errors.ConfigError` naming the field (prefixed
by its place in the configuration) and the allowed values; :func:`dape_core.config.build_plan` runs them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable

from dape_core.errors import ConfigError, require_choice
from dape_core.settings import field_names
from dape_core.settings.che import CHESettings
from dape_core.settings.evaluation import EvalSettings
from dape_core.settings.finetune import FinetuneSettings, check_steps
from dape_core.settings.model import GPTConfig, require_max_position
from dape_core.settings.timing import TimingSettings
from dape_core.settings.training import TrainSettings, require_training_steps


def checked(where: str, build: Callable):
    """``build()``, with a ConfigError's field prefixed by ``where`` (``families.x.`` + ``kernel_size: …``)."""
    try:
        return build()
    except ConfigError as err:
        raise ConfigError(f"{where}.{err}") from None


# ----------------------------------------------------------------------------------------------- datasets
def check_dataset(name: str, s: dict) -> dict:
    """Tokenize settings; files are checked only for local sources (a Hub DAG dry-runs without its data)."""
    where = f"datasets.{name}"
    if s["source"] == "local":
        if not s["data_files"]:
            raise ConfigError(f"{where}.data_files: required for source 'local'; allowed values: existing files")
        for path in s["data_files"]:
            if not Path(path).is_file():
                raise ConfigError(f"{where}.data_files: path {path!r} does not exist; allowed values: existing files")
        if s["tokenizer"] == "file" and not (s["tokenizer_file"] and Path(s["tokenizer_file"]).is_file()):
            raise ConfigError(f"{where}.tokenizer_file: path {s['tokenizer_file']!r} does not exist; allowed values: "
                              "an existing tokenizer.json")
    if s["source"] == "hub" and not s["dataset"]:
        raise ConfigError(f"{where}.dataset: required for source 'hub'; "
                          "allowed values: a Hub dataset name or directory")
    if s["tokenizer"] == "file" and not s["tokenizer_file"]:
        raise ConfigError(f"{where}.tokenizer_file: required for tokenizer 'file'; "
                          "allowed values: a tokenizer.json path")
    if (s["filter_field"] is None) != (s["filter_value"] is None):
        raise ConfigError(f"{where}.filter_field / filter_value: give both or neither; "
                          "allowed values: a field and a value")
    return s


def dataset_inputs(s: dict) -> list[str]:
    """Files a tokenize job reads (declared as inputs only for local sources)."""
    if s["source"] != "local":
        return []
    return list(s["data_files"]) + ([s["tokenizer_file"]] if s["tokenizer"] == "file" else [])


# ----------------------------------------------------------------------------------------------- runs
def _only(settings: dict, cls) -> dict:
    names = field_names(cls)
    return {k: v for k, v in settings.items() if k in names}


def check_lm_run(s: dict, where: str, datasets: dict, *, extrapolates: bool) -> None:
    """One LM run: its model, training and evaluation dataclasses accept it, and the cross-field rules hold."""
    require_choice(f"{where}.dataset", s["dataset"], datasets)
    model = checked(where, lambda: GPTConfig(**_only(s, GPTConfig)))
    checked(where, lambda: require_training_steps(TrainSettings(**_only(s, TrainSettings))))
    ev = s["eval"]
    checked(f"{where}.eval", lambda: EvalSettings(**_only(ev, EvalSettings)))
    checked(f"{where}.eval", lambda: require_max_position(model, max(ev["eval_lens"]), "eval_lens"))
    _check_eval_lengths(s, where, extrapolates)


def check_finetune_run(s: dict, where: str, datasets: dict, *, extrapolates: bool) -> None:
    """One fine-tune run: its model (an existing base directory, or a fresh configuration), training and evaluation
    dataclasses accept it, and the evaluation's cross-field rules hold."""
    require_choice(f"{where}.dataset", s["dataset"], datasets)
    model = _only(s, FinetuneSettings)
    if s["base_run"] is not None:
        model["base_model"] = s["base_run"]  # the base run's output, known to the workflow
    elif s["base_model"] is not None and not Path(s["base_model"]).is_dir():
        raise ConfigError(f"{where}.base_model: {s['base_model']!r} is not a directory; allowed values: a local "
                          "Hugging Face model directory, or null with base_config")
    model_settings = checked(where, lambda: FinetuneSettings(**model))
    train_settings = checked(where, lambda: TrainSettings(**_only(s, TrainSettings)))
    checked(where, lambda: check_steps(model_settings, train_settings))
    checked(f"{where}.eval", lambda: EvalSettings(**_only(s["eval"], EvalSettings)))
    _check_eval_lengths(s, where, extrapolates)


def _check_eval_lengths(s: dict, where: str, extrapolates: bool) -> None:
    ev = s["eval"]
    if ev["delta_p_window"] is not None and ev["delta_p_window"] > s["train_len"]:
        raise ConfigError(f"{where}.eval.delta_p_window: {ev['delta_p_window']} is not allowed; allowed values: "
                          f"1 … train_len ({s['train_len']}), or null for train_len")
    for length in ev["eval_lens"]:
        if extrapolates and length < s["train_len"]:
            raise ConfigError(f"{where}.eval.eval_lens: {length} is shorter than train_len {s['train_len']}; allowed "
                              "values: evaluation lengths ≥ train_len in a family that extrapolates "
                              "(or set extrapolates: false)")


def check_train_processes(plan) -> None:
    """A multi-GPU training job's processes (one per GPU) split its global batch evenly; the memory model picks their
    micro-batch."""
    sizes = plan.config["resources"]["train_lm"]["sizes"]
    for name, run in plan.lm_runs.items():
        size, batch_size = run["settings"]["size"], run["settings"]["batch_size"]
        gpu = plan.resources("train_lm", size)["gpu"]
        if gpu > 1 and batch_size % gpu:
            where = f"resources.train_lm.sizes.{size}.gpu" if "gpu" in sizes.get(size, {}) else "resources.train_lm.gpu"
            raise ConfigError(f"{where}: {gpu} processes do not divide batch_size {batch_size} of run {name}; "
                              "allowed values: a divisor of the batch_size of every run it applies to")


def check_timing_run(s: dict, where: str) -> None:
    """One timing run: TimingSettings accepts it; exactly one of batch_size and equal_tokens (dividing every length)."""
    if (s["batch_size"] is None) == (s["equal_tokens"] is None):
        raise ConfigError(f"{where}.batch_size / equal_tokens: give exactly one (the other null); allowed values: "
                          "a positive batch_size, or equal_tokens divisible by every seq_len")
    checked(where, lambda: TimingSettings(**_only(s, TimingSettings)))
    if s["equal_tokens"] is not None:
        for length in s["seq_lens"]:
            if s["equal_tokens"] % length:
                raise ConfigError(f"{where}.equal_tokens: {s['equal_tokens']} is not divisible by seq_len {length}; "
                                  "allowed values: multiples of every seq_len")


def check_che_run(s: dict, where: str) -> None:
    """One CHE cell: CHESettings accepts it (task, attention settings, shape and protocol)."""
    from dape_core.che.tasks import check_positions

    checked(where, lambda: check_positions(CHESettings(**_only(s, CHESettings))))


# ----------------------------------------------------------------------------------------------- extras
def require_extras(plan, *, job_environments: bool = False) -> None:
    """``transformers`` (the ``hf`` extra) is importable here when the plan has fine-tunes (checked without importing
    it); ``job_environments``: the jobs run in envs/ (``--use-conda``), which bring their own."""
    if not plan.finetune_runs or job_environments or importlib.util.find_spec("transformers") is not None:
        return
    families = sorted({family for run in plan.finetune_runs.values() for family in run.get("families", ())})
    raise ConfigError(f"families.{','.join(families) or 'finetune'}: the finetune stage needs transformers (the hf "
                      "extra), which this Python lacks; install it: pip install -e '.[hf]' (make install does), or "
                      "run the jobs in envs/ with --use-conda")
