"""A decoder's parameters and training FLOPs from its settings alone: arithmetic, no torch, no model built.

The plan's estimates (``dape_core.config.flops``) count every run this way, so building the workflow's DAG never
imports torch. ``tests/test_model_arithmetic.py`` checks the counts against the built ``dape_core.model.GPT``'s for
every encoding × processor (decoder and encoder sides, shared and per-layer encodings).
"""

from __future__ import annotations

from dape_core.encoding_facts import facts


def block_parameters(d_model: int, d_ff: int) -> int:
    """One transformer block: two LayerNorms, the qkv and output projections, the two-layer MLP (with biases)."""
    norms = 2 * 2 * d_model
    attention = (3 * d_model * d_model + 3 * d_model) + (d_model * d_model + d_model)
    mlp = (d_model * d_ff + d_ff) + (d_ff * d_model + d_model)
    return norms + attention + mlp


def processor_parameters(processor: str, n_head: int, *, kernel_size: int, dape_width: int, bias_channels: bool) -> int:
    """One layer's DAPE processor (paper eq. 5): V1's MLP (channels → D → h) or V2's Conv1, Conv2 of kernel 1×k,
    reading 2h channels with a bias, h otherwise (eq. 4)."""
    if processor == "none":
        return 0
    channels = 2 * n_head if bias_channels else n_head
    k = 1 if processor == "dape_v1" else kernel_size
    return (channels * dape_width * k + dape_width) + (dape_width * n_head * k + n_head)


def encoding_instances(encoding: str, n_layer: int, encoding_shared: bool | None) -> int:
    """How many encoding modules a stack holds: one when shared (unset: the encoding's public-code default)."""
    shared = facts(encoding).shared_by_default if encoding_shared is None else encoding_shared
    return 1 if shared else n_layer


def stack_parameters(cfg, *, causal: bool) -> int:
    """The blocks, encodings and processors of a resolved shape (``cfg`` has n_layer, n_head, d_model, d_ff)."""
    head_dim = cfg.d_model // cfg.n_head
    encoding = facts(cfg.encoding)
    return (cfg.n_layer * block_parameters(cfg.d_model, cfg.d_ff)
            + encoding_instances(cfg.encoding, cfg.n_layer, cfg.encoding_shared)
            * encoding.parameters(cfg.n_head, head_dim, causal)
            + cfg.n_layer * processor_parameters(cfg.processor, cfg.n_head, kernel_size=cfg.kernel_size,
                                                 dape_width=cfg.dape_width, bias_channels=encoding.has_bias))


def decoder_non_embedding_parameters(cfg) -> int:
    """A GPT's parameters except the token embedding and the output head: the stack and the final LayerNorm."""
    return stack_parameters(cfg, causal=True) + 2 * cfg.d_model


def decoder_flops_per_token(*, non_embedding: int, vocab_size: int, d_model: int, n_layer: int, n_head: int,
                            attention_width: int, seq_len: int, processor: str, bias_channels: bool,
                            kernel_size: int, dape_width: int) -> float:
    """Training FLOPs per token ≈ 6·N_non-embedding + 6·V·d (head) + attention and DAPE terms (Kaplan et al., 2020,
    C ≈ 6N plus the context term), for this project's GPT and the Hugging Face decoders of fine-tunes alike.

    ``attention_width``: heads × head_dim (d_model in GPT); ``bias_channels``: the encoding adds a bias B, so the
    processor reads 2h channels (h with A alone, eq. 4); Conv1 (channels → D) and Conv2 (D → h) of kernel 1×k (eq. 5,
    §3.3) run at every (query, key) pair."""
    dense = 6 * non_embedding + 6 * vocab_size * d_model
    attention = 6 * n_layer * seq_len * attention_width  # q·kᵀ and p·v, causal halves the pairs: 2·2·T/2·d·3
    dape = 0.0
    if processor != "none":
        channels = 2 * n_head if bias_channels else n_head
        dape = 6 * n_layer * seq_len * (channels * dape_width * kernel_size + dape_width * n_head * kernel_size)
    return float(dense + attention + dape)


def gpt_flops_per_token(cfg, seq_len: int) -> float:
    """Training FLOPs per token of the GPT of ``cfg`` (a resolved GPTConfig) at ``seq_len``."""
    return decoder_flops_per_token(
        non_embedding=decoder_non_embedding_parameters(cfg), vocab_size=cfg.vocab_size, d_model=cfg.d_model,
        n_layer=cfg.n_layer, n_head=cfg.n_head, attention_width=cfg.d_model, seq_len=seq_len,
        processor=cfg.processor, bias_channels=facts(cfg.encoding).has_bias, kernel_size=cfg.kernel_size,
        dape_width=cfg.dape_width)


__all__ = ["block_parameters", "decoder_flops_per_token", "decoder_non_embedding_parameters", "encoding_instances",
           "gpt_flops_per_token", "processor_parameters", "stack_parameters"]


CPU_RESERVE_BYTES = 2**29  # on a CPU: the interpreter, torch and the data loader's baseline (about 0.4 GB measured)


def loss_bytes(batch: int, length: int, vocab_size: int, *, backward: bool = True) -> int:
    """The loss's working set over ``batch`` sequences of ``length`` tokens: fp32 logits, and in training the
    log-softmax's gradient beside them (b·T·V values twice)."""
    return (2 if backward else 1) * batch * length * vocab_size * 4

