"""torch.compile: the decoder and the CHE encoder trace to one graph for every encoding and processor (no graph
break), a training step of a given shape compiles once (no recompilation at later steps, also when randomized
positions change their values), a compiled step equals the eager one to fp32 rounding, and `dape train --compile`
trains, saves the plain module's weights and resumes.

Graph breaks and recompilations are properties of the trace, so they are checked with TorchDynamo and the
``aot_eager`` backend (which also traces the backward pass), at tiny shapes; inductor compiles two training steps
(its kernels take most of this file's time).
"""

from __future__ import annotations

import copy
import functools
import itertools
import json

import pytest
import torch
import torch._dynamo as dynamo
from torch._dynamo.backends.registry import lookup_backend

import dape_core.train as train_module
from dape_core.model_file import load_model
from dape_core.cli import main
from dape_core.encodings import ENCODINGS
from dape_core.errors import ConfigError
from dape_core.model import GPT, Encoder, EncoderConfig, GPTConfig
from dape_core.train import TrainSettings, constrain_parameters, train

VOCAB, T, MAX_POSITION = 50, 12, 64
PROCESSORS = {
    "none": dict(processor="none"),
    "v1": dict(processor="dape_v1", kernel_size=1),
    "v2": dict(processor="dape_v2", kernel_size=3),
    "v2-causal-no-tril": dict(processor="dape_v2", kernel_size=3, padding="causal", tril=False),
}
GRID = [*itertools.product(ENCODINGS, ("none", "v1", "v2")), ("kerple", "v2-causal-no-tril"),
        ("rope", "v2-causal-no-tril")]
# one of each kind: bias from parameters (Kerple, FIRE), from q (CoPE, XL), a rotation, positions drawn per step
STEP_CASES = [("kerple", "none"), ("kerple", "v2"), ("fire", "v1"), ("cope", "v2"), ("xl", "none"), ("rope", "v2"),
              ("randrope", "v1")]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test traces from scratch (no graph or guard of another test counts)."""
    dynamo.reset()
    yield
    dynamo.reset()


def gpt(encoding, proc, attention_impl="materialized", **shape):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, size="tiny", encoding=encoding, train_len=8, max_position=MAX_POSITION,
                          attention_impl=attention_impl, **PROCESSORS[proc], **shape))
    with torch.no_grad():  # non-trivial positional parameters (CoPE and Transformer-XL start at zero)
        for p in model.stack.encodings.parameters():
            p.add_(0.1 * torch.randn_like(p))
    constrain_parameters(model)  # Kerple's r ≥ 0.01, as after every optimiser step
    return model


def batch(encoding, seed):
    """Tokens, targets and the positions a training step passes (randrope: a new sorted draw every step)."""
    g = torch.Generator().manual_seed(seed)
    idx, targets = torch.randint(0, VOCAB, (2, T), generator=g), torch.randint(0, VOCAB, (2, T), generator=g)
    positions = None
    if ENCODINGS[encoding].randomized_positions:
        positions = torch.randperm(MAX_POSITION, generator=g)[:T].sort().values
    return idx, targets, positions


def graph_breaks(model, *args, **kwargs) -> list[str]:
    """TorchDynamo's graph breaks of ``model(*args, **kwargs)``, each as its reason and the user line."""
    explained = dynamo.explain(model)(*args, **kwargs)
    reasons = [f"{r.reason.splitlines()[0]} at {r.user_stack[-1].filename}:{r.user_stack[-1].lineno}"
               if r.user_stack else r.reason for r in explained.break_reasons]
    assert explained.graph_break_count == len(reasons)
    return reasons


def counting_backend(compiles: list):
    """aot_eager (forward and backward traced by AOTAutograd, run eagerly) that records every compilation."""
    aot_eager = lookup_backend("aot_eager")

    def backend(graph_module, example_inputs):
        compiles.append(graph_module)
        return aot_eager(graph_module, example_inputs)

    return backend


@pytest.mark.parametrize("encoding, proc", GRID)
def test_the_accelerator_path_traces_to_one_graph(encoding, proc):
    idx, targets, positions = batch(encoding, 0)
    assert graph_breaks(gpt(encoding, proc), idx, targets, positions=positions) == []


