"""A family's grids crossed into runs' settings: its ``set`` over the stage's defaults, its ``axes`` crossed in order
(a ``method`` axis by the paper's labels), or each of its ``grids`` on top of its own ``set``; nested mappings
(``eval``, ``attention``) merged key by key, every key checked against the settings the stage has."""

from __future__ import annotations

import copy
import itertools
from typing import Iterable

from dape_core.errors import ConfigError
from dape_core.methods import parse_method

#: settings whose value is a free mapping: merged key by key without a check (the job's library checks it)
OPEN_MAPPINGS = ("base_config",)


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


def expand_family(spec: dict, defaults: dict, where: str) -> list[dict]:
    """Cross the family's axes over ``defaults`` updated by ``set``; one settings dict per grid point."""
    allowed = set(defaults)
    base = merge_settings(defaults, spec.get("set") or {}, f"{where}.set", allowed)
    axes = []
    for axis, values in (spec.get("axes") or {}).items():
        entries = []
        for i, value in enumerate(values):
            field_name = f"{where}.axes.{axis}[{i}]"
            if isinstance(value, dict):
                entries.append(value)
            elif axis == "method":  # the label's settings, tril only where the label says "(no tril)"
                entries.append({k: v for k, v in parse_method(value, field=field_name).items() if k != "tril" or not v})
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
        settings = plain_copy(base)
        for entry in combo:
            settings = merge_settings(settings, entry, where, allowed)
        runs.append(settings)
    return runs


def merge_settings(base: dict, update: dict, where: str, allowed: Iterable[str]) -> dict:
    """``base`` with ``update`` applied; nested mappings (``eval``, ``attention``) merge key by key."""
    allowed = set(allowed)
    out = dict(base)  # nested values are copied where they are replaced or merged (plain_copy)
    for key, value in update.items():
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown setting; allowed values: {', '.join(sorted(allowed))}")
        if key in OPEN_MAPPINGS:
            both = isinstance(out.get(key), dict) and isinstance(value, dict)
            out[key] = {**out[key], **plain_copy(value)} if both else plain_copy(value)
        elif isinstance(out.get(key), dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key}: {value!r} is not allowed; allowed values: a mapping of "
                                  f"{', '.join(out[key])}")
            out[key] = merge_settings(out[key], value, f"{where}.{key}", out[key])
        else:
            out[key] = plain_copy(value)
    return out


def plain_copy(value):
    """A copy of a configuration value (mappings, lists and scalars, as YAML gives them): what copy.deepcopy makes
    of it, without its bookkeeping, which costs most of the plan of a large grid."""
    if isinstance(value, dict):
        return {key: plain_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_copy(item) for item in value]
    return value
