"""DAPE inside a Hugging Face decoder: one processor per attention layer, through transformers' attention registry.

:func:`add_processor` gives every attention module of a ``transformers`` causal LM (Llama, Qwen2, Mistral) a
``dape_processor`` (:class:`~dape_core.dape.ScoreProcessor`) and a ``dape_encoding`` (the bias B of ``alibi``,
``kerple`` or ``fire``; ``nope``: none, eq. 4) as submodules, in the ``state_dict``, and switches the model to the
attention function registered as ``"dape"``. Projections, RoPE, KV cache and masks stay transformers'; softmax(·)·V of
the rotated q, k, v goes through :func:`dape_core.attention.attend_causal` (``auto`` resolved by device):

* GQA: key/value heads are repeated to the H query heads; the model's ``scaling`` replaces 1/√d_head (q rescaled);
* scores, softmax and ·V in fp32 at least (the processor's dtype if wider), the output in the model's;
* masks: transformers' boolean [batch, 1, Tq, Tk] mask, built as for SDPA (``None`` for a plain causal forward or a
  single query); where it removes keys beyond the causal mask (padding, a sliding window, packed sequences) the plain
  path treats a removed key as zero padding, so a left-padded sequence's real tokens get the unpadded logits;
* positions of B: key j at position_ids[b, −1] − (Tk − 1) + j; only FIRE reads absolute positions (its normaliser);
* KV cache: query row r is key Tk − Tq + r (``DynamicCache``, ``generate``'s default); a cache whose keys do not end
  at the last query (a static cache) is refused.

Cached decoding: with ``padding: causal`` the output at key j reads keys ≤ j only, so a cached step equals a full
forward's row. With ``padding: same`` (appendix L) Conv2's output on the diagonal reads Conv1's output at key i + 1,
non-zero through Conv1's bias and its tap on key i (a boundary effect, no leakage), so row i depends on whether key
i + 1 exists, which a cached step lacks (from the second layer on, the cached keys also differ). Cached decoding with
``same`` padding and k > 1 therefore raises :class:`~dape_core.errors.ConfigError`; ``use_cache=False``, DAPE V1 and
k = 1 work with either padding.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from dape_core.attention import attend_causal
from dape_core.dape import ScoreProcessor
from dape_core.encodings import build_encoding
from dape_core.errors import ConfigError, require_choice
from dape_core.implementations import resolve_attention_impl
from dape_core.model import TORCH_DTYPES
from dape_core.settings import ATTENTION_IMPLS, AttentionSettings
# declared torch-free in dape_core.settings.finetune, importable from here (dape_core.hf exports them)
from dape_core.settings.finetune import ENCODINGS, PROCESSORS, SUPPORTED_MODEL_TYPES, hf_settings  # noqa: F401

ATTENTION_NAME = "dape"  # the name in transformers' attention and mask registries
CONFIG_KEY = "dape"  # the processor settings in the model's config (config.json)
PROCESSOR_MODULE = "dape_processor"  # submodule names on each attention module (state_dict keys)
ENCODING_MODULE = "dape_encoding"


def register_attention() -> None:
    """Register ``"dape"`` in transformers' attention registry and, with SDPA's boolean masks, in its mask registry."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, dape_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


