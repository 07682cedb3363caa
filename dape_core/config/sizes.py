"""Checks of a plan before any job runs (:func:`check_sizes`), each refused in one line naming the field, its value and
what would fit:

* a CPU job's memory against its rule's ``mem_mb`` (training and evaluation): a lower bound from the settings alone, the
  loss's logits (:func:`~dape_core.model_arithmetic.loss_bytes`) and the CPU's baseline (the job's own preflight,
  :func:`dape_core.memory.cpu_preflight`, counts more, so it would refuse it too);
* the windows of each run's longest evaluation length in its dataset's validation split, once tokenized with the plan's
  settings (:func:`dape_core.windows.require_windows`, the evaluation's own rule).

Evaluation lengths against ``max_position`` are checked with the run (:func:`dape_core.config.checks.check_lm_run`).
Torch-free: the workflow's parse, ``python -m dape_core.config`` and ``dape verify --configfile`` run it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dape_core import io
from dape_core.config.flops import run_vocab
from dape_core.config.provenance import corpus_spec
from dape_core.errors import ConfigError
from dape_core.model_arithmetic import CPU_RESERVE_BYTES, loss_bytes
from dape_core.windows import eval_batch, require_windows

GIB = 2**30


def check_sizes(plan, results: str | Path = "results") -> None:
    """The module docstring's checks of every run; a ConfigError names the first that cannot fit."""
    splits: dict[str, np.ndarray | None] = {}
    for name, run in {**plan.lm_runs, **plan.finetune_runs}.items():
        where = f"families.{run['families'][0]}"
        s, ev = run["settings"], run["eval"]
        vocab = run_vocab(plan, s)
        if name in plan.lm_runs and vocab:
            _check_memory(f"{where}.train_len", s["train_len"], s.get("micro_batch_size") or s["batch_size"], vocab,
                          plan.resources("train_lm", s["size"]), "train_lm", backward=True)
        longest = max(ev["eval_lens"])
        if vocab:
            _check_memory(f"{where}.eval.eval_lens", longest, eval_batch(longest, ev["batch_size"]), vocab,
                          plan.resources("evaluate_lm"), "evaluate_lm", backward=False)
        dataset = s["dataset"]
        if dataset not in splits:
            splits[dataset] = validation_lengths(plan, Path(results) / "data" / dataset)
        if splits[dataset] is not None:
            require_windows(splits[dataset], longest, ev["window"], ev["max_windows"], ev["min_scored_tokens"],
                            ev["seed"], field=f"{where}.eval.eval_lens")


def _check_memory(field: str, length: int, batch: int, vocab: int, job: dict, rule: str, *, backward: bool) -> None:
    """A job on a CPU (no ``gpu``) with ``mem_mb``: ``batch`` sequences of ``length`` tokens need at least their
    loss's bytes and the CPU's baseline; refused naming the longest length that fits."""
    if job.get("gpu") or not job.get("mem_mb"):
        return
    limit = job["mem_mb"] * 2**20
    need = loss_bytes(batch, length, vocab, backward=backward) + CPU_RESERVE_BYTES
    if need <= limit:
        return
    fits = (limit - CPU_RESERVE_BYTES) // loss_bytes(batch, 1, vocab, backward=backward)
    stage = "training step" if backward else "evaluation pass"
    raise ConfigError(
        f"{field}: {length} needs at least {need / GIB:.1f} GiB in a {stage} of {batch} sequence(s) (the logits"
        f"{' and their gradient' if backward else ''} over a vocabulary of {vocab}, and the CPU's baseline), more "
        f"than resources.{rule}.mem_mb {job['mem_mb']}; allowed values: at most {max(fits, 0)} at this batch (the "
        f"job's own estimate counts more), or a larger resources.{rule}.mem_mb")


def validation_lengths(plan, data: Path) -> np.ndarray | None:
    """Token counts of a dataset's validation documents under ``data`` (``results/data/<dataset>``) if tokenized with
    the plan's settings (meta.json's seal) and ``val.docs.npy`` matches meta.json's sha256, else None."""
    meta_path, offsets_path = data / "meta.json", data / "val.docs.npy"
    try:
        seal = io.read_seal(io.hash_path(meta_path))
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        wanted = meta["splits"]["val"]["docs_sha256"]
        if (seal.spec != io.spec_digest(corpus_spec(plan.datasets[data.name]).settings)
                or io.file_sha256(meta_path) != seal.digest or io.file_sha256(offsets_path) != wanted):
            return None
        return np.diff(np.load(offsets_path)) - 1
    except (OSError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError):
        return None
