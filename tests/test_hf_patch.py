"""dape_core.hf: DAPE processors inside tiny random Llama / Qwen2 / Mistral decoders (offline, built here).

The patched models are checked against an independent eager attention written below (q·kᵀ·scaling, the layer's
bias B, ScoreProcessor.forward, the model's mask, softmax, ·V), registered as a second attention function."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # never reach the Hub

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AttentionInterface, GPT2Config, GPT2LMHeadModel, LlamaConfig
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from dape_core.errors import ConfigError
from dape_core.hf import (
    add_processor,
    build_causal_lm,
    load_pretrained,
    processors,
    save_pretrained,
    set_attention_impl,
)

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, max_position_embeddings=64)
SPECS = {
    "llama": dict(model_type="llama", **TINY),
    "qwen2": dict(model_type="qwen2", **TINY),  # q, k, v projections with a bias
    "mistral": dict(model_type="mistral", sliding_window=8, **TINY),  # sequences below are longer than the window
}
V1 = dict(processor="dape_v1", kernel_size=1)
V2 = dict(processor="dape_v2", kernel_size=3)
REFERENCE = "dape_test_reference"


def reference_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager attention with the processor's reference form, for unpadded sequences (positions 0 … Tk − 1)."""
    b, kv_heads, n_k, d = key.shape
    groups = query.shape[1] // kv_heads
    key = key[:, :, None].expand(b, kv_heads, groups, n_k, d).reshape(b, kv_heads * groups, n_k, d)
    value = value[:, :, None].expand(b, kv_heads, groups, n_k, d).reshape(b, kv_heads * groups, n_k, d)
    offset = n_k - query.shape[2]
    q_pos, k_pos = torch.arange(offset, n_k), torch.arange(n_k)
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    encoding = module.dape_encoding
    bias = encoding.bias(query, key, scores, q_pos, k_pos) if encoding.has_bias else None
    causal = k_pos[None, :] <= q_pos[:, None]
    allowed = causal if attention_mask is None else attention_mask & causal
    key_mask = None if attention_mask is None else attention_mask | ~causal
    scores = module.dape_processor(scores, bias, offset, key_mask=key_mask)
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return torch.matmul(probs, value).transpose(1, 2), None


AttentionInterface.register(REFERENCE, reference_attention)
AttentionMaskInterface.register(REFERENCE, sdpa_mask)


def tiny(arch="llama", **changes):
    return build_causal_lm({**SPECS[arch], **changes}, seed=0).eval()


def patched(arch="llama", randomize=True, **settings):
    model = add_processor(tiny(arch), {"encoding": "kerple", "padding": "causal", **V2, **settings})
    if randomize:  # a processor far from the identity
        torch.manual_seed(1)
        with torch.no_grad():
            for proc in processors(model):
                for p in proc.parameters():
                    p.normal_(0, 0.2)
    return model


def logits(model, ids, impl=None, **kwargs):
    if impl is not None:
        model.set_attn_implementation(impl)
    with torch.no_grad():
        out = model(ids, use_cache=False, **kwargs).logits
    if impl is not None:
        model.set_attn_implementation("dape")
    return out


def ids_of(n, batch=2, seed=0):
    return torch.randint(0, 128, (batch, n), generator=torch.Generator().manual_seed(seed))


# --- identity at init, equality with the independent reference, lengths, gradients ---------------------------

