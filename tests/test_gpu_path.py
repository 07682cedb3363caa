"""The accelerator path (``attention_impl: materialized``) equals the plain reference path; ``auto`` resolves by
device; the path's operator calls do not depend on the batch; one chunk's memory stays within its stated bound.

Everything runs on a CPU: the path has no device branches, so its arithmetic is proven here; the resolver is
checked with ``torch.device("cuda")`` without a GPU. Exactness: fp32, 1e-5 relative to each tensor's scale beyond
the fp32 reference's own rounding (its distance from the same computation in fp64: a scalar parameter's gradient,
FIRE's c, sums many cancelling terms), on outputs and on every gradient (q, k, v, the model's inputs, processor
weights, encoding parameters).
"""

import copy
import dataclasses
import functools
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import dape_core.implementations.fast as fast
import dape_core.implementations.materialized as materialized
from dape_core.attention import AttentionPath, attend
from dape_core.dape import ScoreProcessor, build_processor
from dape_core.encodings import ENCODINGS, build_encoding
from dape_core.errors import ConfigError
from dape_core.implementations import resolve_attention_impl
from dape_core.implementations.registry import PATHS
from dape_core.model import GPT, Encoder, EncoderConfig, GPTConfig
from dape_core.settings import AttentionSettings

VOCAB = 50
PROCESSORS = {  # none, DAPE V1, DAPE V2 k = 3 with both paddings, tril on and off
    "none": dict(processor="none"),
    "v1": dict(processor="dape_v1", kernel_size=1),
    "v1-no-tril": dict(processor="dape_v1", kernel_size=1, tril=False),
    **{
        f"v2-{padding}{'' if tril else '-no-tril'}":
            dict(processor="dape_v2", kernel_size=3, padding=padding, tril=tril)
        for padding in ("same", "causal") for tril in (True, False)
    },
}
CASES = list(itertools.product(ENCODINGS, PROCESSORS))


def assert_close_scaled(actual, expected, name=""):
    """fp32 agreement: |a − e| ≤ 1e-5·|e| + 1e-5·max|e| (rounding of a sum scales with its largest terms)."""
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale, msg=name)


def assert_all_close(result: dict, reference: dict, exact: dict):
    """``result`` equals the fp32 ``reference`` to 1e-5 of each tensor's scale beyond the reference's own
    rounding error (its distance from ``exact``, the reference computed in fp64)."""
    assert result.keys() == reference.keys() == exact.keys()
    for name in reference:
        expected = reference[name]
        rounding = float((expected.double() - exact[name]).abs().max())
        scale = max(1.0, float(expected.abs().max()))
        torch.testing.assert_close(result[name], expected, rtol=1e-5, atol=1e-5 * scale + rounding, msg=name)


def replace_entry(monkeypatch, name: str, entry) -> None:
    """For one test the attention path ``name`` runs ``entry`` (its row of the table of paths, replaced)."""
    monkeypatch.setitem(PATHS, name, dataclasses.replace(PATHS[name], attend=entry))


def perturb_encodings(modules):
    """Non-trivial positional parameters (CoPE and Transformer-XL start at zero)."""
    with torch.no_grad():
        for enc in modules:
            for p in enc.parameters():
                p.add_(0.1 * torch.randn_like(p))


def tiny_gpt(encoding, **settings):
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=VOCAB, size="tiny", encoding=encoding, train_len=8, **{"n_layer": 2, **settings}))
    perturb_encodings(model.stack.encodings)
    return model


def logits_and_gradients(net, x, **forward) -> dict:
    """A model's logits on ``x`` and every parameter's gradient of a fixed linear function of them."""
    net.zero_grad()
    logits = net(x, **forward)
    (logits * torch.linspace(-1, 1, VOCAB, dtype=logits.dtype)).sum().backward()
    return {"logits": logits.detach(), **{n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None}}


