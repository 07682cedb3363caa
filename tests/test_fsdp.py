"""Sharded training (FSDP2) under torchrun with 2 CPU processes (gloo): each process stores about half of the
parameters, the loss curve follows one process's at the same global batch, a run killed with SIGKILL resumes
from its distributed checkpoint to the uninterrupted result, Kerple's clamp holds on the shards, and activation
checkpointing gives the same gradients."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from dape_core.cli import main
from dape_core.model_file import load_model

STEPS, EVERY = 24, 4
ARGS = ["--size", "tiny", "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3", "--train-len", "32",
        "--batch-size", "8", "--steps", str(STEPS), "--lr", "3e-3", "--log-every", "1", "--threads", "1",
        "--checkpoint-every", str(EVERY), "--no-progress"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def torchrun(*args) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]


def fsdp_command(corpus, out, checkpoints) -> list[str]:
    return torchrun("-m", "dape_core.cli", "train", "--data-dir", str(corpus), "--out-dir", str(out),
                    "--checkpoint-dir", str(checkpoints), "--distributed", "fsdp", *ARGS)


def losses(out) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tiny_corpus, tmp_path_factory):
    """One uninterrupted FSDP run (2 processes) and the same run in one process."""
    root = tmp_path_factory.mktemp("fsdp")
    threads = torch.get_num_threads()
    try:
        assert main(["train", "--data-dir", str(tiny_corpus), "--out-dir", str(root / "single"), *ARGS]) == 0
    finally:
        torch.set_num_threads(threads)
    done = subprocess.run(fsdp_command(tiny_corpus, root / "fsdp", root / "fsdp-checkpoints"), env=ENV, timeout=300,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.mark.slow
def test_each_process_stores_about_half_of_the_parameters(runs):
    summary = json.loads((runs / "fsdp" / "summary.json").read_text())
    assert summary["distributed"] == "fsdp" and summary["world_size"] == 2
    per_rank, total = summary["parameters_per_rank"], summary["parameters"]
    assert len(per_rank) == 2 and sum(per_rank) == total  # the shards partition the model
    for local in per_rank:
        assert 0.45 * total <= local <= 0.55 * total, (per_rank, total)
    single = json.loads((runs / "single" / "summary.json").read_text())
    assert single["parameters_per_rank"] == [single["parameters"]] == [total]


@pytest.mark.slow
def test_two_fsdp_processes_follow_one_process(runs):
    single, fsdp = losses(runs / "single"), losses(runs / "fsdp")
    assert len(single) == len(fsdp) == STEPS
    # the same batches and the same averaged gradient; only the order of floating-point reductions differs
    for a, b in zip(single, fsdp):
        assert abs(a - b) <= 1e-4 * abs(a), (single, fsdp)
    # model.pt is a plain full state dict: it loads as a one-process run's does
    sharded, _ = load_model(runs / "fsdp" / "model.pt")
    plain, _ = load_model(runs / "single" / "model.pt")
    assert sharded.state_dict().keys() == plain.state_dict().keys()
    tokens = torch.randint(0, sharded.cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(sharded(tokens), plain(tokens), rtol=1e-3, atol=1e-3)
    assert not any((runs / "fsdp-checkpoints").iterdir())  # a finished run keeps no checkpoint


@pytest.mark.slow
def test_sigkilled_fsdp_run_resumes_to_the_uninterrupted_result(runs, tiny_corpus, tmp_path):
    """Bitwise on CPU: the same 2 processes, the data order a function of (seed, step), the optimiser state in the
    distributed checkpoint."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, checkpoints = tmp_path / "killed", tmp_path / "checkpoints"
    proc = subprocess.Popen(fsdp_command(tiny_corpus, out, checkpoints), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not list(checkpoints.glob("step-*/checkpoint.json")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    # the training processes (torchrun starts each in its own session) and the launcher, as a scheduler kills a job
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(workers) == 2, workers
    for pid in [*map(int, workers), proc.pid]:
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (out / "model.pt").exists()
    complete = sorted(p.parent for p in checkpoints.glob("step-*/checkpoint.json"))
    assert complete, "no complete checkpoint was written"
    killed_at = json.loads((complete[-1] / "checkpoint.json").read_text())["step"]
    assert 0 < killed_at < STEPS

    done = subprocess.run(fsdp_command(tiny_corpus, out, checkpoints), env=ENV, timeout=300, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resumed from {complete[-1]} at step {killed_at}" in done.stderr, done.stderr[-3000:]
    resumed = torch.load(out / "model.pt", weights_only=False)["model"]
    uninterrupted = torch.load(runs / "fsdp" / "model.pt", weights_only=False)["model"]
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)
    assert losses(out) == losses(runs / "fsdp")
    # the TensorBoard curve of the resumed job has every step once
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    steps = [e.step for e in events.Scalars("train/loss")]
    assert steps == list(range(1, STEPS + 1)), steps


WORKER = textwrap.dedent("""
    import json, os, sys
    import torch
    from dape_core.distributed import Distributed, local_tensor
    from dape_core.encodings import Kerple
    from dape_core.model import GPT, GPTConfig
    from dape_core.train import TrainSettings, optimizer_for, optimizer_step

    torch.set_num_threads(1)
    dist = Distributed("fsdp")
    config = GPTConfig(size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3, vocab_size=256, train_len=32)
    tokens = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(dist.rank))
    result = {"rank": dist.rank}

    def build(activation_checkpointing):
        torch.manual_seed(0)
        model = GPT(config)
        for block in model.stack.blocks:
            block.activation_checkpointing = activation_checkpointing
        dist.wrap(model)
        return model

    # Kerple's clamp on the shards: a parameter set below 0.01 is >= 0.01 after one optimiser step
    kerples = lambda m: [k for k in m.modules() if isinstance(k, Kerple)]
    for constrained in (False, True):
        model = build(False)
        optimizer = optimizer_for(model, TrainSettings(lr=1e-3, weight_decay=0.0))
        with torch.no_grad():
            for k in kerples(model):
                local_tensor(k.r1).fill_(0.001)
                local_tensor(k.r2).fill_(0.002)
        _, loss = model(tokens, tokens)
        loss.backward()
        if constrained:
            optimizer_step(model, optimizer, grad_clip=1.0)
        else:
            optimizer.step()
        values = torch.cat([p.full_tensor().flatten() for k in kerples(model) for p in (k.r1, k.r2)])
        result["min_constrained" if constrained else "min_unconstrained"] = float(values.min())
    result["kerple_local_elements"] = sum(local_tensor(p).numel() for k in kerples(model) for p in (k.r1, k.r2))

    # activation checkpointing under FSDP: the same gradient shards
    grads = []
    for activation_checkpointing in (False, True):
        model = build(activation_checkpointing)
        _, loss = model(tokens, tokens)
        loss.backward()
        grads.append([local_tensor(p.grad).clone() for p in model.parameters()])
    result["grads_equal"] = all(torch.equal(a, b) for a, b in zip(*grads))
    result["grad_elements"] = sum(g.numel() for g in grads[0])
    with open(os.path.join(sys.argv[1], f"rank{dist.rank}.json"), "w") as f:
        json.dump(result, f)
    dist.close()
""")


@pytest.mark.slow
def test_kerple_clamp_and_activation_checkpointing_under_sharding(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    done = subprocess.run(torchrun(str(script), str(tmp_path)), env=ENV, timeout=300, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for result in results:
        # the forward's own in-place clamp reaches only the gathered copy: the shard stays below 0.01 …
        assert result["min_unconstrained"] < 0.01, result
        # … unless the training step clamps the (sharded) parameters themselves
        assert result["min_constrained"] >= float(torch.tensor(0.01)), result  # 0.01 in float32
        assert result["grads_equal"] and result["grad_elements"] > 0, result
    # r1, r2 are [1, H]: sharded on dim 0, one process holds them and the other an empty shard
    assert sorted(r["kerple_local_elements"] for r in results)[0] == 0