@pytest.mark.parametrize("arch", list(SPECS))
@pytest.mark.parametrize("proc", [V1, V2], ids=["v1", "v2k3"])
def test_new_processors_start_as_the_identity(arch, proc):
    model = tiny(arch)
    ids = ids_of(20)
    original = logits(model, ids)
    add_processor(model, {"encoding": "nope", **proc})
    assert model.config._attn_implementation == "dape"
    assert all(p.output_layer().weight.abs().sum() == 0 for p in processors(model))
    torch.testing.assert_close(logits(model, ids), original, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", list(SPECS))
@pytest.mark.parametrize("proc", [V1, V2], ids=["v1", "v2k3"])
@pytest.mark.parametrize("padding", ["same", "causal"])
def test_patched_logits_equal_an_independent_eager_reference(arch, proc, padding):
    model = patched(arch, padding=padding, **proc)
    ids = ids_of(20)
    out, ref = logits(model, ids), logits(model, ids, impl=REFERENCE)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert (out - logits(tiny(arch), ids)).abs().max() > 1e-2  # the processor does change the model
    if arch == "qwen2":
        assert model.model.layers[0].self_attn.q_proj.bias is not None


@pytest.mark.parametrize("encoding", ["nope", "alibi", "kerple", "fire"])
@pytest.mark.parametrize("impl", ["plain", "fast", "materialized"])
def test_every_encoding_on_every_path_equals_the_reference(encoding, impl):
    model = patched(encoding=encoding, padding="same")
    set_attention_impl(model, impl)
    ids = ids_of(18)
    torch.testing.assert_close(logits(model, ids), logits(model, ids, impl=REFERENCE), atol=1e-5, rtol=1e-5)
    assert processors(model)[0].bias_channels == (encoding != "nope")


@pytest.mark.parametrize("arch", ["llama", "mistral"])
def test_a_forward_longer_than_max_position_embeddings(arch):
    model = patched(arch, encoding="fire", padding="same")
    ids = ids_of(model.config.max_position_embeddings + 16, batch=1)
    out = logits(model, ids)
    assert out.shape[1] == 80 and torch.isfinite(out).all()
    torch.testing.assert_close(out, logits(model, ids, impl=REFERENCE), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("proc", [V1, V2], ids=["v1", "v2k3"])
def test_gradients_reach_both_processor_layers_from_the_identity(proc):
    model = add_processor(tiny(), {"encoding": "kerple", **proc}).train()
    names = {n for n, _ in model.named_parameters()}
    assert any(".dape_processor." in n for n in names) and any(".dape_encoding." in n for n in names)
    first = [p.mlp[0] if p.processor == "dape_v1" else p.conv1 for p in processors(model)]
    second = [p.output_layer() for p in processors(model)]
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = ids_of(16)

    def step():
        optimiser.zero_grad()
        model(ids, labels=ids, use_cache=False).loss.backward()

    step()
    assert all(layer.weight.grad.abs().sum() > 0 and layer.bias.grad.abs().sum() > 0 for layer in second)
    assert all(layer.weight.grad.abs().sum() == 0 for layer in first)  # the second layer is zero at the start
    optimiser.step()
    step()
    assert all(layer.weight.grad.abs().sum() > 0 and layer.bias.grad.abs().sum() > 0 for layer in first + second)


# --- padding masks ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["llama", "mistral"])
@pytest.mark.parametrize("encoding", ["kerple", "fire"])
@pytest.mark.parametrize("padding", ["same", "causal"])
def test_left_padding_gives_the_unpadded_logits_at_real_tokens(arch, encoding, padding):
    model = patched(arch, encoding=encoding, padding=padding)
    long, short = ids_of(14, batch=1, seed=1), ids_of(9, batch=1, seed=2)
    pad = long.shape[1] - short.shape[1]
    batch = torch.cat([long, torch.cat([torch.full((1, pad), 3), short], dim=1)])
    attention_mask = torch.ones_like(batch)
    attention_mask[1, :pad] = 0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = logits(model, batch, attention_mask=attention_mask, position_ids=position_ids)
    torch.testing.assert_close(out[0], logits(model, long)[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[1, pad:], logits(model, short)[0], atol=1e-5, rtol=1e-5)


# --- generation with a KV cache ----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch,settings", [
    ("llama", dict(encoding="fire", padding="causal", **V2)),
    ("qwen2", dict(encoding="kerple", padding="causal", **V2)),
    ("mistral", dict(encoding="alibi", padding="causal", **V2)),  # decodes past its sliding window (8)
    ("llama", dict(encoding="nope", padding="same", **V1)),  # kernel 1: no padding, so same decodes too
])
def test_cached_decoding_equals_a_full_forward_of_the_whole_sequence(arch, settings):
    model = patched(arch, **settings)
    prompt, new = ids_of(10, batch=2), 6
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, do_sample=False,
                         use_cache=True, output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    sequence = out.sequences
    full = logits(model, sequence)[:, prompt.shape[1] - 1 : -1]
    torch.testing.assert_close(torch.stack(out.logits, dim=1), full, atol=1e-5, rtol=1e-5)
    assert torch.equal(sequence[:, prompt.shape[1]:], full.argmax(-1))
    # a manual loop over the cache: one token, then two at once
    with torch.no_grad():
        step = model(sequence[:, :10], use_cache=True)
        cache, rows = step.past_key_values, [step.logits[:, -1:]]
        for start, stop in ((10, 11), (11, 13), (13, 14)):
            step = model(sequence[:, start:stop], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            rows.append(step.logits)
    torch.testing.assert_close(torch.cat(rows, dim=1), logits(model, sequence)[:, 9:14], atol=1e-5, rtol=1e-5)


def test_left_padded_batch_generates_as_each_sequence_alone():
    model = patched(encoding="kerple", padding="causal")
    long, short = ids_of(10, batch=1, seed=3), ids_of(6, batch=1, seed=4)
    batch = torch.cat([long, torch.cat([torch.zeros(1, 4, dtype=torch.long), short], dim=1)])
    attention_mask = torch.ones_like(batch)
    attention_mask[1, :4] = 0
    kwargs = dict(max_new_tokens=5, do_sample=False, use_cache=True, pad_token_id=0, output_logits=True,
                  return_dict_in_generate=True)
    together = model.generate(batch, attention_mask=attention_mask, **kwargs)
    for row, alone_ids in enumerate((long, short)):
        alone = model.generate(alone_ids, attention_mask=torch.ones_like(alone_ids), **kwargs)
        assert torch.equal(together.sequences[row, -5:], alone.sequences[0, -5:])
        torch.testing.assert_close(torch.stack(together.logits, 1)[row], torch.stack(alone.logits, 1)[0],
                                   atol=1e-5, rtol=1e-5)


def test_same_padding_refuses_cached_decoding_and_decodes_without_a_cache():
    model = patched(encoding="kerple", padding="same")
    prompt = ids_of(8, batch=1)
    with pytest.raises(ConfigError, match=r"padding: 'same'.*allowed values: causal.*use_cache=False"):
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3, do_sample=False,
                       use_cache=True, pad_token_id=0)
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3, do_sample=False,
                         use_cache=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    sequence = out.sequences
    for i, step in enumerate(out.logits):  # each step is the last row of a forward of its prefix
        prefix = sequence[:, : prompt.shape[1] + i]
        torch.testing.assert_close(step, logits(model, prefix)[:, -1], atol=1e-5, rtol=1e-5)
    whole = logits(model, sequence)[:, prompt.shape[1] - 1 : -1]
    assert (torch.stack(out.logits, 1) - whole).abs().max() > 1e-4  # same padding's boundary effect


# --- save and load ---------------------------------------------------------------------------------------------

def test_save_and_load_round_trip_with_the_processors(tmp_path):
    model = patched(encoding="fire", padding="causal")
    set_attention_impl(model, "plain")
    ids = ids_of(16)
    before = logits(model, ids)
    path = save_pretrained(model, tmp_path / "patched")
    assert not list(tmp_path.glob(".*tmp"))
    loaded = load_pretrained(path).eval()
    assert loaded.config._attn_implementation == "dape" and loaded.config.dape == model.config.dape
    torch.testing.assert_close(logits(loaded, ids), before, atol=1e-6, rtol=1e-6)
    for a, b in zip(processors(loaded), processors(model)):
        assert torch.equal(a.conv1.weight, b.conv1.weight) and torch.equal(a.conv2.bias, b.conv2.bias)


def test_loading_refuses_missing_processor_weights_and_unpatched_models(tmp_path):
    model = patched()
    path = save_pretrained(model, tmp_path / "patched")
    state = load_file(path / "model.safetensors")
    del state["model.layers.1.self_attn.dape_processor.conv2.weight"]
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConfigError, match=r"missing \['model.layers.1.self_attn.dape_processor.conv2.weight'\]"):
        load_pretrained(path)
    tiny().save_pretrained(tmp_path / "plain")
    with pytest.raises(ConfigError, match="no 'dape' settings"):
        load_pretrained(tmp_path / "plain")


