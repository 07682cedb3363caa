"""The training-memory model (dape_core.memory): its saved bytes are the model's own (an exact trace on ``meta``,
affine in batch and depth), its peak bounds the peak measured on a CPU training step from above without being
loose, it picks the largest micro-batch that fits a GPU's memory, refuses a run that cannot fit before it starts,
and a job split into such pieces trains the same model."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from dape_core import config as grid
from dape_core.config.__main__ import main as config_main
from dape_core.config.memory_plan import fit_micro_batches
from dape_core.errors import ConfigError
from dape_core.memory import (COMPILED_KEPT_SCALE, cpu_preflight, machine_memory_bytes, model_saved_bytes,
                              micro_batch_for, saved_bytes, training_memory, transient_bytes)
from dape_core.model import GPT, GPTConfig
from dape_core.train import TrainSettings, micro_batch_pieces, train

CASES = [("nope", "none", 1), ("kerple", "none", 1), ("fire", "none", 1), ("xl", "none", 1), ("cope", "none", 1),
         ("kerple", "dape_v2", 3), ("alibi", "dape_v1", 1)]


def measured_peak(run) -> int:
    """Peak of the CPU bytes allocated and not yet freed during ``run`` (torch.profiler, operator granularity)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("encoding,processor,kernel", CASES)
def test_the_modelled_step_bounds_the_measured_cpu_peak(encoding, processor, kernel):
    """Forward and backward of a step on the CPU's accelerator path (SDPA's math kernel, as the CPU runs it): the
    model (saved + transient + the gradients) is never below the measured peak and at most twice it."""
    cfg = GPTConfig(size="small", vocab_size=512, encoding=encoding, processor=processor, kernel_size=kernel,
                    train_len=128, attention_impl="materialized")
    model, batch = GPT(cfg), 8
    idx = torch.randint(0, 512, (batch, cfg.train_len))

    def step():
        model.zero_grad(set_to_none=True)
        model(idx, idx)[1].backward()

    step()
    measured = measured_peak(step)
    gradients = 4 * sum(p.numel() for p in model.parameters())
    modelled = (model_saved_bytes(cfg, batch, attention_kernel="math") + transient_bytes(cfg, batch) + gradients)
    assert measured <= modelled <= 2 * measured, (measured, modelled)


@pytest.mark.parametrize("encoding,processor,kernel", [("kerple", "dape_v2", 3), ("t5", "none", 1)])
def test_saved_bytes_are_affine_in_batch_and_depth(encoding, processor, kernel):
    cfg = GPTConfig(size="125M", vocab_size=50304, encoding=encoding, processor=processor, kernel_size=kernel,
                    train_len=512)
    assert model_saved_bytes(cfg, 4, precision="bf16") == saved_bytes(cfg, 4, precision="bf16")


def test_recomputed_dape_needs_the_memory_of_its_baseline_at_the_lengths_that_ran_out():
    """125M, bf16, T 2048, micro-batch 16 (what ran out of 80 GB): DAPE1x3-Kerple is modelled within Kerple's
    peak plus a tenth, and far below it without recomputation."""
    base = dict(size="125M", vocab_size=50304, encoding="kerple", train_len=2048)
    kerple = training_memory(GPTConfig(**base), 16, precision="bf16")
    dape = training_memory(GPTConfig(**base, processor="dape_v2", kernel_size=3), 16, precision="bf16")
    kept = training_memory(GPTConfig(**base, processor="dape_v2", kernel_size=3, recompute_scores=False), 16,
                           precision="bf16")
    assert dape.peak <= 1.1 * kerple.peak < 80e9
    assert kept.peak > 80e9


def test_the_largest_fitting_divisor_is_chosen_and_a_run_that_cannot_fit_is_refused():
    cfg = GPTConfig(size="125M", vocab_size=50304, encoding="cope", train_len=1024)
    whole = training_memory(cfg, 32, precision="bf16")
    chosen = micro_batch_for(cfg, 32, 80, precision="bf16")
    assert whole.peak > 80e9 and chosen.peak <= 80e9 and 32 % chosen.micro_batch == 0
    assert training_memory(cfg, 2 * chosen.micro_batch, precision="bf16").peak > 80e9  # the largest that fits
    with pytest.raises(ConfigError, match=r"run code-T1024.*gpu_mem_gb 4\b.*allowed: a larger gpu_mem_gb"):
        micro_batch_for(cfg, 32, 4, precision="bf16", run="run code-T1024-cope-none")


