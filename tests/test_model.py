"""Decoder and encoder: presets, parameter counts, gradients to every parameter, sharing, direction."""

import pytest
import torch

from dape_core.encodings import ENCODINGS
from dape_core.errors import ConfigError
from dape_core.methods import method_label
from dape_core.model import GPT, SIZE_PRESETS, Encoder, EncoderConfig, GPTConfig


def test_125m_preset_has_85m_non_embedding_parameters_on_the_meta_device():
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=50304, size="125M"))
    assert abs(model.non_embedding_parameters() / (12 * 12 * 768**2) - 1) < 0.02


@pytest.mark.parametrize("size,shape", [("350M", (24, 16, 1024)), ("2.7B", (32, 32, 2560)), ("6.7B", (32, 32, 4096))])
def test_paper_shapes(size, shape):
    cfg = GPTConfig(size=size)
    assert (cfg.n_layer, cfg.n_head, cfg.d_model) == shape == SIZE_PRESETS[size]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("processor,kernel_size", [("none", 1), ("dape_v1", 1), ("dape_v2", 3)])
def test_gradients_reach_every_parameter(encoding, processor, kernel_size):
    model = GPT(GPTConfig(vocab_size=40, size="tiny", encoding=encoding, processor=processor, kernel_size=kernel_size, train_len=8))
    x = torch.randint(0, 40, (2, 20))
    _, loss = model(x, x)
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.any(p.grad != 0)]
    assert not missing


def test_tied_embeddings_share_one_tensor_and_untied_is_the_default():
    assert GPTConfig().tie_embeddings is False
    tied = GPT(GPTConfig(vocab_size=40, size="tiny", tie_embeddings=True))
    assert tied.head.weight is tied.embed.weight
    untied = GPT(GPTConfig(vocab_size=40, size="tiny"))
    assert untied.head.weight is not untied.embed.weight


def test_encoding_sharing_follows_the_public_code_and_can_be_switched():
    assert len(GPT(GPTConfig(vocab_size=40, size="tiny", encoding="t5")).stack.encodings) == 1
    assert len(GPT(GPTConfig(vocab_size=40, size="tiny", encoding="kerple")).stack.encodings) == 2
    shared = GPT(GPTConfig(vocab_size=40, size="tiny", encoding="kerple", encoding_shared=True))
    assert len(shared.stack.encodings) == 1
    x = torch.randint(0, 40, (2, 12))
    _, loss = shared(x, x)
    loss.backward()  # a shared table is used by every layer without autograd conflicts


@pytest.mark.parametrize("bad,field", [
    (dict(size="1B"), "size"),
    (dict(encoding="sinusoidal"), "encoding"),
    (dict(size=None, n_layer=2, n_head=3, d_model=64), "d_model"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(query_chunk_size=0), "query_chunk_size"),
])
def test_bad_model_settings_name_the_field(bad, field):
    with pytest.raises(ConfigError, match=rf"^{field}:.*allowed values"):
        GPTConfig(**bad)


def test_method_labels_follow_the_paper():
    assert method_label("kerple") == "Kerple"
    assert method_label("kerple", "dape_v1", 1) == "DAPE-Kerple"
    assert method_label("kerple", "dape_v2", 3) == "DAPE1x3-Kerple"
    assert method_label("alibi", "dape_v2", 3, tril=False) == "DAPE1x3-ALiBi (no tril)"


@pytest.mark.parametrize("encoding", [e for e in ENCODINGS if e != "nope"])
@pytest.mark.parametrize("processor,kernel_size", [("none", 1), ("dape_v2", 3)])
def test_encoder_sees_direction(encoding, processor, kernel_size):
    """Reversing the input changes the query token's output: left and right are told apart (NoPE cannot)."""
    torch.manual_seed(3)
    model = Encoder(EncoderConfig(input_vocab=2, output_vocab=2, n_layer=2, encoding=encoding, processor=processor,
                                  kernel_size=kernel_size, dropout=0.0)).eval()
    with torch.no_grad():
        for enc in model.stack.encodings:
            for p in enc.parameters():
                p.add_(0.2 * torch.randn_like(p))
        for block in model.stack.blocks:  # a trained model's scores, not the near-zero ones of N(0, 0.02) weights
            block.attn.qkv.weight.mul_(25)
    seq = torch.tensor([[0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1]])
    query = torch.full((1, 1), 2)
    with torch.no_grad():
        a = model(torch.cat([seq, query], 1))[:, -1]
        b = model(torch.cat([seq.flip(1), query], 1))[:, -1]
    assert (a - b).abs().max() > 1e-3


def test_encoder_accepts_randomised_positions():
    model = Encoder(EncoderConfig(input_vocab=2, output_vocab=3, n_layer=1, encoding="kerple")).eval()
    tokens = torch.randint(0, 3, (4, 10))
    positions = torch.sort(torch.randperm(2048)[:10]).values
    assert model(tokens, positions).shape == (4, 10, 3)
