"""The experiment grid: config.yaml's families expanded into runs, and the checks shared by the Snakefile and tests.

A configuration has ``datasets`` (name → options of ``dape tokenize``), ``defaults`` (``lm``, ``timing``, ``che``:
every setting of a run of that stage), ``families`` (name → a grid: ``stage``, ``axes`` crossed in order,
``seeds``, ``set`` overrides), ``run_overrides`` (one run's settings), ``resources`` (per rule) and ``estimate``.
:func:`build_plan` validates it — the JSON schema (``workflow/schemas/config.schema.yaml``, which also fills in
defaults), then the checks that need the registries and files — and expands the families into a :class:`Plan`.

Run names are deterministic: ``{dataset}-T{train_len}-{encoding}-{processor}[-k{kernel_size}-w{dape_width}]``
plus a suffix for each name setting that differs from ``defaults.lm`` (``-B16``, ``-S300``, ``-notril``, ``-medium``,
…, and ``-{tag}``). Every other setting (lr, warm-up, …) is not part of any path: changing it reruns that run through
Snakemake's params trigger. A run listed by several families is trained once; two families that give one name
different settings are an error. Every error is a :class:`~dape_core.errors.ConfigError` naming the field and the
allowed values.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import itertools
import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from dape_core.errors import ConfigError, require_choice, require_odd_kernel, require_positive

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"
STAGES = ("lm", "leakage", "timing", "che")
LM_STAGES = ("lm", "leakage")
PRECISIONS = ("fp32", "bf16")
TIMING_MODES = ("forward", "train_step")
DATA_SOURCES = ("builtin-code", "builtin-prose", "local", "hub")
TOKENIZERS = ("bpe", "file")

# Options of each stage's command, in the order they are passed (names as in config.yaml and on the CLI).
TOKENIZE_OPTIONS = ("source", "data_files", "dataset", "dataset_config", "dataset_split", "text_field", "filter_field",
                    "filter_value", "max_docs", "tokenizer", "tokenizer_file", "vocab_size", "val_fraction", "seed")
TRAIN_OPTIONS = ("encoding", "processor", "kernel_size", "dape_width", "tril", "padding", "size", "n_layer", "n_head",
                 "d_model", "dropout", "tie_embeddings", "encoding_shared", "train_len", "batch_size", "grad_accum",
                 "steps", "lr", "min_lr_ratio", "warmup_ratio", "weight_decay", "grad_clip", "beta1", "beta2",
                 "precision", "attention_impl", "dape_dtype", "checkpoint_every", "log_every")
EVAL_OPTIONS = ("eval_lens", "window", "delta_p_window", "min_scored_tokens", "max_windows", "batch_size",
                "query_chunk_size", "bootstrap", "seed")
ATTENTION_OPTIONS = ("eval_lens", "window", "min_scored_tokens", "max_windows", "batch_size", "query_chunk_size",
                     "bootstrap", "seed", "heatmap_len")
TIMING_OPTIONS = ("encoding", "processor", "kernel_size", "dape_width", "size", "n_layer", "vocab_size", "seq_lens",
                  "batch_size", "equal_tokens", "mode", "repeats", "warmup", "query_chunk_size", "attention_impl",
                  "dape_dtype")
CHE_OPTIONS = ("task", "encoding", "processor", "kernel_size", "dape_width", "padding", "lr", "steps", "batch_size",
               "train_max_len", "eval_min_len", "eval_max_len", "eval_samples", "eval_batch_size",
               "eval_score_budget", "randomized_positions", "max_position", "n_layer", "d_model", "n_head", "d_ff",
               "dropout", "attention_impl")
LM_SETTINGS = ("dataset", "tag", *TRAIN_OPTIONS)

# Settings that are part of a run's name: (setting, suffix when it differs from the defaults).
LM_NAME_SUFFIXES = {
    "size": lambda v: f"-{v}", "n_layer": lambda v: f"-L{v}", "n_head": lambda v: f"-H{v}",
    "d_model": lambda v: f"-d{v}", "tril": lambda v: "-tril" if v else "-notril", "padding": lambda v: f"-{v}",
    "batch_size": lambda v: f"-B{v}", "grad_accum": lambda v: f"-A{v}", "steps": lambda v: f"-S{v}",
    "tie_embeddings": lambda v: "-tied" if v else "-untied",
    "encoding_shared": lambda v: {True: "-shared", False: "-unshared", None: "-sharedefault"}[v],
    "tag": lambda v: f"-{v}" if v else "",
}
LM_NAME_SETTINGS = ("dataset", "train_len", "encoding", "processor", "kernel_size", "dape_width", *LM_NAME_SUFFIXES)
CHE_NAME_SUFFIXES = {"padding": lambda v: f"-{v}", "steps": lambda v: f"-S{v}", "batch_size": lambda v: f"-B{v}",
                     "randomized_positions": lambda v: "-randpos" if v else "-norandpos"}
TIMING_NAME_SUFFIXES = {"n_layer": lambda v: f"-L{v}", "attention_impl": lambda v: f"-{v}",
                        "dape_dtype": lambda v: f"-{v}"}
RULES = ("tokenize", "train_lm", "evaluate_lm", "attention_maps", "time_lm", "che", "report")
METHOD_PATTERN = re.compile(r"^(?:dape(?:1[x×](?P<k>\d+))?-)?(?P<encoding>[a-z0-9]+)$", re.IGNORECASE)


# ----------------------------------------------------------------------------------------------- registries
def _registries() -> dict[str, tuple[str, ...]]:
    """Allowed names from the library itself (the schema's enums are checked against these by the tests)."""
    from dape_core.che.tasks import TASKS
    from dape_core.dape import PADDINGS, PROCESSORS
    from dape_core.encodings import DISPLAY_NAMES, ENCODINGS
    from dape_core.model import SIZE_PRESETS

    return {"encoding": tuple(ENCODINGS), "processor": tuple(PROCESSORS), "padding": tuple(PADDINGS),
            "size": tuple(SIZE_PRESETS), "task": tuple(TASKS), "display": tuple(DISPLAY_NAMES.items())}


def size_shape(size: str) -> tuple[int, int, int]:
    """(n_layer, n_head, d_model) of a size preset."""
    from dape_core.model import SIZE_PRESETS

    return SIZE_PRESETS[size]


def parse_method(label: str) -> dict:
    """A paper label ("Kerple", "DAPE-Kerple", "DAPE1x3-Kerple") → encoding, processor, kernel_size."""
    reg = _registries()
    by_display = {display.lower(): name for name, display in reg["display"]} | {e: e for e in reg["encoding"]}
    match = METHOD_PATTERN.match(str(label).strip())
    encoding = by_display.get(match.group("encoding").lower()) if match else None
    if encoding is None:
        allowed = [display for _, display in reg["display"]]
        raise ConfigError(f"method: {label!r} is not allowed; allowed values: {', '.join(allowed)}, DAPE-<encoding> "
                          "(DAPE V1) or DAPE1x<k>-<encoding> (DAPE V2, k odd)")
    if not label.lower().startswith("dape"):
        return {"encoding": encoding, "processor": "none", "kernel_size": 1}
    if match.group("k") is None:
        return {"encoding": encoding, "processor": "dape_v1", "kernel_size": 1}
    return {"encoding": encoding, "processor": "dape_v2", "kernel_size": int(match.group("k"))}


def method_slug(encoding: str, processor: str, kernel_size: int, dape_width: int) -> str:
    """``kerple-none`` or ``kerple-dape_v2-k3-w32``: the method part of a run name."""
    if processor == "none":
        return f"{encoding}-none"
    return f"{encoding}-{processor}-k{kernel_size}-w{dape_width}"


# ----------------------------------------------------------------------------------------------- schema
def load_yaml(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def validate_schema(config: dict, schema_path: str | Path = SCHEMA_PATH) -> dict:
    """Validate against the JSON schema, filling in its defaults (in place); errors become ConfigError."""
    import jsonschema
    from jsonschema import validators

    schema = load_yaml(schema_path)
    base = validators.validator_for(schema)

    def set_defaults(validator, properties, instance, schema_node):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from base.VALIDATORS["properties"](validator, properties, instance, schema_node)

    validator = validators.extend(base, {"properties": set_defaults})(schema)
    try:
        validator.validate(config)
    except jsonschema.ValidationError as err:
        raise ConfigError(_schema_message(err)) from None
    return config


def _schema_message(err) -> str:
    where = ".".join(str(p) for p in err.absolute_path) or "config"
    kind, spec = err.validator, err.validator_value
    if kind == "enum":
        allowed = ", ".join(map(str, spec))
    elif kind == "type":
        allowed = " or ".join(spec) if isinstance(spec, list) else spec
    elif kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = {"minimum": "≥", "maximum": "≤", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[kind]
        allowed = f"{bound} {spec}"
    elif kind == "additionalProperties":
        allowed = ", ".join(err.schema.get("properties", {})) or "none"
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        return f"{where}: unknown key(s) {', '.join(map(repr, extra))}; allowed values: {allowed}"
    elif kind == "required":
        allowed = ", ".join(spec)
    elif kind == "pattern":
        allowed = f"strings matching {spec}"
    elif kind in ("minItems", "minProperties"):
        allowed = f"at least {spec} entries"
    else:
        allowed = json.dumps(spec)
    return f"{where}: {err.message}; allowed values: {allowed}"


# ----------------------------------------------------------------------------------------------- plan
@dataclass
class Plan:
    """Everything the DAG and the report need, expanded from a configuration."""

    config: dict
    datasets: dict[str, dict] = field(default_factory=dict)
    lm_runs: dict[str, dict] = field(default_factory=dict)  # name → settings, eval, seeds, attention_seeds, families
    lm_members: list[dict] = field(default_factory=list)  # {"family", "run", "seed", "eval_lens"}
    leakage_pairs: dict[str, list[dict]] = field(default_factory=dict)  # family → [{"run", "twin"}]
    timing_runs: dict[str, dict] = field(default_factory=dict)
    timing_members: list[dict] = field(default_factory=list)  # {"family", "run"}
    che_cells: dict[str, dict] = field(default_factory=dict)  # name → {"settings", "seeds"}
    che_members: list[dict] = field(default_factory=list)  # {"family", "cell", "seed"}
    families: dict[str, dict] = field(default_factory=dict)  # name → family spec plus its run names

    # ---- jobs
    def lm_jobs(self) -> list[tuple[str, int]]:
        return [(name, seed) for name, run in self.lm_runs.items() for seed in run["seeds"]]

    def attention_jobs(self) -> list[tuple[str, int, int]]:
        """(run, seed, heat-map length) of the runs of families with attention_maps."""
        return [(name, seed, length) for name, run in self.lm_runs.items() for seed in run["attention_seeds"]
                for length in run["attention_settings"]["heatmap_lens"]]

    def che_jobs(self) -> list[tuple[str, int]]:
        return [(name, seed) for name, cell in self.che_cells.items() for seed in cell["seeds"]]

    def families_of_stage(self, *stages: str) -> list[str]:
        return [name for name, fam in self.families.items() if fam["stage"] in stages]

    def resources(self, rule: str) -> dict:
        return dict(self.config["resources"][rule])

    def report_spec(self) -> dict:
        """What the report stage needs (results/plan.json): families with their runs, memberships, run settings."""
        lm_runs = {name: {"settings": run["settings"], "eval": run["eval"]} for name, run in self.lm_runs.items()}
        return {"families": self.families, "lm_runs": lm_runs, "lm_members": self.lm_members,
                "leakage_pairs": self.leakage_pairs, "timing_members": self.timing_members,
                "che_members": self.che_members}

    def job_counts(self) -> dict[str, dict[str, int]]:
        """Family → jobs of each kind it lists (a job shared by families counts in each)."""
        counts: dict[str, dict[str, int]] = {}
        for name, fam in self.families.items():
            if fam["stage"] in LM_STAGES:
                pairs = {(m["run"], m["seed"]) for m in self.lm_members if m["family"] == name}
                attention = sum(len(self.lm_runs[run]["attention_settings"]["heatmap_lens"]) for run, _ in pairs
                                ) if fam["attention_maps"] else 0
                counts[name] = {"train_lm": len(pairs), "evaluate_lm": len(pairs), "attention_maps": attention}
            elif fam["stage"] == "timing":
                counts[name] = {"time_lm": sum(1 for m in self.timing_members if m["family"] == name)}
            else:
                counts[name] = {"che": sum(1 for m in self.che_members if m["family"] == name)}
        return counts


def build_plan(config: dict, *, check_schema: bool = True, schema_path: str | Path = SCHEMA_PATH) -> Plan:
    """Validate a configuration and expand its families into runs (the configuration is not modified)."""
    config = copy.deepcopy(config)
    if check_schema:
        validate_schema(config, schema_path)
    plan = Plan(config=config)
    for name, settings in config["datasets"].items():
        plan.datasets[name] = check_dataset(name, settings)
    defaults = config["defaults"]
    check_lm_run(defaults["lm"], "defaults.lm", plan.datasets, extrapolates=False)
    check_timing_run(defaults["timing"], "defaults.timing")
    check_che_run(defaults["che"], "defaults.che")
    for family, spec in config["families"].items():
        stage = spec["stage"]
        where = f"families.{family}"
        _check_family_keys(family, spec)
        grids = family_grids(spec)
        meta = {k: v for k, v in spec.items() if k not in ("set", "axes", "grids", "seeds")}
        meta["axes"] = list(dict.fromkeys(axis for grid in grids for axis in grid["axes"]))
        meta["seeds"] = sorted({seed for grid in grids for seed in grid["seeds"]})
        meta["runs"] = []
        plan.families[family] = meta
        for i, grid in enumerate(grids):
            grid_where = where if len(grids) == 1 else f"{where}.grids[{i}]"
            grid_spec = dict(spec, **grid)
            for settings in expand_family(grid_spec, defaults[_defaults_key(stage)], grid_where):
                if stage in LM_STAGES:
                    _add_lm(plan, family, grid_spec, settings, grid_where)
                elif stage == "timing":
                    _add_timing(plan, family, settings, grid_where)
                else:
                    _add_che(plan, family, grid_spec, settings, grid_where)
    _apply_run_overrides(plan, config.get("run_overrides") or {})
    for run in plan.lm_runs.values():
        run["eval"]["eval_lens"] = sorted(set(run["eval"]["eval_lens"]))
        run["seeds"] = sorted(set(run["seeds"]))
    for cell in plan.che_cells.values():
        cell["seeds"] = sorted(set(cell["seeds"]))
    return plan


def family_grids(spec: dict) -> list[dict]:
    """The family's grids: its own ``set``/``axes``/``seeds``, or each of ``grids`` on top of the family's ``set``."""
    if not spec.get("grids"):
        return [{"set": spec["set"], "axes": spec["axes"], "seeds": spec["seeds"]}]
    return [{"set": _deep_update(spec["set"], grid.get("set", {})), "axes": grid.get("axes", spec["axes"]),
             "seeds": grid.get("seeds", spec["seeds"])} for grid in spec["grids"]]


def _deep_update(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        out[key] = _deep_update(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) \
            else copy.deepcopy(value)
    return out


def _defaults_key(stage: str) -> str:
    return "lm" if stage in LM_STAGES else stage


def _check_family_keys(family: str, spec: dict) -> None:
    where = f"families.{family}"
    stage = spec["stage"]
    if spec.get("sweep") is not None and stage not in LM_STAGES:
        raise ConfigError(f"{where}.sweep: not used by stage {stage!r}; allowed with stages: {', '.join(LM_STAGES)}")
    for key in ("delta_p", "attention_maps"):
        if spec.get(key) and stage not in LM_STAGES:
            raise ConfigError(f"{where}.{key}: not used by stage {stage!r}; "
                              f"allowed with stages: {', '.join(LM_STAGES)}")


def expand_family(spec: dict, defaults: dict, where: str) -> list[dict]:
    """Cross the family's axes over ``defaults`` updated by ``set``; one settings dict per grid point."""
    allowed = set(defaults)
    base = _merge(defaults, spec.get("set") or {}, f"{where}.set", allowed)
    axes = []
    for axis, values in (spec.get("axes") or {}).items():
        entries = []
        for i, value in enumerate(values):
            field_name = f"{where}.axes.{axis}[{i}]"
            if axis == "method":
                entries.append(parse_method(value) if not isinstance(value, dict) else value)
            elif isinstance(value, dict):
                entries.append(value)
            elif axis in allowed:
                entries.append({axis: value})
            else:
                raise ConfigError(f"{where}.axes.{axis}: unknown setting; allowed values: a setting "
                                  f"({', '.join(sorted(allowed))}), `method`, or any name with mappings as values")
            for key in entries[-1]:
                if key not in allowed:
                    raise ConfigError(f"{field_name}.{key}: unknown setting; "
                                      f"allowed values: {', '.join(sorted(allowed))}")
        axes.append(entries)
    runs = []
    for combo in itertools.product(*axes):
        settings = copy.deepcopy(base)
        for entry in combo:
            settings = _merge(settings, entry, where, allowed)
        runs.append(settings)
    return runs


def _merge(base: dict, update: dict, where: str, allowed: Iterable[str]) -> dict:
    """``base`` with ``update`` applied; nested mappings (``eval``, ``attention``) merge key by key."""
    allowed = set(allowed)
    out = copy.deepcopy(base)
    for key, value in update.items():
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown setting; allowed values: {', '.join(sorted(allowed))}")
        if isinstance(out.get(key), dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key}: {value!r} is not allowed; allowed values: a mapping of "
                                  f"{', '.join(out[key])}")
            out[key] = _merge(out[key], value, f"{where}.{key}", out[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


# ----------------------------------------------------------------------------------------------- LM runs
def normalise_lm(settings: dict, defaults: dict) -> dict:
    """Settings without a processor ignore the processor's settings: reset them so such runs share a name."""
    settings = dict(settings)
    if settings["processor"] == "none":
        for key in ("kernel_size", "dape_width", "tril", "padding"):
            settings[key] = defaults[key]
    if settings["eval"].get("delta_p_window") is None:
        settings["eval"] = dict(settings["eval"], delta_p_window=settings["train_len"])
    return settings


def _suffixes(settings: dict, defaults: dict, table: dict) -> str:
    """The name suffix of every setting in ``table`` that differs from its default, in the table's order."""
    return "".join(suffix(settings[key]) for key, suffix in table.items() if settings[key] != defaults[key])


def lm_run_name(settings: dict, defaults: dict) -> str:
    """``code-T64-kerple-dape_v2-k3-w32`` plus a suffix per name setting that differs from ``defaults``."""
    name = f"{settings['dataset']}-T{settings['train_len']}-" + method_slug(
        settings["encoding"], settings["processor"], settings["kernel_size"], settings["dape_width"])
    return name + _suffixes(settings, defaults, LM_NAME_SUFFIXES)


def _add_lm(plan: Plan, family: str, spec: dict, settings: dict, where: str) -> None:
    defaults = plan.config["defaults"]["lm"]
    settings = normalise_lm(settings, defaults)
    stage = spec["stage"]
    if stage == "leakage":
        if settings["tril"]:
            raise ConfigError(f"{where}.tril: True is not allowed in a leakage family; allowed values: false "
                              "(each leakage run is paired with its tril twin automatically)")
        if settings["processor"] == "none":
            raise ConfigError(f"{where}.processor: 'none' is not allowed in a leakage family; allowed values: "
                              "dape_v1, dape_v2 (tril only acts on a processor's input)")
    check_lm_run(settings, where, plan.datasets, extrapolates=spec["extrapolates"])
    runs = [settings]
    if stage == "leakage":
        twin = dict(settings, tril=True)
        runs.append(twin)
        plan.leakage_pairs.setdefault(family, []).append(
            {"run": lm_run_name(settings, defaults), "twin": lm_run_name(twin, defaults)})
    for run_settings in runs:
        name = lm_run_name(run_settings, defaults)
        _register_lm(plan, family, spec, name, run_settings)


def _register_lm(plan: Plan, family: str, spec: dict, name: str, settings: dict) -> None:
    train = {k: settings[k] for k in LM_SETTINGS}
    evaluation = dict(settings["eval"])
    attention = dict(settings["attention"])
    run = plan.lm_runs.get(name)
    if run is None:
        run = plan.lm_runs[name] = {"settings": train, "eval": evaluation, "attention_settings": attention,
                                    "attention_seeds": [], "seeds": [], "families": []}
    else:
        _require_same(name, family, run, "settings", train)
        _require_same(name, family, run, "eval", {**evaluation, "eval_lens": run["eval"]["eval_lens"]})
        _require_same(name, family, run, "attention_settings", attention)
        run["eval"]["eval_lens"] = run["eval"]["eval_lens"] + evaluation["eval_lens"]
    if family not in run["families"]:
        run["families"].append(family)
    if spec["attention_maps"]:
        run["attention_seeds"] = sorted(set(run["attention_seeds"]) | set(spec["seeds"]))
    run["seeds"] = run["seeds"] + list(spec["seeds"])
    if name not in plan.families[family]["runs"]:
        plan.families[family]["runs"].append(name)
    for seed in spec["seeds"]:
        plan.lm_members.append({"family": family, "run": name, "seed": seed,
                                "eval_lens": sorted(set(evaluation["eval_lens"]))})


def _require_same(name: str, family: str, run: dict, key: str, new: dict) -> None:
    old = run[key]
    diff = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if diff:
        details = "; ".join(f"{k}: {old.get(k)!r} vs {new.get(k)!r}" for k in diff)
        raise ConfigError(f"families.{family}: duplicate run name {name!r} with different settings "
                          f"(families {', '.join(run['families'])} give {details}); allowed values: equal settings "
                          "for a run shared by several families, or a distinct `tag` for each")


def _apply_run_overrides(plan: Plan, overrides: dict) -> None:
    """One run's settings outside its name (lr, warm-up, …); the name settings would make it another run."""
    changeable = [k for k in TRAIN_OPTIONS if k not in LM_NAME_SETTINGS]
    for name, update in overrides.items():
        require_choice("run_overrides", name, plan.lm_runs)
        for key in update:
            require_choice(f"run_overrides.{name}", key, changeable)
        run = plan.lm_runs[name]
        settings = dict(run["settings"], **update, eval=run["eval"], attention=run["attention_settings"])
        check_lm_run(settings, f"run_overrides.{name}", plan.datasets, extrapolates=False)
        run["settings"] = {k: settings[k] for k in LM_SETTINGS}


def check_method(s: dict, where: str) -> None:
    """encoding, processor, kernel_size and dape_width of any stage."""
    reg = _registries()
    require_choice(f"{where}.encoding", s["encoding"], reg["encoding"])
    require_choice(f"{where}.processor", s["processor"], reg["processor"])
    require_odd_kernel(f"{where}.kernel_size", s["kernel_size"])
    if s["processor"] == "dape_v1" and s["kernel_size"] != 1:
        raise ConfigError(f"{where}.kernel_size: {s['kernel_size']!r} is not allowed with processor dape_v1; "
                          "allowed values: 1 (dape_v2 takes 1×k kernels)")
    require_positive(f"{where}.dape_width", s["dape_width"])


def _check_divisible(where: str, d_model: int, n_head: int) -> None:
    if d_model % n_head:
        raise ConfigError(f"{where}.d_model: {d_model} is not divisible by n_head {n_head}; "
                          "allowed values: multiples of n_head")


def check_lm_run(s: dict, where: str, datasets: dict, *, extrapolates: bool) -> None:
    """Every setting of one LM run (``where`` prefixes the field in messages)."""
    reg = _registries()
    require_choice(f"{where}.dataset", s["dataset"], datasets)
    check_method(s, where)
    require_choice(f"{where}.padding", s["padding"], reg["padding"])
    require_choice(f"{where}.size", s["size"], reg["size"])
    require_choice(f"{where}.precision", s["precision"], PRECISIONS)
    for key in ("train_len", "batch_size", "grad_accum", "steps", "checkpoint_every", "log_every"):
        require_positive(f"{where}.{key}", s[key])
    for key in ("lr", "grad_clip"):
        require_positive(f"{where}.{key}", s[key], integer=False)
    for key in ("n_layer", "n_head", "d_model"):
        if s[key] is not None:
            require_positive(f"{where}.{key}", s[key])
    n_layer, n_head, d_model = size_shape(s["size"])
    n_head, d_model = s["n_head"] or n_head, s["d_model"] or d_model
    _check_divisible(where, d_model, n_head)
    if not re.fullmatch(r"[A-Za-z0-9_.]*", s["tag"]):
        raise ConfigError(f"{where}.tag: {s['tag']!r} is not allowed; allowed values: letters, digits, '_' and '.'")
    ev = s["eval"]
    for key in ("window", "min_scored_tokens", "max_windows", "batch_size", "query_chunk_size", "bootstrap"):
        require_positive(f"{where}.eval.{key}", ev[key])
    if ev["delta_p_window"] is not None:
        require_positive(f"{where}.eval.delta_p_window", ev["delta_p_window"])
        if ev["delta_p_window"] > s["train_len"]:
            raise ConfigError(f"{where}.eval.delta_p_window: {ev['delta_p_window']} is not allowed; allowed values: "
                              f"1 … train_len ({s['train_len']}), or null for train_len")
    for length in ev["eval_lens"]:
        require_positive(f"{where}.eval.eval_lens", length)
        if extrapolates and length < s["train_len"]:
            raise ConfigError(f"{where}.eval.eval_lens: {length} is shorter than train_len {s['train_len']}; allowed "
                              "values: evaluation lengths ≥ train_len in a family that extrapolates "
                              "(or set extrapolates: false)")
    for length in s["attention"]["heatmap_lens"]:
        require_positive(f"{where}.attention.heatmap_lens", length)
    require_positive(f"{where}.attention.max_windows", s["attention"]["max_windows"])


# ----------------------------------------------------------------------------------------------- timing and CHE
def timing_run_name(s: dict, defaults: dict) -> str:
    batch = f"N{s['equal_tokens']}" if s["equal_tokens"] is not None else f"B{s['batch_size']}"
    method = method_slug(s["encoding"], s["processor"], s["kernel_size"], s["dape_width"])
    name = f"{s['mode']}-{s['size']}-{method}-{batch}"
    return name + _suffixes(s, defaults, TIMING_NAME_SUFFIXES)


def check_timing_run(s: dict, where: str) -> None:
    """Every setting of one timing run; exactly one of batch_size and equal_tokens."""
    check_method(s, where)
    require_choice(f"{where}.size", s["size"], _registries()["size"])
    require_choice(f"{where}.mode", s["mode"], TIMING_MODES)
    require_positive(f"{where}.repeats", s["repeats"])
    if s["n_layer"] is not None:
        require_positive(f"{where}.n_layer", s["n_layer"])
    for length in s["seq_lens"]:
        require_positive(f"{where}.seq_lens", length)
    if (s["batch_size"] is None) == (s["equal_tokens"] is None):
        raise ConfigError(f"{where}.batch_size / equal_tokens: give exactly one (the other null); allowed values: "
                          "a positive batch_size, or equal_tokens divisible by every seq_len")
    if s["batch_size"] is not None:
        require_positive(f"{where}.batch_size", s["batch_size"])
    else:
        require_positive(f"{where}.equal_tokens", s["equal_tokens"])
        for length in s["seq_lens"]:
            if s["equal_tokens"] % length:
                raise ConfigError(f"{where}.equal_tokens: {s['equal_tokens']} is not divisible by seq_len {length}; "
                                  "allowed values: multiples of every seq_len")


def che_cell_name(s: dict, defaults: dict) -> str:
    name = f"{s['task']}-{method_slug(s['encoding'], s['processor'], s['kernel_size'], s['dape_width'])}-lr{s['lr']:g}"
    return name + _suffixes(s, defaults, CHE_NAME_SUFFIXES)


def check_che_run(s: dict, where: str) -> None:
    """Every setting of one CHE cell."""
    reg = _registries()
    require_choice(f"{where}.task", s["task"], reg["task"])
    check_method(s, where)
    require_choice(f"{where}.padding", s["padding"], reg["padding"])
    require_positive(f"{where}.lr", s["lr"], integer=False)
    for key in ("steps", "batch_size", "train_max_len", "eval_min_len", "eval_max_len", "eval_samples",
                "eval_batch_size", "eval_score_budget", "max_position", "n_layer", "d_model", "n_head", "d_ff"):
        require_positive(f"{where}.{key}", s[key])
    if s["eval_min_len"] > s["eval_max_len"]:
        raise ConfigError(f"{where}.eval_min_len: {s['eval_min_len']} exceeds eval_max_len {s['eval_max_len']}; "
                          "allowed values: eval_min_len ≤ eval_max_len")
    _check_divisible(where, s["d_model"], s["n_head"])


def _add_timing(plan: Plan, family: str, settings: dict, where: str) -> None:
    defaults = plan.config["defaults"]["timing"]
    if settings["processor"] == "none":
        settings = dict(settings, kernel_size=defaults["kernel_size"], dape_width=defaults["dape_width"])
    if settings["equal_tokens"] is not None:
        settings = dict(settings, batch_size=None)
    check_timing_run(settings, where)
    name = timing_run_name(settings, defaults)
    old = plan.timing_runs.setdefault(name, settings)
    if old != settings:
        _require_same(name, family, {"settings": old, "families": _families_listing(plan, name)}, "settings", settings)
    plan.timing_members.append({"family": family, "run": name})
    plan.families[family]["runs"].append(name)


def _add_che(plan: Plan, family: str, spec: dict, settings: dict, where: str) -> None:
    defaults = plan.config["defaults"]["che"]
    if settings["processor"] == "none":
        settings = dict(settings, kernel_size=defaults["kernel_size"], dape_width=defaults["dape_width"])
    check_che_run(settings, where)
    name = che_cell_name(settings, defaults)
    cell = plan.che_cells.setdefault(name, {"settings": settings, "seeds": []})
    if cell["settings"] != settings:
        _require_same(name, family, {"settings": cell["settings"], "families": _families_listing(plan, name)},
                      "settings", settings)
    cell["seeds"] = cell["seeds"] + list(spec["seeds"])
    for seed in spec["seeds"]:
        plan.che_members.append({"family": family, "cell": name, "seed": seed})
    if name not in plan.families[family]["runs"]:
        plan.families[family]["runs"].append(name)


def _families_listing(plan: Plan, name: str) -> list[str]:
    return [f for f, meta in plan.families.items() if name in meta["runs"]]


# ----------------------------------------------------------------------------------------------- datasets
def check_dataset(name: str, s: dict) -> dict:
    """Tokenize settings; files are checked only for local sources (a Hub DAG dry-runs without its data)."""
    where = f"datasets.{name}"
    require_choice(f"{where}.source", s["source"], DATA_SOURCES)
    require_choice(f"{where}.tokenizer", s["tokenizer"], TOKENIZERS)
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


def spec_digest(spec: dict) -> str:
    """A short hash of the report spec: the params of the rule that writes it (a changed spec reruns it)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def write_report_spec(path: str | Path, spec: dict, log: str | Path | None = None) -> None:
    """Write the report spec (``Plan.report_spec``) atomically; one summary line goes to ``log``."""
    from dape_core import io

    io.write_json(path, spec)
    if log is not None:
        io.write_text(log, f"{len(spec['families'])} families, {len(spec['lm_runs'])} LM runs → {path}\n")


# ----------------------------------------------------------------------------------------------- command lines
def cli_options(values: dict, names: Iterable[str], **renamed: str) -> str:
    """``--name value`` for each setting (lists as several values, booleans as --x/--no-x, None left out)."""
    tokens: list[str] = []
    for name in names:
        value = values[name]
        option = "--" + renamed.get(name, name).replace("_", "-")
        if value is None or value == [] or value == ():
            continue
        if isinstance(value, bool):
            tokens.append(option if value else "--no-" + option[2:])
        elif isinstance(value, (list, tuple)):
            tokens += [option, *map(_format_value, value)]
        else:
            tokens += [option, _format_value(value)]
    return " ".join(shlex.quote(t) for t in tokens)


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def tokenize_options(settings: dict) -> str:
    s = dict(settings)
    if s["tokenizer"] != "bpe":
        s["vocab_size"] = None
    return cli_options(s, TOKENIZE_OPTIONS)


def train_options(settings: dict) -> str:
    s = dict(settings)
    s["encoding_shared"] = {None: "default", True: "true", False: "false"}[s["encoding_shared"]]
    # booleans of dape train are --x/--no-x switches; encoding_shared is a choice
    return cli_options(s, TRAIN_OPTIONS)


def eval_options(evaluation: dict) -> str:
    return cli_options(evaluation, EVAL_OPTIONS)


def attention_options(evaluation: dict, attention: dict, heatmap_len: int) -> str:
    """The side evaluation of an attention-map job: a few windows at the heat-map length, sink and maps there."""
    values = {**evaluation, "eval_lens": [heatmap_len], "min_scored_tokens": 1,
              "max_windows": attention["max_windows"], "batch_size": 1, "heatmap_len": heatmap_len}
    return cli_options(values, ATTENTION_OPTIONS)


def timing_options(settings: dict) -> str:
    return cli_options(settings, TIMING_OPTIONS)


def che_options(settings: dict) -> str:
    return cli_options(settings, CHE_OPTIONS)


# ----------------------------------------------------------------------------------------------- estimate
def lm_flops(settings: dict, vocab_size: int) -> float:
    """Training FLOPs of one run: 6 × (matmul parameters + head) per token, plus attention and DAPE terms."""
    n_layer, n_head, d_model = size_shape(settings["size"])
    n_layer, n_head = settings["n_layer"] or n_layer, settings["n_head"] or n_head
    d_model = settings["d_model"] or d_model
    T = settings["train_len"]
    per_token = 6 * (12 * n_layer * d_model**2 + vocab_size * d_model) + 6 * n_layer * T * d_model
    if settings["processor"] != "none":
        channels = 2 * n_head if settings["encoding"] not in ("nope", "rope") else n_head
        k, width = settings["kernel_size"], settings["dape_width"]
        per_token += 6 * n_layer * T * (channels * width * k + width * n_head * k)
    tokens = settings["steps"] * settings["batch_size"] * settings["grad_accum"] * T
    return float(per_token * tokens)


def estimate(plan: Plan) -> dict:
    """Jobs per rule and GPU-hours of the training jobs under ``estimate`` (peak TFLOP/s × utilisation)."""
    assumptions = plan.config["estimate"]
    rate = assumptions["gpu_tflops"] * 1e12 * assumptions["utilisation"]
    flops = 0.0
    for name, seed in plan.lm_jobs():
        settings = plan.lm_runs[name]["settings"]
        vocab = assumptions["vocab_size"] or plan.datasets[settings["dataset"]]["vocab_size"]
        flops += lm_flops(settings, vocab)
    jobs = {"tokenize": len(plan.datasets), "train_lm": len(plan.lm_jobs()), "evaluate_lm": len(plan.lm_jobs()),
            "attention_maps": len(plan.attention_jobs()), "time_lm": len(plan.timing_runs), "che": len(plan.che_jobs())}
    return {"jobs": jobs, "train_flops": flops, "gpu_hours": flops / rate / 3600,
            "gpu_tflops": assumptions["gpu_tflops"], "utilisation": assumptions["utilisation"]}


def estimate_line(plan: Plan) -> str:
    e = estimate(plan)
    jobs = ", ".join(f"{n} {rule}" for rule, n in e["jobs"].items() if n)
    return (f"plan: {jobs}; training the LM runs ≈ {e['train_flops']:.3g} FLOPs ≈ {e['gpu_hours']:.1f} GPU-hours "
            f"at {e['gpu_tflops']:g} TFLOP/s × {e['utilisation']:g} utilisation (evaluation, timing and CHE jobs "
            "not included)")


def main(argv: list[str] | None = None) -> int:
    """``python -m dape_core.config CONFIG``: validate, then print jobs per family and the estimate."""
    parser = argparse.ArgumentParser(prog="python -m dape_core.config", description=main.__doc__)
    parser.add_argument("config", nargs="+", help="configuration file(s); later ones override earlier keys")
    args = parser.parse_args(argv)
    config: dict = {}
    for path in args.config:
        config.update(load_yaml(path))
    try:
        plan = build_plan(config)
    except ConfigError as err:
        print(f"configuration error: {err}", file=sys.stderr)
        return 2
    for family, counts in plan.job_counts().items():
        spec = plan.families[family]
        print(f"{family:<16} {spec['stage']:<8} " + ", ".join(f"{n} {rule}" for rule, n in counts.items()))
    print(estimate_line(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
