"""Activation checkpointing: each block's activations are recomputed in the backward pass instead of stored —
fewer tensors saved for backward, the same gradients (bitwise on CPU), and the same training run."""

import json

import pytest
import torch

from dape_core.cli import main
from dape_core.model import GPT, GPTConfig


def saved_and_grads(activation_checkpointing: bool, attention_impl: str):
    """(tensors the forward saves for backward, their bytes, the gradients) of one forward and backward."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3, vocab_size=256,
                          train_len=32, attention_impl=attention_impl))
    for block in model.stack.blocks:
        block.activation_checkpointing = activation_checkpointing
    tokens = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(1))
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss = model(tokens, tokens)
    loss.backward()
    return len(saved), sum(saved), {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("attention_impl", ["fast", "plain"])
def test_checkpointed_blocks_save_fewer_tensors_and_give_the_same_gradients(attention_impl):
    count, size, grads = saved_and_grads(False, attention_impl)
    count_ac, size_ac, grads_ac = saved_and_grads(True, attention_impl)
    assert 0 < count_ac < count and size_ac < size, (count, count_ac, size, size_ac)
    assert grads.keys() == grads_ac.keys()
    for name in grads:
        assert grads[name] is not None and torch.equal(grads[name], grads_ac[name]), name


def test_evaluation_does_not_checkpoint():
    """Without gradients nothing is stored anyway: the block runs as it is."""
    model = GPT(GPTConfig(size="tiny", vocab_size=64, train_len=16))
    for block in model.stack.blocks:
        block.activation_checkpointing = True
    tokens = torch.randint(0, 64, (1, 16))
    with torch.no_grad():
        out = model(tokens)
    assert out.shape == (1, 16, 64) and out.grad_fn is None


@pytest.mark.slow
def test_the_training_option_gives_the_same_run(tiny_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["dape"])  # cli.main rewrites sys.argv
    args = ["--size", "tiny", "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3", "--train-len",
            "32", "--batch-size", "4", "--steps", "4", "--log-every", "1", "--threads", "1", "--no-progress"]
    threads = torch.get_num_threads()
    try:
        for name, extra in (("plain", []), ("checkpointed", ["--activation-checkpointing"])):
            out = str(tmp_path / name)
            assert main(["train", "--data-dir", str(tiny_corpus), "--out-dir", out, *args, *extra]) == 0
    finally:
        torch.set_num_threads(threads)
    summary = json.loads((tmp_path / "checkpointed" / "summary.json").read_text())
    assert summary["config"]["train"]["activation_checkpointing"] is True
    plain = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert summary["config_hash"] == plain["config_hash"]  # a checkpoint resumes across the setting
    curve = lambda p: (tmp_path / p / "metrics.jsonl").read_text().splitlines()  # noqa: E731
    assert [json.loads(x)["loss"] for x in curve("plain")] == [json.loads(x)["loss"] for x in curve("checkpointed")]
    a = torch.load(tmp_path / "plain" / "model.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "checkpointed" / "model.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
