"""The Triton feature map (``feature_map="triton"`` of the materialized and compiled paths,
:mod:`dape_core.implementations.feature_map`) equals the layer's own convolutions: f of ``padded_feature_map`` on
its first K keys, and the whole path against the plain reference, on outputs and every gradient (x; q, k, v; the
encoding's parameters; both layers' weights and biases).

Without a GPU the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``, which ``conftest.py`` sets).
Tiles of 2 rows × 8 keys put the tile edges inside short maps (K = 1, 7, 8, 9, 17: below, at and across a tile);
fp32, 1e-5 of each tensor's scale.
"""

import copy
import functools
import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("these tests run the kernels in Triton's CPU interpreter (TRITON_INTERPRET=1, which conftest.py sets "
                "without a GPU); on a GPU benchmarks/fused_layer.py --check compares them", allow_module_level=True)
triton = pytest.importorskip("triton", minversion="3.9",
                             reason="the kernels' CPU interpreter needs Triton ≥ 3.9 (make install-test installs it)")

import torch._dynamo as dynamo  # noqa: E402
from torch._dynamo.backends.registry import lookup_backend  # noqa: E402

import dape_core.implementations.compiled as compiled  # noqa: E402
import dape_core.implementations.feature_map as feature_map  # noqa: E402
from dape_core.dape import build_processor  # noqa: E402
from dape_core.errors import ConfigError  # noqa: E402
from dape_core.implementations.feature_map import FeatureTiles, triton_feature_map  # noqa: E402
from dape_core.implementations.materialized import attend_materialized, padded_feature_map  # noqa: E402
from dape_core.implementations.registry import PATHS  # noqa: E402
from dape_core.settings import AttentionSettings  # noqa: E402
from test_gpu_path import PROCESSORS, AttentionCase, assert_all_close, replace_entry, saved_bytes  # noqa: E402

SMALL = FeatureTiles(rows=2, keys=8)
PATH_TILES = FeatureTiles(rows=16, keys=32)
FEATURE_CASES = [("dape_v1", 1, "same"), ("dape_v2", 3, "same"), ("dape_v2", 3, "causal"), ("dape_v2", 5, "same"),
                 ("dape_v2", 5, "causal")]


def feature_and_gradients(fn, processor, x, weight):
    """f and the gradients of x and of every parameter of the processor, for the loss Σ f ⊙ weight."""
    processor.zero_grad()
    x = x.detach().clone().requires_grad_()
    f = fn(processor, x)[..., :weight.shape[-1]]
    (f * weight).sum().backward()
    return {"f": f.detach(), "grad x": x.grad, **{f"grad {n}": p.grad for n, p in processor.named_parameters()}}


@pytest.mark.parametrize("proc,kernel_size,padding", FEATURE_CASES)
@pytest.mark.parametrize("bias_channels", [True, False])
def test_the_triton_feature_map_equals_the_convolutions(proc, kernel_size, padding, bias_channels):
    """Every key length across the tiles, 3 map rows (an odd number: the last row tile is half empty)."""
    torch.manual_seed(0)
    heads = 4
    processor = build_processor(heads, AttentionSettings(processor=proc, kernel_size=kernel_size, dape_width=6,
                                                         padding=padding), bias_channels=bias_channels)
    with torch.no_grad():  # non-trivial biases (the convolutions start with small ones)
        for p in processor.parameters():
            p.add_(0.1 * torch.randn_like(p))
    channels = 2 * heads if bias_channels else heads
    for keys in (1, 7, 8, 9, 17):
        x = torch.randn(1, 3, keys, channels).permute(0, 3, 1, 2)  # channels-last, as the materialized path's
        weight = torch.randn(1, heads, 3, keys)
        reference = feature_and_gradients(padded_feature_map, processor, x, weight)
        exact = feature_and_gradients(padded_feature_map, copy.deepcopy(processor).double(), x.double(),
                                      weight.double())
        result = feature_and_gradients(functools.partial(triton_feature_map, tiles=SMALL), processor, x, weight)
        assert_all_close(result, reference, exact)