# --- errors ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("settings,match", [
    (dict(processor="none", encoding="nope"), r"processor: 'none' is not allowed; allowed values: dape_v1, dape_v2"),
    (dict(processor="dape_v2", kernel_size=3, encoding="rope"), r"encoding: 'rope'.*nope, alibi, kerple, fire"),
    (dict(processor="dape_v2", kernel_size=3, encoding="kerple", encoding_shared=True), r"encoding_shared"),
    (dict(processor="dape_v2", kernel_size=3, encoding="kerple", window=4), r"settings: window not allowed"),
])
def test_refused_settings_name_the_field_and_the_allowed_values(settings, match):
    with pytest.raises(ConfigError, match=match):
        add_processor(tiny(), settings)


def test_attention_impl_is_checked_and_needs_a_patched_model():
    with pytest.raises(ConfigError, match="attention_impl: 'gpu' is not allowed; allowed values: auto, fast"):
        set_attention_impl(patched(randomize=False), "gpu")
    with pytest.raises(ConfigError, match="has no DAPE processors"):
        set_attention_impl(tiny(), "plain")


def test_unsupported_models_are_refused_with_what_was_found():
    settings = {"encoding": "nope", **V2}
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=128))
    with pytest.raises(ConfigError, match=r"model_type: 'gpt2' \(GPT2LMHeadModel\).*llama, mistral, qwen2"):
        add_processor(gpt2, settings)

    class Unregistered(nn.Module):  # a llama config, but not a transformers model
        config = LlamaConfig(**TINY)

    with pytest.raises(ConfigError, match="AttentionInterface registry"):
        add_processor(Unregistered(), settings)
    model = tiny()
    model.model.layers[1].self_attn = nn.Identity()
    with pytest.raises(ConfigError, match=r"found 1 attention layers.*one per decoder layer \(2\)"):
        add_processor(model, settings)
    twice = add_processor(tiny(), settings)
    with pytest.raises(ConfigError, match="already has DAPE processors"):
        add_processor(twice, settings)
