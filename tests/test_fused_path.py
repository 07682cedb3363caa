"""The fused path (``attention_impl: fused``, :mod:`dape_core.implementations.fused`) equals the plain reference
path on outputs and every gradient: q, k, v, the encoding's parameters, both layers of the processor.

Without a GPU the Triton kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``, which ``conftest.py``
sets before anything imports triton). Small tiles (16 query rows, 32-column wide key tiles) put the tile edges inside short
sequences: T = 1, 16, 17 and 33 are below, at and across the edges of the row blocks and of the key tiles (a
32-wide tile has 32 − 2(k − 1) exact forward and 32 − 4(k − 1) exact backward columns). Exactness: fp32, 1e-5
relative to each tensor's scale beyond the fp32 reference's own rounding (``test_gpu_path.assert_all_close``).
"""

import contextlib
import copy
import functools
import itertools
import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("these tests run the kernels in Triton's CPU interpreter (TRITON_INTERPRET=1, which conftest.py sets "
                "without a GPU); on a GPU benchmarks/fused_layer.py --check compares them", allow_module_level=True)
triton = pytest.importorskip("triton", minversion="3.9",
                             reason="the kernels' CPU interpreter needs Triton ≥ 3.9 (make install-test installs it)")

import dape_core.implementations.fused as fused  # noqa: E402
import dape_core.implementations.materialized as materialized  # noqa: E402
import dape_core.implementations.triton_support as triton_support  # noqa: E402
from dape_core.attention import attend, attend_causal  # noqa: E402
from dape_core.dape import build_processor  # noqa: E402
from dape_core.encodings import ENCODINGS, build_encoding  # noqa: E402
from dape_core.errors import ConfigError  # noqa: E402
from dape_core.implementations.fused import FusedTiles  # noqa: E402
from dape_core.implementations.registry import PATHS  # noqa: E402
from dape_core.model import Encoder, EncoderConfig  # noqa: E402
from dape_core.settings import AttentionSettings  # noqa: E402
from test_gpu_path import (PROCESSORS, VOCAB, AttentionCase, assert_all_close, logits_and_gradients,  # noqa: E402
                           replace_entry, tiny_gpt)

SMALL_TILES = FusedTiles(block_rows=16, key_tile=32)
DAPE = {name: settings for name, settings in PROCESSORS.items() if name != "none"}


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    """Every fused call of these tests uses ``SMALL_TILES`` unless a test says otherwise."""
    original = fused.attend_fused
    replace_entry(monkeypatch, "fused", lambda *args, tiles=None, **kw: original(*args, tiles=tiles or SMALL_TILES, **kw))


def kernel_case(kernel_size, padding, tril, *, n, batch=3, causal=True, encoding="kerple"):
    case = AttentionCase(encoding, dict(processor="dape_v2" if kernel_size > 1 else "dape_v1",
                                        kernel_size=kernel_size, padding=padding, tril=tril), causal=causal, n=n)
    case.qkv = [t[:batch] for t in case.qkv]
    case.weight = case.weight[:batch]
    return case


def assert_fused_equals_plain(case):
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    result = case.run("fused")
    assert any(name.startswith("grad processor") for name in result)
    assert_all_close(result, reference, exact)


@pytest.mark.parametrize("encoding,proc", list(itertools.product(ENCODINGS, DAPE)))
def test_fused_attention_equals_plain_for_every_encoding_and_processor(encoding, proc):
    """Every encoding (no bias, a per-distance table, a bias tensor with and without a batch axis) × DAPE V1 and
    V2 (k = 3), both paddings, tril on and off; T = 23 crosses a row block and a key tile."""
    assert_fused_equals_plain(AttentionCase(encoding, DAPE[proc]))


KERNEL_CASES = [  # (k, padding, tril, T, batch): k ∈ {1, 3, 5}, T below, at and across the tile edges
    *[(k, padding, tril, n, 3) for k in (3, 5) for padding in ("same", "causal") for tril in (True, False)
      for n in (17, 33)],
    *[(k, "same", True, n, 1) for k in (1, 3, 5) for n in (1, 16)],
    (1, "same", False, 33, 1),
    (5, "causal", True, 1, 3),
]


@pytest.mark.parametrize("kernel_size,padding,tril,n,batch", KERNEL_CASES)
def test_fused_attention_equals_plain_across_kernel_sizes_and_tile_edges(kernel_size, padding, tril, n, batch):
    assert_fused_equals_plain(kernel_case(kernel_size, padding, tril, n=n, batch=batch))


