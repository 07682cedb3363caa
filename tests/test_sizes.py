"""Sizes refused when the configuration is read (dape_core.config.sizes): a training or an evaluation beyond its
job's memory, and evaluation windows that the tokenized validation split cannot hold — by the plan command,
``dape verify --configfile`` and the workflow's parse, each in one line naming the field, its value and what fits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dape_core import config as grid
from dape_core import io
from dape_core.config.provenance import corpus_spec
from dape_core.errors import ConfigError
from dape_core.windows import longest_length, require_windows, scored_tokens, window_anchors

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "configs" / "smoke.yaml"


def smoke_with(tmp_path: Path, *changes: tuple[str, str]) -> Path:
    """configs/smoke.yaml with each (old, new) text replaced."""
    text = SMOKE.read_text(encoding="utf-8")
    for old, new in changes:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "huge.yaml"
    path.write_text(text, encoding="utf-8")
    return path


#: the training length of the language models 100000, evaluated at 100000 and 200000
HUGE_TRAINING = (("    size: tiny\n    train_len: 32\n", "    size: tiny\n    train_len: 100000\n"),
                 ("eval_lens: [32, 64]", "eval_lens: [100000, 200000]"))


def tokenized(results: Path, plan, lengths: list[int], *, spec: str | None = None) -> None:
    """A dataset folder as `dape tokenize` leaves it, as far as the check reads it: val.docs.npy (document offsets,
    each document followed by its separator) and meta.json sealed with the corpus spec (the plan's by default)."""
    data = results / "data" / "code"
    offsets = np.concatenate([[0], np.cumsum(np.asarray(lengths) + 1)]).astype(np.int64)
    digest = io.write_npy(data / "val.docs.npy", offsets)
    io.stamp_job("dape tokenize", spec or io.spec_digest(corpus_spec(plan.datasets["code"]).settings))
    try:
        io.write_json(data / "meta.json", {"splits": {"val": {"docs_sha256": digest}}}, seal=True)
    finally:
        io.stamp_job(None, None)


def test_scored_tokens_counts_the_windows_the_evaluation_takes_and_the_longest_length_that_fits():
    lengths = np.array([100, 57, 20, 300])
    for length in (1, 16, 19, 20, 56, 57, 99, 100, 150, 299):
        for window, cap in ((16, None), (7, 3), (50, 2)):
            assert scored_tokens(lengths, length, window, cap) == len(
                window_anchors(lengths, length, window, cap, seed=0)) * min(window, length)
    fits = longest_length(lengths, 16, None, 64, below=300)
    assert scored_tokens(lengths, fits, 16, None) >= 64 > scored_tokens(lengths, fits + 1, 16, None)
    with pytest.raises(ConfigError, match=rf"eval_lens: 300 leaves only 0 windows \(0 scored tokens\).*the longest "
                                          rf"has 300\), below min_scored_tokens 64; allowed values: eval_lens ≤ {fits}"):
        require_windows(lengths, 300, 16, None, 64, seed=0)


def test_a_training_length_beyond_the_jobs_memory_is_refused_naming_the_field_and_what_fits(tmp_path):
    path = smoke_with(tmp_path, *HUGE_TRAINING)
    plan = grid.build_plan(grid.load_yaml(path))
    with pytest.raises(ConfigError, match=r"^families\.baselines\.train_len: 100000 needs at least 2\.3 GiB .* more "
                                          r"than resources\.train_lm\.mem_mb 1000; allowed values: at most 26651 "):
        grid.check_sizes(plan, tmp_path / "results")
    grid.check_sizes(grid.build_plan(grid.load_yaml(SMOKE)), tmp_path / "results")  # the shipped one fits


@pytest.mark.parametrize("name", ["config.yaml", "configs/smoke.yaml", "configs/grid.yaml", "configs/gpu.yaml",
                                  "configs/paper.yaml"])
def test_every_shipped_configuration_fits(name):
    grid.check_sizes(grid.build_plan(grid.load_yaml(REPO / name)), REPO / "no-results")


def test_evaluation_windows_are_checked_against_the_tokenized_validation_split_of_the_plans_corpus(tmp_path):
    path = smoke_with(tmp_path, ("eval_lens: [32, 64]", "eval_lens: [32, 200000]"))
    plan = grid.build_plan(grid.load_yaml(path))
    results = tmp_path / "results"
    grid.check_sizes(plan, results)  # not tokenized yet: nothing to check the windows against
    tokenized(results, plan, [500, 20397, 90], spec="0123456789abcdef")
    grid.check_sizes(plan, results)  # tokenized with other settings: the tokenize job redoes it first
    tokenized(results, plan, [500, 20397, 90])
    with pytest.raises(ConfigError, match=r"^families\.baselines\.eval\.eval_lens: 200000 leaves only 0 windows .*"
                                          r"the longest has 20397\), below min_scored_tokens 32; allowed values: "
                                          r"eval_lens ≤ 20380"):
        grid.check_sizes(plan, results)
    grid.check_sizes(grid.build_plan(grid.load_yaml(SMOKE)), results)


def test_the_plan_command_dape_verify_and_the_dag_refuse_a_size_in_one_line(tmp_path):
    path = smoke_with(tmp_path, *HUGE_TRAINING)
    commands = {
        "plan": [sys.executable, "-m", "dape_core.config", str(path)],
        "verify": [sys.executable, "-m", "dape_core.cli", "verify", "--results", "results", "--configfile", str(path)],
        "dag": [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                str(tmp_path), "--configfile", str(path), "-n", "--cores", "1"],
    }
    for entry, command in commands.items():
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300)
        out = done.stdout + done.stderr
        assert done.returncode != 0, entry
        assert "Traceback" not in out and 'File "' not in out, out
        refused = [line for line in out.splitlines() if "families.baselines.train_len: 100000 needs at least" in line]
        assert len(refused) == 1 and "allowed values: at most" in refused[0], out
        assert not (tmp_path / "results").exists()  # nothing ran
