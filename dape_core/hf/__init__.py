"""DAPE V1/V2 processors inside Hugging Face decoders (Llama, Mistral, Qwen2), through transformers' attention
registry; requires the ``hf`` extra (``transformers``).

* :func:`add_processor` — a DAPE processor (and an additive encoding, or ``nope``) in every attention layer,
  starting as the identity; the model's attention switched to the registered ``"dape"`` function
  (:mod:`dape_core.hf.patch`, whose docstring states the semantics: masks, KV cache, padding).
* :func:`processors`, :func:`set_attention_impl` — a patched model's processors; its path (auto/fast/plain/
  materialized).
* :func:`save_pretrained`, :func:`load_pretrained` — a patched model to and from a directory, processors included
  (:mod:`dape_core.hf.checkpoint`); :func:`save_causal_lm`, :func:`load_causal_lm` — a model with or without them.
* :mod:`dape_core.hf.adapter` — a model directory as ``dape evaluate`` reads it (``--checkpoint DIR``).
* :func:`build_causal_lm` — a fresh model from a configuration dict, offline (:mod:`dape_core.hf.models`).
"""

from dape_core.hf.checkpoint import load_causal_lm, load_pretrained, save_causal_lm, save_pretrained
from dape_core.hf.models import build_causal_lm
from dape_core.hf.patch import (
    ATTENTION_NAME,
    ENCODINGS,
    SUPPORTED_MODEL_TYPES,
    add_processor,
    dape_attention,
    processors,
    register_attention,
    set_attention_impl,
)

__all__ = [
    "ATTENTION_NAME",
    "ENCODINGS",
    "SUPPORTED_MODEL_TYPES",
    "add_processor",
    "build_causal_lm",
    "dape_attention",
    "load_causal_lm",
    "load_pretrained",
    "processors",
    "register_attention",
    "save_causal_lm",
    "save_pretrained",
    "set_attention_impl",
]
