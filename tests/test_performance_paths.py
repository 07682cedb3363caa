"""Fast paths equal the plain reference path; caches hold only parameter-free geometry and follow parameters.

The plain path (``fast_path=False`` / ``attention_impl="plain"``) materialises the paper's form; every fast path —
the blocked GEMM processor with its shared and per-distance bias halves, trimmed keys and fused causal mask,
query chunks, the batched (per-element bias) and bias-free modes, the non-causal encoder — must give the same
outputs and gradients in fp32 (1e-5 relative to each tensor's scale). Speed is benchmarked in ``benchmarks/``.
"""

import copy
import itertools

import pytest
import torch

import dape_core.implementations.fast as fast
import dape_core.implementations.fast_autograd as fast_autograd
from dape_core.dape import ScoreProcessor
from dape_core.implementations.fast import blocked_scores
from dape_core.encodings import ENCODINGS, GeometryCache, build_encoding, geometry
from dape_core.attention import AttentionPath
from dape_core.model import GPT, Encoder, EncoderConfig, GPTConfig
from dape_core.settings import AttentionSettings

VOCAB = 50
PROCESSORS = {
    "v1": dict(processor="dape_v1", kernel_size=1),
    "v2-same": dict(processor="dape_v2", kernel_size=3, padding="same"),
    "v2-causal": dict(processor="dape_v2", kernel_size=3, padding="causal"),
    "v2-k5": dict(processor="dape_v2", kernel_size=5),
    "v2-k5-no-tril": dict(processor="dape_v2", kernel_size=5, tril=False),
}


def assert_close_scaled(actual, expected, name=""):
    """fp32 agreement: |a − e| ≤ 1e-5·|e| + 1e-5·max|e| (rounding of a sum scales with its largest terms)."""
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale, msg=name)


def tiny_gpt(encoding, **settings):
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=VOCAB, size="tiny", n_layer=2, encoding=encoding, train_len=8, **settings))
    with torch.no_grad():  # non-trivial positional parameters (CoPE and XL start at zero)
        for enc in model.stack.encodings:
            for p in enc.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return model


def outputs_and_grads(model, x, **forward):
    model.zero_grad()
    logits = model(x, **forward)
    (logits * torch.linspace(-1, 1, VOCAB)).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(result, reference):
    assert_close_scaled(result[0], reference[0], "logits")
    assert result[1].keys() == reference[1].keys()
    for name in reference[1]:
        assert_close_scaled(result[1][name], reference[1][name], name)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 2 rows and one batch element, so that every block boundary and trimmed key range is crossed."""
    monkeypatch.setattr(fast, "DEFAULT_BLOCK_ROWS", 2)
    monkeypatch.setattr(fast, "DEFAULT_BLOCK_BYTES", 1)


@pytest.mark.parametrize("encoding,proc", list(itertools.product(ENCODINGS, PROCESSORS)))
def test_fast_path_equals_plain_path_in_fp32(encoding, proc, small_blocks):
    model = tiny_gpt(encoding, **PROCESSORS[proc])
    x = torch.randint(0, VOCAB, (3, 23))  # batch 3: the bias half shared by the batch (ALiBi, Kerple, FIRE, T5)
    reference = outputs_and_grads(model, x, fast_path=False)
    assert_same(outputs_and_grads(model, x), reference)
    model.cfg.query_chunk_size = 5  # query chunks: row offsets, trimmed keys and halos
    assert_same(outputs_and_grads(model, x), reference)


@pytest.mark.parametrize("encoding", ["kerple", "rope"])
def test_fast_path_with_batch_one_and_default_blocks(encoding):
    """Batch 1 folds a batch-free bias into Conv1's input channels (the evaluation case)."""
    model = tiny_gpt(encoding, processor="dape_v2", kernel_size=3)
    x = torch.randint(0, VOCAB, (1, 40))
    assert_same(outputs_and_grads(model, x), outputs_and_grads(model, x, fast_path=False))


@pytest.mark.parametrize("encoding,relative", [("kerple", True), ("t5", True), ("alibi", True), ("fire", False)])
def test_a_relative_bias_is_convolved_once_per_distance(encoding, relative, monkeypatch):
    """ALiBi, Kerple and T5 at contiguous positions take the per-distance path; FIRE (normalised by i) does not."""
    built = []
    original = fast_autograd.RelativeBiasHalf.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(fast_autograd.RelativeBiasHalf, "__init__", counting)
    with torch.no_grad():
        tiny_gpt(encoding, processor="dape_v2", kernel_size=3)(torch.randint(0, VOCAB, (2, 12)))
    assert bool(built) == relative


