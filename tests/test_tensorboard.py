"""TensorBoard: a training job writes loss, learning rate, gradient norm, throughput and memory under
<out-dir>/tensorboard/; a resumed job's curve has every step once, and a job trained again from step 0 replaces
the earlier curve."""

import json
import time

import pytest
import torch

from dape_core.model import GPTConfig
from dape_core.train import TrainSettings, learning_rate, train

STEPS, EVERY, LOG, STOP = 12, 4, 3, 10
CONFIG = GPTConfig(size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3)
SETTINGS = TrainSettings(train_len=32, batch_size=8, steps=STEPS, lr=3e-3, threads=1, checkpoint_every=EVERY,
                         log_every=LOG)


def scalars(directory) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_events_have_the_expected_tags_and_steps_across_a_resume(tiny_corpus, tmp_path, keep_threads):
    out, ckpt = tmp_path / "out", tmp_path / "checkpoints"
    train(CONFIG, SETTINGS, tiny_corpus, out, ckpt, progress=False, stop_after=STOP)
    interrupted = scalars(out / "tensorboard")
    assert [s for s, _ in interrupted["train/loss"]] == list(range(1, STOP + 1))  # written past the checkpoint at 8
    # TensorBoard reads event files in name order: the time in seconds, then a per-process writer counter whose
    # digits sort as text (10 < 9). A resumed job is a later process; here, in one process, a later second.
    time.sleep(1.1)
    train(CONFIG, SETTINGS, tiny_corpus, out, ckpt, progress=False)  # resumes at step 8, rewrites 9 and 10

    curves = scalars(out / "tensorboard")
    assert set(curves) == {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "memory/rss_mb"}
    every_step, log_steps = list(range(1, STEPS + 1)), list(range(LOG, STEPS + 1, LOG))
    for tag in ("train/loss", "train/lr", "train/grad_norm"):
        assert [s for s, _ in curves[tag]] == every_step, (tag, curves[tag])  # no step twice, none missing
    for tag in ("train/tokens_per_s", "memory/rss_mb"):
        assert [s for s, _ in curves[tag]] == log_steps, (tag, curves[tag])
        assert all(v > 0 for _, v in curves[tag]), (tag, curves[tag])
    for step, value in curves["train/lr"]:
        assert value == pytest.approx(learning_rate(step - 1, SETTINGS), rel=1e-6)
    metrics = {h["step"]: h for h in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    assert sorted(metrics) == log_steps
    loss, grad_norm = dict(curves["train/loss"]), dict(curves["train/grad_norm"])
    for step in log_steps:  # the same values as the metrics lines
        assert loss[step] == pytest.approx(metrics[step]["loss"], rel=1e-6)
        assert grad_norm[step] == pytest.approx(metrics[step]["grad_norm"], rel=1e-6) and grad_norm[step] > 0

    # trained again from step 0 (a forced rerun; the finished run kept no checkpoint): the earlier curve is hidden
    rerun = TrainSettings(**{**SETTINGS.__dict__, "steps": 6})
    time.sleep(1.1)
    train(CONFIG, rerun, tiny_corpus, out, ckpt, progress=False)
    assert [s for s, _ in scalars(out / "tensorboard")["train/loss"]] == list(range(1, 7))
