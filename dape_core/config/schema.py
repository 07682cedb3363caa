"""The configuration's JSON schema: validation, defaults filled in, and errors naming the field and the allowed values.

``dape_core/config/config.schema.yaml`` holds the structure and what only the schema knows (ranges, patterns, keys that
are not settings). A setting that a settings dataclass declares is completed from it (:func:`full_schema`): its JSON
type, default, allowed values (``enum``) and description are the field's, written there once; the YAML entry adds only
constraints (``minimum: 1``, ``minItems``, …)."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
import types
import typing
from functools import lru_cache
from pathlib import Path

import yaml

from dape_core.errors import ConfigError

SCHEMA_PATH = Path(__file__).resolve().parent / "config.schema.yaml"  # package data
# libyaml's loader where PyYAML has it: yaml.safe_load's documents, several times faster (read at every workflow parse)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(SAFE_LOADER):
    """The safe loader, refusing a mapping that gives a key twice (PyYAML's keeps the last value without a word). A key
    beside a merge (``<<: *defaults``) overrides the merged one, as YAML means it to."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"{key_node.start_mark.name}: the key {key!r} is given twice in one mapping, on "
                                  f"lines {seen[key]} and {line}; allowed: each key once")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def check_yaml_files(paths) -> None:
    """Each YAML file parses with every key of a mapping once (:class:`UniqueKeyLoader`): for the configuration
    files that Snakemake itself loads, whose loader keeps a repeated key's last value."""
    for path in paths:
        load_yaml(path)


def load_yaml(path: str | Path) -> dict:
    """A YAML file the project reads, safely, each mapping key once; unreadable or not YAML: a ConfigError naming it."""
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=UniqueKeyLoader) or {}
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror}; allowed values: a readable configuration file") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" on line {where.line + 1}" if where is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{path}: not YAML{line} ({problem}); allowed values: a YAML mapping") from None


#: schema block ($defs) → the settings dataclasses whose fields complete its properties (first declaring one wins;
#: "module:Class:a,b" completes only fields a and b)
SETTINGS_BLOCKS = {
    "lm_settings": ("dape_core.settings.model:GPTConfig", "dape_core.settings.training:TrainSettings"),
    "eval_settings": ("dape_core.settings.evaluation:EvalSettings",),
    # the attention block's own heatmap_lens and max_windows (2: a few windows of a side evaluation) are its own
    "attention_settings": ("dape_core.settings.evaluation:EvalSettings:sink_sequences",),
    "finetune_settings": ("dape_core.settings.finetune:FinetuneSettings",
                          "dape_core.settings.training:TrainSettings"),
    "timing_settings": ("dape_core.settings.timing:TimingSettings",),
    "che_settings": ("dape_core.settings.che:CHESettings",),
    "dataset": ("dape_core.settings.corpus:TokenizeSettings",),
}
JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object", list: "array",
              tuple: "array", type(None): "null"}


def _dataclass(spec: str):
    module, name = spec.split(":")[:2]
    return getattr(importlib.import_module(module), name)


def declared_fields(spec: str) -> dict:
    """Field name → dataclass field of a :data:`SETTINGS_BLOCKS` entry (only the listed ones with ":a,b")."""
    fields = {f.name: f for f in dataclasses.fields(_dataclass(spec))}
    listed = spec.split(":")[2].split(",") if spec.count(":") == 2 else None
    return {name: f for name, f in fields.items() if listed is None or name in listed}


def json_type(annotation) -> dict:
    """A field annotation's JSON type: ``int`` → integer, ``int | None`` → [integer, null], ``list[int]`` → array."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = [json_type(a)["type"] for a in args]
        return {"type": [k for kind in kinds for k in (kind if isinstance(kind, list) else [kind])]}
    if origin in (list, tuple):
        return {"type": "array", "items": json_type(args[0])} if args else {"type": "array"}
    return {"type": JSON_TYPES[annotation]}


def setting_entry(field, annotation, constraints: dict, *, required: bool = False) -> dict:
    """One property: the dataclass field's type (or its allowed values), default and help, then the YAML entry's
    constraints on top (an ``items`` mapping merged key by key)."""
    from dape_core.settings.fields import field_default

    allowed = field.metadata.get("choices")
    entry = {"enum": list(allowed)} if allowed is not None else json_type(annotation)
    if not required and (default := field_default(field)) is not dataclasses.MISSING:
        entry["default"] = list(default) if isinstance(default, tuple) else default
    if field.metadata.get("help"):
        entry["description"] = field.metadata["help"]
    for key, value in constraints.items():
        entry[key] = {**entry.get(key, {}), **value} if key == "items" and isinstance(value, dict) else value
    return entry


def full_schema(schema: dict) -> dict:
    """The schema with every dataclass-declared setting completed from its dataclass (see the module docstring)."""
    schema = copy.deepcopy(schema)
    for block, specs in SETTINGS_BLOCKS.items():
        node = schema["$defs"][block]
        sources = [(_dataclass(spec), declared_fields(spec)) for spec in specs]
        for name, constraints in node["properties"].items():
            for cls, fields in sources:
                if name in fields:
                    node["properties"][name] = setting_entry(fields[name], typing.get_type_hints(cls)[name],
                                                             constraints, required=name in node.get("required", ()))
                    break
    return schema


@lru_cache(maxsize=None)
def _schema(path: str) -> dict:
    return full_schema(load_yaml(path))


def validate_schema(config: dict, schema_path: str | Path = SCHEMA_PATH) -> dict:
    """Validate against the JSON schema, filling in its defaults (in place); errors become ConfigError."""
    import jsonschema
    from jsonschema import validators

    schema = copy.deepcopy(_schema(str(schema_path)))
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
        raise ConfigError(schema_message(err)) from None
    return config


def schema_message(err) -> str:
    """``where: what; allowed values: …`` for one schema violation."""
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
