"""What a trained decoder's attention looks like (paper appendix K): A, B, the DAPE term and the attention sink.

For one sequence, each layer's pieces of the score pipeline are recomputed from the layer's input:
A = q·kᵀ/√d, B = the encoding's bias, ``dape`` = f(tril([A; B])) (what the processor adds), and the attention
probabilities. The attention sink (Xiao et al., 2024) is measured as ``sink_mass``: the mean, over heads and over
queries at positions ≥ ``sink_min_query`` (default 16), of the probability placed on the first key.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dape_core.model import GPT


@torch.no_grad()
def layer_maps(model: GPT, tokens: torch.Tensor) -> list[dict[str, np.ndarray]]:
    """Per layer: arrays ``A``, ``B``, ``dape`` and ``probs`` of shape [H, T, T] for a [1, T] token sequence."""
    inputs: list[torch.Tensor] = []
    hooks = [blk.attn.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])) for blk in model.stack.blocks]
    try:
        model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    n = tokens.shape[1]
    positions = torch.arange(n)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    maps = []
    for layer, (block, x) in enumerate(zip(model.stack.blocks, inputs)):
        attn, encoding = block.attn, model.stack.encoding(layer)
        q, k, _ = attn.qkv(x).view(1, n, 3, attn.n_head, attn.head_dim).permute(2, 0, 3, 1, 4)
        q, k = encoding.rotate(q, k, positions, positions)
        scores = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim)
        bias = encoding.bias(q, k, scores, positions, positions) if encoding.has_bias else None
        plain = scores if bias is None else scores + bias
        processed = model.stack.processors[layer](scores, bias) if model.stack.has_processor else plain
        probs = torch.softmax(processed.masked_fill(~causal, float("-inf")), dim=-1)
        full_bias = torch.zeros_like(scores) if bias is None else bias.expand_as(scores)
        maps.append({"A": scores[0].numpy(), "B": full_bias[0].numpy(), "dape": (processed - plain)[0].numpy(),
                     "probs": probs[0].numpy()})
    return maps


def sink_mass(probs: np.ndarray, min_query: int = 16) -> float:
    """Mean probability on the first key over heads and queries i ≥ ``min_query`` (all queries if shorter)."""
    start = min_query if probs.shape[-2] > min_query else 0
    return float(probs[:, start:, 0].mean())