def causal_feature_map(fn, first):
    """f ⊙ [key ≤ query] of the feature map ``fn`` on a causal map whose row r is the query at key first + r."""
    def masked(processor, x):
        rows, keys = x.shape[2], x.shape[3]
        f = fn(processor, x)[..., :keys]
        future = torch.arange(keys)[None, :] > first + torch.arange(rows)[:, None]
        return f.masked_fill(future, 0.0)
    return masked


@pytest.mark.parametrize("proc,kernel_size,padding", FEATURE_CASES)
def test_with_a_diagonal_the_kernels_compute_the_causal_part_and_its_exact_gradient(proc, kernel_size, padding):
    """With ``first`` the kernels return f zeroed right of each row's diagonal and the gradient of exactly that
    (df right of the diagonal does not reach x or the weights), skipping the tiles wholly right of it: 2 batch
    elements of 5 rows (the row tiles straddle them), diagonals from key 0 to beyond the last key, a weight that is
    non-zero everywhere."""
    torch.manual_seed(2)
    heads = 3
    processor = build_processor(heads, AttentionSettings(processor=proc, kernel_size=kernel_size, dape_width=5,
                                                         padding=padding, tril=False), bias_channels=True)
    with torch.no_grad():
        for p in processor.parameters():
            p.add_(0.1 * torch.randn_like(p))
    for keys, first in ((25, 0), (25, 3), (17, 12), (9, 30)):
        x = torch.randn(2, 5, keys, 2 * heads).permute(0, 3, 1, 2)
        weight = torch.randn(2, heads, 5, keys)
        conv = causal_feature_map(padded_feature_map, first)
        reference = feature_and_gradients(conv, processor, x, weight)
        exact = feature_and_gradients(conv, copy.deepcopy(processor).double(), x.double(), weight.double())
        kernels = functools.partial(triton_feature_map, tiles=SMALL, first=first)
        result = feature_and_gradients(kernels, processor, x, weight)
        assert_all_close(result, reference, exact)
        if first == 0:  # f right of the diagonal is zero, not f: without the diagonal the kernels return all of f
            assert result["f"][..., 0, 1:].abs().max() == 0
            whole = feature_and_gradients(functools.partial(triton_feature_map, tiles=SMALL), processor, x, weight)
            assert whole["f"][..., 0, 1:].abs().max() > 0


def test_the_kernels_repeat_bit_for_bit_and_take_x_in_any_layout():
    """Deterministic (per-program partial sums, no atomics) and the same on a contiguous NCHW x."""
    torch.manual_seed(1)
    processor = build_processor(4, AttentionSettings(processor="dape_v2", kernel_size=3, dape_width=6),
                                bias_channels=True)
    x = torch.randn(2, 3, 19, 8).permute(0, 3, 1, 2)
    weight = torch.randn(2, 4, 3, 19)
    run = functools.partial(feature_and_gradients, functools.partial(triton_feature_map, tiles=SMALL), processor)
    first, second, nchw = run(x, weight), run(x, weight), run(x.contiguous(), weight)
    for name in first:
        assert torch.equal(first[name], second[name]) and torch.equal(first[name], nchw[name]), name


@pytest.fixture
def triton_paths(monkeypatch):
    """The materialized and compiled paths of ``attend`` with ``feature_map="triton"`` at tiles of 16 rows × 32 keys
    (the interpreter's time grows with the tiles; their edges are the test above's)."""
    for name in ("materialized", "compiled"):
        replace_entry(monkeypatch, name, functools.partial(PATHS[name].attend, feature_map="triton"))
    original = feature_map.triton_feature_map
    monkeypatch.setattr(feature_map, "triton_feature_map",
                        lambda processor, x, tiles=None, **kw: original(processor, x, tiles or PATH_TILES, **kw))


# the feature map sees x alone: its channels (an encoding with a bias, a bias tensor, none), the processor, the
# padding and tril decide what it computes
PATH_CASES = [("kerple", proc) for proc in PROCESSORS if proc != "none"] + [
    ("nope", "v2-same"), ("nope", "v1"), ("fire", "v2-causal")]


