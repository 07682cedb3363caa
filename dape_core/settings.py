"""The attention settings shared by every stage, and command-line options derived from dataclass fields.

:class:`AttentionSettings` is the one place where the encoding, the DAPE processor and the path that computes
them are declared, with their defaults, allowed values and checks. The decoder (``GPTConfig``), the CHE encoder
(``EncoderConfig``), timing (``TimingSettings``) and CHE (``CHESettings``) extend it, so a setting keeps one
name and one default from ``config.yaml`` (whose schema repeats the defaults for validation; a test keeps the
two equal) through the command line to the constructor.

:func:`setting` declares a field with its allowed values and help; :func:`add_arguments` turns a dataclass's
fields into ``--kebab-case`` options (booleans as ``--x/--no-x``, lists as several values, ``bool | None`` as
``default``/``true``/``false``) and :func:`from_args` builds the dataclass back from the parsed options.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterable

from dape_core.encodings import ENCODINGS
from dape_core.errors import ConfigError, require_choice, require_odd_kernel, require_positive

PROCESSORS = ("none", "dape_v1", "dape_v2")
PADDINGS = ("same", "causal")
ATTENTION_IMPLS = ("auto", "fast", "plain", "materialized")
DAPE_DTYPES = ("float32", "bfloat16")
TRISTATE = {"default": None, "true": True, "false": False}  # a ``bool | None`` on the command line
TRISTATE_NAMES = {value: name for name, value in TRISTATE.items()}


def setting(default: Any = dataclasses.MISSING, *, choices: Iterable[Any] | None = None, help: str = "",
            default_factory: Any = dataclasses.MISSING):
    """A dataclass field with its allowed values and a help line (read by :func:`add_arguments`)."""
    metadata = {"choices": tuple(choices) if choices is not None else None, "help": help}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


@dataclass(kw_only=True)
class AttentionSettings:
    """How every layer scores its keys (paper §3, eq. 1–5): encoding, processor and the path computing them."""

    encoding: str = setting("kerple", choices=ENCODINGS, help="positional encoding")
    processor: str = setting("none", choices=PROCESSORS,
                             help="DAPE V1 (the MLP, kernel 1) or DAPE V2 (1×k convolution), eq. 5")
    kernel_size: int = setting(1, help="k of DAPE V2's 1×k kernel (odd; dape_v1 requires 1)")
    dape_width: int = setting(32, help="hidden width D_DAPE of the processor")
    tril: bool = setting(True, help="zero future keys before the processor (off: the §4.5 leakage ablation)")
    padding: str = setting("same", choices=PADDINGS,
                           help="same: k//2 each side (appendix L); causal: k−1 on the left (§3.3's text)")
    encoding_shared: bool | None = setting(None, help="one positional module for all layers; default: as the "
                                                       "public code (only T5's table shared)")
    attention_impl: str = setting("auto", choices=ATTENTION_IMPLS,
                                  help="auto: fast on a CPU, materialized on an accelerator; fast: the blocked "
                                       "DAPE path (CPU); plain: the paper's materialised form; materialized: that "
                                       "form per chunk of query rows, few kernel launches (GPU)")
    dape_dtype: str = setting("float32", choices=DAPE_DTYPES, help="precision of DAPE's GEMMs on the fast path")
    recompute_scores: bool | None = setting(None, help="materialized path: recompute each query chunk's score "
                                                       "pipeline in the backward pass instead of keeping its "
                                                       "[batch, rows, keys, channels] tensors (training memory "
                                                       "linear in T); default: on (the accelerator's path)")

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


def check_choices(instance, cls) -> None:
    """Every field of ``cls`` declared with ``choices`` holds one of them (the error names the field)."""
    for f in dataclasses.fields(cls):
        if f.metadata.get("choices") is not None:
            require_choice(f.name, getattr(instance, f.name), f.metadata["choices"])


def field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def defaults(cls) -> dict[str, Any]:
    """Field → default of a dataclass (fields without a default are left out)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def choices(cls) -> dict[str, tuple]:
    """Field → allowed values, for the fields that declare them."""
    return {f.name: f.metadata["choices"] for f in dataclasses.fields(cls) if f.metadata.get("choices") is not None}


def option_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _kind(annotation) -> tuple[str, type]:
    """(scalar | optional | list | tristate, element type) of a field's resolved type."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if inner == [bool]:
            return "tristate", bool
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
            text = f"{text} (one of: {', '.join(map(str, allowed))})" if text else f"one of: {', '.join(map(str, allowed))}"
        kwargs: dict[str, Any] = {"help": text or None, "default": field_defaults.get(f.name)}
        if kind == "tristate":
            kwargs.update(choices=tuple(TRISTATE), type=str, default=TRISTATE_NAMES[kwargs["default"]])
        elif element is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif kind == "list":
            kwargs.update(type=element, nargs="+")
        else:
            kwargs["type"] = element
        parser.add_argument(option_name(f.name), **kwargs)


def from_args(cls, args: argparse.Namespace, **overrides):
    """``cls`` built from the parsed options of its fields (``overrides`` win); choices checked by ``cls``."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in overrides:
            values[f.name] = overrides[f.name]
        elif hasattr(args, f.name):
            value = getattr(args, f.name)
            if _kind(hints[f.name])[0] == "tristate" and isinstance(value, str):
                value = TRISTATE[value]
            values[f.name] = value
    return cls(**values)
