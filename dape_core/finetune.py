"""Continue training a Hugging Face causal LM (Llama, Mistral, Qwen2) with or without a DAPE processor, or train a
fresh one from a configuration: the base models and fine-tunes of the ``finetune`` families.

The model starts from ``base_model`` (a local transformers directory: ``config.json``, safetensors weights and the
``tokenizer.json`` its data were tokenized with) or, with ``base_model`` null, from ``base_config`` (``model_type``
and the configuration's fields; ``vocab_size`` is the data's, from meta.json). ``processor`` dape_v1 / dape_v2 gives
every attention layer a processor starting as the identity (:func:`dape_core.hf.add_processor`; eq. 4 with
``encoding: nope``, eq. 5 with an additive bias on the model's RoPE); ``none`` leaves the model unpatched. The token
files must come from the model's own tokenizer: a fresh model takes its data's (the trained BPE), a checkpoint brings
the tokenizer.json the data were made with (``tokenizer: file``).

Training is ``dape train``'s loop (:func:`dape_core.train.fit`: optimiser, schedule, resume to the uninterrupted run's
weights, TensorBoard, divergence detection) with the model's loss and saving. ``steps: 0`` with a ``base_model`` and
no processor exports the checkpoint as it is, as one more method ("Llama (base)"). Outputs in ``--out-dir``:
``model/`` (atomically by :func:`dape_core.hf.save_pretrained`, or transformers' own format without a processor;
with ``tokenizer.json`` and ``finetune.json``, the record ``dape evaluate`` reads), ``summary.json``,
``metrics.jsonl`` and ``tensorboard/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dape_core import settings as fields
from dape_core.checkpoints import checkpoints_for
from dape_core.io import file_sha256
from dape_core.distributed import Distributed
from dape_core.errors import ConfigError
from dape_core.model_folder import MODEL_FOLDER
from dape_core.settings.finetune import (BASE_CONFIG_VALUES, NOT_FINETUNE_OPTIONS, FinetuneSettings,
                                         check_steps, is_finetuned)
from dape_core.provenance import config_hash
from dape_core.train import NOT_HASHED, TrainSettings, fit, optimizer_for


def parse_base_config(text: str | None) -> dict | None:
    """``--base-config``: a JSON object (or none)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"base_config: {text!r} is not JSON ({err.msg}); allowed values: "
                          + BASE_CONFIG_VALUES) from None
    if not isinstance(value, dict):
        raise ConfigError(f"base_config: {text!r} is not allowed; allowed values: " + BASE_CONFIG_VALUES)
    return value


def base_identity(model_settings: FinetuneSettings, seed: int) -> dict[str, Any]:
    """The base model's identity for the resume check and summary: the directory's config and weights sha256 (not
    the path: a moved directory is the same base), or the fresh configuration and its seed."""
    if model_settings.base_model is None:
        return {"kind": "config", "base_config": model_settings.base_config, "seed": seed}
    path = Path(model_settings.base_model)
    weights = sorted(p.name for p in path.iterdir() if p.suffix == ".safetensors")
    return {"kind": "directory", "config_sha256": file_sha256(path / "config.json"),
            "weights_sha256": {name: file_sha256(path / name) for name in weights}}


def check_base_directory(path: Path, meta: dict) -> bytes:
    """The base model directory's tokenizer.json, checked to be the one the data were tokenized with."""
    if not path.is_dir():
        raise ConfigError(f"base_model: {str(path)!r} is not a directory; allowed values: a local Hugging Face "
                          "model directory (config.json, safetensors weights, tokenizer.json)")
    tokenizer = path / "tokenizer.json"
    if not tokenizer.is_file():
        raise ConfigError(f"base_model: {str(path)!r} has no tokenizer.json; allowed values: a model directory with "
                          "the tokenizer.json its data were tokenized with")
    content = tokenizer.read_bytes()
    info = meta["tokenizer"]
    if hashlib.sha256(content).hexdigest() not in (info.get("sha256"), info.get("file_sha256")):
        raise ConfigError(f"data_dir: its tokens were made with another tokenizer than {tokenizer}; allowed values: "
                          f"token files of `dape tokenize --tokenizer file --tokenizer-file {tokenizer}` (the "
                          "model's own tokenizer)")
    return content


def build_base(model_settings: FinetuneSettings, meta: dict, data_dir: Path, seed: int):
    """(the base model in fp32, the tokenizer.json it is saved with)."""
    from dape_core.hf import build_causal_lm, load_causal_lm

    vocab = int(meta["tokenizer"]["vocab_size"])
    if model_settings.base_model is not None:
        from dape_core.artefacts import verify_model_directory

        path = Path(model_settings.base_model)
        verify_model_directory(path)  # a base run's model/ (this project's): every file against its seal
        tokenizer = check_base_directory(path, meta)
        model = load_causal_lm(path, dtype=torch.float32)
        if model.config.vocab_size < vocab:
            raise ConfigError(f"base_model: vocab_size {model.config.vocab_size} is smaller than the data's {vocab}; "
                              "allowed values: a model whose vocabulary holds every token id of the data")
        return model, tokenizer
    spec = dict(model_settings.base_config)
    if spec.get("vocab_size", vocab) != vocab:
        raise ConfigError(f"base_config.vocab_size: {spec['vocab_size']} is not allowed; allowed values: {vocab} (the "
                          "data's vocabulary, meta.json) or leave it out")
    eot = int(meta["tokenizer"]["eot_id"])
    spec.update(vocab_size=vocab, bos_token_id=spec.get("bos_token_id", eot),
                eos_token_id=spec.get("eos_token_id", eot))
    from dape_core.data.token_files import tokenizer_bytes

    return build_causal_lm(spec, seed=seed).float(), tokenizer_bytes(data_dir)


