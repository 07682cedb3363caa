"""The settings of a fine-tune of a Hugging Face decoder (`dape finetune`), torch-free: which models, which
encodings on top of their RoPE, and the checks a configuration meets before anything is loaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dape_core.errors import ConfigError, require_choice
from dape_core.settings.attention import AttentionSettings
from dape_core.settings.fields import check_choices, field_names, redeclared, setting
from dape_core.settings.training import TrainSettings

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
ENCODINGS = ("nope", "alibi", "kerple", "fire")  # additive encodings on top of the model's own RoPE
PROCESSORS = ("dape_v1", "dape_v2")
#: TrainSettings fields that `dape finetune` does not take: it runs one process, eagerly, without block recomputation
NOT_FINETUNE_OPTIONS = ("distributed", "activation_checkpointing", "compile")
BASE_CONFIG_VALUES = (f"a mapping with model_type ({', '.join(SUPPORTED_MODEL_TYPES)}) and fields of its "
                      "transformers configuration (JSON on the command line)")


def hf_settings(settings: AttentionSettings | dict[str, Any]) -> AttentionSettings:
    """A Hugging Face decoder's processor settings, checked: a processor, an additive encoding or nope, one encoding
    per layer."""
    if isinstance(settings, dict):
        unknown = sorted(set(settings) - set(field_names(AttentionSettings)))
        if unknown:
            raise ConfigError(f"settings: {', '.join(unknown)} not allowed; allowed values: "
                              f"{', '.join(field_names(AttentionSettings))}")
        settings = AttentionSettings(**settings)
    settings = settings.attention_settings()
    require_choice("processor", settings.processor, PROCESSORS)
    require_choice("encoding", settings.encoding, ENCODINGS)
    if settings.encoding_shared:
        raise ConfigError("encoding_shared: True is not allowed in a Hugging Face decoder; allowed values: unset, "
                          "false (one encoding per attention layer)")
    return settings


@dataclass(kw_only=True)
class FinetuneSettings(AttentionSettings):
    """The model of a fine-tune: where it starts and the processor it gets (§3; the encoding is added on top of
    the model's own RoPE)."""

    base_model: str | None = setting(None, help="a local Hugging Face model directory (config.json, safetensors "
                                                "weights, tokenizer.json); null: a fresh model from base_config")
    base_config: dict | None = setting(None, help="with base_model null: the fresh model's configuration, "
                                                  + BASE_CONFIG_VALUES + "; vocab_size comes from the data")
    # without a processor the decoder stays unpatched (dape_core.hf): the encoding and the path are the patch's
    encoding: str = setting("nope", choices=ENCODINGS, processor_only=True,
                            help="nope: the processor sees A alone (eq. 4); alibi, kerple, fire: a bias B on top of "
                                 "the model's RoPE scores (eq. 5)")
    attention_impl: str = redeclared(AttentionSettings, "attention_impl", processor_only=True)
    dape_dtype: str = redeclared(AttentionSettings, "dape_dtype", processor_only=True)

    def __post_init__(self):
        super().__post_init__()
        check_choices(self, FinetuneSettings)
        if (self.base_model is None) == (self.base_config is None):
            given = "both" if self.base_model is not None else "neither"
            raise ConfigError(f"base_model / base_config: {given} given; allowed values: exactly one — a model "
                              f"directory as base_model, or base_config ({BASE_CONFIG_VALUES}) with base_model null")
        if self.base_config is not None:
            if not isinstance(self.base_config, dict):
                raise ConfigError(f"base_config: {self.base_config!r} is not allowed; allowed values: "
                                  + BASE_CONFIG_VALUES)
            require_choice("base_config.model_type", self.base_config.get("model_type"), SUPPORTED_MODEL_TYPES)
        if self.processor != "none":
            hf_settings(self.attention_settings())  # one encoding per layer


def check_steps(model_settings: FinetuneSettings, settings: TrainSettings) -> None:
    """``steps: 0`` exports a checkpoint as it is (evaluated as one more method): only from a ``base_model`` directory
    without a processor, since a fresh model or an untrained processor would be an untrained method."""
    if settings.steps == 0 and (model_settings.base_model is None or model_settings.processor != "none"):
        given = "base_config" if model_settings.base_model is None else f"processor {model_settings.processor}"
        raise ConfigError(f"steps: 0 is not allowed with {given}; allowed values: ≥ 1, or 0 with a base_model "
                          "directory and processor none (the checkpoint as it is)")


def is_finetuned(from_model: bool, steps: int) -> bool:
    """A run that trains a model it loaded is labelled "… fine-tuned"; a fresh model, or a checkpoint exported as it
    is (``steps: 0``), is "… (base)"."""
    return from_model and steps > 0