class AttentionCase:
    """One layer's encoding and processor with q, k, v [3, 4, 23, 8] that require gradients."""

    def __init__(self, encoding, settings, *, causal=True, n=23):
        torch.manual_seed(0)
        heads, head_dim = 4, 8
        self.encoding = build_encoding(encoding, heads, head_dim, causal=causal, train_len=8)
        perturb_encodings([self.encoding])
        self.processor = build_processor(heads, AttentionSettings(dape_width=6, **settings),
                                         bias_channels=self.encoding.has_bias)
        self.causal, self.positions = causal, torch.arange(n)
        self.qkv = [torch.randn(3, heads, n, head_dim) for _ in range(3)]
        self.weight = torch.randn(3, heads, n, head_dim)

    def run(self, attention_impl, chunk=None, dtype=torch.float32, recompute_scores=None) -> dict:
        """The output and every gradient: q, k, v, the processor's weights, the encoding's parameters (on fresh
        copies of the modules in ``dtype``)."""
        encoding = copy.deepcopy(self.encoding).to(dtype)
        processor = copy.deepcopy(self.processor).to(dtype) if self.processor is not None else None
        params = dict(encoding.named_parameters(prefix="encoding"))
        if processor is not None:
            params.update(processor.named_parameters(prefix="processor"))
        qkv = [t.to(dtype, copy=True).requires_grad_() for t in self.qkv]
        out = attend(*qkv, encoding=encoding, processor=processor, positions=self.positions, causal=self.causal,
                     query_chunk_size=chunk, attention_impl=attention_impl, recompute_scores=recompute_scores)
        (out * self.weight.to(dtype)).sum().backward()
        result = {"output": out.detach(), **{f"grad {n}": t.grad for n, t in zip("qkv", qkv)}}
        result.update({f"grad {n}": p.grad for n, p in params.items() if p.grad is not None})
        return result


@pytest.mark.parametrize("encoding,proc", CASES)
def test_materialized_attention_equals_plain_on_output_and_every_gradient(encoding, proc):
    case = AttentionCase(encoding, PROCESSORS[proc])
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    if case.processor is not None:
        assert materialized.chunk_rows(case.processor, 3, 23) >= 23  # the default budget: one chunk
        assert any(name.startswith("grad processor") for name in reference)
    assert_all_close(case.run("materialized"), reference, exact)  # a single chunk
    assert_all_close(case.run("materialized", chunk=5), reference, exact)  # 5 chunks, the last one short


def test_causal_chunks_split_the_rows_and_each_chunk_reads_only_the_keys_its_rows_reach(monkeypatch):
    """``causal_chunks`` 4 over 23 rows: chunks of 6 rows (the last 5), each reading the keys up to its last row
    plus the halo and keeping those up to its last row, largest first; the result equals plain. Without the causal
    mask every chunk reads every key, and a count below 1 is refused by name."""
    case = AttentionCase("kerple", PROCESSORS["v2-same"])
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    seen = []

    def recording(q_rows, k_read, v_kept, **kw):
        seen.append((kw["first"], q_rows.shape[2], k_read.shape[2], v_kept.shape[2]))
        return materialized.chunk_attention(q_rows, k_read, v_kept, **kw)

    replace_entry(monkeypatch, "materialized", functools.partial(
        materialized.attend_materialized, causal_chunks=4, chunk_fn=recording))
    assert_all_close(case.run("materialized"), reference, exact)
    assert case.processor.needed_halo() == 1
    assert seen[:4] == [(18, 5, 23, 23), (12, 6, 19, 18), (6, 6, 13, 12), (0, 6, 7, 6)]
    assert materialized.causal_chunk(23, 23, causal=False, causal_chunks=4) == 23
    with pytest.raises(ConfigError, match="causal_chunks: 0"):
        materialized.causal_chunk(23, 23, causal=True, causal_chunks=0)


def saved_bytes(run) -> int:
    """Bytes of the distinct storages that ``run()`` saves for its backward pass, counted as ``dape_core.memory``
    counts them (under ``saved_tensors_hooks``)."""
    from torch.autograd.graph import saved_tensors_hooks

    storages = {}

    def pack(tensor):
        storages[tensor.untyped_storage()._cdata] = tensor.untyped_storage().nbytes()
        return tensor

    with saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return sum(storages.values())


def test_causal_chunks_keep_less_for_the_backward_pass_than_one_chunk():
    """Without recomputation the chunks keep their maps: N causal chunks keep (N + 1)/2N of one chunk's, so the
    memory model's count at one chunk bounds them."""
    case = AttentionCase("kerple", PROCESSORS["v2-causal"], n=24)

    def layer(causal_chunks):
        q, k, v = (t.clone().requires_grad_() for t in case.qkv)
        return materialized.attend_materialized(q, k, v, encoding=case.encoding, processor=case.processor,
                                                positions=case.positions, causal=True, recompute_scores=False,
                                                causal_chunks=causal_chunks)

    assert saved_bytes(lambda: layer(4)) < 0.75 * saved_bytes(lambda: layer(1))


MODEL_CASES = sorted({(encoding, "v2-same") for encoding in ENCODINGS} | {("kerple", proc) for proc in PROCESSORS})


