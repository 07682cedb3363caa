"""The compiled path (``attention_impl: compiled``): the materialized path's chunks under ``torch.compile``.

It equals the plain reference on outputs and every gradient (q, k, v, the encoding's parameters, both layers of
the processor) for every encoding × processor setting, chunked and not, with and without recomputation: the breadth
traced with the ``aot_eager`` backend (TorchDynamo and AOTAutograd trace the forward and backward graphs, which run
eagerly), and TorchInductor's generated kernels for the default DAPE1×3-Kerple layer and a two-layer decoder. One
graph per chunk shape serves every layer and step; the graph mutates no parameter (Kerple's clamp clamped in place
at every call bumped its parameters' versions under a tensor the previous chunk had saved, which failed the
backward pass of a two-chunk layer on an H200); with attention dropout, and inside a graph that is already being
traced (``training.compile``), the chunks run uncompiled.
"""

import copy
import functools

import pytest
import torch
import torch._dynamo as dynamo
from torch._dynamo.backends.registry import lookup_backend

import dape_core.implementations.compiled as compiled
from dape_core.dape import build_processor
from dape_core.encodings import ENCODINGS
from dape_core.implementations.materialized import chunk_rows
from dape_core.memory import transient_bytes
from dape_core.model import GPTConfig
from dape_core.settings import AttentionSettings
from test_gpu_path import (PROCESSORS, VOCAB, AttentionCase, assert_all_close, logits_and_gradients, replace_entry,
                           tiny_gpt)

CASES = [(encoding, "v2-same") for encoding in ENCODINGS] + [
    ("kerple", proc) for proc in ("v1", "v1-no-tril", "v2-causal", "v2-causal-no-tril", "v2-same-no-tril")]


@pytest.fixture
def backend(monkeypatch):
    """The chunks compiled with a backend that records each compilation (``aot_eager`` unless the test swaps
    ``graphs.backend``), from a fresh TorchDynamo cache."""
    graphs = []
    inner = {"backend": lookup_backend("aot_eager")}

    def recording(graph_module, example_inputs):
        graphs.append(graph_module)
        return inner["backend"](graph_module, example_inputs)

    dynamo.reset()
    compiled.compiled_chunk.cache_clear()
    monkeypatch.setattr(compiled, "BACKEND", recording)
    yield graphs, inner
    dynamo.reset()
    compiled.compiled_chunk.cache_clear()


@pytest.mark.parametrize("encoding,proc", CASES)
def test_the_compiled_path_equals_plain_on_output_and_every_gradient(encoding, proc, backend):
    graphs, _ = backend
    case = AttentionCase(encoding, PROCESSORS[proc])
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    assert any(name.startswith("grad processor") for name in reference)
    assert_all_close(case.run("compiled"), reference, exact)  # one chunk
    assert_all_close(case.run("compiled", chunk=5), reference, exact)  # 5 chunks, the last one short
    assert len(graphs) == 1 + 5  # one graph per chunk shape


@pytest.mark.parametrize("recompute", [True, False])
def test_the_compiled_path_with_and_without_recomputation_equals_plain(recompute, backend, monkeypatch):
    case = AttentionCase("kerple", PROCESSORS["v2-causal"])
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    checkpoints = []
    original = compiled.attend_materialized.__globals__["checkpoint"]
    monkeypatch.setitem(compiled.attend_materialized.__globals__, "checkpoint",
                        lambda *a, **kw: checkpoints.append(1) or original(*a, **kw))
    assert_all_close(case.run("compiled", chunk=8, recompute_scores=recompute), reference, exact)
    assert len(checkpoints) == (3 if recompute else 0)


def test_inductor_kernels_equal_plain_for_a_chunked_dape1x3_kerple_layer(backend):
    """TorchInductor's generated (C++) kernels, three chunks, forward and backward."""
    graphs, inner = backend
    inner["backend"] = lookup_backend("inductor")
    case = AttentionCase("kerple", PROCESSORS["v2-same"])
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    assert_all_close(case.run("compiled", chunk=9), reference, exact)
    assert len(graphs) == 3


def test_a_compiled_decoder_equals_plain_and_compiles_once_per_chunk_shape(backend):
    """A two-layer DAPE1×3-Kerple decoder over three steps: the logits and every parameter's gradient equal the
    plain path's; both layers share each chunk shape's graph, later steps compile nothing, and the encoding's
    parameters are never written (their autograd versions stay)."""
    graphs, inner = backend
    inner["backend"] = lookup_backend("inductor")
    model = tiny_gpt("kerple", attention_impl="compiled", query_chunk_size=8, **PROCESSORS["v2-same"])
    x = torch.randint(0, VOCAB, (3, 23))
    run = functools.partial(logits_and_gradients, x=x)
    reference, exact = run(model, fast_path=False), run(copy.deepcopy(model).double(), fast_path=False)
    versions = [p._version for p in model.stack.encodings.parameters()]
    for step in range(3):
        with dynamo.config.patch(error_on_recompile=step > 0):
            assert_all_close(run(model), reference, exact)
    assert len(graphs) == 3  # ⌈23 / 8⌉ chunk shapes, for both layers and every step
    assert [p._version for p in model.stack.encodings.parameters()] == versions


