"""What a trained decoder's attention looks like (paper appendix K): A, B, the DAPE term and the attention sink.

Each layer's score pipeline is recomputed from its input for one sequence: A = q·kᵀ/√d, B, ``dape`` = f(tril([A; B]))
(what the processor adds) and the probabilities. The attention sink (Xiao et al., 2024; App. K compares DAPE1x3's with
DAPE's) is ``sink_mass``: the probability on the first key, averaged over heads and queries at positions ≥
``sink_min_query`` (default 16), measured on sequences (:func:`sink_sequences`) chosen from the split, the length and
the evaluation seed alone, so every run of a dataset sees the same ones and runs pair by ``sequence``. Sequence 0's
heat-maps are the ones written.

Everything is computed on the model's device; :func:`layer_rows` hands back only what appendix K's figures and the
sink read (each map's last query row, the sink mass), so a long sequence (8192) never puts T² maps in host memory
(:func:`layer_maps`: whole maps, for small lengths and tests).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import torch

from dape_core import io
from dape_core.errors import require_positive
from dape_core.model import GPT

MAP_NAMES = ("A", "B", "dape", "probs")


def model_device(model: torch.nn.Module) -> torch.device:
    """The device holding the model's parameters (where its maps are computed)."""
    return next(model.parameters()).device


@torch.no_grad()
def _layers(model: GPT, tokens: torch.Tensor) -> Iterator[dict[str, torch.Tensor]]:
    """Per layer on the model's device: A, B (zero without a bias), DAPE term, probabilities, each [1, H, T, T] fp32."""
    device = model_device(model)
    tokens = tokens.to(device)
    inputs: list[torch.Tensor] = []
    hooks = [blk.attn.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])) for blk in model.stack.blocks]
    try:
        model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    n = tokens.shape[1]
    positions = torch.arange(n, device=device)
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    for layer, (block, x) in enumerate(zip(model.stack.blocks, inputs)):
        attn, encoding = block.attn, model.stack.encoding(layer)
        q, k, _ = attn.qkv(x).view(1, n, 3, attn.n_head, attn.head_dim).permute(2, 0, 3, 1, 4)
        q, k = encoding.rotate(q, k, positions, positions)
        scores = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim)  # A = q·kᵀ/√d (eq. 1)
        bias = encoding.bias(q, k, scores, positions, positions) if encoding.has_bias else None
        plain = scores if bias is None else scores + bias
        processed = model.stack.processors[layer](scores, bias) if model.stack.has_processor else plain  # eq. 5
        probs = torch.softmax(processed.masked_fill(~causal, float("-inf")), dim=-1)
        full_bias = torch.zeros_like(scores) if bias is None else bias.expand_as(scores)
        yield {"A": scores.float(), "B": full_bias.float(), "dape": (processed - plain).float(), "probs": probs.float()}
        del q, k, scores, bias, plain, processed, probs, full_bias  # one layer's T² maps on the device at a time


def layer_maps(model: GPT, tokens: torch.Tensor) -> list[dict[str, np.ndarray]]:
    """Per layer: arrays ``A``, ``B``, ``dape`` and ``probs`` of shape [H, T, T] for a [1, T] token sequence."""
    return [{name: parts[name][0].cpu().numpy() for name in MAP_NAMES} for parts in _layers(model, tokens)]


def layer_rows(model: GPT, tokens: torch.Tensor, min_query: int = 16) -> list[dict]:
    """Per layer: the last query row [H, T] of ``A``, ``B``, ``dape`` and ``probs`` (appendix K's figures) and
    ``sink_mass``; no [H, T, T] map leaves the device."""
    out = []
    for parts in _layers(model, tokens):
        row = {name: parts[name][0, :, -1, :].cpu().numpy() for name in MAP_NAMES}
        row["sink_mass"] = sink_mass(parts["probs"][0], min_query)
        out.append(row)
        del parts  # before the next layer's maps are computed
    return out


def layer_sinks(model: GPT, tokens: torch.Tensor, min_query: int = 16) -> list[float]:
    """Per layer: ``sink_mass`` of a [1, T] sequence alone (one layer's maps on the device at a time)."""
    return [sink_mass(parts["probs"][0], min_query) for parts in _layers(model, tokens)]


def sink_sequences(split, length: int, count: int, seed: int = 0) -> list[tuple[int, int]]:
    """(document, start) of up to ``count`` windows ``doc[start : start + length]`` for App. K's sink statistic: every
    document's non-overlapping windows (starts 0, length, 2·length, …) in an order seeded by ``seed``, the first
    ``count`` whose tokens differ from every window taken before (boilerplate such as a licence header repeats across
    documents and would count twice). Depends on the split, ``length``, ``count`` and ``seed`` only; a smaller
    ``count`` takes a prefix of a larger one. Fewer when the documents hold fewer distinct windows; none when no
    document has ``length`` tokens."""
    require_positive("heatmap_len", length)
    require_positive("sink_sequences", count)
    lengths = np.asarray(split.document_lengths, dtype=np.int64)
    windows = lengths // length  # per document
    total = int(windows.sum())
    first = np.cumsum(windows) - windows  # flat index of each document's first window
    chosen: list[tuple[int, int]] = []
    seen: set[bytes] = set()
    for flat in np.random.default_rng(seed).permutation(total):
        document = int(np.searchsorted(first, flat, side="right") - 1)
        start = int(flat - first[document]) * length
        key = np.asarray(split.document(document)[start : start + length], dtype=np.int64).tobytes()
        if key not in seen:
            seen.add(key)
            chosen.append((document, start))
            if len(chosen) == count:
                break
    return chosen


def sink_mass(probs, min_query: int = 16) -> float:
    """Mean probability on the first key over heads and queries i ≥ ``min_query`` (all queries if shorter);
    ``probs`` [H, T, T] as a numpy array or a tensor on any device."""
    start = min_query if probs.shape[-2] > min_query else 0
    return float(probs[:, start:, 0].mean())


SINK_COLUMNS = ["method", "eval_len", "layer", "sequence", "document", "start", "sink_mass", "device"]


def sink_frame(layers: list, *, method: str, eval_len: int, device: str, sequence: int = 0,
               document: int = 0, start: int = 0) -> pd.DataFrame:
    """One row per layer of one sequence (``sequence``, ``document``, ``start``: :func:`sink_sequences`): the sink
    mass (a float of :func:`layer_sinks`, or a layer of :func:`layer_rows` or :func:`layer_maps`) and the device
    that computed it; no rows for a diverged run (no layers)."""
    def mass(m) -> float:
        if isinstance(m, dict):
            return m["sink_mass"] if "sink_mass" in m else sink_mass(m["probs"])
        return float(m)

    rows = [{"method": method, "eval_len": eval_len, "layer": i, "sequence": sequence, "document": document,
             "start": start, "sink_mass": mass(m), "device": device} for i, m in enumerate(layers)]
    return pd.DataFrame(rows, columns=SINK_COLUMNS)


def write_heatmaps(path: str | Path, layers: list[dict], *, method: str, device: str) -> None:
    """Appendix K's heat-map data, atomically: ``layer{i}_{A,B,dape,probs}`` as the last query row [H, T] of each
    map, the method and the device."""
    arrays = {f"layer{i}_{name}": m[name] if m[name].ndim == 2 else m[name][:, -1, :]
              for i, m in enumerate(layers) for name in MAP_NAMES}
    with io.output_path(Path(path), seal=True) as tmp:
        with open(tmp, "wb") as handle:
            np.savez_compressed(handle, method=np.array(method), device=np.array(device), **arrays)
