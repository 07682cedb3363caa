"""The score product A = q·kᵀ with ``tf32_scores`` (:mod:`dape_core.implementations.score_product`) and the
compiled path's options on CUDA (``CUDA_COMPILED_OPTIONS``, :func:`dape_core.implementations.path_options`).

On a CPU TF32 changes nothing, so the operator equals ``torch.matmul`` with its gradients exactly; what the tests
check beyond that is where the switch is on: in the forward product and in both backward products, also when a
compiled graph (``torch.compile``) runs them, and nowhere else. And the attention entry gives the materialized and
compiled paths the options :func:`path_options` names for the device they run on.
"""

import inspect

import pytest
import torch
import torch._dynamo as dynamo

import dape_core.attention as attention
import dape_core.implementations as implementations
import dape_core.implementations.compiled as compiled
from dape_core.implementations.materialized import attend_materialized
from dape_core.implementations.score_product import score_product, tf32_matmul
from dape_core.settings.attention import COMPILED_OPTIONS_OFF, CUDA_COMPILED_OPTIONS, FEATURE_MAPS
from test_gpu_path import PROCESSORS, AttentionCase, replace_entry


def switch():
    return torch.backends.cuda.matmul.fp32_precision


@pytest.fixture
def products(monkeypatch):
    """The TF32 switch at every ``torch.matmul`` that runs eagerly, in order (one that ``torch.compile`` traces into
    a graph is not recorded; the custom operator's implementation runs eagerly inside any graph)."""
    seen = []
    original = torch.matmul

    def recording(a, b, *args, **kwargs):
        if not torch.compiler.is_compiling():
            seen.append(switch())
        return original(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "matmul", recording)
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tf32_scores_equal_the_plain_product_and_its_gradients(dtype):
    q = torch.randn(2, 3, 5, 8, dtype=dtype, requires_grad=True)
    k = torch.randn(2, 3, 7, 8, dtype=dtype, requires_grad=True)
    weight = torch.randn(2, 3, 5, 7, dtype=dtype)
    results = []
    for tf32 in (False, True):
        out = score_product(q, k, tf32_scores=tf32)
        results.append((out, *torch.autograd.grad((out * weight).sum(), (q, k))))
    for plain, tf32 in zip(*results):
        torch.testing.assert_close(tf32, plain, rtol=0, atol=0)
    assert results[1][0].shape == (2, 3, 5, 7)


def test_the_operator_passes_torch_librarys_checks():
    a = torch.randn(2, 3, 5, 8, requires_grad=True)
    b = torch.randn(2, 3, 8, 7, requires_grad=True)
    torch.library.opcheck(tf32_matmul, (a, b))


def test_the_switch_is_on_in_the_forward_and_both_backward_products_and_as_it_was_after(products):
    before = switch()
    assert before != "tf32"
    q, k = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(2))
    out = score_product(q, k, tf32_scores=True)
    assert products == ["tf32"] and switch() == before
    out.sum().backward()
    assert products == ["tf32"] * 3 and switch() == before  # dQ = dA·k and dK = dAᵀ·q
    products.clear()
    score_product(q, k).sum().backward()
    assert products == [before]  # without the option: the process's switch (autograd's products call no matmul)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_compiled_graph_sets_the_switch_when_its_products_run(backend, products):
    """The switch is set by the operator at run time, not traced into the graph: a compiled function's forward and
    backward products run with it on, every call, and leave it as it was."""
    dynamo.reset()
    before = switch()
    fn = torch.compile(lambda q, k: score_product(q, k, tf32_scores=True).mul(0.5).exp(), backend=backend,
                       fullgraph=True)
    q, k = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(2))
    for _ in range(2):
        products.clear()
        fn(q, k).sum().backward()
        assert products == ["tf32"] * 3 and switch() == before
    dynamo.reset()


