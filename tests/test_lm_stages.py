"""The language-model stages end to end on the built-in corpus: train, resume, divergence, evaluate, time."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from dape_core.cli import main
from dape_core.data import load_split
from dape_core.evaluate import evaluate, evaluate_windows, more_anchors, window_anchors
from dape_core.model import GPTConfig
from dape_core.model_file import load_model
from dape_core.train import TrainSettings, train

TINY = ["--size", "tiny", "--train-len", "32", "--batch-size", "8", "--threads", "1", "--no-progress"]


def _train(corpus, out, *extra):
    return main(["train", "--data-dir", str(corpus), "--out-dir", str(out), *TINY, *extra])


@pytest.fixture(scope="module")
def trained(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert _train(tiny_corpus, out, "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3",
                  "--steps", "40", "--lr", "3e-3", "--log-every", "5") == 0
    return out


def test_train_writes_a_restorable_model_metrics_and_a_provenance_summary(trained):
    summary = json.loads((trained / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps_done"] == 40
    for key in ("git_commit", "versions", "hardware", "threads", "config_hash", "non_embedding_parameters",
                "flops_per_token", "tokens_per_s"):
        assert key in summary
    metrics = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(5, 41, 5))
    assert metrics[-1]["loss"] < metrics[0]["loss"]  # it learns
    model, ckpt = load_model(trained / "model.pt")
    assert model.cfg.processor == "dape_v2" and model.cfg.train_len == 32
    x = torch.randint(0, model.cfg.vocab_size, (1, 16))
    assert model(x).shape == (1, 16, model.cfg.vocab_size)


def test_resume_after_interruption_reproduces_the_uninterrupted_run(tiny_corpus, tmp_path):
    cfg = GPTConfig(size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3)
    settings = TrainSettings(train_len=32, batch_size=4, steps=12, lr=3e-3, threads=1, checkpoint_every=4, log_every=1)
    full = train(cfg, settings, tiny_corpus, tmp_path / "full", progress=False)
    partial = train(cfg, settings, tiny_corpus, tmp_path / "resumed", progress=False, stop_after=6)
    assert partial["status"] == "incomplete" and not (tmp_path / "resumed" / "model.pt").exists()
    resumed = train(cfg, settings, tiny_corpus, tmp_path / "resumed", progress=False)  # picks up step 4
    assert resumed["final_loss"] == full["final_loss"]
    a = torch.load(tmp_path / "full" / "model.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "resumed" / "model.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a finished run keeps no checkpoint: forcing it again (after a code change) trains from step 0
    assert not (tmp_path / "full" / "checkpoints" / "last.pt").exists()
    assert not (tmp_path / "resumed" / "checkpoints" / "last.pt").exists()
    curve = lambda p: [json.loads(line)["loss"] for line in (p / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert curve(tmp_path / "full") == curve(tmp_path / "resumed")


def test_a_diverging_run_is_recorded_as_diverged_and_evaluates_to_diverged_rows(tiny_corpus, tmp_path):
    assert _train(tiny_corpus, tmp_path, "--encoding", "fire", "--steps", "30", "--lr", "1e6", "--warmup-ratio", "0") == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["steps_done"] < 30
    assert main(["evaluate", "--min-scored-tokens", "1", "--checkpoint", str(tmp_path / "model.pt"), "--data-dir", str(tiny_corpus),
                 "--eval-lens", "32", "64", "--threads", "1", "--out", str(tmp_path / "eval.csv")]) == 0
    rows = pd.read_csv(tmp_path / "eval.csv")
    assert list(rows.status) == ["diverged", "diverged"] and rows.ppl.isna().all()


def test_evaluate_scores_the_same_final_tokens_at_every_length(trained, tiny_corpus, tmp_path):
    out = tmp_path / "eval.csv"
    assert main(["evaluate", "--min-scored-tokens", "1", "--checkpoint", str(trained / "model.pt"), "--data-dir", str(tiny_corpus),
                 "--eval-lens", "16", "32", "128", "512", "--window", "24", "--max-windows", "6",
                 "--query-chunk-size", "64", "--threads", "1", "--out", str(out),
                 "--sink-out", str(tmp_path / "sink.csv"), "--heatmap-out", str(tmp_path / "maps.npz")]) == 0
    rows = pd.read_csv(out)
    assert list(rows.window) == [16, 24, 24, 24]  # effective window min(window, L)
    assert list(rows.n_tokens) == [6 * 16, 6 * 24, 6 * 24, 6 * 24]
    assert (rows.ppl_ci_low <= rows.ppl).all() and (rows.ppl <= rows.ppl_ci_high).all()
    assert (rows.bpb > 0).all() and (rows.method == "DAPE1x3-Kerple").all()
    assert (rows.loc[rows.eval_len <= 32, "delta_p"] == 0).all()
    assert rows.loc[rows.eval_len > 32, "delta_p"].notna().all()
    sink = pd.read_csv(tmp_path / "sink.csv")
    assert len(sink) == 8 * 2 and sink.sink_mass.between(0, 1).all()  # default sink_sequences × layers
    maps = np.load(tmp_path / "maps.npz")
    assert maps["layer0_A"].shape == (4, 32) and maps["layer1_dape"].shape == (4, 32)


def test_evaluation_is_exact_under_query_chunking(trained, tiny_corpus):
    split = load_split(tiny_corpus, "val")
    model, _ = load_model(trained / "model.pt")
    plain = evaluate(model, split, [96], train_len=32, window=24, max_windows=4, n_boot=10)
    model.cfg.query_chunk_size = 20
    chunked = evaluate(model, split, [96], train_len=32, window=24, max_windows=4, n_boot=10)
    assert abs(plain.ppl[0] - chunked.ppl[0]) < 1e-4 * plain.ppl[0]


def test_window_anchors_fit_the_longest_length():
    lengths = np.array([10, 100, 250])
    anchors = window_anchors(lengths, max_len=90, window=50, max_windows=None, seed=0)
    assert anchors == [(1, 100), (2, 250), (2, 200), (2, 150), (2, 100)]
    assert len(window_anchors(lengths, 90, 50, max_windows=2, seed=0)) == 2


def test_more_anchors_keep_the_chosen_windows_first_and_add_others_of_the_same_documents():
    lengths = np.array([10, 400, 700, 1000])
    pool = window_anchors(lengths, 90, 10, None, seed=3)
    chosen = window_anchors(lengths, 90, 10, 8, seed=3)
    more = more_anchors(lengths, 90, 10, chosen, 40, seed=3)
    assert more[:8] == chosen and len(more) == 40 == len(set(more)) and set(more) <= set(pool)
    assert more == more_anchors(lengths, 90, 10, chosen, 40, seed=3)  # seeded: the same windows every time
    assert more_anchors(lengths, 90, 10, chosen, 8, seed=3) is chosen  # no more asked: the same list
    assert len(more_anchors(lengths, 90, 10, chosen, 10_000, seed=3)) == len(pool)  # at most the pool
    from dape_core.errors import ConfigError
    from dape_core.settings.evaluation import EvalSettings

    with pytest.raises(ConfigError, match="max_windows_within"):
        EvalSettings(max_windows_within=0)


def test_more_windows_within_the_training_length_leave_every_other_number_as_it_was(trained, tiny_corpus):
    """``max_windows_within``: lengths up to the training length score more windows, the first of them those of
    every length with the same losses bit for bit; longer lengths score exactly what they scored without it."""
    split = load_split(tiny_corpus, "val")
    model, _ = load_model(trained / "model.pt")
    options = dict(train_len=32, window=8, max_windows=4, n_boot=0, seed=1)
    rows, windows = evaluate_windows(model, split, [16, 32, 64], **options)
    more_rows, more = evaluate_windows(model, split, [16, 32, 64], max_windows_within=12, **options)
    assert list(more.groupby("eval_len").size()) == [12, 12, 4] and list(more_rows["n_windows"]) == [12, 12, 4]
    for n in (16, 32, 64):
        base = windows[windows.eval_len == n].reset_index(drop=True)
        first = more[more.eval_len == n].head(4).reset_index(drop=True)
        pd.testing.assert_frame_equal(base, first, check_exact=True)
    pd.testing.assert_frame_equal(rows[rows.eval_len == 64].reset_index(drop=True),
                                  more_rows[more_rows.eval_len == 64].reset_index(drop=True), check_exact=True)
    extra = more[more.eval_len == 32].set_index(["document", "anchor"])
    assert len(extra.index.unique()) == 12 and not extra.index.isin(
        windows[windows.eval_len == 64].set_index(["document", "anchor"]).index).all()


def test_time_measures_each_length_in_a_fresh_process_with_equal_tokens(tmp_path):
    out = tmp_path / "timing.csv"
    assert main(["time", "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3", "--size", "tiny",
                 "--seq-lens", "16", "32", "--equal-tokens", "64", "--mode", "train_step", "--repeats", "2",
                 "--warmup", "1", "--threads", "1", "--out", str(out)]) == 0
    rows = pd.read_csv(out)
    assert list(rows.batch_size) == [4, 2] and (rows.median_ms > 0).all() and (rows.peak_mem_mb > 0).all()
    assert (rows.per_layer_ms * rows.n_layer - rows.median_ms).abs().max() < 1e-6
    assert set(rows.method) == {"DAPE1x3-Kerple"}


def test_timed_method_names_a_path_other_than_the_default():
    from dape_core.timing import timed_method

    cfg = lambda **kw: GPTConfig(size="tiny", processor="dape_v2", kernel_size=3, **kw)  # noqa: E731
    assert timed_method(cfg()) == "DAPE1x3-Kerple"
    assert timed_method(cfg(attention_impl="plain")) == "DAPE1x3-Kerple (plain)"
    assert timed_method(cfg(dape_dtype="bfloat16")) == "DAPE1x3-Kerple (bfloat16)"


@pytest.mark.slow
def test_leakage_without_tril_collapses_perplexity(tiny_corpus, tmp_path):
    """§4.5: without tril, DAPE1x3 with `same` padding reads the next token's score; validation ppl < ½ of tril's."""
    ppl = {}
    for tril in (True, False):
        out = tmp_path / f"tril{tril}"
        flag = "--tril" if tril else "--no-tril"
        assert _train(tiny_corpus, out, "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3",
                      "--n-head", "8", "--batch-size", "12", flag, "--steps", "300", "--lr", "1e-2") == 0
        model, _ = load_model(out / "model.pt")
        ppl[tril] = evaluate(model, load_split(tiny_corpus, "val"), [32], train_len=32, window=32, max_windows=32,
                             n_boot=10).ppl[0]
    assert ppl[False] < 0.5 * ppl[True], ppl


def test_same_config_and_seed_give_the_same_curve_and_perplexities(tiny_corpus, tmp_path):
    results = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert _train(tiny_corpus, out, "--encoding", "alibi", "--processor", "dape_v1", "--steps", "6",
                      "--log-every", "1", "--seed", "3") == 0
        assert main(["evaluate", "--min-scored-tokens", "1", "--checkpoint", str(out / "model.pt"), "--data-dir", str(tiny_corpus),
                     "--eval-lens", "32", "64", "--max-windows", "4", "--threads", "1", "--out", str(out / "e.csv")]) == 0
        curve = [json.loads(x)["loss"] for x in (out / "metrics.jsonl").read_text().splitlines()]
        results.append((curve, pd.read_csv(out / "e.csv")[["ppl", "ppl_ci_low", "delta_p"]].to_numpy()))
    assert results[0][0] == results[1][0]
    assert np.array_equal(results[0][1], results[1][1])
