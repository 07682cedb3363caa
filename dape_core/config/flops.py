"""Training FLOPs of a plan's jobs as arithmetic on each run's settings, so the estimate, printed whenever the workflow
is parsed, builds no model: a ``dape train`` run's by :func:`dape_core.model_arithmetic.gpt_flops_per_token` (the
training summary's formula; the tests check its parameter count against the built model), without torch.

A ``dape finetune`` run's Hugging Face model (``base_config`` with the data's ``vocab_size``; a ``base_model``
directory's ``config.json``, with the larger vocabulary; a ``base_run``'s model; the processor the run's or else its
base's) is built on the meta device and counted by :func:`dape_core.model_arithmetic.decoder_flops_per_token`,
:meth:`~dape_core.model.GPT.flops_per_token`'s formula; ``transformers`` and torch are imported only for fine-tunes."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from dape_core.encoding_facts import facts
from dape_core.errors import ConfigError
from dape_core.model_arithmetic import decoder_flops_per_token, gpt_flops_per_token
from dape_core.settings import AttentionSettings, field_names
from dape_core.settings.finetune import SUPPORTED_MODEL_TYPES
from dape_core.settings.model import GPTConfig


def run_shape(settings: dict, vocab_size: int):
    """The run's decoder settings with the shape resolved from its size (n_layer, n_head, d_model, d_ff)."""
    # the length enters the count as the FLOPs' argument
    model = {k: settings[k] for k in field_names(GPTConfig) if k in settings and k not in ("vocab_size", "train_len")}
    return GPTConfig(**model, vocab_size=vocab_size)


def flops_per_token(settings: dict, vocab_size: int, seq_len: int) -> float:
    """FLOPs per token of one LM run's decoder at ``seq_len`` (its shape resolved from its size)."""
    return gpt_flops_per_token(run_shape(settings, vocab_size), seq_len)


def training_flops(settings: dict, vocab_size: int) -> float:
    """Training FLOPs of one LM run: FLOPs per token (arithmetic on its shape) × tokens of all its steps."""
    return flops_per_token(settings, vocab_size, settings["train_len"]) * training_tokens(settings)


def training_tokens(settings: dict) -> int:
    """Tokens of all steps of one LM run: steps × batch_size × grad_accum × train_len."""
    return settings["steps"] * settings["batch_size"] * settings["grad_accum"] * settings["train_len"]


def run_vocab(plan, settings: dict) -> int:
    """The vocabulary an estimate uses for a run: ``estimate.vocab_size``, or its dataset's ``vocab_size``."""
    return plan.config["estimate"]["vocab_size"] or plan.datasets[settings["dataset"]]["vocab_size"]


# ----------------------------------------------------------------------------------------------- fine-tunes
def finetune_model(plan, name: str) -> tuple[dict, dict]:
    """A fine-tune run's model as its job builds it: (``model_type`` with the transformers configuration fields and
    ``vocab_size``; the attention settings of the first processor met from the run down its ``base_run`` chain to a
    base directory's ``config.json``, else the run's own, processor none)."""
    attention = None
    chain = [name]
    settings = plan.finetune_runs[name]["settings"]
    own = {k: settings[k] for k in field_names(AttentionSettings)}
    while True:
        if attention is None and settings["processor"] != "none":
            attention = {k: settings[k] for k in field_names(AttentionSettings)}
        if settings["base_run"] is None:
            break
        if settings["base_run"] in chain:
            raise ConfigError(f"finetune_runs.{name}.base_run: {' → '.join(chain + [settings['base_run']])} is a "
                              "cycle; allowed values: a chain of runs that ends at a base_config or base_model")
        chain.append(settings["base_run"])
        settings = plan.finetune_runs[settings["base_run"]]["settings"]
    vocab = run_vocab(plan, settings)
    if settings["base_model"] is None:
        config = {**settings["base_config"], "vocab_size": vocab}
    else:
        config = _directory_config(str(settings["base_model"]))
        if config.get("model_type") not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(f"base_model: {settings['base_model']!r} holds a {config.get('model_type')!r} model; "
                              f"allowed values: a directory of a {', '.join(SUPPORTED_MODEL_TYPES)} model")
        saved = config.pop("dape", None)  # dape_core.hf.patch.CONFIG_KEY: the directory's own processor
        if attention is None and isinstance(saved, dict):
            attention = {**own, **{k: saved[k] for k in field_names(AttentionSettings) if k in saved}}
        config["vocab_size"] = max(int(config.get("vocab_size") or 0), vocab)
    return config, attention or own


def _directory_config(path: str) -> dict:
    """The configuration fields of a local model directory's config.json (``model_type`` among them)."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise ConfigError(f"base_model: {path!r} has no config.json; allowed values: a local Hugging Face model "
                          "directory (config.json, safetensors weights, tokenizer.json)")
    return dict(json.loads(file.read_text()))


def finetune_shape(config: dict, attention: dict) -> dict:
    """The counted shape of a fine-tune model: model_type, hidden_size, layers, heads, attention width (heads ×
    head_dim), vocab_size, non-embedding parameters (on the meta device) and whether its encoding adds a bias."""
    return dict(_finetune_shape(json.dumps(config, sort_keys=True), json.dumps(attention, sort_keys=True)))


@lru_cache(maxsize=None)
def _finetune_shape(config_json: str, attention_json: str) -> tuple:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from dape_core.finetune import non_embedding_parameters
    from dape_core.hf.patch import add_processor, attention_layers

    fields = json.loads(config_json)
    attention = json.loads(attention_json)
    model_type = fields.pop("model_type")
    config = AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
        if attention["processor"] != "none":
            add_processor(model, attention)
    layers = attention_layers(model)
    heads = config.num_attention_heads
    return (("model_type", model_type), ("hidden_size", config.hidden_size), ("n_layer", len(layers)),
            ("n_head", heads), ("attention_width", heads * layers[0].head_dim),
            ("vocab_size", config.vocab_size), ("non_embedding", non_embedding_parameters(model)),
            ("bias_channels", attention["processor"] != "none" and facts(attention["encoding"]).has_bias))


def finetune_flops_per_token(shape: dict, attention: dict, train_len: int) -> float:
    """Fine-tune model FLOPs per token (:func:`~dape_core.model_arithmetic.decoder_flops_per_token`, as the GPT's)."""
    return decoder_flops_per_token(
        non_embedding=shape["non_embedding"], vocab_size=shape["vocab_size"], d_model=shape["hidden_size"],
        n_layer=shape["n_layer"], n_head=shape["n_head"], attention_width=shape["attention_width"], seq_len=train_len,
        processor=attention["processor"], bias_channels=shape["bias_channels"], kernel_size=attention["kernel_size"],
        dape_width=attention["dape_width"])


def finetune_flops(plan, name: str) -> float:
    """Training FLOPs of one fine-tune job: FLOPs per token × tokens of all its steps (0 for steps 0)."""
    settings = plan.finetune_runs[name]["settings"]
    config, attention = finetune_model(plan, name)
    return finetune_flops_per_token(finetune_shape(config, attention), attention,
                                    settings["train_len"]) * training_tokens(settings)


def transformers_available() -> bool:
    """Whether ``transformers`` (the ``hf`` extra) can be imported."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True
