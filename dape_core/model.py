"""The decoder (GPT) of the language-model experiments and the encoder of the CHE benchmark.

Both are built from a config dataclass and share the attention block; the encoding and the DAPE processor are chosen
by the names of ``config.yaml`` and the command line (``encoding``, ``processor``, ``kernel_size``, ``dape_width``,
``tril``, ``padding``). The configs and size presets (paper appendix I, Table 8) are torch-free, in
:mod:`dape_core.settings.model`; the parameter and FLOP arithmetic in :mod:`dape_core.model_arithmetic`.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from dape_core.attention import AttentionPath, SelfAttention
from dape_core.dape import build_processor
from dape_core.encodings import build_encoding
from dape_core.implementations import resolve_attention_impl
from dape_core.model_arithmetic import encoding_instances, gpt_flops_per_token
from dape_core.settings.model import SIZE_PRESETS, EncoderConfig, GPTConfig, layer_sizes

TORCH_DTYPES = {"float32": None, "bfloat16": torch.bfloat16}  # dape_dtype → DAPE's GEMMs (None: the scores')


class Block(nn.Module):
    """Transformer block: pre-LN (decoder, GPT-NeoX) or post-LN (CHE encoder)."""

    def __init__(self, d_model, n_head, d_ff, *, causal, dropout, pre_norm, activation):
        super().__init__()
        self.pre_norm = pre_norm
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_head, causal=causal, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), activation(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)

    #: recompute the block's activations in the backward pass instead of storing them (training's
    #: ``activation_checkpointing``); a wrapper such as FSDP2's hooks stays outside the recomputed part
    activation_checkpointing = False

    def forward(self, x, **attn_kwargs):
        if self.activation_checkpointing and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False, **attn_kwargs)
        return self._forward(x, **attn_kwargs)

    def _forward(self, x, **attn_kwargs):
        if self.pre_norm:
            x = x + self.drop(self.attn(self.norm1(x), **attn_kwargs))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self.attn(x, **attn_kwargs)))
        return self.norm2(x + self.drop(self.ff(x)))


class _Stack(nn.Module):
    """Blocks plus each layer's encoding and processor; shared encodings are one module used by every layer."""

    def __init__(self, cfg, *, causal: bool, pre_norm: bool, activation):
        super().__init__()
        head_dim = cfg.d_model // cfg.n_head
        self.encodings = nn.ModuleList(
            build_encoding(cfg.encoding, cfg.n_head, head_dim, causal=causal, train_len=cfg.train_len)
            for _ in range(encoding_instances(cfg.encoding, cfg.n_layer, cfg.encoding_shared)))
        settings = cfg.attention_settings()
        if not causal:  # the encoder sees every key: nothing to hide from the processor
            settings = dataclasses.replace(settings, tril=False)
        processors = (build_processor(cfg.n_head, settings, bias_channels=self.encodings[0].has_bias)
                      for _ in range(cfg.n_layer))
        self.processors = nn.ModuleList(proc if proc is not None else nn.Identity() for proc in processors)
        self.has_processor = cfg.processor != "none"
        self.blocks = nn.ModuleList(
            Block(cfg.d_model, cfg.n_head, cfg.d_ff, causal=causal, dropout=cfg.dropout, pre_norm=pre_norm,
                  activation=activation)
            for _ in range(cfg.n_layer)
        )

    def encoding(self, layer: int):
        return self.encodings[layer if len(self.encodings) > 1 else 0]

    def forward(self, x, positions, path: AttentionPath = AttentionPath()):
        for i, block in enumerate(self.blocks):
            x = block(x, encoding=self.encoding(i), processor=self.processors[i] if self.has_processor else None,
                      positions=positions, path=path)
        return x


class GPT(nn.Module):
    """Decoder-only language model (paper §4: GPT-NeoX style, pre-LN, GELU MLP, learned token embedding only)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.stack = _Stack(cfg, causal=True, pre_norm=True, activation=nn.GELU)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        for module in (self.embed, self.head, *self.stack.blocks):
            module.apply(_init_weights)  # encodings and processors keep their own (reference) initialisation
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, fast_path: bool = True,
                last: int | None = None, positions: torch.Tensor | None = None):
        """Logits [batch, T, vocab] for token ids [batch, T] (only the ``last`` positions if given), with ``targets``
        also the mean cross-entropy; ``fast_path=False``: the plain reference path."""
        # positions [T]: 0 … T−1 unless given (randomized encodings draw theirs with dape_core.positions)
        positions = torch.arange(idx.shape[1], device=idx.device) if positions is None else positions.to(idx.device)
        x = self.drop(self.embed(idx))
        x = self.stack(x, positions, self.attention_path(idx.device, fast_path))
        if last is not None:
            x = x[:, -last:]
        logits = self.head(self.norm(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    def resolved_attention_impl(self, device: torch.device | str | None = None) -> str:
        """The path ``attention_impl`` runs on ``device`` (default: the parameters'): ``auto`` resolved."""
        return resolve_attention_impl(self.cfg.attention_impl, device or self.head.weight.device,
                                      layer_sizes(self.cfg))

    def attention_path(self, device: torch.device | str, fast_path: bool = True) -> AttentionPath:
        """How this decoder's layers attend on ``device`` (``fast_path=False``: the plain reference path)."""
        return AttentionPath(self.resolved_attention_impl(device) if fast_path else "plain", self.cfg.query_chunk_size,
                             TORCH_DTYPES[self.cfg.dape_dtype], self.cfg.recompute_scores)

    def non_embedding_parameters(self) -> int:
        skip = {id(self.embed.weight), id(self.head.weight)}
        return sum(p.numel() for p in self.parameters() if id(p) not in skip)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (:func:`~dape_core.model_arithmetic.gpt_flops_per_token`, whose parameter count
        equals :meth:`non_embedding_parameters`)."""
        return gpt_flops_per_token(self.cfg, seq_len)


class Encoder(nn.Module):
    """Non-causal transformer for CHE (che-spec): post-LN, ReLU FFN ×4, one extra input id for query tokens."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.input_vocab + 1, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.stack = _Stack(cfg, causal=False, pre_norm=False, activation=nn.ReLU)
        self.head = nn.Linear(cfg.d_model, cfg.output_vocab)
        for module in (self.embed, self.head, *self.stack.blocks):
            module.apply(_init_weights)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [batch, T, output_vocab]; ``positions`` [T] (or [batch, T] with equal rows) for randomised PE."""
        if positions is None:
            positions = torch.arange(tokens.shape[1], device=tokens.device)
        elif positions.dim() == 2:
            positions = positions[0]
        x = self.drop(self.embed(tokens) * math.sqrt(self.cfg.d_model))
        path = AttentionPath(self.resolved_attention_impl(tokens.device), dape_dtype=TORCH_DTYPES[self.cfg.dape_dtype],
                             recompute_scores=self.cfg.recompute_scores)
        return self.head(self.stack(x, positions, path))

    def resolved_attention_impl(self, device: torch.device | str | None = None) -> str:
        """The path ``attention_impl`` runs on ``device`` (default: the parameters'): ``auto`` resolved."""
        return resolve_attention_impl(self.cfg.attention_impl, device or self.head.weight.device,
                                      layer_sizes(self.cfg))


def _init_weights(module: nn.Module) -> None:
    """GPT-2 style: N(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)


__all__ = ["GPT", "Encoder", "Block", "TORCH_DTYPES",
           # declared in dape_core.settings.model, importable from here too
           "GPTConfig", "EncoderConfig", "SIZE_PRESETS"]