@pytest.mark.parametrize("impl", ["materialized", "compiled"])
@pytest.mark.parametrize("recompute", [True, False])
def test_the_paths_run_every_score_product_under_tf32_where_q_and_k_are_16_bit(impl, recompute, products, monkeypatch):
    """``tf32_scores`` with bf16 q and k (as bf16 autocast's linear layers give them): the materialized and compiled
    paths (``aot_eager``) give the results they give without it, and their score products — the forward, the
    recomputed forward and both backward products, per chunk — run with the switch on, the products with v (·V
    and its backward) with it as it was. With fp32 q and k (whose products TF32 would round) it stays off."""
    case = AttentionCase("kerple", PROCESSORS["v2-causal"])
    monkeypatch.setattr(compiled, "BACKEND", "aot_eager")
    compiled.compiled_chunk.cache_clear()
    dynamo.reset()
    path = compiled.attend_compiled if impl == "compiled" else attend_materialized
    before, chunks, forwards = switch(), 2, 2 if recompute else 1

    def run(dtype, tf32):
        products.clear()
        qkv = [t.to(dtype).requires_grad_() for t in case.qkv]
        out = path(*qkv, encoding=case.encoding, processor=case.processor, positions=case.positions, causal=True,
                   chunk=12, recompute_scores=recompute, tf32_scores=tf32)
        (out.float() * case.weight).sum().backward()
        return [out, *(t.grad for t in qkv)], products.count("tf32")

    plain, _ = run(torch.bfloat16, False)
    tf32, count = run(torch.bfloat16, True)
    for a, b in zip(tf32, plain):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert count == chunks * (forwards + 2) and switch() == before
    assert set(products) <= {"tf32", before}
    if impl == "materialized":  # ·V, eagerly: as the process had it
        assert products.count(before) == chunks * forwards
    assert run(torch.float32, True)[1] == 0
    compiled.compiled_chunk.cache_clear()
    dynamo.reset()


def test_path_options_are_the_compiled_paths_on_cuda_under_16_bit_autocast_and_none_elsewhere(monkeypatch):
    """Under bf16 or fp16 autocast on CUDA (where they are measured) the compiled path takes CUDA_COMPILED_OPTIONS;
    without it (fp32), on other devices and on the materialized path, none."""
    assert not implementations.half_autocast("cuda")  # no CUDA autocast on this machine
    assert implementations.path_options("compiled", "cuda") == {}
    modes = {"cuda": torch.bfloat16, "cpu": torch.bfloat16}
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda device_type: device_type in modes)
    monkeypatch.setattr(torch, "get_autocast_dtype", lambda device_type: modes[device_type])
    assert implementations.half_autocast("cuda") and implementations.half_autocast("cpu")
    assert implementations.path_options("compiled", "cuda") == dict(CUDA_COMPILED_OPTIONS)
    for impl, device in (("compiled", "cpu"), ("materialized", "cuda"), ("materialized", "cpu")):
        assert implementations.path_options(impl, device) == {}
    modes["cuda"] = torch.float32  # fp32 autocast: no 16-bit products
    assert not implementations.half_autocast("cuda") and implementations.path_options("compiled", "cuda") == {}


def test_the_compiled_paths_cuda_options_are_arguments_it_takes_with_allowed_values():
    """Every option is an argument of the materialized path (which the compiled one passes on) whose default is
    its value off, and the CUDA values are allowed ones."""
    parameters = inspect.signature(attend_materialized).parameters
    assert CUDA_COMPILED_OPTIONS.keys() == COMPILED_OPTIONS_OFF.keys()
    for name, off in COMPILED_OPTIONS_OFF.items():
        assert parameters[name].default == off, name
    assert "causal_chunks" in inspect.signature(compiled.attend_compiled).parameters
    assert CUDA_COMPILED_OPTIONS["feature_map"] in FEATURE_MAPS
    assert type(CUDA_COMPILED_OPTIONS["causal_chunks"]) is int and CUDA_COMPILED_OPTIONS["causal_chunks"] >= 1
    assert type(CUDA_COMPILED_OPTIONS["tf32_scores"]) is bool
    with pytest.raises(TypeError):
        CUDA_COMPILED_OPTIONS["causal_chunks"] = 2  # one source: read-only


@pytest.mark.parametrize("impl", ["materialized", "compiled"])
def test_the_attention_entry_gives_each_path_the_options_of_its_device(impl, monkeypatch):
    """Both entries (``attend`` and a KV cache's rows through ``attend_causal``) call the path with what
    :func:`path_options` names for the path and the device of q: none on this CPU, the stand-in's when it names
    some."""
    case = AttentionCase("kerple", PROCESSORS["v2-causal"])
    seen = []
    replace_entry(monkeypatch, impl, lambda q, k, v, **kw: seen.append(kw) or q)
    q, k, v = case.qkv

    def run():
        seen.clear()
        attention.attend(q, k, v, encoding=case.encoding, processor=case.processor, positions=case.positions,
                         causal=True, attention_impl=impl)
        attention.attend_causal(q[:, :, 20:], k, v, encoding=case.encoding, processor=case.processor,
                                positions=case.positions, attention_impl=impl)
        return seen

    names = {"feature_map", "causal_chunks", "tf32_scores"}
    assert all(not names & kw.keys() for kw in run()) and len(seen) == 2
    asked = []
    monkeypatch.setattr(attention, "path_options",
                        lambda path, device: asked.append((path, device)) or {"causal_chunks": 3, "tf32_scores": True})
    assert all(kw["causal_chunks"] == 3 and kw["tf32_scores"] for kw in run()) and len(seen) == 2
    assert asked == [(impl, "cpu")] * 2
