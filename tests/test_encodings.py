"""Encodings: closed forms at 4× and 16× the training length, constraints, no stale caches."""

import math

import pytest
import torch

from dape_core.encodings import ENCODINGS, alibi_slopes, build_encoding, sinusoid, t5_bucket
from dape_core.errors import ConfigError

TRAIN_LEN = 16
H, D = 4, 8


def _closed_form(enc, q, k, i, j, b=0):
    """b(i, j) from the formulas of reference-facts.md, one scalar at a time (decoder side)."""
    h_vals = []
    for h in range(enc.n_head):
        d = i - j
        if enc.name == "alibi":
            m = 2 ** (-8 * (h + 1) / enc.n_head)
            h_vals.append(-m * d)
        elif enc.name == "kerple":
            r1, r2 = max(float(enc.r1[0, h]), 0.01), max(float(enc.r2[0, h]), 0.01)
            h_vals.append(-r1 * math.log(1 + r2 * abs(d)))
        elif enc.name == "fire":
            c, L = float(enc.c), abs(float(enc.L_multiplier) * TRAIN_LEN / 2)
            psi = lambda x: math.log(abs(c * x) + 1)  # noqa: E731
            x = psi(d) / (psi(max(L, i)) + 1e-6)
            h_vals.append(float(enc.mlp(torch.tensor([[x]]))[0, h]))
        elif enc.name == "t5":
            max_exact = 16  # causal: all 32 buckets on one side, half of them exact
            if d < max_exact:
                bucket = d
            else:
                bucket = min(31, max_exact + int(math.log(d / max_exact) / math.log(128 / max_exact) * (32 - max_exact)))
            h_vals.append(float(enc.table.weight[bucket, h]))
        elif enc.name == "cope":
            scores = (q[b, h, i] * k[b, h, : i + 1]).sum(-1) / math.sqrt(D)
            p = min(float(torch.sigmoid(scores[j:]).sum()), 63)
            logits = q[b, h, i] @ enc.pos_emb[0]
            lo, hi = math.floor(p), math.ceil(p)
            w = p - lo
            h_vals.append(float(logits[hi]) * w + float(logits[lo]) * (1 - w))
        elif enc.name == "xl":
            r = torch.tensor([d], dtype=torch.float32)
            rel = enc.w_r(sinusoid(r, H * D))[0].view(H, D)[h]
            val = (enc.u[h] @ k[b, h, j] + (q[b, h, i] + enc.v[h]) @ rel) / math.sqrt(D)
            h_vals.append(float(val))
    return h_vals


BIASED = [n for n, cls in ENCODINGS.items() if cls.has_bias]


@pytest.mark.parametrize("name", BIASED)
@pytest.mark.parametrize("factor", [4, 16])
def test_bias_matches_closed_form_far_beyond_training_length(name, factor):
    enc = build_encoding(name, H, D, causal=True, train_len=TRAIN_LEN)
    with torch.no_grad():
        for p in enc.parameters():  # random values so that the check is not trivially zero
            p.uniform_(0.05, 0.5)
    n = TRAIN_LEN * factor
    pos = torch.arange(n)
    q, k = torch.randn(2, H, n, D), torch.randn(2, H, n, D)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    with torch.no_grad():
        bias = enc.bias(q, k, scores, pos, pos)
    assert bias.shape[-2:] == (n, n)
    gen = torch.Generator().manual_seed(factor)
    for _ in range(6):
        i = int(torch.randint(0, n, (1,), generator=gen))
        j = int(torch.randint(0, i + 1, (1,), generator=gen))
        with torch.no_grad():
            expected = _closed_form(enc, q, k, i, j)
        got = bias[0, :, i, j] if bias.dim() == 4 else bias[:, i, j]
        torch.testing.assert_close(got, torch.tensor(expected), rtol=1e-4, atol=1e-4)


