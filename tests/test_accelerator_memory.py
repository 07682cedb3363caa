"""The accelerator path's calls and memory, proven on the CPU: one SDPA call per biased layer where its scores fit,
the bias built once per layer, and DAPE's recomputed chunks (``recompute_scores``) keeping what a layer saves for
its backward pass linear in T — within 1.5× of a Kerple layer under the memory-efficient SDPA kernel — with the
gradients of the unrecomputed path.

Shapes are the paper's 125M layer (12 heads, d_model 768) on the ``meta`` device, where tensors have shapes and
storages but no data, so the bytes are exact and cost nothing. A Kerple layer on a GPU runs SDPA's
memory-efficient kernel (a float mask with a gradient); what its autograd node saves is fixed by its derivative
formula (q, k, v, the mask, the output, the log-sum-exp), the same on every device, so the test calls that kernel's
operator on ``meta`` where the CPU would choose the math kernel (which keeps the [batch, H, T, T] probabilities).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.autograd.graph import saved_tensors_hooks

import dape_core.attention as attention
from dape_core.attention import AttentionPath, SelfAttention, accelerator_chunk_rows
from dape_core.dape import build_processor
from dape_core.encodings import Kerple, build_encoding
from dape_core.settings import AttentionSettings

HEADS, WIDTH = 12, 768  # the 125M layer
DAPE1X3 = AttentionSettings(processor="dape_v2", kernel_size=3)


def efficient_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **_):
    """F.scaled_dot_product_attention as CUDA runs it with a float mask: the memory-efficient kernel's operator."""
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device).masked_fill(~attn_mask, -math.inf)
        attn_mask = attn_mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, True, dropout_p, is_causal)[0]


def meta_layer(encoding: str, settings: AttentionSettings, train_len: int):
    with torch.device("meta"):
        layer = SelfAttention(WIDTH, HEADS, causal=True)
        enc = build_encoding(encoding, HEADS, WIDTH // HEADS, causal=True, train_len=train_len)
        processor = build_processor(HEADS, settings, bias_channels=enc.has_bias)
    return layer, enc, processor


@pytest.fixture
def on_meta(monkeypatch):
    """Kerple's clamp reads its parameters' values (none on meta; they are at their initial values anyway), and
    SDPA runs the accelerator's kernel."""
    monkeypatch.setattr(Kerple, "clamp_parameters", lambda self: None)
    monkeypatch.setattr(F, "scaled_dot_product_attention", efficient_sdpa)


def saved_bytes(encoding: str, settings: AttentionSettings, batch: int, n: int, **kwargs) -> int:
    """Bytes of the distinct storages one attention layer (projections included) saves for its backward pass,
    its input excluded (the previous layer's output)."""
    layer, enc, processor = meta_layer(encoding, settings, n)
    x = torch.randn(batch, n, WIDTH, device="meta", requires_grad=True)
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage._cdata] = storage.nbytes()
        return tensor

    with saved_tensors_hooks(pack, lambda tensor: tensor):
        layer(x, encoding=enc, processor=processor, positions=torch.arange(n, device="meta"),
              path=AttentionPath("materialized", **kwargs))
    storages.pop(x.untyped_storage()._cdata, None)
    return sum(storages.values())


def sdpa_calls(encoding: str, batch: int, n: int, monkeypatch) -> tuple[int, int]:
    """(SDPA calls, bias builds) of one forward pass of a layer without a processor on the accelerator path."""
    layer, enc, _ = meta_layer(encoding, AttentionSettings(encoding=encoding), n)
    calls, builds = [], []
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or efficient_sdpa(*a, **kw))
    original_bias = enc.bias
    monkeypatch.setattr(enc, "bias", lambda *a: builds.append(1) or original_bias(*a))
    x = torch.randn(batch, n, WIDTH, device="meta")
    layer(x, encoding=enc, processor=None, positions=torch.arange(n, device="meta"), path=AttentionPath("materialized"))
    return len(calls), len(builds)


@pytest.mark.parametrize("encoding", ["kerple", "alibi", "fire", "t5"])
def test_one_sdpa_call_and_one_bias_per_biased_layer_at_batch_32_by_512(encoding, on_meta, monkeypatch):
    assert sdpa_calls(encoding, 32, 512, monkeypatch) == (1, 1)