@pytest.mark.parametrize("encoding,proc", MODEL_CASES)
def test_materialized_model_equals_plain_on_logits_and_every_parameter_gradient(encoding, proc):
    """The whole decoder (every encoding with DAPE1x3, every processor setting with Kerple; the full grid is
    proven per layer above): gradients reach the inputs (the embedding), q/k/v projections, processors,
    encodings."""
    model = tiny_gpt(encoding, attention_impl="materialized", **PROCESSORS[proc])
    x = torch.randint(0, VOCAB, (3, 23))
    run = functools.partial(logits_and_gradients, x=x)
    reference, exact = run(model, fast_path=False), run(copy.deepcopy(model).double(), fast_path=False)
    assert "embed.weight" in reference and "stack.blocks.0.attn.qkv.weight" in reference
    assert_all_close(run(model), reference, exact)
    model.cfg.query_chunk_size = 4
    assert_all_close(run(model), reference, exact)


@pytest.mark.parametrize("proc", ["v1", "v2-same", "v2-causal"])
def test_chunks_sized_by_the_budget_equal_one_chunk(proc, monkeypatch):
    """A budget of 4 rows' bytes gives chunks of 4 rows, and the same results as the reference."""
    case = AttentionCase("kerple", PROCESSORS[proc])
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    monkeypatch.setattr(materialized, "DEFAULT_CHUNK_BYTES", materialized.chunk_bytes(case.processor, 3, 4, 23))
    assert materialized.chunk_rows(case.processor, 3, 23) == 4
    calls = []
    original = materialized.materialized_scores
    monkeypatch.setattr(materialized, "materialized_scores", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    assert_all_close(case.run("materialized"), reference, exact)
    assert len(calls) == 2 * 6  # ⌈23 / 4⌉ chunks, each once more in the backward pass (recompute_scores)


def test_encoder_materialized_path_equals_plain_path():
    """The non-causal CHE encoder: every key of every row, no mask."""
    torch.manual_seed(0)
    model = Encoder(EncoderConfig(n_layer=2, d_model=16, n_head=4, dropout=0.0, encoding="kerple", processor="dape_v2",
                                  kernel_size=3, attention_impl="materialized"))
    x = model.embed(torch.randint(0, 3, (2, 11)))
    positions = torch.arange(11)
    with torch.no_grad():
        reference = model.stack(x, positions, AttentionPath("plain"))
        assert_close_scaled(model.stack(x, positions, AttentionPath("materialized")), reference)
        assert_close_scaled(model.stack(x, positions, AttentionPath("materialized", 3)), reference)


def changes_before(model, t=9, n=16):
    x = torch.randint(0, VOCAB, (2, n))
    y = x.clone()
    y[:, t] = (y[:, t] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(x), model(y)
    return (a[:, :t] - b[:, :t]).abs().max().item(), (a[:, t:] - b[:, t:]).abs().max().item()


@pytest.mark.parametrize("encoding,proc", list(itertools.product(ENCODINGS, ["v1", "v2-same", "v2-causal"])))
@pytest.mark.parametrize("chunk", [None, 4])
def test_materialized_path_with_tril_never_reads_future_tokens(encoding, proc, chunk):
    model = tiny_gpt(encoding, attention_impl="materialized", query_chunk_size=chunk, **PROCESSORS[proc]).eval()
    before, after = changes_before(model)
    assert before == 0.0
    assert after > 0  # the perturbation is visible from t on


def test_materialized_path_without_tril_reads_the_future_with_same_padding():
    """The §4.5 leakage ablation is the same function on this path (a check that the mask is not over-applied)."""
    model = tiny_gpt("kerple", attention_impl="materialized", **PROCESSORS["v2-same-no-tril"]).eval()
    assert changes_before(model)[0] > 1e-6


def test_scores_and_softmax_stay_fp32_under_bf16_autocast(monkeypatch):
    case = AttentionCase("kerple", PROCESSORS["v2-same"])
    reference = case.run("plain")["output"]
    seen = []
    original = materialized.materialized_scores

    def recording(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append((args[1].dtype, kwargs["compute_dtype"], out.dtype))
        return out

    monkeypatch.setattr(materialized, "materialized_scores", recording)
    q, k, v = (t.to(torch.bfloat16) for t in case.qkv)  # what a bf16-autocast projection returns
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = attend(q, k, v, encoding=case.encoding, processor=case.processor, positions=case.positions,
                     causal=True, attention_impl="materialized")
    assert seen == [(torch.float32, torch.bfloat16, torch.float32)]  # A in, scores out in fp32; convs in bf16
    torch.testing.assert_close(out.float(), reference, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("proc", ["v2-same", "v2-causal"])
def test_the_convolutions_see_a_channels_last_input_and_no_padded_copy(proc, monkeypatch):
    """Both convolutions read channels-last inputs, and no constant_pad_nd copies the feature map: the
    convolutions pad themselves."""
    case = AttentionCase("kerple", PROCESSORS[proc])
    layouts, original = [], F.conv2d
    monkeypatch.setattr(F, "conv2d", lambda x, *a, **kw: layouts.append(
        x.is_contiguous(memory_format=torch.channels_last)) or original(x, *a, **kw))
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        attend(*case.qkv, encoding=case.encoding, processor=case.processor, positions=case.positions, causal=True,
               attention_impl="materialized")
    assert layouts == [True, True]
    assert not [e.name for e in prof.events() if e.name == "aten::constant_pad_nd"]


# --- auto ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,device,expected", [
    ("auto", torch.device("cpu"), "fast"),
    ("auto", "cpu", "fast"),
    ("auto", torch.device("cuda"), "compiled"),
    ("auto", "cuda:1", "compiled"),
    ("auto", "mps", "materialized"),
    *[(name, device, name) for name in ("fast", "plain", "materialized", "compiled", "fused")
      for device in ("cpu", torch.device("cuda"))],
])
def test_auto_resolves_by_device_and_other_names_are_themselves(name, device, expected, monkeypatch):
    from dape_core import implementations
    monkeypatch.setattr(implementations, "TRITON_IMPORTABLE", True)
    assert resolve_attention_impl(name, device) == expected


def test_auto_trains_on_the_materialized_path_on_cuda_without_triton(monkeypatch):
    """TorchInductor compiles GPU kernels with Triton: without it, auto on CUDA is the materialized path."""
    from dape_core import implementations
    monkeypatch.setattr(implementations, "TRITON_IMPORTABLE", False)
    assert resolve_attention_impl("auto", "cuda") == "materialized"
    assert resolve_attention_impl("compiled", "cuda") == "compiled"  # a named path is itself


def test_an_unknown_attention_impl_names_the_field_and_the_allowed_values():
    with pytest.raises(ConfigError, match="attention_impl: 'flash'.*auto, fast, plain, materialized"):
        resolve_attention_impl("flash", "cpu")
    with pytest.raises(ConfigError, match="attention_impl: 'auto'.*plain, fast, materialized"):
        attend(*(torch.zeros(1, 1, 2, 2) for _ in range(3)), encoding=build_encoding("nope", 1, 2), processor=None,
               positions=torch.arange(2), causal=True, attention_impl="auto")  # attend takes a resolved path


def test_the_default_is_auto_and_runs_the_blocked_path_on_a_cpu(monkeypatch):
    from dape_core import implementations
    on_cuda = "compiled" if implementations.TRITON_IMPORTABLE else "materialized"  # training: torch.compile's
    model = tiny_gpt("kerple", processor="dape_v2", kernel_size=3)
    assert model.cfg.attention_impl == "auto"
    assert model.resolved_attention_impl() == "fast" and model.resolved_attention_impl("cuda") == on_cuda
    used = []
    original = fast.blocked_scores
    monkeypatch.setattr(fast, "blocked_scores", lambda *a, **kw: used.append("fast") or original(*a, **kw))
    replace_entry(monkeypatch, "materialized", lambda *a, **kw: pytest.fail("materialized ran on a CPU"))
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (2, 12)))
    assert used == ["fast"] * model.cfg.n_layer
    encoder = Encoder(EncoderConfig(n_layer=1, d_model=16, n_head=4, processor="dape_v2", kernel_size=3))
    assert encoder.resolved_attention_impl() == "fast" and encoder.resolved_attention_impl("cuda") == on_cuda