def test_rope_rotation_is_relative_at_any_length():
    enc = build_encoding("rope", H, D)
    q, k = torch.randn(1, H, 1, D), torch.randn(1, H, 1, D)
    dots = []
    for offset in (0, 1000, 40_000):  # far beyond any training length
        pos = torch.tensor([offset + 7])
        kpos = torch.tensor([offset + 3])
        qr, _ = enc.rotate(q, q, pos, pos)
        _, kr = enc.rotate(k, k, kpos, kpos)
        dots.append((qr * kr).sum())
    torch.testing.assert_close(dots[0], dots[1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dots[0], dots[2], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("heads,expected", [
    (8, [2 ** -(h + 1) for h in range(8)]),
    (12, [2 ** -(h + 1) for h in range(8)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]),
])
def test_alibi_slopes(heads, expected):
    torch.testing.assert_close(alibi_slopes(heads), torch.tensor(expected))


def test_kerple_parameters_stay_above_floor_after_a_step_that_pushes_them_negative():
    enc = build_encoding("kerple", H, D)
    opt = torch.optim.SGD(enc.parameters(), lr=100.0)
    pos = torch.arange(10)
    q = torch.zeros(1, H, 10, D)
    enc.bias(q, q, None, pos, pos).sum().neg().backward()  # gradient pushes r1, r2 down hard
    opt.step()
    assert float(enc.r1.min()) < 0 and float(enc.r2.min()) < 0  # the step did push them negative
    bias = enc.bias(q, q, None, pos, pos)
    floor = float(torch.tensor(0.01))  # 0.01 in float32
    assert float(enc.r1.min()) >= floor and float(enc.r2.min()) >= floor
    far = bias[:, 9, 0]
    assert torch.all(far <= -0.01 * math.log(1 + 0.01 * 9) + 1e-7)


@pytest.mark.parametrize("name", [n for n in BIASED if any(True for _ in build_encoding(n, H, D).parameters())])
def test_bias_follows_parameters_after_an_optimiser_step(name):
    enc = build_encoding(name, H, D, train_len=TRAIN_LEN)
    pos = torch.arange(12)
    q, k = torch.randn(1, H, 12, D), torch.randn(1, H, 12, D)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    before = enc.bias(q, k, scores, pos, pos)
    opt = torch.optim.SGD(enc.parameters(), lr=0.5)
    (before * torch.randn_like(before)).sum().backward()
    opt.step()
    after = enc.bias(q, k, scores, pos, pos)
    assert not torch.allclose(before, after)


def test_t5_buckets_monotone_and_capped():
    d = torch.arange(0, 5000)
    b = t5_bucket(d, bidirectional=False)
    assert b[:16].tolist() == list(range(16)) and int(b.max()) == 31 and bool((b[1:] >= b[:-1]).all())
    both = t5_bucket(torch.tensor([3, -3]), bidirectional=True)
    assert both[0] != both[1]


def test_unknown_encoding_names_field_and_choices():
    with pytest.raises(ConfigError, match=r"encoding: 'sinusoidal'.*allowed values: .*kerple"):
        build_encoding("sinusoidal", H, D)


@pytest.mark.parametrize("name", [n for n in ENCODINGS if n != "nope"])
def test_encoder_side_tells_left_from_right(name):
    """Two-sided encodings (CHE encoder): b(i, i−1) ≠ b(i, i+1) or, for RoPE, the rotation is not symmetric."""
    enc = build_encoding(name, H, D, causal=False, train_len=TRAIN_LEN)
    with torch.no_grad():
        for p in enc.parameters():
            p.uniform_(0.05, 0.5)
    pos = torch.arange(9)
    q, k = torch.randn(1, H, 9, D), torch.randn(1, H, 9, D)
    k[:, :, 3] = k[:, :, 5]  # same key content on both sides of query 4
    if name == "rope":
        qr, kr = enc.rotate(q, k, pos, pos)
        s = qr @ kr.transpose(-1, -2)
        assert not torch.allclose(s[0, :, 4, 3], s[0, :, 4, 5])
        return
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    b = enc.bias(q, k, scores, pos, pos)
    b = b[0] if b.dim() == 4 else b
    assert not torch.allclose(b[:, 4, 3], b[:, 4, 5])