def test_rows_are_chunked_only_where_one_call_would_exceed_the_budget(on_meta, monkeypatch):
    """T 2048 at batch 16: [16, 12, 2048, 2048] fp32 scores are 3 GiB, beyond the 1 GiB budget: 682 rows a call."""
    rows = accelerator_chunk_rows(16, HEADS, 2048, 4)
    assert rows == 2**30 // (16 * HEADS * 2048 * 4) == 682
    assert sdpa_calls("kerple", 16, 2048, monkeypatch) == (math.ceil(2048 / rows),) * 2
    assert accelerator_chunk_rows(16, HEADS, 2048, 2) == 1365  # bf16 autocast: half the bytes
    assert accelerator_chunk_rows(1, HEADS, 10**6, 4) == attention.MIN_CHUNK_ROWS


def test_the_cpu_path_keeps_its_cache_sized_chunks(on_meta, monkeypatch):
    """The fast (CPU) path still splits a biased layer into chunks of 16 MiB of scores: 8 calls at 32 × 512."""
    layer, enc, _ = meta_layer("kerple", AttentionSettings(), 512)
    calls = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or efficient_sdpa(*a, **kw))
    layer(torch.randn(32, 512, WIDTH, device="meta"), encoding=enc, processor=None,
          positions=torch.arange(512, device="meta"), path=AttentionPath("fast"))
    assert len(calls) == 8


@pytest.mark.parametrize("batch,n", [(32, 512), (16, 2048), (1, 2048)])
def test_a_dape1x3_layer_saves_within_1_5x_of_kerple(batch, n, on_meta):
    kerple = saved_bytes("kerple", AttentionSettings(), batch, n)
    dape = saved_bytes("kerple", DAPE1X3, batch, n)
    kept = saved_bytes("kerple", DAPE1X3, batch, n, recompute_scores=False)
    assert dape <= 1.5 * kerple
    assert kept > 5 * dape  # without recomputation every chunk keeps its [batch, rows, keys, channels] tensors


def test_what_a_dape1x3_layer_saves_grows_linearly_in_t(on_meta):
    """Four times the length at the same tokens (batch 32 × 512 → 8 × 2048): the same saved bytes with
    recomputation; more than three times more without it (tensors of batch × T² elements)."""
    short, long = (saved_bytes("kerple", DAPE1X3, b, n) for b, n in ((32, 512), (8, 2048)))
    assert long == short
    kept_short, kept_long = (saved_bytes("kerple", DAPE1X3, b, n, recompute_scores=False) for b, n in ((32, 512), (8, 2048)))
    assert kept_long > 3 * kept_short


@pytest.mark.parametrize("encoding,settings", [
    ("kerple", DAPE1X3), ("rope", DAPE1X3), ("fire", AttentionSettings(processor="dape_v1")),
    ("kerple", AttentionSettings(processor="dape_v2", kernel_size=3, padding="causal", tril=False)),
])
def test_recomputed_chunks_give_the_gradients_of_kept_ones(encoding, settings, monkeypatch):
    """Recomputation changes what is kept, not what is computed: bitwise-equal outputs and gradients on the CPU,
    with several chunks (a budget of a few rows) and dropout (the recomputation replays the random state)."""
    torch.manual_seed(0)
    heads, width, batch, n = 4, 32, 2, 40
    layer = SelfAttention(width, heads, causal=True, dropout=0.1)
    enc = build_encoding(encoding, heads, width // heads, causal=True, train_len=n)
    processor = build_processor(heads, settings, bias_channels=enc.has_bias)
    x = torch.randn(batch, n, width)

    def run(recompute):
        for module in (layer, enc, processor):
            module.zero_grad()
        inputs = x.clone().requires_grad_()
        torch.manual_seed(1)
        out = layer(inputs, encoding=enc, processor=processor, positions=torch.arange(n),
                    path=AttentionPath("materialized", query_chunk_size=12, recompute_scores=recompute))
        out.pow(2).sum().backward()
        grads = [p.grad.clone() for m in (layer, enc, processor) for p in m.parameters() if p.grad is not None]
        return out.detach(), inputs.grad, grads

    kept, recomputed = run(False), run(True)
    assert torch.equal(kept[0], recomputed[0]) and torch.equal(kept[1], recomputed[1])
    assert len(kept[2]) == len(recomputed[2]) > 0
    assert all(torch.equal(a, b) for a, b in zip(kept[2], recomputed[2]))
