"""Settings declared once, as dataclass fields, and the command-line options derived from them.

:func:`setting` declares a field with its allowed values and help; :func:`add_arguments` turns a dataclass's fields
into ``--kebab-case`` options (booleans and ``bool | None`` as ``--x/--no-x``, the latter unset, None, when neither
is given, as a key left out or null in ``config.yaml``; lists as several values); :func:`from_args` builds the
dataclass back. :func:`apply_spec` reads a job's spec (one JSON object of its settings, as a workflow rule hands it)
into the same options, its JSON types checked instead of parsed from text.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from typing import Any, Iterable, Mapping

from dape_core.errors import ConfigError, require_choice


def setting(default: Any = dataclasses.MISSING, *, choices: Iterable[Any] | None = None, help: str = "",
            default_factory: Any = dataclasses.MISSING, processor_only: bool = False):
    """A dataclass field with its allowed values and help line (read by :func:`add_arguments`). A mapping of choices
    (a registry such as ``ENCODING_FACTS``) stays live: names added later are allowed too. ``processor_only``: only the
    DAPE processor reads it (:meth:`dape_core.settings.AttentionSettings.reset_processor_settings`)."""
    if choices is not None and not isinstance(choices, Mapping):
        choices = tuple(choices)
    metadata = {"choices": choices, "help": help, "processor_only": processor_only}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def redeclared(cls, name: str, **changes):
    """``cls``'s declaration of setting ``name`` with ``changes``, for a subclass in which it means something more
    (e.g. ``processor_only=True``)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    declared = dict(default=f.default, default_factory=f.default_factory, choices=f.metadata.get("choices"),
                    help=f.metadata.get("help", ""), processor_only=f.metadata.get("processor_only", False))
    return setting(**{**declared, **changes})


def check_choices(instance, cls) -> None:
    """Every field of ``cls`` declared with ``choices`` holds one of them (the error names the field)."""
    for f in dataclasses.fields(cls):
        if f.metadata.get("choices") is not None:
            require_choice(f.name, getattr(instance, f.name), f.metadata["choices"])


def field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def field_default(f: dataclasses.Field) -> Any:
    """A field's default (its ``default_factory`` called), or ``dataclasses.MISSING`` where it has none."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def defaults(cls) -> dict[str, Any]:
    """Field → default of a dataclass (fields without a default are left out)."""
    return {f.name: value for f in dataclasses.fields(cls) if (value := field_default(f)) is not dataclasses.MISSING}


def choices(cls) -> dict[str, tuple]:
    """Field → allowed values, for the fields that declare them."""
    return {f.name: tuple(f.metadata["choices"]) for f in dataclasses.fields(cls)
            if f.metadata.get("choices") is not None}


def option_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _kind(annotation) -> tuple[str, type]:
    """(scalar | optional | list, element type) of a field's resolved type (``bool | None``: optional bool)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return "optional", inner[0]
    if origin in (list, tuple):
        return "list", args[0]
    return "scalar", annotation


def add_arguments(parser: argparse.ArgumentParser, cls, *, exclude: Iterable[str] = ()) -> None:
    """One option per field of ``cls`` (its default, allowed values and help), except ``exclude``."""
    hints, exclude = typing.get_type_hints(cls), set(exclude)
    field_defaults = defaults(cls)
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        kind, element = _kind(hints[f.name])
        allowed = f.metadata.get("choices")
        text = f.metadata.get("help", "")
        if allowed is not None:
            text = (f"{text} (one of: {', '.join(map(str, allowed))})" if text
                    else f"one of: {', '.join(map(str, allowed))}")
        kwargs: dict[str, Any] = {"help": text or None, "default": field_defaults.get(f.name)}
        if element is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif kind == "list":
            default = kwargs["default"]
            kwargs.update(type=element, nargs="+", default=list(default) if default is not None else None)
        else:
            kwargs["type"] = element
        parser.add_argument(option_name(f.name), **kwargs)


def from_args(cls, args: argparse.Namespace, **overrides):
    """``cls`` built from the parsed options of its fields (``overrides`` win); choices checked by ``cls``."""
    names = field_names(cls)
    values = {name: getattr(args, name) for name in names if hasattr(args, name)}
    return cls(**{**values, **{name: value for name, value in overrides.items() if name in names}})


# ----------------------------------------------------------------------------------------------- a job's spec
SPEC_OPTION = "--spec"


def _spec_value(action: argparse.Action, value: Any) -> Any:
    """A spec's ``value`` as its option takes it: checked against the option's type, not parsed (an integer for a
    float becomes that float); the error names the setting and what it allows."""
    name = action.dest
    if isinstance(action, argparse.BooleanOptionalAction) or action.const is True:
        if not isinstance(value, bool):
            raise ConfigError(f"spec.{name}: {value!r} is not allowed; allowed values: true, false")
        return value
    element = action.type if action.type in (int, float, str) else None
    if element is None:  # an option whose own type function reads it (JSON-valued options)
        return value
    if action.nargs in ("+", "*"):
        if not isinstance(value, list):
            raise ConfigError(f"spec.{name}: {value!r} is not allowed; allowed values: a list, each {_KINDS[element]}")
        return [_scalar(name, element, v) for v in value]
    return _scalar(name, element, value)


_KINDS = {int: "an integer", float: "a number", str: "a string"}


def _scalar(name: str, element: type, value: Any) -> Any:
    fits = (isinstance(value, str) if element is str else
            isinstance(value, int) and not isinstance(value, bool) if element is int else
            isinstance(value, (int, float)) and not isinstance(value, bool))
    if not fits:
        raise ConfigError(f"spec.{name}: {value!r} is not allowed; allowed values: {_KINDS[element]}")
    return element(value)


def apply_spec(parser: argparse.ArgumentParser, text: str) -> dict[str, Any]:
    """Make a job's spec (``--spec``: one JSON object, setting → value) the defaults of ``parser``'s options, so the
    command reads it as the same options given one by one (an option beside the spec wins). Every key must be a
    setting of the command; None leaves the setting at its default. Returns the settings read."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"spec: not valid JSON ({err}); allowed values: a JSON object setting → value") from None
    if not isinstance(spec, dict):
        raise ConfigError("spec: allowed values: a JSON object setting → value")
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "spec")}
    values = {}
    for name, value in spec.items():
        if name not in actions or actions[name].required:
            allowed = ", ".join(sorted(n for n, a in actions.items() if not a.required))
            raise ConfigError(f"spec.{name}: not a setting of this command; allowed values: {allowed}")
        if value is not None:
            values[name] = _spec_value(actions[name], value)
    parser.set_defaults(**values)
    return values
