"""attend_causal (the score pipeline's entry for a host model): query rows at an offset (a KV cache) and a host's
key mask, on every path, against the full forward of the project's own pipeline and ScoreProcessor.forward."""

import pytest
import torch

from dape_core.attention import attend, attend_causal
from dape_core.dape import ScoreProcessor
from dape_core.encodings import build_encoding
from dape_core.settings import AttentionSettings

H, D = 4, 8


def _setup(encoding, processor="dape_v2", kernel_size=3, padding="causal"):
    settings = AttentionSettings(encoding=encoding, processor=processor, kernel_size=kernel_size, padding=padding)
    enc = build_encoding(encoding, H, D, causal=True, train_len=16)
    proc = ScoreProcessor(H, settings, bias_channels=enc.has_bias)
    with torch.no_grad():  # a processor far from the identity
        for p in proc.parameters():
            p.normal_(0, 0.4)
    return enc, proc


def _qkv(batch, n):
    return (torch.randn(batch, H, n, D) for _ in range(3))


@pytest.mark.parametrize("impl", ["plain", "fast", "materialized"])
@pytest.mark.parametrize("encoding,processor,kernel_size", [
    ("kerple", "dape_v2", 3), ("fire", "dape_v2", 3), ("nope", "dape_v2", 5), ("alibi", "dape_v1", 1),
])
def test_rows_at_an_offset_equal_the_last_rows_of_a_full_forward(impl, encoding, processor, kernel_size):
    enc, proc = _setup(encoding, processor, kernel_size)
    q, k, v = _qkv(2, 13)
    pos = torch.arange(13)
    full = attend(q, k, v, encoding=enc, processor=proc, positions=pos, causal=True, attention_impl="plain")
    for n_q in (1, 4):
        rows = attend_causal(q[:, :, -n_q:], k, v, encoding=enc, processor=proc, positions=pos, attention_impl=impl,
                             query_chunk_size=3 if impl != "plain" else None)
        torch.testing.assert_close(rows, full[:, :, -n_q:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["plain", "fast", "materialized"])
def test_without_offset_or_mask_it_is_the_projects_own_attend(impl):
    enc, proc = _setup("kerple")
    q, k, v = _qkv(2, 11)
    pos = torch.arange(11)
    own = attend(q, k, v, encoding=enc, processor=proc, positions=pos, causal=True, attention_impl=impl)
    everything = torch.ones(1, 1, 11, 11, dtype=torch.bool)  # a mask that removes nothing past the causal one
    for mask in (None, everything):
        out = attend_causal(q, k, v, encoding=enc, processor=proc, positions=pos, key_mask=mask, attention_impl=impl)
        assert torch.equal(out, own)


def test_same_padding_row_at_an_offset_is_the_prefix_forward_not_the_whole_sequence():
    """With same padding Conv2 reads Conv1 at key i + 1: a row computed without that key (a cached step) equals
    the last row of the prefix's forward and differs from the row of the whole sequence's forward."""
    enc, proc = _setup("kerple", padding="same")
    q, k, v = _qkv(1, 10)
    pos = torch.arange(10)
    step = attend_causal(q[:, :, 6:7], k[:, :, :7], v[:, :, :7], encoding=enc, processor=proc, positions=pos[:7],
                         attention_impl="plain")
    prefix = attend(q[:, :, :7], k[:, :, :7], v[:, :, :7], encoding=enc, processor=proc, positions=pos[:7],
                    causal=True, attention_impl="plain")
    whole = attend(q, k, v, encoding=enc, processor=proc, positions=pos, causal=True, attention_impl="plain")
    torch.testing.assert_close(step, prefix[:, :, 6:7], atol=1e-5, rtol=1e-5)
    assert (step - whole[:, :, 6:7]).abs().max() > 1e-3


@pytest.mark.parametrize("padding", ["same", "causal"])
@pytest.mark.parametrize("encoding", ["kerple", "nope"])
@pytest.mark.parametrize("n_q", [9, 1])
def test_left_padding_key_mask_gives_the_unpadded_rows(padding, encoding, n_q):
    """Keys removed by a padding mask are the processor's zero padding: the real rows equal the unpadded run."""
    enc, proc = _setup(encoding, padding=padding)
    n, pad = 9, 4
    q, k, v = _qkv(1, n)
    positions = torch.arange(n + pad)
    unpadded = attend(q, k, v, encoding=enc, processor=proc, positions=torch.arange(n), causal=True,
                      attention_impl="plain")
    noise = lambda: torch.randn(1, H, pad, D) * 5  # noqa: E731 - padding content must not matter
    qp, kp, vp = (torch.cat([noise(), x], dim=2) for x in (q, k, v))
    present = torch.cat([torch.zeros(pad, dtype=torch.bool), torch.ones(n, dtype=torch.bool)])
    causal = torch.ones(n + pad, n + pad, dtype=torch.bool).tril()
    key_mask = (causal & present)[None, None, -n_q:]
    out = attend_causal(qp[:, :, -n_q:], kp, vp, encoding=enc, processor=proc, positions=positions, key_mask=key_mask,
                        attention_impl="fast", query_chunk_size=4)
    torch.testing.assert_close(out, unpadded[:, :, -n_q:], atol=1e-5, rtol=1e-5)


def test_a_query_whose_keys_are_all_masked_stays_finite_and_gradients_too():
    enc, proc = _setup("kerple")
    q, k, v = _qkv(1, 6)
    q.requires_grad_(True)
    present = torch.tensor([False, False, True, True, True, True])
    key_mask = (torch.ones(6, 6, dtype=torch.bool).tril() & present)[None, None]
    out = attend_causal(q, k, v, encoding=enc, processor=proc, positions=torch.arange(6), key_mask=key_mask)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(q.grad).all()
    assert q.grad[:, :, 2:].abs().sum() > 0


def test_more_queries_than_keys_is_refused():
    enc, proc = _setup("kerple")
    q, k, v = _qkv(1, 4)
    with pytest.raises(ValueError, match="at most as many rows as keys"):
        attend_causal(q, k[:, :, :3], v[:, :, :3], encoding=enc, processor=proc, positions=torch.arange(3))


@pytest.mark.parametrize("processor,kernel_size", [("dape_v1", 1), ("dape_v2", 3)])
def test_zero_init_output_makes_a_new_processor_the_identity_and_is_off_by_default(processor, kernel_size):
    from dape_core.dape import build_processor

    settings = AttentionSettings(encoding="kerple", processor=processor, kernel_size=kernel_size)
    scores, bias = torch.randn(2, H, 5, 5), torch.randn(H, 5, 5)
    identity = build_processor(H, settings, zero_init_output=True)
    assert torch.equal(identity(scores, bias), scores + bias)
    default = build_processor(H, settings)
    assert default.output_layer().weight.abs().sum() > 0
    assert (default(scores, bias) - (scores + bias)).abs().max() > 1e-3