@pytest.mark.parametrize("encoding", ["kerple", "alibi", "t5", "nope", "fire"])
@pytest.mark.parametrize("kernel_size,tril", [(3, True), (3, False), (5, False), (1, True)])
def test_fused_encoder_equals_plain(encoding, kernel_size, tril):
    """The two-sided CHE encoder: no causal mask, two-sided relative biases (every distance of the table)."""
    assert_fused_equals_plain(kernel_case(kernel_size, "same", tril, n=19, causal=False, encoding=encoding))


def test_default_tiles_equal_plain_across_a_wide_tile(monkeypatch):
    """The shipped tiles (16 rows, 64-column wide tiles: 56 exact backward columns at k = 3) at T = 70."""
    case = kernel_case(3, "same", True, n=70, batch=1)
    reference, exact = case.run("plain"), case.run("plain", dtype=torch.float64)
    original = fused.attend_fused
    replace_entry(monkeypatch, "fused", lambda *args, tiles=None, **kw: original(*args, tiles=FusedTiles(), **kw))
    assert_all_close(case.run("fused"), reference, exact)


@pytest.mark.parametrize("encoding,proc", [("kerple", "v2-same"), ("t5", "v2-causal"), ("rope", "v2-same-no-tril"),
                                           ("fire", "v1")])
def test_fused_kv_cache_rows_equal_plain(encoding, proc):
    """``attend_causal``'s query rows at an offset (a KV cache): 7 rows against 23 keys."""
    torch.manual_seed(0)
    heads, head_dim, n_keys, n_rows = 4, 8, 23, 7
    encoding_module = build_encoding(encoding, heads, head_dim, causal=True, train_len=8)
    processor = build_processor(heads, AttentionSettings(dape_width=6, **DAPE[proc]),
                                bias_channels=encoding_module.has_bias)
    q = torch.randn(2, heads, n_rows, head_dim)
    k, v = torch.randn(2, heads, n_keys, head_dim), torch.randn(2, heads, n_keys, head_dim)
    weight = torch.randn(2, heads, n_rows, head_dim)

    def run(impl, dtype=torch.float32):
        enc, proc_ = copy.deepcopy(encoding_module).to(dtype), copy.deepcopy(processor).to(dtype)
        inputs = [t.to(dtype, copy=True).requires_grad_() for t in (q, k, v)]
        out = attend_causal(*inputs, encoding=enc, processor=proc_, positions=torch.arange(n_keys),
                            attention_impl=impl)
        (out * weight.to(dtype)).sum().backward()
        grads = {f"grad {n}": t.grad for n, t in zip("qkv", inputs)}
        grads.update({f"grad {n}": p.grad for n, p in [*enc.named_parameters(prefix="encoding"),
                                                       *proc_.named_parameters(prefix="processor")]
                      if p.grad is not None})
        return {"output": out.detach(), **grads}

    assert_all_close(run("fused"), run("plain"), run("plain", torch.float64))