def test_a_model_set_to_materialized_runs_it_on_a_cpu(monkeypatch):
    model = tiny_gpt("kerple", processor="dape_v2", kernel_size=3, attention_impl="materialized")
    assert model.resolved_attention_impl() == "materialized"
    monkeypatch.setattr(fast, "blocked_scores", lambda *a, **kw: pytest.fail("the blocked path ran"))
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (2, 12)))


# --- operator calls -----------------------------------------------------------------------------------------


def aten_calls(model, batch, length) -> int:
    """aten:: operator calls (torch.profiler) of one forward and backward pass, after a warm-up pass: the calls
    made by the model's code and the autograd engine, not those an operator makes inside itself (which a CPU
    kernel chooses by size: ``cat`` narrows its inputs at some sizes)."""
    tokens = torch.randint(0, VOCAB, (batch, length))

    def step():
        model.zero_grad(set_to_none=True)
        model(tokens).sum().backward()

    step()  # fills the geometry caches
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(1 for event in prof.events() if event.name.startswith("aten::")
               and not (event.cpu_parent is not None and event.cpu_parent.name.startswith("aten::")))


@pytest.mark.parametrize("length", [32, 64])
@pytest.mark.parametrize("chunk", [None, 16])
def test_materialized_operator_calls_do_not_grow_with_the_batch(length, chunk):
    """DAPE1x3-Kerple, one layer: the same calls at batch 2 and 8, whole or in chunks of 16 query rows."""
    model = tiny_gpt("kerple", processor="dape_v2", kernel_size=3, attention_impl="materialized", n_layer=1,
                     query_chunk_size=chunk)
    counts = [aten_calls(model, batch, length) for batch in (2, 8)]
    assert counts[0] == counts[1]
    if chunk is not None:  # the count does see the loop over chunks of rows
        model.cfg.query_chunk_size = None
        assert counts[0] > aten_calls(model, 2, length)