def attention_layers(model: nn.Module) -> list[nn.Module]:
    """The attention modules of a supported causal LM (one per decoder layer), in layer order."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(f"model_type: {model_type!r} ({type(model).__name__}) is not supported; allowed values: "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    can_set = getattr(type(model), "_can_set_attn_implementation", None)
    if can_set is None or not can_set():
        raise ConfigError(f"model: {type(model).__name__} does not take its attention from transformers' "
                          "AttentionInterface registry; allowed: models whose attention does (Llama, Mistral, Qwen2)")
    layers = [m for m in model.modules() if all(hasattr(m, a) for a in ("q_proj", "k_proj", "v_proj", "layer_idx"))]
    n_layers = config.num_hidden_layers
    if len(layers) != n_layers or sorted(m.layer_idx for m in layers) != list(range(n_layers)):
        raise ConfigError(f"model: found {len(layers)} attention layers (modules with q_proj, k_proj, v_proj and "
                          f"layer_idx) in {type(model).__name__}; allowed: one per decoder layer ({n_layers})")
    return sorted(layers, key=lambda m: m.layer_idx)


def add_processor(model: nn.Module, settings: AttentionSettings | dict[str, Any], *, train_len: int | None = None,
                  zero_init_output: bool = True) -> nn.Module:
    """Give every attention layer of ``model`` its DAPE processor (and encoding) and switch it to ``"dape"`` attention;
    returns ``model``, patched in place. ``settings``: :class:`~dape_core.settings.AttentionSettings` (or a dict of
    its fields), processor ``dape_v1``/``dape_v2``, encoding ``nope``/``alibi``/``kerple``/``fire``; ``train_len``:
    twice FIRE's L_init (default ``max_position_embeddings``); ``zero_init_output``: processors start as the identity,
    so with ``nope`` the patched model computes the original's logits."""
    settings = hf_settings(settings)
    layers = attention_layers(model)
    if any(hasattr(m, PROCESSOR_MODULE) for m in layers):
        raise ConfigError("model: already has DAPE processors; allowed: a model without them (add_processor once)")
    config = model.config
    train_len = train_len or config.max_position_embeddings
    n_head = config.num_attention_heads
    for layer in layers:
        reference = layer.q_proj.weight
        encoding = build_encoding(settings.encoding, n_head, layer.head_dim, causal=True, train_len=train_len)
        processor = ScoreProcessor(n_head, settings, bias_channels=encoding.has_bias, zero_init_output=zero_init_output)
        layer.add_module(ENCODING_MODULE, encoding.to(reference.device))
        layer.add_module(PROCESSOR_MODULE, processor.to(reference.device))
    setattr(config, CONFIG_KEY, {**dataclasses.asdict(settings), "train_len": train_len})
    register_attention()
    model.set_attn_implementation(ATTENTION_NAME)
    if config._attn_implementation != ATTENTION_NAME:
        raise ConfigError(f"model: {type(model).__name__} kept attention {config._attn_implementation!r}; allowed: "
                          f"models that accept the registered {ATTENTION_NAME!r}")
    return model


def processors(model: nn.Module) -> list[ScoreProcessor]:
    """The DAPE processors of a patched model, in layer order."""
    return [getattr(m, PROCESSOR_MODULE) for m in attention_layers(model) if hasattr(m, PROCESSOR_MODULE)]


def dape_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                   **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: q [batch, H, Tq, d], k and v [batch, H_kv, Tk, d] (rotated,
    cache included) → ([batch, Tq, H, d], no weights), the scores through the project's pipeline (eq. 5)."""
    processor = getattr(module, PROCESSOR_MODULE, None)
    if processor is None:
        raise ConfigError(f"attention: {type(module).__name__} (layer {getattr(module, 'layer_idx', '?')}) has no "
                          f"DAPE processor; allowed: a model patched with dape_core.hf.add_processor")
    if not getattr(module, "is_causal", True) or kwargs.get("is_causal") is False:
        raise ConfigError("is_causal: False is not allowed; allowed values: True (DAPE in a causal decoder)")
    encoding = getattr(module, ENCODING_MODULE)
    dtype = torch.promote_types(torch.promote_types(query.dtype, torch.float32), next(processor.parameters()).dtype)
    groups = query.shape[1] // key.shape[1]
    q, k, v = query.to(dtype), key.to(dtype), value.to(dtype)
    if groups > 1:  # GQA: head h reads key/value head h // groups, as transformers' repeat_kv
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    head_dim = q.shape[-1]
    if scaling is not None and not math.isclose(scaling, head_dim ** -0.5, rel_tol=1e-12):
        q = q * (scaling * math.sqrt(head_dim))  # the pipeline divides by √d_head
    n_q = q.shape[2]
    key_mask = _key_mask(attention_mask, n_q, k.shape[2])
    if attention_mask is None and 1 < n_q < k.shape[2]:
        k, v = k[:, :, :n_q], v[:, :, :n_q]  # transformers' convention for no mask: upper-left (an empty cache's tail)
    n_k = k.shape[2]
    if n_k > n_q and processor.padding == "same" and processor.kernel_size > 1:
        raise ConfigError("padding: 'same' cannot decode with a KV cache (a cached step lacks the key right of the "
                          "query that Conv2 reads with same padding, so it differs from a full forward); allowed "
                          "values: causal (or generate with use_cache=False)")
    saved = getattr(module.config, CONFIG_KEY)  # the patched model's settings (config.dape)
    impl = resolve_attention_impl(saved["attention_impl"], q.device, (processor.n_head, head_dim, processor.dape_width))
    common = dict(encoding=encoding, processor=processor, dropout_p=dropout, attention_impl=impl,
                  dape_dtype=TORCH_DTYPES[saved["dape_dtype"]], query_chunk_size=saved.get("query_chunk_size"))
    outputs = []
    for rows, positions in _position_groups(encoding, kwargs.get("position_ids"), q.shape[0], n_k, q.device):
        mask = key_mask if key_mask is None or key_mask.shape[0] == 1 else key_mask[rows]
        outputs.append((rows, attend_causal(q[rows], k[rows], v[rows], positions=positions, key_mask=mask, **common)))
    out = outputs[0][1] if len(outputs) == 1 else _in_batch_order(outputs, q.shape[0])
    return out.transpose(1, 2).contiguous().to(query.dtype), None