@pytest.mark.parametrize("proc", ["v2-same", "v1"])
def test_fused_model_equals_plain_on_logits_and_every_parameter_gradient(proc, monkeypatch):
    """The whole decoder through ``attention_impl: fused``: gradients reach the embedding, q/k/v projections,
    processors and the encodings."""
    model = tiny_gpt("kerple", attention_impl="fused", **PROCESSORS[proc])
    run = functools.partial(logits_and_gradients, x=torch.randint(0, VOCAB, (2, 21)))

    reference, exact = run(model, fast_path=False), run(copy.deepcopy(model).double(), fast_path=False)
    calls = []
    original = PATHS["fused"].attend
    replace_entry(monkeypatch, "fused", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    assert_all_close(run(model), reference, exact)
    assert len(calls) == model.cfg.n_layer


def test_fused_path_with_attention_dropout_takes_the_materialized_path(monkeypatch):
    case = AttentionCase("kerple", PROCESSORS["v2-same"])
    taken = []
    replace_entry(monkeypatch, "materialized", lambda *a, **kw: taken.append(kw["dropout_p"]) or a[0])
    attend(*case.qkv, encoding=case.encoding, processor=case.processor, positions=case.positions, causal=True,
           attention_impl="fused", dropout_p=0.1)
    assert taken == [0.1]


def test_fused_path_refuses_a_device_it_cannot_run_on(monkeypatch):
    case = AttentionCase("kerple", PROCESSORS["v2-same"])
    monkeypatch.setattr(triton_support, "interpreted", lambda: False)
    with pytest.raises(ConfigError, match="attention_impl: fused runs on CUDA.*allowed here: auto, fast"):
        attend(*case.qkv, encoding=case.encoding, processor=case.processor, positions=case.positions, causal=True,
               attention_impl="fused")


def test_fused_path_refuses_float64_naming_the_allowed_dtypes():
    case = AttentionCase("kerple", PROCESSORS["v2-same"])
    q, k, v = (t.double() for t in case.qkv)
    with pytest.raises(ConfigError, match="allowed dtypes: float32, bfloat16, float16"):
        attend(q, k, v, encoding=case.encoding.double(), processor=case.processor.double(),
               positions=case.positions, causal=True, attention_impl="fused")


@pytest.fixture
def cuda_autocast():
    """bf16 autocast switched on for CUDA (a flag, settable without a GPU), restored afterwards."""
    enabled, dtype = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    yield
    torch.set_autocast_enabled("cuda", enabled)
    torch.set_autocast_dtype("cuda", dtype)


def test_auto_picks_the_fused_kernel_on_cuda_for_gradient_free_half_precision_passes_only(cuda_autocast,
                                                                                         monkeypatch):
    from dape_core import implementations
    monkeypatch.setattr(implementations, "TRITON_IMPORTABLE", True)
    model = tiny_gpt("kerple", processor="dape_v2", kernel_size=3)
    assert model.resolved_attention_impl("cuda") == "compiled"  # training: the compiled path measured fastest
    with torch.no_grad():
        assert model.resolved_attention_impl("cuda") == "fused"  # evaluation under bf16 autocast
        assert model.resolved_attention_impl("cpu") == "fast"
        torch.set_autocast_enabled("cuda", False)
        assert model.resolved_attention_impl("cuda") == "compiled"  # fp32: the kernel takes 16-bit inputs
        torch.set_autocast_enabled("cuda", True)
        monkeypatch.setattr(implementations, "_fused_available", lambda: False)
        monkeypatch.setattr(implementations, "TRITON_IMPORTABLE", False)
        assert model.resolved_attention_impl("cuda") == "materialized"  # without Triton
    with torch.no_grad():
        assert tiny_gpt("kerple", processor="dape_v2", attention_impl="materialized").resolved_attention_impl(
            "cuda") == "materialized"  # a named path is itself


def test_auto_picks_the_fused_kernel_only_at_layer_sizes_up_to_those_it_was_measured_at(cuda_autocast, monkeypatch):
    """Heads, head size and D_DAPE padded as the kernel pads them, at most 16, 64 and 32 (the 125M and 350M layers,
    where it measured faster): beyond, its forward spills far more or needs more shared memory than a block has, so
    a gradient-free pass runs the compiled path; so does a caller that does not say the sizes."""
    from dape_core import implementations, timing
    monkeypatch.setattr(implementations, "TRITON_IMPORTABLE", True)
    monkeypatch.setattr(implementations, "_fused_available", lambda: True)
    assert fused.measured_at(12, 64, 32) and fused.measured_at(16, 64, 21) and fused.measured_at(4, 16, 10)
    for sizes in ((17, 64, 32), (32, 80, 32), (12, 80, 32), (12, 64, 64)):
        assert not fused.measured_at(*sizes), sizes
    with torch.no_grad():
        assert implementations.resolve_attention_impl("auto", "cuda", (16, 64, 32)) == "fused"
        assert implementations.resolve_attention_impl("auto", "cuda", (32, 80, 32)) == "compiled"
        assert implementations.resolve_attention_impl("auto", "cuda") == "compiled"  # sizes unknown
        assert implementations.resolve_attention_impl("fused", "cuda", (32, 80, 32)) == "fused"  # asked for by name
        for kwargs, expected in ((dict(), "fused"), (dict(dape_width=64), "compiled"), (dict(n_head=32), "compiled")):
            model = tiny_gpt("kerple", processor="dape_v2", kernel_size=3, **kwargs)
            assert model.resolved_attention_impl("cuda") == expected, kwargs
        assert Encoder(EncoderConfig(n_layer=1, d_model=16, n_head=4, processor="dape_v2", kernel_size=3)
                       ).resolved_attention_impl("cuda") == "fused"
    # a timing row names the path its pass runs: a forward pass without gradients, a training step with them
    monkeypatch.setattr(timing.device, "pass_autocast", lambda device, dtype: contextlib.nullcontext())
    cfg = tiny_gpt("kerple", processor="dape_v2", kernel_size=3).cfg
    assert timing.pass_path(cfg, torch.device("cuda"), "forward", torch.bfloat16) == "fused"
    assert timing.pass_path(cfg, torch.device("cuda"), "train_step", torch.bfloat16) == "compiled"


def test_fused_path_on_a_gpu_takes_bf16_and_fp16_only():
    from dape_core.implementations.fused import check_dtype
    with pytest.raises(ConfigError, match="float32 inputs on cuda; allowed dtypes: bfloat16, float16"):
        check_dtype(torch.float32, "cuda")
    check_dtype(torch.bfloat16, "cuda")
    check_dtype(torch.float32, "cpu")


def test_a_gpu_without_the_resources_the_kernel_needs_is_named_as_the_setting_s_error(monkeypatch):
    """Where a launch needs more shared memory (or registers) than the GPU has (the forward at 2.7B's 32 heads of
    size 80: 384 KB), the error names the setting, the sizes and the paths that run them."""
    kt = fused._triton()

    class Refused:
        def __getitem__(self, grid):
            def launch(*args, **meta):
                raise kt.triton.runtime.errors.OutOfResources(393216, 232448, "shared memory")
            return launch

    monkeypatch.setattr(kt, "dape_forward_kernel", Refused())
    enc = build_encoding("kerple", 4, 8, causal=True, train_len=8)
    proc = build_processor(4, AttentionSettings(processor="dape_v2", kernel_size=3), bias_channels=True)
    q, k, v = (torch.randn(1, 4, 9, 8) for _ in range(3))
    with pytest.raises(ConfigError, match=r"attention_impl: fused needs 393216 of shared memory per program at heads "
                                          r"padded to 16, head size 16 and D_DAPE 32, and this GPU has 232448; "
                                          r"allowed here: auto \(the compiled path .*\), compiled, materialized"):
        fused.attend_fused(q, k, v, encoding=enc, processor=proc, positions=torch.arange(9), causal=True)


def test_tiles_must_be_powers_of_two():
    with pytest.raises(ConfigError, match="key_tile: 48 is not allowed; allowed values: powers of two"):
        FusedTiles(key_tile=48)
    assert FusedTiles(backward_key_tile=16).wide_tile(5, backward=True) == 32  # 4·(5 − 1) + 8 = 24, raised
    assert FusedTiles(key_tile=8).wide_tile(5) == 16  # the forward: 2·(5 − 1) + 8 = 16


def test_relative_bias_reaches_the_kernel_as_a_table_and_others_as_a_tensor():
    positions = torch.arange(9)
    kinds = {}
    for name in ENCODINGS:
        enc = build_encoding(name, 4, 8, causal=True, train_len=8)
        proc = build_processor(4, AttentionSettings(processor="dape_v2", kernel_size=3), bias_channels=enc.has_bias)
        kinds[name] = fused.bias_form(enc, proc, positions)
    assert {n for n, k in kinds.items() if k == "table"} == {"alibi", "kerple", "t5"}
    assert {n for n, k in kinds.items() if k == "tensor"} == {"fire", "cope", "xl"}
    enc = build_encoding("kerple", 4, 8, causal=True, train_len=8)
    proc = build_processor(4, AttentionSettings(processor="dape_v2", kernel_size=3), bias_channels=True)
    assert fused.bias_form(enc, proc, torch.tensor([0, 2, 3, 7])) == "tensor"  # not consecutive


def test_the_fused_path_allocates_memory_linear_in_t(monkeypatch):
    """The largest tensor the fused forward and backward allocate (Kerple, DAPE1×3) does not grow from T = 48 to
    T = 96 beyond 2× (its scratch and partial sums are sized by programs and tiles, its outputs by T); the
    materialized path's grows 4× (a [batch, rows, T, channels] chunk). In-place copies and storage swaps are the
    interpreter's moves of existing tensors between host and "device", not allocations."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in (torch.ops.aten.set_.source_Storage, torch.ops.aten.copy_.default):
                return out
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    self.numel = max(self.numel, t.numel())
            return out

    original = fused.attend_fused
    replace_entry(monkeypatch, "fused", lambda *a, **kw: original(*a, tiles=FusedTiles(key_tile=32, programs=2), **kw))

    def largest(impl, n):
        case = kernel_case(3, "same", True, n=n, batch=2)
        qkv = [t.requires_grad_() for t in case.qkv]
        with Largest() as mode:
            out = attend(*qkv, encoding=case.encoding, processor=case.processor, positions=case.positions,
                         causal=True, attention_impl=impl)
            out.sum().backward()
        return mode.numel

    assert largest("fused", 96) <= 2 * largest("fused", 48)
    assert largest("materialized", 96) >= 3.5 * largest("materialized", 48)
