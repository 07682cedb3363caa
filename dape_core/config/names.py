"""Deterministic names of runs, timing runs and CHE cells: the method plus a suffix for each name setting that
differs from the stage's defaults. Settings outside a name reach their jobs through ``params:`` instead."""

from __future__ import annotations

import re
from pathlib import Path

from dape_core.errors import ConfigError
from dape_core.methods import method_slug

_SUFFIX = {
    "size": lambda v: f"-{v}", "n_layer": lambda v: f"-L{v}", "n_head": lambda v: f"-H{v}",
    "d_model": lambda v: f"-d{v}", "tril": lambda v: "-tril" if v else "-notril", "padding": lambda v: f"-{v}",
    "batch_size": lambda v: f"-B{v}", "grad_accum": lambda v: f"-A{v}", "steps": lambda v: f"-S{v}",
    "tie_embeddings": lambda v: "-tied" if v else "-untied",
    "encoding_shared": lambda v: {True: "-shared", False: "-unshared", None: "-sharedefault"}[v],
    "tag": lambda v: f"-{v}" if v else "",
    "randomized_positions": lambda v: "-randpos" if v else "-norandpos",
    "attention_impl": lambda v: f"-{v}", "dape_dtype": lambda v: f"-{v}", "precision": lambda v: f"-{v}",
}

# Name settings in suffix order. A timing run's name keeps the path (it is timed); an LM run's omits it (attention_impl,
# dape_dtype) and how training runs (distributed, compile, activation_checkpointing): the same model to fp32 rounding.
LM_NAME_SUFFIXES = ("size", "n_layer", "n_head", "d_model", "tril", "padding", "batch_size", "grad_accum", "steps",
                    "tie_embeddings", "encoding_shared", "tag")
LM_NAME_SETTINGS = ("dataset", "train_len", "encoding", "processor", "kernel_size", "dape_width", *LM_NAME_SUFFIXES)
TIMING_NAME_SUFFIXES = ("n_layer", "tril", "padding", "encoding_shared", "attention_impl", "dape_dtype", "precision")
# a timing job's: the timing run suffixes that are no attention setting
TIMING_JOB_NAME_SUFFIXES = ("n_layer", "precision")
FINETUNE_NAME_SUFFIXES = ("tril", "padding", "batch_size", "grad_accum", "steps", "encoding_shared", "tag")
# a fine-tune's model (its base run, directory or configuration) is part of its name as well
FINETUNE_NAME_SETTINGS = ("dataset", "train_len", "base_run", "base_model", "base_config", "encoding", "processor",
                          "kernel_size", "dape_width", *FINETUNE_NAME_SUFFIXES)
CHE_NAME_SUFFIXES = ("padding", "steps", "batch_size", "randomized_positions", "encoding_shared", "attention_impl",
                     "dape_dtype")


def suffixes(settings: dict, defaults: dict, names) -> str:
    """The name suffix of every setting in ``names`` that differs from its default, in that order."""
    return "".join(_SUFFIX[key](settings[key]) for key in names if settings[key] != defaults[key])


def _method(s: dict) -> str:
    return method_slug(s["encoding"], s["processor"], s["kernel_size"], s["dape_width"])


def lm_run_name(settings: dict, defaults: dict) -> str:
    """``code-T64-kerple-dape_v2-k3-w32`` plus a suffix per name setting that differs from ``defaults``."""
    return f"{settings['dataset']}-T{settings['train_len']}-{_method(settings)}" + suffixes(
        settings, defaults, LM_NAME_SUFFIXES)


def finetune_run_name(settings: dict, defaults: dict) -> str:
    """``code-T64-llama-nope-none-S300`` (a fresh model of that model_type), ``code-T512-from_<directory>-…`` or
    ``<base run>.ft-code-T64-nope-dape_v2-k3-w32`` (its family's base run fine-tuned), plus a suffix per name setting
    differing from ``defaults.finetune``."""
    data = f"{settings['dataset']}-T{settings['train_len']}"
    method = _method(settings) + suffixes(settings, defaults, FINETUNE_NAME_SUFFIXES)
    if settings["base_run"] is not None:
        return f"{settings['base_run']}.ft-{data}-{method}"
    if settings["base_model"] is not None:
        source = "from_" + re.sub(r"[^A-Za-z0-9_.]+", "_", Path(settings["base_model"]).name)
    else:
        source = settings["base_config"]["model_type"]
    return f"{data}-{source}-{method}"


def timing_run_name(s: dict, defaults: dict) -> str:
    """``forward-small-kerple-none-B1`` (``-N4096`` at equal tokens) plus suffixes."""
    batch = f"N{s['equal_tokens']}" if s["equal_tokens"] is not None else f"B{s['batch_size']}"
    return f"{s['mode']}-{s['size']}-{_method(s)}-{batch}" + suffixes(s, defaults, TIMING_NAME_SUFFIXES)


def timing_job_name(s: dict, defaults: dict) -> str:
    """``forward-small-B1``: a timing job, the methods of one shape timed together (a timing run's name without its
    method and attention suffixes)."""
    batch = f"N{s['equal_tokens']}" if s["equal_tokens"] is not None else f"B{s['batch_size']}"
    return f"{s['mode']}-{s['size']}-{batch}" + suffixes(s, defaults, TIMING_JOB_NAME_SUFFIXES)


def che_cell_name(s: dict, defaults: dict) -> str:
    """``even_pairs-kerple-none-lr0.0005`` plus suffixes."""
    return f"{s['task']}-{_method(s)}-lr{s['lr']:g}" + suffixes(s, defaults, CHE_NAME_SUFFIXES)


DEFAULT_CONFIGURATION = "config"  # config.yaml (the committed reference run) writes into reports/ itself
RESERVED_REPORT_NAMES = frozenset({"tables", "figures"})  # reports/ folders of the reference run


def configuration_name(configfiles) -> str:
    """The name a run's outputs are filed under: the stem of its (last) configuration file; '' for config.yaml or
    none (Snakemake's default configuration)."""
    stem = Path(str(list(configfiles)[-1])).stem if configfiles else DEFAULT_CONFIGURATION
    if stem in RESERVED_REPORT_NAMES:
        raise ConfigError(f"configuration file {configfiles[-1]}: its name {stem!r} is a folder of reports/ already;"
                          f" rename it (not one of {', '.join(sorted(RESERVED_REPORT_NAMES))})")
    return "" if stem == DEFAULT_CONFIGURATION else stem


def reports_dir(name: str) -> str:
    """Where a configuration's reports go: reports/ for config.yaml, reports/<name>/ for any other, so no other
    configuration overwrites the committed reference (the Makefile's REPORTS spells the same rule)."""
    return f"reports/{name}" if name else "reports"


def plan_path(name: str) -> str:
    """The report spec of a configuration (results/plan.json for config.yaml): one per configuration, so switching
    configurations in one checkout does not redo the other's reports."""
    return f"results/plan.{name}.json" if name else "results/plan.json"
