"""``model.pt``, what ``dape train`` writes: the keys it holds and its restore, checked against its job's seal."""

from __future__ import annotations

from pathlib import Path

import torch

from dape_core.model import GPT, GPTConfig

MODEL_KEYS = ("model", "model_config", "train_settings", "status", "config_hash", "method")  # model.pt's


def load_model(path: str | Path, map_location: str = "cpu") -> tuple[GPT, dict]:
    """Restore a ``model.pt`` written by ``dape train``: returns (model in eval mode, the checkpoint dict). The file
    is checked against the sha256 its job recorded; an unreadable or foreign file stops with one line naming it."""
    from dape_core.artefacts import fail, verify_hash

    verify_hash(path, "train_lm", commands=("dape train",))
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as err:  # pickle, zip and torch each raise their own kinds on a damaged file
        raise fail(path, f"not a readable model.pt of `dape train` ({type(err).__name__})", "train_lm") from None
    missing = [k for k in MODEL_KEYS if not isinstance(checkpoint, dict) or k not in checkpoint]
    if missing:
        raise fail(path, f"not a model.pt of `dape train` (no {', '.join(missing)})", "train_lm")
    try:
        model = GPT(GPTConfig(**checkpoint["model_config"]))
        model.load_state_dict(checkpoint["model"])
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        raise fail(path, f"its weights do not fit the model its model_config describes ({type(err).__name__}: "
                         f"{str(err).splitlines()[0][:120]})", "train_lm") from None
    return model.eval(), checkpoint
