"""Encodings: closed forms at 4× and 16× the training length, constraints, no stale caches; YaRN and randomized
RoPE against their definitions; decoder biases above the diagonal and the T5 table as the public code has them."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from dape_core import positions as pos_module
from dape_core.encodings import ENCODINGS, alibi_slopes, build_encoding, sinusoid, t5_bucket
from dape_core.errors import ConfigError
from dape_core.model import GPT, GPTConfig

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
            h_vals.append(math.sqrt(D) * float(enc.table.weight[bucket, h]))  # public code: table × √d_head
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
    if not enc.has_bias:  # the RoPE family
        qr, kr = enc.rotate(q, k, pos, pos)
        s = qr @ kr.transpose(-1, -2)
        assert not torch.allclose(s[0, :, 4, 3], s[0, :, 4, 5])
        return
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    b = enc.bias(q, k, scores, pos, pos)
    b = b[0] if b.dim() == 4 else b
    assert not torch.allclose(b[:, 4, 3], b[:, 4, 5])


# ------------------------------------------------------------------------------------------------------ YaRN
def _yarn_expected(head_dim, train_len, s, base=10000.0, alpha=1.0, beta=32.0):
    """(θ′_d, γ_d) per dimension from YaRN eqs. 13, 17, 18 and 20, one scalar at a time in float64."""
    frequencies, gammas = [], []
    for d in range(head_dim // 2):
        theta = base ** (-2 * d / head_dim)
        r = train_len / (2 * math.pi / theta)  # L / λ_d
        gamma = 0.0 if r < alpha else 1.0 if r > beta else (r - alpha) / (beta - alpha)
        frequencies.append((1 - gamma) * theta / s + gamma * theta)
        gammas.append(gamma)
    return torch.tensor(frequencies, dtype=torch.float64), gammas


@pytest.mark.parametrize("s", [2.0, 4.0, 16.0])
def test_yarn_frequencies_are_ntk_by_parts(s):
    head_dim, train_len = 64, 2048  # θ_0 = 1: r = 326 > β; the last dimensions r < α; about 12 on the ramp
    enc = build_encoding("yarn", 1, head_dim, train_len=train_len)
    expected, gammas = _yarn_expected(head_dim, train_len, s)
    got = enc.frequencies(s).double()
    torch.testing.assert_close(got, expected, rtol=2e-6, atol=0)
    theta = torch.tensor([10000.0 ** (-2 * d / head_dim) for d in range(head_dim // 2)], dtype=torch.float64)
    kept = [d for d, g in enumerate(gammas) if g == 1]
    divided = [d for d, g in enumerate(gammas) if g == 0]
    ramp = [d for d, g in enumerate(gammas) if 0 < g < 1]
    assert kept and divided and len(ramp) >= 3, gammas  # every region is exercised
    torch.testing.assert_close(got[kept], theta[kept], rtol=2e-6, atol=0)  # γ = 1: θ unchanged
    torch.testing.assert_close(got[divided], theta[divided] / s, rtol=2e-6, atol=0)  # γ = 0: θ / s
    assert bool(((got[ramp] < theta[ramp]) & (got[ramp] > theta[ramp] / s)).all())  # the ramp: in between


def test_yarn_temperature_at_four_times_the_training_length():
    """At L′ = 4L the logits are those of the interpolated rotation times (0.1·ln 4 + 1)², i.e. divided by t."""
    train_len, head_dim, n = 16, 8, 64
    enc = build_encoding("yarn", 1, head_dim, train_len=train_len)
    assert enc.scale_factor(n) == 4.0
    assert enc.attention_factor(4.0) == pytest.approx(0.1 * math.log(4) + 1, rel=1e-12)
    pos = torch.arange(n)
    q, k = torch.randn(1, 1, n, head_dim, dtype=torch.float64), torch.randn(1, 1, n, head_dim, dtype=torch.float64)
    qr, kr = enc.rotate(q, k, pos, pos)
    logits = (qr @ kr.transpose(-1, -2))[0, 0]
    theta, _ = _yarn_expected(head_dim, train_len, 4.0)
    half, factor = head_dim // 2, 0.1 * math.log(4) + 1
    for i, j in [(63, 0), (40, 39), (10, 5), (20, 20)]:
        qc = torch.complex(q[0, 0, i, :half], q[0, 0, i, half:])  # rotate-half layout: pairs (x_d, x_{d+D/2})
        kc = torch.complex(k[0, 0, j, :half], k[0, 0, j, half:])
        expected = factor**2 * float((qc * kc.conj() * torch.exp(1j * (i - j) * theta)).real.sum())
        assert float(logits[i, j]) == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_yarn_is_rope_up_to_the_training_length_and_not_beyond():
    train_len = 16
    yarn, rope = (build_encoding(name, H, D, train_len=train_len) for name in ("yarn", "rope"))
    for n in (1, 5, train_len, train_len + 1, 4 * train_len):
        pos = torch.arange(n)
        q, k = torch.randn(2, H, n, D), torch.randn(2, H, n, D)
        same = all(torch.equal(a, b) for a, b in zip(yarn.rotate(q, k, pos, pos), rope.rotate(q, k, pos, pos)))
        assert same == (n <= train_len), n


def test_a_yarn_model_is_the_rope_model_up_to_its_training_length():
    def model(encoding):
        torch.manual_seed(3)
        return GPT(GPTConfig(vocab_size=50, size="tiny", n_layer=2, encoding=encoding, train_len=16)).eval()

    yarn, rope = model("yarn"), model("rope")
    x = torch.randint(0, 50, (2, 32))
    with torch.no_grad():
        assert torch.equal(yarn(x[:, :16]), rope(x[:, :16]))
        assert not torch.allclose(yarn(x), rope(x), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------- randomized RoPE
def _randrope(**kw):
    return GPTConfig(vocab_size=50, size="tiny", encoding="randrope", **{"train_len": 16, "max_position": 64, **kw})


def test_randomized_training_positions_are_sorted_distinct_bounded_and_fixed_by_seed_step_micro():
    cfg = _randrope()
    draws = {}
    for seed in (0, 1):
        for step in (0, 7):
            for micro in (0, 1):
                p = pos_module.training_positions(cfg, seed, step, micro, 16)
                assert p.shape == (16,) and p.dtype == torch.int64
                assert bool((p[1:] > p[:-1]).all()) and int(p.min()) >= 0 and int(p.max()) < 64
                assert torch.equal(p, pos_module.training_positions(cfg, seed, step, micro, 16))  # a resumed run
                draws[seed, step, micro] = tuple(p.tolist())
    assert len(set(draws.values())) == len(draws)  # seed, step and micro-batch each change the draw
    assert any(max(d) > 16 for d in draws.values())  # positions beyond the training length are trained
    every = pos_module.training_positions(_randrope(max_position=16), 0, 0, 0, 16)
    assert every.tolist() == list(range(16))  # drawn without replacement: all of [0, 16) at L_max = T
    assert pos_module.training_positions(GPTConfig(vocab_size=50, size="tiny", encoding="rope"), 0, 0, 0, 16) is None


def test_randomized_evaluation_positions_are_fixed_per_seed_length_and_window():
    cfg = _randrope()
    a = pos_module.evaluation_positions(cfg, 0, 32, 3)
    assert torch.equal(a, pos_module.evaluation_positions(cfg, 0, 32, 3))
    assert bool((a[1:] > a[:-1]).all()) and int(a.max()) < 64
    others = [pos_module.evaluation_positions(cfg, *key) for key in ((1, 32, 3), (0, 32, 4))]
    assert all(not torch.equal(a, b) for b in others)
    assert pos_module.evaluation_positions(GPTConfig(vocab_size=50, size="tiny", encoding="kerple"), 0, 32, 3) is None


def test_max_position_must_cover_the_training_and_evaluation_lengths():
    with pytest.raises(ConfigError, match=r"^max_position: 8 is not allowed with train_len 16; allowed values: ≥"):
        _randrope(max_position=8)
    GPTConfig(vocab_size=50, size="tiny", encoding="rope", train_len=16, max_position=8)  # only randrope draws
    with pytest.raises(ConfigError, match=r"^eval_lens: 128 exceeds max_position 64 .*allowed values: ≤ 64"):
        pos_module.require_max_position(_randrope(), 128, "eval_lens")
    with pytest.raises(ConfigError, match=r"^max_position: 64 is not allowed .*allowed values: ≥ 65"):
        pos_module.draw_positions(np.random.default_rng(0), 65, 64)


@pytest.mark.parametrize("processor", [{"processor": "none"}, {"processor": "dape_v2", "kernel_size": 3}])
def test_a_randrope_model_at_drawn_positions_stays_causal_and_reads_them(processor):
    torch.manual_seed(1)
    model = GPT(_randrope(n_layer=2, **processor)).eval()
    positions = pos_module.training_positions(model.cfg, 0, 0, 0, 16)
    x = torch.randint(0, 50, (2, 16))
    y = x.clone()
    y[:, 9] = (y[:, 9] + 1) % 50
    with torch.no_grad():
        a, b = model(x, positions=positions), model(y, positions=positions)
        assert float((a[:, :9] - b[:, :9]).abs().max()) == 0.0 and float((a[:, 9:] - b[:, 9:]).abs().max()) > 0
        assert not torch.allclose(model(x), a, rtol=1e-4, atol=1e-4)  # 0 … T−1 gives other logits


def test_the_che_runner_draws_with_the_shared_sampler():
    from dape_core.che.runner import CHESettings, draw_positions

    settings = CHESettings(train_max_len=10, eval_min_len=11, eval_max_len=25, max_position=64)
    che = draw_positions(np.random.default_rng(4), 30, settings)
    assert torch.equal(che, pos_module.draw_positions(np.random.default_rng(4), 30, 64))


def test_training_and_evaluation_give_a_randrope_model_its_drawn_positions(tiny_corpus, tmp_path, monkeypatch):
    from dape_core.data import load_split
    from dape_core.evaluate import evaluate
    from dape_core.model_file import load_model
    from dape_core.train import TrainSettings, train

    seen = []
    forward = GPT.forward

    def spy(self, idx, *args, positions=None, **kwargs):
        if idx.device.type != "meta":  # not the memory preflight's shape-only traces
            seen.append(None if positions is None else positions.clone())
        return forward(self, idx, *args, positions=positions, **kwargs)

    monkeypatch.setattr(GPT, "forward", spy)
    cfg = GPTConfig(size="tiny", encoding="randrope", train_len=16, max_position=128)
    settings = TrainSettings(train_len=16, batch_size=4, grad_accum=2, steps=2, seed=5, threads=1, log_every=1)
    assert train(cfg, settings, tiny_corpus, tmp_path, progress=False)["status"] == "ok"
    expected = [pos_module.training_positions(cfg, 5, step, micro, 16) for step in (0, 1) for micro in (0, 1)]
    assert len(seen) == 4 and all(torch.equal(a, b) for a, b in zip(seen, expected))

    model, _ = load_model(tmp_path / "model.pt")
    split = load_split(tiny_corpus, "val")
    options = dict(train_len=16, window=8, max_windows=3, n_boot=10, seed=2)
    seen.clear()
    first = evaluate(model, split, [16, 32], batch_size=8, **options)
    lengths = [16] * 3 + [32] * 3 + [16] * 3  # L = 16; L = 32, then its ΔP context of train_len 16
    assert [len(p) for p in seen] == lengths
    for k, p in enumerate(seen):
        assert torch.equal(p, pos_module.evaluation_positions(model.cfg, 2, lengths[k], k % 3))  # one draw a window
    pd.testing.assert_frame_equal(first, evaluate(model, split, [16, 32], batch_size=1, **options))
    with pytest.raises(ConfigError, match=r"^eval_lens: 256 exceeds max_position 128"):
        evaluate(model, split, [256], batch_size=1, **options)


# ------------------------------------------------------------------ decoder biases and T5 as the public code
def _public_code_bias(enc, n):
    """The public code's decoder bias [H, n, n] at positions 0 … n−1 (DAPE repository: ALiBi, Kerple and FIRE in
    positional_embeddings.py; T5 is GPT-NeoX's ParallelRelativePositionBias): every one is built on tril(i − j),
    so keys right of the query get the value of distance 0."""
    i = torch.arange(n)
    diff = torch.tril(i[:, None] - i[None, :]).double()
    if enc.name == "alibi":
        return -enc.slopes.double()[:, None, None] * diff
    if enc.name == "kerple":
        p, a = (x[0].detach().double().clamp(min=0.01)[:, None, None] for x in (enc.r1, enc.r2))
        return -p * torch.log(1 + a * diff)
    if enc.name == "fire":
        c, threshold = float(enc.c), abs(float(enc.L_multiplier) * float(enc.L_init))
        normaliser = diff.max(dim=-1).values.clamp(min=threshold)[:, None]
        x = torch.log(torch.abs(c * diff) + 1) / (torch.log(torch.abs(c * normaliser) + 1) + 1e-6)
        return enc.mlp(x.float().unsqueeze(-1)).permute(2, 0, 1).double()
    if enc.name == "t5":
        distance = torch.clamp(-(i[None, :] - i[:, None]), min=0)  # n = max(−(k − q), 0), causal
        large = 16 + (torch.log(distance.double().clamp(min=1) / 16) / math.log(128 / 16) * 16).long()
        bucket = torch.where(distance < 16, distance, large.clamp(max=31))
        return math.sqrt(enc.head_dim) * enc.table.weight.detach().double()[bucket].permute(2, 0, 1)
    raise AssertionError(enc.name)


@pytest.mark.parametrize("name", ["alibi", "kerple", "fire", "t5"])
def test_decoder_biases_are_the_public_codes_on_tril_distances(name):
    enc = build_encoding(name, H, D, causal=True, train_len=TRAIN_LEN)
    with torch.no_grad():
        for p in enc.parameters():
            p.uniform_(0.05, 0.5)
    n = 3 * TRAIN_LEN
    pos = torch.arange(n)
    with torch.no_grad():
        bias = enc.bias(torch.zeros(1, H, n, D), torch.zeros(1, H, n, D), None, pos, pos).double()
        expected = _public_code_bias(enc, n)
    torch.testing.assert_close(bias, expected, rtol=1e-5, atol=1e-5)  # above the diagonal too
    above = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    torch.testing.assert_close(bias[:, above], bias[:, :1, 0].expand(-1, int(above.sum())))  # = distance 0
    if name in ("alibi", "kerple"):
        assert bool((bias[:, above] == 0).all())
    else:  # FIRE's f_θ(0) and T5's bucket 0 are not 0: the test sees the value, not a zero
        assert bool((bias[:, above] != 0).all())


def test_t5_table_is_initialised_and_scaled_as_the_public_code():
    heads, head_dim = 256, 16
    enc = build_encoding("t5", heads, head_dim)
    assert float(enc.table.weight.std()) == pytest.approx(math.sqrt(2 / (32 + heads)), rel=0.05)  # Xavier-normal
    pos = torch.arange(40)
    bias = enc.bias(torch.zeros(1, heads, 40, head_dim), None, None, pos, pos)
    bucket = t5_bucket(pos[:, None] - pos[None, :], bidirectional=False)
    torch.testing.assert_close(bias, math.sqrt(head_dim) * enc.table.weight[bucket].permute(2, 0, 1))


def test_a_t5_table_saved_without_its_scale_loads_unscaled():
    model = GPT(GPTConfig(vocab_size=50, size="tiny", encoding="t5"))
    state = model.state_dict()
    assert float(state["stack.encodings.0.scale"]) == pytest.approx(math.sqrt(model.cfg.d_model // model.cfg.n_head))
    restored = GPT(GPTConfig(vocab_size=50, size="tiny", encoding="t5"))
    restored.load_state_dict(state)
    assert float(restored.stack.encodings[0].scale) == float(state["stack.encodings.0.scale"])
    del state["stack.encodings.0.scale"]  # a model.pt of an earlier version, trained unscaled
    legacy = GPT(GPTConfig(vocab_size=50, size="tiny", encoding="t5"))
    legacy.load_state_dict(state)
    assert float(legacy.stack.encodings[0].scale) == 1.0
