"""Fresh (randomly initialised) Hugging Face causal LMs from a configuration dict, offline.

``build_causal_lm({"model_type": "llama", "hidden_size": 32, ...})`` builds ``model_type``'s model class from its
transformers configuration (the other keys its fields) without the Hub: a tiny model for tests, or one to train.
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
