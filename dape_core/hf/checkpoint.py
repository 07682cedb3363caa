"""Saving and loading a Hugging Face decoder patched with DAPE processors.

A patched model saves as any transformers model: ``config.json`` holds the settings under ``"dape"``
(:class:`~dape_core.settings.AttentionSettings` fields and ``train_len``), the safetensors files the processors' and
encodings' weights beside the model's. Saving is atomic (a temporary directory, renamed when complete; ``files``
added before); :func:`load_pretrained` rebuilds the base model, patches it and restores the processor weights
strictly. :func:`save_causal_lm` and :func:`load_causal_lm` take a model with or without processors.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from torch import nn

from dape_core.errors import ConfigError
from dape_core.hf.patch import CONFIG_KEY, ENCODING_MODULE, PROCESSOR_MODULE, add_processor
from dape_core.settings import AttentionSettings, field_names

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def save_pretrained(model: nn.Module, path: str | Path, *, files: dict[str, str | bytes] | None = None) -> Path:
    """``model.save_pretrained`` into ``path`` atomically (a temporary name, then renamed; an existing ``path`` is
    replaced); ``files``: name → content added to the directory."""
    if getattr(model.config, CONFIG_KEY, None) is None:
        raise ConfigError("model: has no DAPE processors; allowed: a model patched with dape_core.hf.add_processor")
    return save_causal_lm(model, path, files=files)


def save_causal_lm(model: nn.Module, path: str | Path, *, files: dict[str, str | bytes] | None = None) -> Path:
    """:func:`save_pretrained` for a model with or without DAPE processors."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        for name, content in (files or {}).items():
            target = tmp / name
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8")
        seal_directory(tmp, path)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def seal_directory(written: Path, final: Path) -> None:
    """Seal every file of a model directory written under ``written`` as the file it becomes under ``final``
    (``<file>.sha256``: sha256 and identity, :mod:`dape_core.io`), so a reader can verify each."""
    from dape_core import io
    from dape_core.model_folder import model_files

    for file in model_files(written):
        relative = file.relative_to(written)
        io.hash_path(file).write_text(io.seal_text(final / relative, io.file_sha256(file)), encoding="utf-8")


def quiet_progress() -> None:
    """No transformers progress bars (loading and writing weights) in a job's log."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def is_patched_directory(path: str | Path, field: str = "base_model") -> bool:
    """Whether a saved model directory's ``config.json`` carries DAPE settings (errors name ``field``)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        raise ConfigError(f"{field}: {str(path)!r} has no config.json; allowed values: a Hugging Face model "
                          "directory (config.json and safetensors weights)")
    return isinstance(json.loads(config.read_text(encoding="utf-8")).get(CONFIG_KEY), dict)


def load_causal_lm(path: str | Path, *, dtype: torch.dtype | None = None, field: str = "base_model") -> nn.Module:
    """A saved causal LM with its DAPE processors (:func:`load_pretrained`) or without (transformers'
    ``from_pretrained`` of the local directory, never the Hub); errors name ``field``."""
    if is_patched_directory(path, field):
        return load_pretrained(path, dtype=dtype)
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": dtype} if dtype is not None else {}
    return AutoModelForCausalLM.from_pretrained(Path(path), local_files_only=True, **kwargs)


def is_dape_key(name: str) -> bool:
    """Whether a state_dict key belongs to a DAPE processor or its encoding."""
    return f".{PROCESSOR_MODULE}." in name or f".{ENCODING_MODULE}." in name


def load_pretrained(path: str | Path, *, dtype: torch.dtype | None = None) -> nn.Module:
    """A patched model saved by :func:`save_pretrained` (or transformers' ``save_pretrained``): the base model from
    its weights (``dtype``: theirs, default transformers'), its processors from the saved settings and weights (fp32).
    Raises :class:`~dape_core.errors.ConfigError` without DAPE settings or with missing or unexpected processor
    weights."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    path = Path(path)
    config = AutoConfig.from_pretrained(path)
    saved = getattr(config, CONFIG_KEY, None)
    if not isinstance(saved, dict):
        raise ConfigError(f"{path / 'config.json'}: no {CONFIG_KEY!r} settings; allowed: a directory saved from a "
                          "model patched with dape_core.hf.add_processor")
    state = read_state_dict(path)
    dape_state = {name: tensor for name, tensor in state.items() if is_dape_key(name)}
    base_state = {name: tensor for name, tensor in state.items() if not is_dape_key(name)}
    kwargs = {"dtype": dtype} if dtype is not None else {}
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    model = model_class.from_pretrained(None, config=config, state_dict=base_state, **kwargs)
    settings = AttentionSettings(**{name: saved[name] for name in field_names(AttentionSettings) if name in saved})
    add_processor(model, settings, train_len=saved.get("train_len"), zero_init_output=False)
    expected = {name for name in model.state_dict() if is_dape_key(name)}
    missing, unexpected = sorted(expected - dape_state.keys()), sorted(dape_state.keys() - expected)
    if missing or unexpected:
        raise ConfigError(f"{path}: processor weights do not match the settings {saved}: missing {missing[:4]}"
                          f"{' …' if len(missing) > 4 else ''}, unexpected {unexpected[:4]}"
                          f"{' …' if len(unexpected) > 4 else ''}; allowed: exactly the weights add_processor creates")
    model.load_state_dict(dape_state, strict=False)
    return model


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a saved model directory (one safetensors file or a sharded index)."""
    from safetensors.torch import load_file

    if (path / INDEX_FILE).exists():
        files = sorted(set(json.loads((path / INDEX_FILE).read_text())["weight_map"].values()))
    elif (path / SINGLE_FILE).exists():
        files = [SINGLE_FILE]
    else:
        raise ConfigError(f"{path}: no {SINGLE_FILE} or {INDEX_FILE}; allowed: a directory written by "
                          "save_pretrained (safetensors)")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(path / name))
    return state