def test_causal_chunks_compile_one_graph_per_chunk_shape_and_equal_plain(backend, monkeypatch):
    """``causal_chunks`` 3 over 23 rows: three chunks, each its own shape (its rows reach different keys), so three
    graphs; the result equals plain."""
    graphs, _ = backend
    case = AttentionCase("kerple", PROCESSORS["v2-causal"])
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    replace_entry(monkeypatch, "compiled", functools.partial(compiled.attend_compiled, causal_chunks=3))
    assert_all_close(case.run("compiled"), reference, exact)
    assert len(graphs) == 3


def test_a_process_compiles_more_chunk_shapes_than_dynamos_default_limit(backend):
    """Every (length, causal chunks) pair of one process compiles the chunk shapes it has not met (a chunk is its
    length, whose strides its views keep, first row, rows and keys), all counted against the one chunk function:
    here 30 graphs, past Dynamo's default limit of 8 per function (and the 3 + 8 one call needs), where
    ``fullgraph`` would fail the call."""
    graphs, _ = backend
    case = AttentionCase("kerple", PROCESSORS["v2-causal"])  # tril and causal padding: no halo
    shapes = set()
    for n in (16, 20, 24, 28, 32):
        for causal_chunks in (1, 2, 3):
            q, k, v = (torch.randn(1, 4, n, 8, requires_grad=True) for _ in range(3))
            out = compiled.attend_compiled(q, k, v, encoding=case.encoding, processor=case.processor,
                                           positions=torch.arange(n), causal=True, causal_chunks=causal_chunks)
            out.sum().backward()
            chunk = -(-n // causal_chunks)
            shapes |= {(n, r0, min(n, r0 + chunk) - r0, min(n, r0 + chunk)) for r0 in range(0, n, chunk)}
    assert len(graphs) == len(shapes) == 30


def test_with_attention_dropout_the_chunks_run_uncompiled(backend):
    graphs, _ = backend
    case = AttentionCase("kerple", PROCESSORS["v2-same"])
    q, k, v = (t.requires_grad_() for t in case.qkv)
    torch.manual_seed(3)
    out = compiled.attend_compiled(q, k, v, encoding=case.encoding, processor=case.processor,
                                   positions=case.positions, causal=True, dropout_p=0.5, chunk=8)
    out.sum().backward()
    assert graphs == [] and q.grad is not None


def test_inside_a_traced_model_the_chunks_are_traced_into_its_graph(backend):
    """``training.compile``: the whole model under ``torch.compile(fullgraph=True)`` on the compiled path is one
    graph (the model's), with no graph of the chunks' own."""
    graphs, _ = backend
    model = tiny_gpt("kerple", attention_impl="compiled", **PROCESSORS["v2-same"])
    x = torch.randint(0, VOCAB, (2, 12))
    model_graphs = []

    def model_backend(graph_module, example_inputs):
        model_graphs.append(graph_module)
        return lookup_backend("aot_eager")(graph_module, example_inputs)

    expected = model(x)  # eagerly: the chunk's own graph
    assert len(graphs) == 1
    dynamo.reset()
    torch.testing.assert_close(torch.compile(model, fullgraph=True, backend=model_backend)(x), expected)
    assert len(model_graphs) == 1 and len(graphs) == 1


def test_chunks_within_the_compiled_budget_and_the_memory_model_reads_it():
    """The 125M shape (H 12, D_DAPE 32, Kerple) at 16,384 tokens in bf16: one chunk at T 512, two at T 2048 within
    4 GiB; the memory model's transient bytes of the compiled path follow its larger chunks."""
    processor = build_processor(12, AttentionSettings(processor="dape_v2", kernel_size=3), bias_channels=True)
    assert compiled.compiled_chunk_rows(processor, 32, 512, feature_itemsize=2) == 512
    rows = compiled.compiled_chunk_rows(processor, 8, 2048, feature_itemsize=2)
    assert 1024 <= rows < 2048 and rows > chunk_rows(processor, 8, 2048, feature_itemsize=2)
    cfg = dict(size="125M", vocab_size=50304, train_len=2048, encoding="kerple", processor="dape_v2", kernel_size=3)
    assert transient_bytes(GPTConfig(**cfg, attention_impl="compiled"), 8, precision="bf16") > \
        transient_bytes(GPTConfig(**cfg, attention_impl="materialized"), 8, precision="bf16")