def test_attention_impl_plain_selects_the_reference(monkeypatch):
    model = tiny_gpt("kerple", processor="dape_v2", kernel_size=3, attention_impl="plain")
    x = torch.randint(0, VOCAB, (2, 12))

    def fail(*args, **kwargs):
        raise AssertionError("the fast processor ran on the plain path")

    monkeypatch.setattr(fast, "blocked_scores", fail)
    with torch.no_grad():
        model(x)
        torch.manual_seed(0)
        encoder = Encoder(EncoderConfig(n_layer=1, d_model=16, n_head=4, processor="dape_v2", kernel_size=3,
                                        attention_impl="plain"))
        encoder(torch.randint(0, 2, (2, 9)))


@pytest.mark.parametrize("mode", ["shared", "batched", "none"])
@pytest.mark.parametrize("padding,tril", [("same", True), ("causal", True), ("same", False)])
def test_processor_fast_equals_forward_everywhere_without_a_causal_mask(mode, padding, tril, small_blocks):
    """Non-causal use (the CHE encoder): every position exact, for a shared, per-element and absent bias."""
    torch.manual_seed(0)
    heads, batch, n = 3, 2, 9
    settings = AttentionSettings(processor="dape_v2", kernel_size=3, dape_width=5, padding=padding, tril=tril)
    proc = ScoreProcessor(heads, settings, bias_channels=mode != "none")
    scores = torch.randn(batch, heads, n, n, requires_grad=True)
    bias = None
    if mode != "none":
        bias = torch.randn(*([batch] if mode == "batched" else []), heads, n, n, requires_grad=True)
    weight = torch.randn(batch, heads, n, n)
    results = []
    for run in (proc.forward, lambda *a: blocked_scores(proc, *a)):
        proc.zero_grad()
        inputs = [t for t in (scores, bias) if t is not None]
        for t in inputs:
            t.grad = None
        out = run(scores, bias, 2)
        (out * weight).sum().backward()
        results.append([out.detach()] + [t.grad.clone() for t in inputs] + [p.grad.clone() for p in proc.parameters()])
    for blocked, plain in zip(results[1], results[0]):
        assert_close_scaled(blocked, plain)


def test_encoder_fast_path_equals_plain_path(small_blocks):
    torch.manual_seed(0)
    model = Encoder(EncoderConfig(n_layer=2, d_model=16, n_head=4, dropout=0.0, encoding="kerple", processor="dape_v2", kernel_size=3))
    x = model.embed(torch.randint(0, 3, (2, 11)))
    positions = torch.arange(11)
    torch.testing.assert_close(model.stack(x, positions), model.stack(x, positions, AttentionPath("plain")), rtol=1e-5, atol=1e-5)


def test_bf16_option_runs_and_stays_close():
    model = tiny_gpt("kerple", processor="dape_v2", kernel_size=3)
    x = torch.randint(0, VOCAB, (2, 30))
    reference = outputs_and_grads(model, x)
    model.cfg.dape_dtype = "bfloat16"
    logits, grads = outputs_and_grads(model, x)
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
    assert all(torch.isfinite(g).all() for g in grads.values())
    torch.testing.assert_close(logits, reference[0], rtol=0.05, atol=0.05)


@pytest.mark.parametrize("encoding", [n for n in ENCODINGS if any(True for _ in build_encoding(n, 4, 16).parameters())])
def test_caches_follow_parameters_after_an_optimiser_step(encoding):
    """A learned bias is recomputed from its parameters at every call; only the geometry is reused."""
    model = tiny_gpt(encoding, processor="dape_v2", kernel_size=3)
    x = torch.randint(0, VOCAB, (2, 16))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model(x)  # fills the geometry cache
    (before * torch.randn_like(before)).sum().backward()
    opt.step()
    with torch.no_grad():
        after = model(x)
        geometry.clear()
        fresh = copy.deepcopy(model)(x)
    torch.testing.assert_close(after, fresh, rtol=0, atol=0)
    assert not torch.allclose(before.detach(), after)


def test_geometry_cache_is_shared_by_layers_and_keyed_by_the_position_tensors():
    cache = GeometryCache(max_bytes=10_000)
    pos = torch.arange(8)
    built = []

    def build():
        built.append(1)
        return pos[:, None] - pos[None, :]

    first = cache.get(("d",), pos, pos, build)
    assert cache.get(("d",), pos, pos, build) is first and len(built) == 1  # the next layer reuses it
    assert cache.get(("d",), torch.arange(8), torch.arange(8), build) is not first  # other position tensors
    pos.add_(1)  # an in-place change bumps the version counter
    cache.get(("d",), pos, pos, build)
    assert len(built) == 3
    big = torch.arange(200)
    cache.get(("d",), big, big, lambda: big[:, None] - big[None, :])  # 320 kB: returned, not kept
    assert cache.bytes <= cache.max_bytes


def test_alibi_bias_is_built_once_for_all_layers():
    model = tiny_gpt("alibi", processor="dape_v2", kernel_size=3)
    geometry.clear()
    hits = geometry.hits
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (1, 12)))
    assert geometry.hits - hits == model.cfg.n_layer - 1