def non_embedding_parameters(model: torch.nn.Module) -> int:
    """Parameters outside the input and output embeddings (counted once if tied)."""
    embeddings = {id(p) for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None
                  for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in embeddings)


def finetune(
    model_settings: FinetuneSettings,
    settings: TrainSettings,
    data_dir: str | Path,
    out_dir: str | Path,
    checkpoint_dir: str | Path | None = None,
    *,
    progress: bool = True,
    stop_after: int | None = None,
) -> dict:
    """Build the base, add the processor, train with :func:`dape_core.train.fit`, write ``model/`` and the outputs;
    returns the summary. ``stop_after`` ends early (tests)."""
    from dape_core.data import load_split
    from dape_core.hf import add_processor, save_causal_lm
    from dape_core.hf.adapter import RUN_RECORD, run_record
    from dape_core.hf.patch import CONFIG_KEY
    from dape_core.implementations import resolve_attention_impl

    check_steps(model_settings, settings)
    torch.set_num_threads(settings.threads)
    if not progress:
        from dape_core.hf.checkpoint import quiet_progress

        quiet_progress()
    dist = Distributed("none")
    device = dist.device
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    checkpoint_dir = Path(checkpoint_dir or out_dir / "checkpoints")
    train_split = load_split(data_dir, "train")
    meta = train_split.meta
    n_tokens = len(train_split.tokens)
    if n_tokens < settings.train_len + 2:
        raise ConfigError(f"train_len: {settings.train_len} exceeds the training split ({n_tokens} tokens)")

    model, tokenizer = build_base(model_settings, meta, data_dir, settings.seed)
    if model_settings.processor != "none":
        if getattr(model.config, CONFIG_KEY, None) is not None:
            raise ConfigError("processor: base_model already has DAPE processors; allowed values: none (train them "
                              "further as they are)")
        torch.manual_seed(settings.seed)
        add_processor(model, model_settings.attention_settings(), train_len=settings.train_len)
    model.to(device)
    optimizer = optimizer_for(model, settings)
    base = base_identity(model_settings, settings.seed)
    patched = getattr(model.config, CONFIG_KEY, None) is not None
    attention_impl = resolve_attention_impl(model.config.dape["attention_impl"], device) if patched \
        else model.config._attn_implementation
    full_config = {"model": dataclasses.asdict(model_settings), "train": dataclasses.asdict(settings),
                   "base": base, "data_dir": str(data_dir),
                   "data_sha256": meta["splits"]["train"].get("tokens_sha256")}
    chash = config_hash({
        "model": {**dataclasses.asdict(model_settings), "base_model": None, "attention_impl": attention_impl},
        "train": {k: v for k, v in dataclasses.asdict(settings).items() if k not in NOT_HASHED},
        "base": base, "data_sha256": full_config["data_sha256"]})
    record = run_record(model, finetuned=is_finetuned(model_settings.base_model is not None, settings.steps),
                        train_settings=dataclasses.asdict(settings), status="ok", config_hash=chash)

    def loss_of(x, y, step, micro):
        logits = model(input_ids=x.to(device), use_cache=False).logits
        return F.cross_entropy(logits.float().flatten(0, 1), y.to(device).flatten())

    def describe() -> dict:
        return {"parameters": sum(p.numel() for p in model.parameters()),
                "non_embedding_parameters": non_embedding_parameters(model), "method": record["method"],
                "model_type": model.config.model_type,
                "attention_impl": attention_impl,  # the path that ran (`auto` resolved)
                "config": full_config}

    def save(status: str, summary: dict) -> None:
        saved = {**record, "status": status, "base": base}
        save_causal_lm(model, out_dir / MODEL_FOLDER,
                       files={"tokenizer.json": tokenizer, RUN_RECORD: json.dumps(saved, indent=2, default=str)})

    return fit(model, optimizer, settings, train_split.tokens, loss_of, save=save, describe=describe,
               config_hash=chash, out_dir=out_dir, checkpoints=checkpoints_for(checkpoint_dir, dist), dist=dist,
               label=f"finetune {record['method']}", progress=progress, stop_after=stop_after)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", required=True, help="an --out-dir of `dape tokenize`, made with the model's tokenizer")
    p.add_argument("--out-dir", required=True, help="receives model/, summary.json, metrics.jsonl")
    p.add_argument("--checkpoint-dir", default=None, help="periodic checkpoints (default: OUT_DIR/checkpoints)")
    fields.add_arguments(p, FinetuneSettings, exclude=("base_config",))
    p.add_argument("--base-config", default=None,
                   help=f"with no --base-model: the fresh model's configuration, {BASE_CONFIG_VALUES}")
    fields.add_arguments(p, TrainSettings, exclude=NOT_FINETUNE_OPTIONS)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    settings = fields.from_args(TrainSettings, args)
    model_settings = fields.from_args(FinetuneSettings, args, base_config=parse_base_config(args.base_config))
    summary = finetune(model_settings, settings, args.data_dir, args.out_dir, args.checkpoint_dir,
                       progress=not args.no_progress)
    print(json.dumps({k: summary[k] for k in ("status", "steps_done", "final_loss", "tokens_per_s", "method")}))
    return 0
