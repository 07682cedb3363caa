"""Score pipeline: causality for every encoding × processor, and fast/chunked paths equal the plain path."""

import inspect
import itertools

import pytest
import torch

from dape_core.dape import ScoreProcessor, build_processor
from dape_core.encodings import ENCODINGS
from dape_core.errors import ConfigError
from dape_core.implementations.registry import PATHS, attention_path
from dape_core.settings import ATTENTION_IMPLS, AttentionSettings
from dape_core.model import GPT, GPTConfig

VOCAB = 50
PROCESSORS = {
    "none": dict(processor="none"),
    "v1": dict(processor="dape_v1", kernel_size=1),
    "v2-same": dict(processor="dape_v2", kernel_size=3, padding="same"),
    "v2-causal": dict(processor="dape_v2", kernel_size=3, padding="causal"),
}


def tiny_gpt(encoding, train_len=8, **proc):
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=VOCAB, size="tiny", n_layer=2, encoding=encoding, train_len=train_len, **proc))
    with torch.no_grad():  # non-trivial positional parameters (CoPE and XL start at zero)
        for enc in model.stack.encodings:
            for p in enc.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def changes_before(model, t=9, n=16):
    x = torch.randint(0, VOCAB, (2, n))
    y = x.clone()
    y[:, t] = (y[:, t] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(x), model(y)
    return (a[:, :t] - b[:, :t]).abs().max().item(), (a[:, t:] - b[:, t:]).abs().max().item()


@pytest.mark.parametrize("encoding,proc", list(itertools.product(ENCODINGS, PROCESSORS)))
def test_perturbing_a_future_token_never_changes_earlier_outputs(encoding, proc):
    before, after = changes_before(tiny_gpt(encoding, **PROCESSORS[proc]))
    assert before == 0.0
    assert after > 0  # the perturbation is visible from t on


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_leakage_variant_without_tril_reads_the_future_with_same_padding(encoding):
    before, _ = changes_before(tiny_gpt(encoding, processor="dape_v2", kernel_size=3, padding="same", tril=False))
    assert before > 1e-6


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_causal_padding_stays_causal_even_without_tril(encoding):
    before, _ = changes_before(tiny_gpt(encoding, processor="dape_v2", kernel_size=3, padding="causal", tril=False))
    assert before == 0.0


CHUNK_CASES = [("none", 1, "same", True), ("dape_v1", 1, "same", True)] + [
    ("dape_v2", k, pad, tril) for k in (3, 5) for pad in ("same", "causal") for tril in (True, False)
]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("processor,kernel_size,padding,tril", CHUNK_CASES)
def test_chunked_path_equals_plain_path(encoding, processor, kernel_size, padding, tril):
    # T = 23: 5 chunks of 5 rows (T not a multiple), T > 2 × FIRE's L (train_len 8 → L = 4)
    model = tiny_gpt(encoding, processor=processor, kernel_size=kernel_size, padding=padding, tril=tril).double()
    x = torch.randint(0, VOCAB, (2, 23))
    outputs, grads = [], []
    for chunk in (None, 5):
        model.cfg.query_chunk_size = chunk
        model.zero_grad()
        logits = model(x, fast_path=False)
        (logits * torch.linspace(-1, 1, VOCAB, dtype=torch.float64)).sum().backward()
        outputs.append(logits.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("chunk", [None, 5])
def test_fast_path_equals_plain_path_without_processor(encoding, chunk):
    model = tiny_gpt(encoding)
    model.cfg.query_chunk_size = chunk
    x = torch.randint(0, VOCAB, (2, 23))
    with torch.no_grad():
        torch.testing.assert_close(model(x, fast_path=True), model(x, fast_path=False), rtol=1e-5, atol=1e-5)


def test_dape_v2_with_kernel_1_equals_the_v1_mlp_given_the_same_weights():
    v1 = ScoreProcessor(4, AttentionSettings(processor="dape_v1", kernel_size=1, dape_width=6))
    v2 = ScoreProcessor(4, AttentionSettings(processor="dape_v2", kernel_size=1, dape_width=6))
    with torch.no_grad():
        v2.conv1.weight.copy_(v1.mlp[0].weight[:, :, None, None])
        v2.conv1.bias.copy_(v1.mlp[0].bias)
        v2.conv2.weight.copy_(v1.mlp[2].weight[:, :, None, None])
        v2.conv2.bias.copy_(v1.mlp[2].bias)
    scores, bias = torch.randn(2, 4, 7, 7), torch.randn(4, 7, 7)
    torch.testing.assert_close(v1(scores, bias), v2(scores, bias), rtol=1e-6, atol=1e-6)


def test_processor_adds_its_feature_map_to_scores_plus_bias():
    proc = ScoreProcessor(2, AttentionSettings(processor="dape_v2", kernel_size=3, dape_width=4))
    with torch.no_grad():
        for p in proc.parameters():
            p.zero_()
    scores, bias = torch.randn(1, 2, 5, 5), torch.randn(2, 5, 5)
    torch.testing.assert_close(proc(scores, bias), scores + bias)  # f ≡ 0 → A + B (eq. 5)


def test_bias_free_encodings_feed_the_score_channels_alone():
    model = GPT(GPTConfig(vocab_size=VOCAB, size="tiny", encoding="rope", processor="dape_v2", kernel_size=3))
    assert model.stack.processors[0].conv1.in_channels == 4  # H, not 2H (eq. 4)
    model = GPT(GPTConfig(vocab_size=VOCAB, size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3))
    assert model.stack.processors[0].conv1.in_channels == 8


@pytest.mark.parametrize("kwargs,field,allowed", [
    (dict(processor="dape"), "processor", "dape_v1"),
    (dict(processor="dape_v2", kernel_size=4), "kernel_size", "odd positive"),
    (dict(processor="dape_v2", kernel_size=0), "kernel_size", "odd positive"),
    (dict(processor="dape_v2", kernel_size=-3), "kernel_size", "odd positive"),
    (dict(processor="dape_v2", kernel_size=3, dape_width=0), "dape_width", "positive integer"),
    (dict(processor="dape_v2", kernel_size=3, padding="valid"), "padding", "same, causal"),
    (dict(processor="dape_v1", kernel_size=3), "kernel_size", "1"),
])
def test_bad_processor_settings_name_field_and_allowed_values(kwargs, field, allowed):
    with pytest.raises(ConfigError) as err:
        build_processor(4, AttentionSettings(**kwargs))
    assert str(err.value).startswith(f"{field}:") and "allowed values" in str(err.value) and allowed in str(err.value)


def test_every_resolved_attention_impl_is_one_row_of_the_table_of_paths_named_as_its_module():
    """Each path but ``plain`` (the reference, in dape_core.attention) is the module of its name, whose entry
    ``attend_<name>`` takes the options its row names; under attention dropout the fused path runs the materialized
    one."""
    assert set(PATHS) == set(ATTENTION_IMPLS) - {"auto"}
    assert PATHS["plain"].attend is None
    for name, path in PATHS.items():
        assert path.name == name
        if path.attend is not None:
            assert (path.attend.__module__, path.attend.__name__) == (f"dape_core.implementations.{name}",
                                                                      f"attend_{name}")
            parameters = inspect.signature(path.attend).parameters
            takes_more = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
            assert takes_more or set(path.options) <= set(parameters), name
    assert attention_path("fused", dropout=True) is PATHS["materialized"]
    assert attention_path("fused") is PATHS["fused"] and attention_path("compiled", dropout=True) is PATHS["compiled"]
    with pytest.raises(ConfigError, match="attention_impl: 'auto' is not allowed; allowed values: plain, fast"):
        attention_path("auto")
