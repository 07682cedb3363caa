"""DAPE V1/V2 processors inside Hugging Face decoders (Llama, Mistral, Qwen2), through transformers' attention
registry; requires the ``hf`` extra (``transformers``).

* :func:`add_processor`, :func:`processors`, :func:`set_attention_impl` — patch a model (every attention layer gets a
  processor starting as the identity; semantics: :mod:`dape_core.hf.patch`), its processors, its path;
* :func:`save_pretrained`, :func:`load_pretrained`, :func:`save_causal_lm`, :func:`load_causal_lm` — a model to and
  from a directory (:mod:`dape_core.hf.checkpoint`); :mod:`dape_core.hf.adapter` — one as ``dape evaluate`` reads it;
* :func:`build_causal_lm` — a fresh model from a configuration dict, offline (:mod:`dape_core.hf.models`).
"""

from dape_core.hf.checkpoint import load_causal_lm, load_pretrained, save_causal_lm, save_pretrained
from dape_core.hf.models import build_causal_lm
from dape_core.hf.patch import (ATTENTION_NAME, ENCODINGS, SUPPORTED_MODEL_TYPES, add_processor, dape_attention,
                                processors, register_attention, set_attention_impl)

__all__ = [
    "ATTENTION_NAME", "ENCODINGS", "SUPPORTED_MODEL_TYPES", "add_processor", "build_causal_lm", "dape_attention",
    "load_causal_lm", "load_pretrained", "processors", "register_attention", "save_causal_lm", "save_pretrained",
    "set_attention_impl",
]