def test_the_operator_count_sees_a_loop_over_batch_elements(monkeypatch):
    """The same count grows with the batch on the blocked CPU path once its blocks hold one batch element (a hidden
    map of 16 rows × ≤ 34 keys × D_DAPE 32 in fp32 per block; as at the 125M shape with T = 512)."""
    monkeypatch.setattr(fast, "DEFAULT_BLOCK_BYTES", 16 * 34 * 32 * 4)
    model = tiny_gpt("kerple", processor="dape_v2", kernel_size=3, attention_impl="fast", n_layer=1)
    assert aten_calls(model, 8, 32) > aten_calls(model, 2, 32)


# --- memory -------------------------------------------------------------------------------------------------


def test_the_stated_350m_chunk_at_8192():
    """The module docstring's figures: 350M shape (16 heads, D_DAPE 32), DAPE1×3-Kerple, fp32, T 8192, batch 1."""
    processor = ScoreProcessor(16, AttentionSettings(processor="dape_v2", kernel_size=3, dape_width=32))
    assert materialized.chunk_bytes(processor, 1, 1, 8192) == 3_670_016
    assert materialized.chunk_rows(processor, 1, 8192) == 292
    assert materialized.chunk_bytes(processor, 1, 292, 8192) == 1_071_644_672 <= materialized.DEFAULT_CHUNK_BYTES


def peak_bytes(run) -> int:
    """Peak of the CPU bytes allocated and not yet freed during ``run`` (torch.profiler, operator granularity)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("encoding", ["kerple", "rope"])
@pytest.mark.parametrize("proc", ["v1", "v2-same", "v2-causal-no-tril"])
@pytest.mark.parametrize("dape_dtype", [None, torch.bfloat16])
@pytest.mark.parametrize("rows", [96, 24])
def test_one_chunk_stays_within_the_stated_bytes(encoding, proc, dape_dtype, rows, monkeypatch):
    """Measured peak ≤ chunk_bytes (plus the [R, K] mask and the attention output), and the bound is tight."""
    torch.manual_seed(0)
    heads, head_dim, batch, n = 4, 8, 2, 96
    enc = build_encoding(encoding, heads, head_dim, causal=True, train_len=n)
    processor = build_processor(heads, AttentionSettings(dape_width=8, **PROCESSORS[proc]), bias_channels=enc.has_bias)
    itemsize = 2 if dape_dtype is not None else 4
    bound = materialized.chunk_bytes(processor, batch, rows, n, itemsize)
    monkeypatch.setattr(materialized, "DEFAULT_CHUNK_BYTES", bound)
    assert materialized.chunk_rows(processor, batch, n, feature_itemsize=itemsize) == rows
    q, k, v = (torch.randn(batch, heads, n, head_dim) for _ in range(3))

    def run():
        materialized.attend_materialized(q, k, v, encoding=enc, processor=processor, positions=torch.arange(n),
                                         causal=True, dape_dtype=dape_dtype)

    with torch.no_grad():
        run()
        peak = peak_bytes(run)
    outside = rows * n + batch * heads * n * head_dim * 4  # the boolean mask; the outputs of all chunks
    assert 0.75 * bound < peak <= bound + outside