def _key_mask(attention_mask: torch.Tensor | None, n_q: int, n_k: int) -> torch.Tensor | None:
    """transformers' boolean [batch, 1, Tq, Tk] mask (True: attend), checked to end at the last query's key."""
    if attention_mask is None:
        return None
    if attention_mask.dtype != torch.bool or attention_mask.dim() != 4:
        raise ConfigError(f"attention_mask: a {attention_mask.dim()}-D {attention_mask.dtype} mask reached the "
                          "attention; allowed values: the boolean 4-D mask transformers builds for 'dape' (pass a "
                          "2-D padding mask to the model)")
    if n_k > n_q and not bool(attention_mask[:, :, -1, -1].all()):
        raise ConfigError("cache: the attention mask does not end at the last query's own key (a static cache, or "
                          "a padded last query); allowed values: a DynamicCache whose keys end at the last query "
                          "(the default of generate), left padding")
    return attention_mask


def _position_groups(encoding, position_ids, batch: int, n_k: int, device):
    """(batch rows, key positions [Tk]) groups: key j at position_ids[b, −1] − (Tk − 1) + j; encodings reading i − j
    alone (ALiBi, Kerple) or no positions (NoPE) take 0 … Tk − 1 for the whole batch."""
    base = torch.arange(n_k, device=device)
    if position_ids is None or not encoding.has_bias or encoding.relative_bias:
        return [(slice(None), base)]
    last = position_ids[:, -1].to(device).expand(batch)
    offsets = (last - (n_k - 1)).tolist()
    if len(set(offsets)) == 1:
        return [(slice(None), base + offsets[0])]
    groups: dict[int, list[int]] = {}
    for row, offset in enumerate(offsets):
        groups.setdefault(offset, []).append(row)
    return [(torch.tensor(rows, device=device), base + offset) for offset, rows in groups.items()]


def _in_batch_order(outputs, batch: int) -> torch.Tensor:
    first = outputs[0][1]
    out = first.new_empty(batch, *first.shape[1:])
    for rows, values in outputs:
        out[rows] = values
    return out


def set_attention_impl(model: nn.Module, attention_impl: str) -> None:
    """Switch a patched model's path (``attention_impl``: auto, fast, plain, materialized, compiled or fused), kept in
    its config."""
    require_choice("attention_impl", attention_impl, ATTENTION_IMPLS)
    saved = getattr(model.config, CONFIG_KEY, None)
    if saved is None:
        raise ConfigError("model: has no DAPE processors; allowed: a model patched with dape_core.hf.add_processor")
    saved["attention_impl"] = attention_impl