@pytest.mark.parametrize("encoding, proc", [("kerple", "none"), ("kerple", "v2"), ("fire", "v1")])
def test_the_accelerator_path_traces_to_one_graph_under_autocast_where_its_check_is_untraceable(
        encoding, proc, monkeypatch):
    """bf16 autocast, with ``torch.amp.is_autocast_available`` untraceable as TorchDynamo of torch 2.11 finds it on
    CUDA (where it broke the graph at every layer, measured on an H100): still one graph, and the same loss."""
    untraceable = dynamo.disable(torch.amp.is_autocast_available)
    monkeypatch.setattr(torch.amp, "is_autocast_available", untraceable)
    idx, targets, positions = batch(encoding, 0)
    model = gpt(encoding, proc)

    def loss(idx, targets):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(idx, targets, positions=positions)[1]

    assert graph_breaks(loss, idx, targets) == []
    assert torch.compile(loss, fullgraph=True, backend="aot_eager")(idx, targets).item() == loss(idx, targets).item()


@pytest.mark.parametrize("encoding, proc", [("alibi", "v2"), ("xl", "v2"), ("cope", "v1"), ("rope", "v2")])
def test_the_cpu_path_traces_to_one_graph(encoding, proc):
    idx, targets, positions = batch(encoding, 0)
    assert graph_breaks(gpt(encoding, proc, attention_impl="fast"), idx, targets, positions=positions) == []


@pytest.mark.parametrize("encoding, proc", [("kerple", "v2"), ("xl", "v1")])
def test_the_encoder_compiles_once(encoding, proc):
    """The CHE encoder (two-sided biases) under ``fullgraph=True``: one compilation for three steps."""
    torch.manual_seed(0)
    model = Encoder(EncoderConfig(n_layer=2, encoding=encoding, attention_impl="materialized", **PROCESSORS[proc]))
    compiles = []
    compiled = torch.compile(model, fullgraph=True, backend=counting_backend(compiles))
    for step in range(3):
        with dynamo.config.patch(error_on_recompile=step > 0):
            compiled(torch.randint(0, 2, (2, T))).sum().backward()
    assert len(compiles) == 1


@pytest.mark.parametrize("encoding, proc", STEP_CASES)
def test_training_steps_of_one_shape_compile_once(encoding, proc):
    """Three optimiser steps (new tokens, new randomized positions, updated and clamped parameters) under
    ``fullgraph=True``: one compilation, and a recompilation would raise."""
    model = gpt(encoding, proc)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    compiles = []
    compiled = torch.compile(model, fullgraph=True, backend=counting_backend(compiles))
    for step in range(3):
        idx, targets, positions = batch(encoding, step)
        with dynamo.config.patch(error_on_recompile=step > 0):
            compiled(idx, targets, positions=positions)[1].backward()
        optimizer.step()
        optimizer.zero_grad()
        constrain_parameters(model)
    assert len(compiles) == 1


def test_compiled_xl_reads_its_table_at_consecutive_positions_and_refuses_others():
    """Transformer-XL's table of distances under compile spans |i − j| ≤ T − 1 from the shapes: consecutive
    positions (at any offset) give the eager output; positions farther apart fail the graph's assertion."""
    torch.manual_seed(0)
    model = Encoder(EncoderConfig(n_layer=1, encoding="xl", attention_impl="materialized", dropout=0.0))
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    tokens = torch.randint(0, 2, (2, T))
    shifted = torch.arange(T) + 5
    torch.testing.assert_close(compiled(tokens, shifted), model(tokens, shifted))
    with pytest.raises(RuntimeError, match="Transformer-XL under torch.compile"):
        compiled(tokens, torch.arange(T) * 2)


def loss_and_grads(model, idx, targets, run=None):
    """The loss of ``run`` (default: ``model``) and the gradients of ``model``'s parameters, by name."""
    loss = (model if run is None else run)(idx, targets)[1]
    loss.backward()
    return {"loss": loss.detach(), **{name: p.grad for name, p in model.named_parameters()}}


@pytest.mark.parametrize("encoding, proc, n_layer", [("kerple", "v2", 2), ("xl", "v1", 1)])
def test_an_inductor_training_step_equals_the_eager_step(encoding, proc, n_layer):
    """Loss and every gradient on the accelerator path, compiled by inductor, equal the eager step to 1e-5 of
    each tensor's scale beyond the eager fp32 step's own rounding (its distance from fp64)."""
    model = gpt(encoding, proc, n_layer=n_layer)
    eager, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    idx, targets, _ = batch(encoding, 0)
    compiled = loss_and_grads(model, idx, targets, run=torch.compile(model, fullgraph=True))
    reference, fp64 = loss_and_grads(eager, idx, targets), loss_and_grads(exact, idx, targets)
    assert compiled.keys() == reference.keys()
    for name, expected in reference.items():
        rounding = float((expected.double() - fp64[name]).abs().max())
        scale = max(1.0, float(expected.abs().max()))
        torch.testing.assert_close(compiled[name], expected, rtol=1e-5, atol=1e-5 * scale + rounding, msg=name)