@pytest.mark.parametrize("encoding,proc", PATH_CASES)
def test_the_materialized_path_with_the_triton_feature_map_equals_plain(encoding, proc, triton_paths):
    """DAPE V1 and V2, both paddings, tril on and off, a bias from a table, a bias tensor and none; 3 chunks."""
    case = AttentionCase(encoding, PROCESSORS[proc])
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    result = case.run("materialized", chunk=9)
    assert any(name.startswith("grad processor") for name in result)
    assert_all_close(result, reference, exact)


def test_the_two_sided_encoders_path_with_the_triton_feature_map_equals_plain(triton_paths):
    """Without the causal mask the kernels get no diagonal: every pixel of f and of its gradient counts."""
    case = AttentionCase("kerple", PROCESSORS["v2-same"], causal=False)
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    assert_all_close(case.run("materialized", chunk=9), reference, exact)


def test_the_compiled_path_traces_the_kernels_as_operators_and_equals_plain(triton_paths, monkeypatch):
    """Under ``torch.compile`` (aot_eager: TorchDynamo and AOTAutograd trace the forward and backward graphs) the
    feature map is one ``dape::feature_map`` node, its backward one ``dape::feature_map_backward``; with and without
    recomputation the result equals plain."""
    graphs = []

    def recording(graph_module, example_inputs):
        graphs.append(graph_module)
        return lookup_backend("aot_eager")(graph_module, example_inputs)

    dynamo.reset()
    compiled.compiled_chunk.cache_clear()
    monkeypatch.setattr(compiled, "BACKEND", recording)
    try:
        case = AttentionCase("kerple", PROCESSORS["v2-same"])
        reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
        for recompute in (True, False):
            assert_all_close(case.run("compiled", chunk=12, recompute_scores=recompute), reference, exact)
        assert len(graphs) == 2  # chunk shapes 12 and 11, shared by both runs
        calls = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
        assert any(call.startswith("dape.feature_map") for call in calls), calls
        assert not any("conv" in call for call in calls), calls
    finally:
        dynamo.reset()
        compiled.compiled_chunk.cache_clear()


def test_the_triton_feature_map_keeps_no_more_for_the_backward_pass_than_the_convolutions():
    """What a layer without recomputation saves for its backward pass, counted as the memory model counts it: with
    the kernels less than what the convolutions keep (they keep x; the convolutions keep x and the hidden map), so
    the model's count of the convolutions bounds them."""
    case = AttentionCase("kerple", PROCESSORS["v2-same"])

    def layer(feature_map_name):
        q, k, v = (t.clone().requires_grad_() for t in case.qkv)
        return attend_materialized(q, k, v, encoding=case.encoding, processor=case.processor,
                                   positions=case.positions, causal=True, recompute_scores=False,
                                   feature_map=feature_map_name)

    assert 0 < saved_bytes(lambda: layer("triton")) < saved_bytes(lambda: layer("conv"))


def test_bad_feature_map_settings_are_named_with_the_allowed_values():
    case = AttentionCase("kerple", PROCESSORS["v2-same"])
    q, k, v = case.qkv
    with pytest.raises(ConfigError, match=r"feature_map: 'cudnn' is not allowed; allowed values: conv, triton"):
        attend_materialized(q, k, v, encoding=case.encoding, processor=case.processor, positions=case.positions,
                            causal=True, feature_map="cudnn")
    with pytest.raises(ConfigError, match=r"keys: 12 is not allowed; allowed values: powers of two"):
        FeatureTiles(keys=12)
    with pytest.raises(ConfigError, match=r"allowed: three powers of two rows.keys.warps"):
        FeatureTiles.parse("2.64")
    assert FeatureTiles.parse("4.32.8") == FeatureTiles(rows=4, keys=32, warps=8)
    with pytest.raises(ConfigError, match=r"does not take torch.float64; allowed dtypes: float32, bfloat16, float16"):
        triton_feature_map(case.processor.double(), torch.randn(1, 8, 2, 5, dtype=torch.float64))
