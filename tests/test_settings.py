"""One source per setting: the dataclasses declare each default, allowed values and help once; every stage's
command line is derived from them, and so are the configuration schema's entries for them (the schema file adds
only constraints) and docs/settings.md."""

from __future__ import annotations

import argparse
import importlib

import pytest

from dape_core import settings
from dape_core.config import SCHEMA_PATH, group, load_yaml
from dape_core.config.schema import SETTINGS_BLOCKS, full_schema
from dape_core.errors import ConfigError
from dape_core.settings import AttentionSettings
from workflow_fixture import REPO

SCHEMA = full_schema(load_yaml(SCHEMA_PATH))["$defs"]  # as validation uses it: completed from the dataclasses

# stage module → (schema block, its settings dataclasses, option groups a rule passes, required job options)
STAGES = {
    "dape_core.train": ("lm_settings", ("attention", "shape", "training"), ["--data-dir", "d", "--out-dir", "o"]),
    "dape_core.evaluate": ("eval_settings", ("evaluation",), ["--checkpoint", "c", "--data-dir", "d", "--out", "o"]),
    "dape_core.timing": ("timing_settings", ("timed_method", "timing", "replicates"), ["--out", "o"]),
    "dape_core.che.runner": ("che_settings", ("che_attention", "che"), ["--out", "o"]),
    "dape_core.data": ("dataset", ("corpus",), ["--out-dir", "o"]),
    "dape_core.finetune": ("finetune_settings", ("finetune_model", "finetune_training"),
                           ["--data-dir", "d", "--out-dir", "o"]),
}


def _defaults(module_name: str, required: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    importlib.import_module(module_name).add_arguments(parser)
    return parser.parse_args(required)


def _choices(module_name: str) -> dict[str, tuple]:
    """Allowed values as the stage's dataclasses declare them (and check them)."""
    from dape_core.che.runner import CHESettings
    from dape_core.data import SOURCES, TOKENIZERS
    from dape_core.finetune import FinetuneSettings
    from dape_core.model import GPTConfig
    from dape_core.timing import TimingSettings
    from dape_core.train import TrainSettings

    classes = {"dape_core.train": (GPTConfig, TrainSettings), "dape_core.evaluate": (),
               "dape_core.timing": (TimingSettings,), "dape_core.che.runner": (CHESettings,),
               "dape_core.finetune": (FinetuneSettings, TrainSettings)}
    if module_name == "dape_core.data":
        return {"source": SOURCES, "tokenizer": TOKENIZERS}
    return {k: v for cls in classes[module_name] for k, v in settings.choices(cls).items()}


@pytest.mark.parametrize("module_name", STAGES)
def test_every_stage_defaults_equal_the_schema(module_name):
    block, groups, required = STAGES[module_name]
    props = SCHEMA[block]["properties"]
    args = _defaults(module_name, required)
    passed = [key for name in groups for key in group(name)]
    assert passed, module_name
    for key in passed:
        assert key in props, (module_name, key, "a passed setting the schema does not know")
        if "default" in props[key]:
            assert getattr(args, key) == props[key]["default"], (module_name, key)


@pytest.mark.parametrize("module_name", STAGES)
def test_every_stage_choices_equal_the_schema(module_name):
    block, groups, _ = STAGES[module_name]
    props = SCHEMA[block]["properties"]
    choices = _choices(module_name)
    for key in (key for name in groups for key in group(name)):
        if "enum" in props[key]:
            assert tuple(props[key]["enum"]) == choices[key], (module_name, key)


def test_schema_settings_all_reach_a_command():
    """No schema setting of a run is silently dropped on its way to the job."""
    lm = set(SCHEMA["lm_settings"]["properties"]) - {"dataset", "tag", "eval", "attention"}
    assert lm == set(group("attention")) | set(group("shape")) | set(group("training"))
    assert set(SCHEMA["eval_settings"]["properties"]) == set(group("evaluation"))
    # a timing run's shape reaches `dape time` in --methods (group timed_method), `replicates` the merge
    assert set(SCHEMA["timing_settings"]["properties"]) == (set(group("timed_method")) | set(group("timing"))
                                                            | set(group("replicates")))
    assert set(SCHEMA["che_settings"]["properties"]) == set(group("che_attention")) | set(group("che"))
    finetune = set(SCHEMA["finetune_settings"]["properties"]) - {"dataset", "tag"}
    assert finetune == set(group("finetune_model")) | set(group("finetune_training"))


def test_the_attention_settings_are_one_dataclass_shared_by_every_stage():
    from dape_core.che.runner import CHESettings
    from dape_core.model import EncoderConfig, GPTConfig
    from dape_core.timing import TimingSettings

    for cls in (GPTConfig, EncoderConfig, TimingSettings, CHESettings):
        assert issubclass(cls, AttentionSettings)
        for name, value in settings.defaults(AttentionSettings).items():
            assert settings.defaults(cls)[name] == value, (cls.__name__, name)


@pytest.mark.parametrize("kwargs, field, allowed", [
    (dict(encoding="sinusoidal"), "encoding", "kerple"),
    (dict(processor="dape_v3"), "processor", "dape_v2"),
    (dict(processor="dape_v2", kernel_size=2), "kernel_size", "odd"),
    (dict(processor="dape_v1", kernel_size=3), "kernel_size", "1"),
    (dict(attention_impl="flash"), "attention_impl", "plain"),
    (dict(dape_dtype="float16"), "dape_dtype", "bfloat16"),
])
def test_attention_settings_reject_bad_values_naming_field_and_allowed_values(kwargs, field, allowed):
    with pytest.raises(ConfigError) as err:
        AttentionSettings(**kwargs)
    message = str(err.value)
    assert message.startswith(f"{field}:") and "allowed values" in message and allowed in message, message


def test_options_round_trip_through_the_derived_command_line():
    from dape_core.timing import TimingSettings

    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, TimingSettings)
    args = parser.parse_args(["--processor", "dape_v2", "--kernel-size", "5", "--no-tril", "--encoding-shared",
                              "--no-recompute-scores", "--seq-lens", "32", "64", "--equal-tokens", "128"])
    timing = settings.from_args(TimingSettings, args)
    assert (timing.processor, timing.kernel_size, timing.tril, timing.encoding_shared) == ("dape_v2", 5, False, True)
    assert timing.seq_lens == [32, 64] and timing.equal_tokens == 128 and timing.batch_size is None
    assert timing.recompute_scores is False
    # a bool | None left unset on the command line is unset (None), as a key left out of config.yaml
    unset = settings.from_args(TimingSettings, parser.parse_args([]))
    assert unset.encoding_shared is None and unset.recompute_scores is None
    with pytest.raises(SystemExit):  # one spelling: no "default" / "true" / "false" words
        parser.parse_args(["--recompute-scores", "default"])