def test_train_compile_follows_the_eager_run_and_resumes(tiny_corpus, tmp_path, monkeypatch):
    """`dape train --compile` of DAPE-XL on the accelerator path, interrupted after two of four steps and resumed
    from its checkpoint: the eager run's loss curve to fp32 rounding, the same configuration hash (a checkpoint
    resumes across the setting), and a model.pt with the plain module's keys. The backend is aot_eager (the
    whole step traced, forward and backward, without kernel compilation): inductor's numbers are the test above's.
    """
    monkeypatch.setattr("sys.argv", ["dape"])  # cli.main rewrites sys.argv
    compiles = []
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=counting_backend(compiles)))
    model_args = ["--size", "tiny", "--encoding", "xl", "--processor", "dape_v1", "--attention-impl", "materialized"]
    train_args = ["--train-len", "32", "--batch-size", "4", "--steps", "4", "--checkpoint-every", "2",
                  "--log-every", "1", "--threads", "1", "--no-progress"]
    cfg = GPTConfig(size="tiny", encoding="xl", processor="dape_v1", attention_impl="materialized")
    settings = TrainSettings(train_len=32, batch_size=4, steps=4, checkpoint_every=2, log_every=1, threads=1,
                             compile=True)
    threads = torch.get_num_threads()
    try:
        assert main(["train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path / "eager"), *model_args,
                     *train_args]) == 0
        partial = train(cfg, settings, tiny_corpus, tmp_path / "compiled", progress=False, stop_after=2)
        assert partial["status"] == "incomplete"
        steps_run = []
        batch_starts = train_module.batch_starts
        monkeypatch.setattr(train_module, "batch_starts",
                            lambda step, *args: steps_run.append(step) or batch_starts(step, *args))
        assert main(["train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path / "compiled"), *model_args,
                     *train_args, "--compile"]) == 0
    finally:
        torch.set_num_threads(threads)
    assert steps_run == [2, 3]  # resumed after step 2
    assert compiles  # the steps ran through a compiled graph
    summary = {name: json.loads((tmp_path / name / "summary.json").read_text()) for name in ("eager", "compiled")}
    assert summary["compiled"]["config"]["train"]["compile"] is True
    assert summary["compiled"]["config_hash"] == summary["eager"]["config_hash"]
    curve = {name: [json.loads(line)["loss"] for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
             for name in ("eager", "compiled")}
    assert len(curve["eager"]) == len(curve["compiled"]) == 4
    torch.testing.assert_close(torch.tensor(curve["compiled"]), torch.tensor(curve["eager"]), rtol=1e-5, atol=0)
    model, checkpoint = load_model(tmp_path / "compiled" / "model.pt")  # strict: the plain keys
    assert checkpoint["model"].keys() == GPT(model.cfg).state_dict().keys()


def test_compile_reaches_training_but_not_a_run_name():
    """Like ``distributed``, ``compile`` changes how a run is computed, not its numbers beyond rounding."""
    from dape_core import config as grid

    config = {"datasets": {"code": {"source": "builtin-code", "vocab_size": 300}},
              "defaults": {"lm": {"size": "tiny", "train_len": 32, "steps": 10, "batch_size": 4,
                                  "eval": {"eval_lens": [32, 64]}}},
              "families": {"baselines": {"axes": {"method": ["Kerple", "DAPE1x3-Kerple"]}}}}
    plain = grid.build_plan(copy.deepcopy(config))
    config["defaults"]["lm"]["compile"] = True
    compiled = grid.build_plan(config)
    assert list(compiled.lm_runs) == list(plain.lm_runs) == ["code-T32-kerple-none", "code-T32-kerple-dape_v2-k3-w32"]
    for name in plain.lm_runs:
        assert "--no-compile" in str(grid.train_options(plain.lm_runs[name]["settings"])["training"]).split()
        assert "--compile" in str(grid.train_options(compiled.lm_runs[name]["settings"])["training"]).split()


def test_compile_is_refused_with_fsdp():
    """FSDP2's hooks around each block do not trace into one graph: the settings say so before a run starts."""
    with pytest.raises(ConfigError, match="compile: true is not allowed with distributed fsdp"):
        TrainSettings(compile=True, distributed="fsdp")
    assert TrainSettings(compile=True, distributed="ddp").compile
