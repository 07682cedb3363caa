"""Fresh (randomly initialised) Hugging Face causal LMs from a configuration dict, offline.

``build_causal_lm({"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2, ...})`` builds the model
class of ``model_type`` from its transformers configuration (every other key is a field of that configuration),
without reading the Hub: a tiny model for tests, or a model to train from scratch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dape_core.errors import ConfigError
from dape_core.hf.patch import SUPPORTED_MODEL_TYPES


def build_causal_lm(spec: dict[str, Any], *, seed: int | None = None) -> nn.Module:
    """A randomly initialised causal LM of ``spec["model_type"]`` (llama, mistral, qwen2) with the configuration
    fields in the rest of ``spec``; ``seed``: torch's seed for the initialisation."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(spec)
    model_type = spec.pop("model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(f"model_type: {model_type!r} is not allowed; allowed values: "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    config = AutoConfig.for_model(model_type, **spec)
    if seed is not None:
        torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)