def test_the_settings_reference_is_generated_from_the_dataclasses():
    """docs/settings.md is what dape_core.settings.reference generates now: a changed default, help or allowed
    value in a dataclass shows up there (regenerate with `python -m dape_core.settings.reference --write ...`)."""
    from dape_core.settings.reference import reference

    REFERENCE = REPO / "docs" / "settings.md"

    text = reference()
    assert REFERENCE.read_text(encoding="utf-8") == text, "docs/settings.md is stale: regenerate it"
    from dape_core.settings.model import GPTConfig

    line = next(row for row in text.splitlines() if row.startswith("| `max_position`"))
    assert f"`{GPTConfig.max_position}`" in line and "--max-position" in line  # from the dataclass itself


def test_dape_tokenize_options_are_the_corpus_settings():
    import argparse

    from dape_core.data import add_arguments
    from dape_core.settings.corpus import TokenizeSettings
    from dape_core.settings import defaults

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--out-dir", "x"])
    for name, value in defaults(TokenizeSettings).items():
        assert getattr(args, name) == (list(value) if isinstance(value, tuple) else value), name
    assert TokenizeSettings(**{name: getattr(args, name) for name in defaults(TokenizeSettings)},
                            out_dir="x") == TokenizeSettings(out_dir="x")


def test_the_schema_file_writes_no_default_type_or_allowed_values_of_a_dataclass_setting():
    """Every default is written once: in its dataclass. The schema file holds only the constraints of a setting a
    dataclass declares; validation fills in its type, default, allowed values and description from the field."""
    import dataclasses

    from dape_core.config.schema import declared_fields

    raw = load_yaml(SCHEMA_PATH)["$defs"]
    checked = 0
    for block, specs in SETTINGS_BLOCKS.items():
        declared = {name for spec in specs for name in declared_fields(spec)}
        for name, entry in raw[block]["properties"].items():
            if name in declared:
                assert not {"default", "enum", "type"} & set(entry), (block, name, entry)
                checked += 1
    assert checked > 100
    assert SCHEMA["lm_settings"]["properties"]["kernel_size"] == {
        "type": "integer", "default": AttentionSettings.kernel_size, "minimum": 1,
        "description": next(f for f in dataclasses.fields(AttentionSettings) if f.name == "kernel_size").metadata["help"]}


def test_a_changed_dataclass_default_is_the_configurations_default(monkeypatch):
    """The validated configuration takes a setting's default from its dataclass field, not from a copy."""
    import dataclasses

    from dape_core.config import schema
    from dape_core.settings.evaluation import EvalSettings

    window = next(f for f in dataclasses.fields(EvalSettings) if f.name == "window")
    monkeypatch.setattr(window, "default", 128)
    completed = schema.full_schema(load_yaml(SCHEMA_PATH))
    assert completed["$defs"]["eval_settings"]["properties"]["window"]["default"] == 128
