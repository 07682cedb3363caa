"""A Hugging Face causal LM as ``dape evaluate`` sees a model, so the evaluation runs unchanged on it.

:class:`CausalLMAdapter` gives a transformers model the interface of :class:`dape_core.model.GPT` that
:func:`dape_core.evaluate.window_nll` and :func:`~dape_core.evaluate.evaluate_windows` call: ``model(x, last=n)``
(transformers' ``logits_to_keep``) and ``model.cfg`` (the model's own RoPE at 0 … T−1, any length; the evaluation's
``query_chunk_size``). :func:`load_for_evaluation` reads a model directory and its record for the evaluation's rows:
``finetune.json`` from ``dape finetune`` (:func:`run_record`), else an original checkpoint ("Llama (base)", training
length ``max_position_embeddings``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dape_core.errors import ConfigError
from dape_core.hf.checkpoint import load_causal_lm, quiet_progress
from dape_core.hf.patch import CONFIG_KEY
from dape_core.methods import hf_method_label
from dape_core.model_folder import RUN_RECORD
#: settings of the evaluation rows (as a model.pt's model_config) read off a model's DAPE settings
ATTENTION_KEYS = ("encoding", "processor", "kernel_size", "dape_width", "tril", "padding")


@dataclass
class AdapterConfig:
    """What the evaluation reads off ``model.cfg``: the encoding (the model's RoPE: positions 0 … T−1),
    ``max_position`` (unused by RoPE) and a patched model's query chunks."""

    encoding: str = "rope"
    max_position: int = 0
    query_chunk_size: int | None = None


class CausalLMAdapter(nn.Module):
    """``model(idx, last=n)`` → logits [batch, n, vocab] of a transformers causal LM."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.cfg = AdapterConfig(max_position=int(model.config.max_position_embeddings))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, last: int | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        if targets is not None or positions is not None:
            raise ConfigError("positions: given to a Hugging Face model; allowed values: none (the model places its "
                              "tokens at 0 … T−1 and computes the loss itself)")
        saved = getattr(self.model.config, CONFIG_KEY, None)
        if saved is not None:
            saved["query_chunk_size"] = self.cfg.query_chunk_size
        return self.model(input_ids=idx, use_cache=False, logits_to_keep=last or 0).logits


def attention_record(model: nn.Module) -> dict[str, Any]:
    """The model's processor settings (none for an unpatched model) and shape, as the evaluation's rows name them
    (``size`` empty: no preset describes a transformers configuration)."""
    config = model.config
    saved = getattr(config, CONFIG_KEY, None) or {"processor": "none"}
    out = {key: saved.get(key) for key in ATTENTION_KEYS}
    if out["processor"] == "none":
        out.update(encoding="nope", kernel_size=1, dape_width=None, tril=True, padding=None)
    return {**out, "model_type": config.model_type, "size": None, "n_layer": config.num_hidden_layers,
            "d_model": config.hidden_size}


def run_record(model: nn.Module, *, finetuned: bool, train_settings: dict[str, Any], status: str,
               config_hash: str, **extra: Any) -> dict[str, Any]:
    """The record of a model directory (``finetune.json``): what a ``model.pt`` carries for the evaluation."""
    attention = attention_record(model)
    method = hf_method_label(attention["model_type"], attention["encoding"], attention["processor"],
                             attention["kernel_size"], attention["tril"], finetuned=finetuned)
    return {"method": method, "status": status, "config_hash": config_hash, "model_config": attention,
            "train_settings": dict(train_settings), **extra}


def original_record(model: nn.Module, path: Path) -> dict[str, Any]:
    """The record of a directory ``dape finetune`` did not write: the original checkpoint, trained (as far as its
    configuration says) at ``max_position_embeddings``."""
    train = {"train_len": int(model.config.max_position_embeddings), "seed": None, "lr": None, "steps": None,
             "batch_size": None}
    digest = hashlib.sha256((path / "config.json").read_bytes()).hexdigest()[:16]
    return run_record(model, finetuned=False, train_settings=train, status="ok", config_hash=digest)


def read_run_record(path: str | Path) -> dict[str, Any] | None:
    """``finetune.json`` of a model directory, or None."""
    record = Path(path) / RUN_RECORD
    return json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None


def load_for_evaluation(path: str | Path) -> tuple[CausalLMAdapter, dict[str, Any]]:
    """(the model of a directory behind the adapter, in eval mode; its record)."""
    from dape_core.artefacts import verify_model_directory

    path = Path(path)
    verify_model_directory(path)  # a directory `dape finetune` wrote: every file against its seal
    quiet_progress()
    model = load_causal_lm(path, field="checkpoint").eval()
    record = read_run_record(path) or original_record(model, path)
    return CausalLMAdapter(model).eval(), record
