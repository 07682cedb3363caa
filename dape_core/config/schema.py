"""The configuration's JSON schema (``workflow/schemas/config.schema.yaml``): validation, defaults filled in, and
its errors as messages that name the field and the allowed values."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

import yaml

from dape_core.errors import ConfigError

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


# libyaml's loader where PyYAML has it: the same documents as yaml.safe_load, several times faster (the schema
# and the paper's configuration are parsed whenever the workflow is)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=SAFE_LOADER) or {}


@lru_cache(maxsize=None)
def _schema(path: str) -> dict:
    return load_yaml(path)


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