def test_dape_scores_are_kept_where_the_whole_share_fits_and_recomputed_otherwise():
    """recompute_scores left unset: the memory model keeps the scores (faster) only where the whole share of a
    micro-batch fits that way; an explicit setting and a model without a processor are not its to choose."""
    base = dict(size="125M", vocab_size=50304, encoding="kerple", processor="dape_v2", kernel_size=3)
    short = micro_batch_for(GPTConfig(**base, train_len=512), 32, 80, precision="bf16")
    assert (short.recompute_scores, short.micro_batch) == (False, 32) and short.peak <= 80e9
    assert short.describe().endswith(", scores kept")
    kept_long = training_memory(GPTConfig(**base, train_len=2048, recompute_scores=False), 8, precision="bf16")
    long = micro_batch_for(GPTConfig(**base, train_len=2048), 8, 80, precision="bf16")
    assert kept_long.peak > 80e9 and (long.recompute_scores, long.micro_batch) == (True, 8)
    assert long.describe().endswith(", scores recomputed")
    assert micro_batch_for(GPTConfig(**base, train_len=2048), 8, 140, precision="bf16").recompute_scores is False
    explicit = micro_batch_for(GPTConfig(**base, train_len=512, recompute_scores=True), 32, 80, precision="bf16")
    assert explicit.recompute_scores is True
    kerple = micro_batch_for(GPTConfig(size="125M", vocab_size=50304, encoding="kerple", train_len=512), 32, 80,
                             precision="bf16")
    assert kerple.recompute_scores is None and "scores" not in kerple.describe()


def test_the_compiled_path_keeping_its_scores_is_modelled_at_the_fitted_scale_of_the_eager_trace():
    """COMPILED_KEPT_SCALE: the compiled graphs' kept scores are the eager trace's saved bytes at the scale the
    measured peaks need (benchmarks/memory_fit.py); recomputed, they are the trace's."""
    cfg = GPTConfig(size="125M", vocab_size=50304, encoding="kerple", processor="dape_v1", train_len=512,
                    recompute_scores=False)
    eager = training_memory(dataclasses.replace(cfg, attention_impl="materialized"), 4, precision="bf16")
    compiled = training_memory(dataclasses.replace(cfg, attention_impl="compiled"), 4, precision="bf16")
    assert compiled.saved == int(COMPILED_KEPT_SCALE * eager.saved)
    recomputed = dataclasses.replace(cfg, recompute_scores=True)
    assert (training_memory(dataclasses.replace(recomputed, attention_impl="compiled"), 4, precision="bf16").saved
            == training_memory(dataclasses.replace(recomputed, attention_impl="materialized"), 4,
                               precision="bf16").saved)


def test_pieces_are_equal_divisors():
    assert micro_batch_pieces(8, None) == [(0, 8)]
    assert micro_batch_pieces(8, 2) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    with pytest.raises(ConfigError, match="micro_batch_size: 3 does not divide the 8 sequences"):
        micro_batch_pieces(8, 3)


def test_a_job_in_pieces_takes_the_steps_of_the_whole_micro_batch(tiny_corpus, tmp_path, monkeypatch):
    """Every optimiser step sees the gradient of the whole micro-batch, to fp32 rounding (AdamW then amplifies
    rounding in near-zero gradients, so the steps' gradients are compared, not the weights after several)."""
    import dape_core.train as training

    cfg = GPTConfig(size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3)
    settings = TrainSettings(train_len=32, batch_size=8, grad_accum=2, steps=3, lr=3e-3, threads=1, log_every=1)
    original, gradients = training.optimizer_step, []

    def recording(model, optimizer, grad_clip):
        gradients[-1].append([p.grad.clone() for p in model.parameters()])
        return original(model, optimizer, grad_clip)

    monkeypatch.setattr(training, "optimizer_step", recording)
    summaries = []
    for name, micro in (("whole", None), ("pieces", 2)):
        gradients.append([])
        torch.manual_seed(0)
        summaries.append(train(cfg, TrainSettings(**{**settings.__dict__, "micro_batch_size": micro}), tiny_corpus,
                               tmp_path / name, progress=False))
    whole, pieces = summaries
    assert pieces["config_hash"] == whole["config_hash"]  # the same run: a resume may change the split
    assert pieces["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)
    first_whole, first_pieces = gradients[0][0], gradients[1][0]
    for a, b in zip(first_whole, first_pieces):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-7)


def paper_config(gpu_mem_gb):
    config = copy.deepcopy(grid.load_yaml("configs/paper.yaml"))
    config["resources"]["train_lm"]["gpu_mem_gb"] = gpu_mem_gb
    return config


def test_the_paper_plan_gets_a_micro_batch_per_run_and_prints_them(capsys):
    plan = grid.build_plan(paper_config(80))
    assert plan.memory == {} and all(plan.micro_batch_size(name) is None for name in plan.lm_runs)  # parse: no torch
    fit_micro_batches(plan)
    assert set(plan.memory) == set(plan.lm_runs)
    assert all(memory.peak <= 80e9 for memory in plan.memory.values())
    cope = [name for name in plan.lm_runs if "-T1024-cope-none" in name]
    assert cope and all(plan.micro_batch_size(name) < 32 for name in cope)  # CoPE's [b, H, T, T] gates
    assert config_main(["configs/paper.yaml"]) == 0
    assert "micro-batch on one GPU (80 GB): 125M kerple/dape_v2 k3 T1024 bf16, 32 sequences per GPU" in capsys.readouterr().out


