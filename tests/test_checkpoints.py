"""Checkpoint fallback: the newest two checkpoints are kept; an unreadable newest one (truncated to half its bytes)
is reported by name and the run resumes from the one before, ending as the uninterrupted run; with none readable
the job stops with an error naming the files and the way out. Plain (last.pt / previous.pt) and sharded (FSDP2,
torch.distributed.checkpoint directories) alike."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from dape_core.checkpoints import CheckpointError, read_step
from dape_core.errors import ConfigError
from dape_core.model import GPTConfig
from dape_core.train import TrainSettings, train

STEPS, EVERY, STOP = 16, 4, 10
CONFIG = GPTConfig(size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3)


def settings(**kw) -> TrainSettings:
    return TrainSettings(train_len=32, batch_size=8, steps=STEPS, lr=3e-3, threads=1, checkpoint_every=EVERY,
                         log_every=1, **kw)


def truncate(path) -> None:
    """Keep the first half of a file's bytes, as a disk filling up or a copy cut short leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def losses(out) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_truncated_last_checkpoint_falls_back_to_the_previous_one(tiny_corpus, tmp_path, capfd, keep_threads):
    ckpt = tmp_path / "checkpoints"
    train(CONFIG, settings(), tiny_corpus, tmp_path / "full", tmp_path / "full-checkpoints", progress=False)
    train(CONFIG, settings(), tiny_corpus, tmp_path / "out", ckpt, progress=False, stop_after=STOP)
    last, previous = ckpt / "last.pt", ckpt / "previous.pt"
    assert (read_step(last), read_step(previous)) == (8, 4)  # the newest two, each at its step
    truncate(last)
    with pytest.raises(Exception, match="central directory"):  # the raw error a rerun used to die with
        torch.load(last, weights_only=False)
    capfd.readouterr()

    # a second interruption right after the fallback's first checkpoint: the good previous.pt must survive it
    train(CONFIG, settings(), tiny_corpus, tmp_path / "out", ckpt, progress=False, stop_after=9)
    err = capfd.readouterr().err
    assert f"warning: checkpoint {last} is unreadable" in err, err
    assert f"resumed from {previous} at step 4" in err, err
    assert (read_step(last), read_step(previous)) == (8, 4)  # the unreadable file was replaced, not rotated in

    summary = train(CONFIG, settings(), tiny_corpus, tmp_path / "out", ckpt, progress=False)
    assert f"resumed from {last} at step 8" in capfd.readouterr().err
    assert summary["status"] == "ok" and summary["steps_done"] == STEPS
    assert losses(tmp_path / "out") == losses(tmp_path / "full")
    a = torch.load(tmp_path / "out" / "model.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "full" / "model.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not last.exists() and not previous.exists()  # a finished run keeps no checkpoint


@pytest.mark.slow
def test_no_readable_checkpoint_stops_with_a_clear_error(tiny_corpus, tmp_path, capfd, keep_threads, monkeypatch):
    from dape_core.cli import main

    monkeypatch.setattr(sys, "argv", sys.argv[:1])  # cli.main rewrites sys.argv
    ckpt = tmp_path / "checkpoints"
    train(CONFIG, settings(), tiny_corpus, tmp_path / "out", ckpt, progress=False, stop_after=STOP)
    for name in ("last.pt", "previous.pt"):
        truncate(ckpt / name)
    with pytest.raises(CheckpointError) as caught:
        train(CONFIG, settings(), tiny_corpus, tmp_path / "out", ckpt, progress=False)
    message = str(caught.value)
    assert isinstance(caught.value, ConfigError) and message.startswith("checkpoint_dir:")
    assert str(ckpt / "last.pt") in message and str(ckpt / "previous.pt") in message
    assert f"Delete {ckpt}" in message and "step 0" in message
    assert not (tmp_path / "out" / "model.pt").exists()
    # the command line says it in one line, without a traceback
    capfd.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path / "out"), "--checkpoint-dir",
              str(ckpt), "--size", "tiny", "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3",
              "--train-len", "32", "--batch-size", "8", "--steps", str(STEPS), "--lr", "3e-3", "--threads", "1",
              "--checkpoint-every", str(EVERY), "--log-every", "1", "--no-progress"])
    err = capfd.readouterr().err
    assert exited.value.code == 2 and "no readable checkpoint" in err and "Traceback" not in err, err


SHARDED = textwrap.dedent("""
    import sys
    from dape_core.model import GPTConfig
    from dape_core.train import TrainSettings, train

    data, out, checkpoints, stop = sys.argv[1:5]
    settings = TrainSettings(train_len=32, batch_size=8, steps={steps}, lr=3e-3, threads=1, checkpoint_every={every},
                             log_every=1, distributed="fsdp")
    config = GPTConfig(size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3)
    train(config, settings, data, out, checkpoints, progress=False, stop_after=None if stop == "none" else int(stop))
""").format(steps=STEPS, every=EVERY)


@pytest.mark.slow
def test_sharded_checkpoint_fallback(tiny_corpus, tmp_path, keep_threads):
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def run(out, checkpoints, stop):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
               str(tiny_corpus), str(out), str(checkpoints), str(stop)]
        return subprocess.run(cmd, env=env, timeout=300, capture_output=True, text=True)

    ckpt = tmp_path / "checkpoints"
    done = run(tmp_path / "out", ckpt, STOP)
    assert done.returncode == 0, done.stderr[-3000:]
    newest, before = ckpt / "step-00000008", ckpt / "step-00000004"
    assert sorted(p.name for p in ckpt.iterdir()) == [before.name, newest.name]  # the newest two, complete
    assert (read_step(newest), read_step(before)) == (8, 4)

    # none readable: every shard file of both checkpoints truncated
    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    for shard in broken.glob("step-*/*.distcp"):
        truncate(shard)
    done = run(tmp_path / "broken-out", broken, "none")
    assert done.returncode != 0
    assert "checkpoint_dir: no readable checkpoint" in done.stderr, done.stderr[-3000:]
    assert str(broken / newest.name) in done.stderr and str(broken / before.name) in done.stderr
    assert f"Delete {broken}" in done.stderr
    assert not (tmp_path / "broken-out" / "model.pt").exists()

    # the newest unreadable: one shard file truncated; the run resumes from the one before
    truncate(newest / "__0_0.distcp")
    done = run(tmp_path / "out", ckpt, "none")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"warning: checkpoint {newest} is unreadable" in done.stderr, done.stderr[-3000:]
    assert f"resumed from {before} at step 4" in done.stderr, done.stderr[-3000:]
    # the curve carries steps 1–4 from the checkpoint and follows the uninterrupted one-process run afterwards
    train(CONFIG, settings(), tiny_corpus, tmp_path / "single", tmp_path / "single-checkpoints", progress=False)
    single, sharded = losses(tmp_path / "single"), losses(tmp_path / "out")
    assert len(single) == len(sharded) == STEPS
    for a, b in zip(single, sharded):
        assert abs(a - b) <= 1e-4 * abs(a), (single, sharded)
    assert not any(ckpt.iterdir())  # a finished run keeps no checkpoint
