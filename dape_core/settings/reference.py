"""The settings reference (``docs/settings.md``), generated from the settings dataclasses: every setting's name in
``config.yaml`` and on the command line, its type, default, allowed values and help, each written once in its
dataclass. ``tests/test_settings.py`` checks that the committed file is what this module generates.

    python -m dape_core.settings.reference [--write docs/settings.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path

from dape_core.settings.fields import field_default, option_name


def sections() -> list[tuple[str, str, type, tuple[str, ...]]]:
    """(title, where it is set, dataclass, fields left out) per block of the reference."""
    from dape_core.settings.corpus import TokenizeSettings
    from dape_core.settings import AttentionSettings
    from dape_core.settings.che import CHESettings
    from dape_core.settings.evaluation import EvalSettings
    from dape_core.settings.finetune import FinetuneSettings
    from dape_core.settings.model import GPTConfig
    from dape_core.settings.timing import TimingSettings
    from dape_core.settings.training import NOT_TRAIN_OPTIONS, TrainSettings

    attention = tuple(f.name for f in dataclasses.fields(AttentionSettings))
    return [
        ("Attention", "`defaults.lm`, `defaults.timing`, `defaults.che`, `defaults.finetune`, a family's axes; "
         "`dape train`, `dape time`, `dape che`, `dape finetune`", AttentionSettings, ()),
        ("Decoder shape", "`defaults.lm`; `dape train` (`vocab_size` comes from the token files, `d_ff` is "
         "4 × `d_model`, `train_len` is the training's, `query_chunk_size` the evaluation's)", GPTConfig,
         (*attention, *NOT_TRAIN_OPTIONS)),
        ("Training", "`defaults.lm`, `defaults.finetune`; `dape train`, `dape finetune`", TrainSettings, ()),
        ("Evaluation", "`defaults.lm.eval`; `dape evaluate`", EvalSettings, ()),
        ("Timing", "`defaults.timing`; `dape time`", TimingSettings, attention),
        ("CHE", "`defaults.che`; `dape che`", CHESettings, attention),
        ("Fine-tune model", "`defaults.finetune`; `dape finetune`", FinetuneSettings,
         tuple(name for name in attention if name != "encoding")),
        ("Corpus", "`datasets.<name>`; `dape tokenize`", TokenizeSettings, ("out_dir",)),
    ]


def type_text(annotation) -> str:
    """A field's type as a reader writes it: ``int``, ``int | None``, ``list[int]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin in (list, tuple):
        return f"{origin.__name__}[{type_text(args[0])}]" if args else origin.__name__
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def default_text(field: dataclasses.Field) -> str:
    value = field_default(field)
    if value is dataclasses.MISSING:
        return "required"
    if value is None:
        return "unset (`null`)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, tuple)):
        return "`[" + ", ".join(map(str, value)) + "]`"
    return f"`{value}`"


def reference() -> str:
    """The whole of docs/settings.md."""
    out = ["# Settings reference", "",
           "Generated from the settings dataclasses by `python -m dape_core.settings.reference --write "
           "docs/settings.md`; do not edit by hand (`tests/test_settings.py` checks it is current). A setting has "
           "one name in `config.yaml`, in a job's spec (`--spec`, the JSON object a workflow rule hands its job), on "
           "the command line (`--kebab-case`) and in the constructor; `null` in "
           "`config.yaml` is unset (the help says what unset means). Checks across settings (a kernel with "
           "`dape_v1`, lengths against `max_position`, …) run when the configuration is validated.", ""]
    for title, where, cls, excluded in sections():
        hints = typing.get_type_hints(cls)
        out += [f"## {title}", "", f"{cls.__name__} — {where}.", "",
                "| setting | option | type | default | allowed | help |", "|---|---|---|---|---|---|"]
        for field in dataclasses.fields(cls):
            if field.name in excluded:
                continue
            allowed = field.metadata.get("choices")
            allowed_text = ", ".join(f"`{value}`" for value in allowed) if allowed is not None else ""
            help_text = field.metadata.get("help", "").replace("|", "\\|")
            kind = type_text(hints[field.name]).replace("|", "\\|")
            out.append(f"| `{field.name}` | `{option_name(field.name)}` | `{kind}` | "
                       f"{default_text(field)} | {allowed_text} | {help_text} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dape_core.settings.reference", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", default=None, help="write the reference to this file (default: print it)")
    args = parser.parse_args(argv)
    text = reference()
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