def test_a_paper_run_that_cannot_fit_names_itself_and_the_setting(capsys):
    plan = grid.build_plan(paper_config(1))  # the workflow's parse does not trace models
    with pytest.raises(ConfigError, match=r"run \S+: one sequence of \d+ tokens needs .* gpu_mem_gb 1\b"):
        fit_micro_batches(plan)
    config = paper_config(1)
    assert config_main_on(config) == 2  # the plan command stops before anything is submitted
    assert "configuration error: run " in capsys.readouterr().err


def config_main_on(config: dict) -> int:
    import tempfile

    import yaml

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump(config, handle)
    return config_main([handle.name])


def test_a_training_job_given_its_gpu_memory_runs_in_the_pieces_that_fit(tiny_corpus, tmp_path, capsys):
    """`dape train --gpu-mem-gb`: the job picks the memory model's micro-batch itself (the workflow passes the
    resource, not a number it would have to trace the model for) — the same run, in pieces."""
    cfg = GPTConfig(size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3, vocab_size=tiny_vocab(tiny_corpus),
                    train_len=32)
    settings = TrainSettings(train_len=32, batch_size=8, steps=2, threads=1, log_every=1)
    fits_four = (training_memory(cfg, 4).peak + training_memory(cfg, 8).peak) / 2 / 1e9  # 4 fit, 8 do not
    whole = train(cfg, settings, tiny_corpus, tmp_path / "whole", progress=False)
    capsys.readouterr()
    pieces = train(cfg, settings, tiny_corpus, tmp_path / "pieces", progress=False, gpu_mem_gb=fits_four)
    assert f"micro-batch on one GPU ({fits_four:g} GB): 8 sequences per process → micro-batch 4:" in capsys.readouterr().out
    assert pieces["config_hash"] == whole["config_hash"]
    assert pieces["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)
    roomy = train(cfg, settings, tiny_corpus, tmp_path / "roomy", progress=False, gpu_mem_gb=1000)
    assert "8 sequences per process → micro-batch 8:" in capsys.readouterr().out
    assert roomy["config"]["model"]["recompute_scores"] is False  # the memory model's choice, in the run's record
    assert roomy["config_hash"] == whole["config_hash"] and roomy["final_loss"] == pytest.approx(whole["final_loss"],
                                                                                                 rel=1e-5)


def tiny_vocab(data_dir) -> int:
    import json
    from pathlib import Path

    return int(json.loads((Path(data_dir) / "meta.json").read_text())["tokenizer"]["vocab_size"])


# ------------------------------------------------------------------------------------------ the CPU preflight
def test_a_cpu_job_that_cannot_fit_stops_before_it_starts_with_the_estimate_and_the_settings(tiny_corpus, tmp_path):
    """`dape train --train-len 100000` on a CPU: refused with the estimate instead of being killed at ~20 GB."""
    cfg = GPTConfig(size="small", encoding="kerple", processor="dape_v2", kernel_size=3, vocab_size=4096,
                    train_len=100_000)
    with pytest.raises(ConfigError, match=r"train: 32 sequences of 100000 tokens need an estimated at least [\d.]+ GiB "
                                          r"\(micro-batch 32: .*\), more than this machine's memory \(24.0 GiB\); "
                                          r"allowed: a shorter train_len, .*resources.train_lm.mem_mb"):
        cpu_preflight(cfg, 32, machine_bytes=24 * 2**30)
    small = dataclasses.replace(cfg, train_len=32)
    estimate = cpu_preflight(small, 32, machine_bytes=24 * 2**30)
    assert 2**28 < estimate.peak < 2**30  # the interpreter's baseline dominates a small model
    with pytest.raises(ConfigError, match=r"more than resources.train_lm.mem_mb 100;"):
        cpu_preflight(small, 32, mem_mb=100, machine_bytes=24 * 2**30)
    settings = TrainSettings(train_len=32, batch_size=8, steps=2, threads=1)
    with pytest.raises(ConfigError, match="more than resources.train_lm.mem_mb 1;"):
        train(GPTConfig(size="tiny"), settings, tiny_corpus, tmp_path / "out", progress=False, mem_mb=1)
    assert not (tmp_path / "out" / "model.pt").exists()  # stopped before training


def test_the_machine_memory_is_read():
    assert machine_memory_bytes() > 2**30


def test_a_wrong_mem_mb_is_named():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "dape_core.cli", "train", "--data-dir", "x", "--out-dir", "y",
                             "--mem-mb", "0"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("mem_mb: 0 is not allowed; allowed values: a positive integer")
    result = subprocess.run([sys.executable, "-m", "dape_core.cli", "train", "--data-dir", "x", "--out-dir", "y",
                             "--gpu-mem-gb", "-8"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("gpu_mem_gb: -8.0 is not allowed; allowed values: a positive number")
