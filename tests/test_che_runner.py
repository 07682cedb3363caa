"""CHE runner: protocol pieces, a short training that learns, the `dape che` CSV, cell aggregation, and encoders
that tell left from right."""

import numpy as np
import pandas as pd
import pytest
import torch

from dape_core import cli
from dape_core.artefacts import verify_hash
from dape_core.che.tasks import check_positions
from dape_core.che.runner import (
    CHESettings,
    aggregate_cells,
    draw_positions,
    per_sample_accuracy,
    run_cell,
)
from dape_core.encodings import ENCODINGS
from dape_core.errors import ConfigError
from dape_core.model import Encoder, EncoderConfig

TINY_MODEL = dict(n_layer=2, d_model=32, n_head=4, d_ff=64, dropout=0.0)


def test_accuracy_is_averaged_over_the_mask_per_sample_then_over_samples():
    targets = torch.tensor([[1, 0, 2, 0], [0, 1, 1, 1]])
    masks = torch.tensor([[True, True, True, False], [True, False, False, False]])
    predicted = torch.tensor([[1, 1, 2, 1], [0, 0, 0, 0]])
    logits = torch.nn.functional.one_hot(predicted, 3).float()
    np.testing.assert_allclose(per_sample_accuracy(logits, targets, masks).numpy(), [2 / 3, 1.0])


def test_randomized_positions_are_sorted_distinct_and_bounded():
    settings = CHESettings(train_max_len=10, eval_min_len=11, eval_max_len=25, max_position=64)
    positions = draw_positions(np.random.default_rng(0), 50, settings)
    assert positions.shape == (50,) and positions.dtype == torch.int64
    assert bool((positions[1:] > positions[:-1]).all()) and 0 <= int(positions.min()) and int(positions.max()) < 64
    assert draw_positions(np.random.default_rng(0), 50, CHESettings(randomized_positions=False)) is None


def test_settings_reject_bad_values_naming_the_field():
    with pytest.raises(ConfigError, match="max_position: 1024 is not allowed; allowed values: ≥ 1500"):
        check_positions(CHESettings(task="duplicate_string", max_position=1024))  # N = 500 needs 1500 positions
    with pytest.raises(ConfigError, match="eval_max_len"):
        CHESettings(eval_min_len=41, eval_max_len=40)
    with pytest.raises(ConfigError, match="processor"):
        CHESettings(processor="dape_v3")
    with pytest.raises(ConfigError, match="task"):
        CHESettings(task="sorting")
    with pytest.raises(ConfigError, match="attention_impl: 'flash'.*fast, plain"):
        CHESettings(attention_impl="flash")


@pytest.mark.slow
def test_short_training_learns_in_distribution_and_evaluates_out_of_distribution():
    settings = CHESettings(
        task="bucket_sort", encoding="kerple", **TINY_MODEL, steps=400, lr=2e-3, batch_size=32, train_max_len=6,
        eval_min_len=7, eval_max_len=10, eval_samples=64, threads=torch.get_num_threads(), seed=0,
    )  # fmt: skip
    frame = run_cell(settings)
    lengths = frame[frame["row_type"] == "length"]
    assert lengths["length"].tolist() == [*range(1, 7), *range(7, 11)]
    in_distribution = lengths[lengths["length"] <= 6]["accuracy"].mean()
    assert in_distribution > 0.7  # chance: 0.2 per token
    ood = lengths[lengths["length"] >= 7]["accuracy"]
    assert ood.between(0, 1).all()
    assert frame[frame["row_type"] == "summary"]["accuracy"].item() == pytest.approx(ood.mean())


def test_cli_writes_the_csv_atomically_with_length_and_summary_rows(tmp_path):
    out = tmp_path / "cell" / "che.csv"
    argv = [
        "che", "--task", "even_pairs", "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3",
        "--dape-width", "8", "--seed", "3", "--lr", "3e-4", "--steps", "2", "--batch-size", "4",
        "--train-max-len", "3", "--eval-min-len", "5", "--eval-max-len", "7", "--eval-samples", "8",
        "--eval-batch-size", "3", "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--d-ff", "32",
        "--threads", str(torch.get_num_threads()), "--out", str(out),
    ]  # fmt: skip
    assert cli.main(argv) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["che.csv", "che.csv.sha256"]  # no temporary file left
    assert verify_hash(out)  # sealed: the sha256 the job recorded matches what it wrote
    frame = pd.read_csv(out)
    assert list(frame.columns) == [
        "task", "encoding", "processor", "kernel_size", "dape_width", "method", "seed", "lr", "steps", "length",
        "accuracy", "n_samples", "row_type",
    ]  # fmt: skip
    rows = frame[frame["row_type"] == "length"]
    assert rows["length"].tolist() == [1, 2, 3, 5, 6, 7] and (rows["n_samples"] == 8).all()
    summary = frame[frame["row_type"] == "summary"]
    assert len(summary) == 1 and summary["length"].isna().all() and summary["n_samples"].item() == 24
    assert summary["accuracy"].item() == pytest.approx(rows[rows["length"] >= 5]["accuracy"].mean())
    assert set(frame["method"]) == {"DAPE1x3-Kerple"}
    assert (frame[["task", "seed", "lr", "steps", "dape_width"]].drop_duplicates().values.tolist()
            == [["even_pairs", 3, 3e-4, 2, 8]])  # fmt: skip


def test_cli_reports_a_bad_setting_as_a_config_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["che", "--eval-min-len", "50", "--eval-max-len", "45", "--out", "unused.csv"])
    assert exit_info.value.code == 2 and "eval_max_len" in capsys.readouterr().err


METHOD_SETTINGS = {"Kerple": ("kerple", "none", 1), "DAPE1x3-Kerple": ("kerple", "dape_v2", 3)}


def _summary_row(task, method, seed, lr, accuracy):
    encoding, processor, kernel_size = METHOD_SETTINGS[method]
    return dict(
        task=task, encoding=encoding, processor=processor, kernel_size=kernel_size, dape_width=32, method=method,
        seed=seed, lr=lr, steps=100, length=None, accuracy=accuracy, n_samples=10, row_type="summary",
    )  # fmt: skip


def test_aggregate_cells_takes_max_or_mean_over_seeds_and_learning_rates():
    rows = [
        _summary_row("reverse_string", "Kerple", 0, 1e-4, 0.60),
        _summary_row("reverse_string", "Kerple", 1, 1e-4, 0.70),
        _summary_row("reverse_string", "Kerple", 0, 3e-4, 0.80),
        _summary_row("reverse_string", "DAPE1x3-Kerple", 0, 1e-4, 0.90),
        _summary_row("even_pairs", "Kerple", 0, 1e-4, 0.50),
        {**_summary_row("even_pairs", "Kerple", 0, 1e-4, 1.0), "length": 41, "row_type": "length"},  # ignored
    ]
    frame = pd.DataFrame(rows)
    best = aggregate_cells(frame, "max").set_index(["task", "method"])
    assert best.loc[("reverse_string", "Kerple"), "accuracy"] == pytest.approx(0.80)
    assert best.loc[("reverse_string", "Kerple"), "n_runs"] == 3
    assert best.loc[("reverse_string", "DAPE1x3-Kerple"), "accuracy"] == pytest.approx(0.90)
    assert best.loc[("even_pairs", "Kerple"), "accuracy"] == pytest.approx(0.50)
    mean = aggregate_cells(frame, "mean").set_index(["task", "method"])
    assert mean.loc[("reverse_string", "Kerple"), "accuracy"] == pytest.approx(0.70)
    assert set(mean["aggregation"]) == {"mean"} and len(mean) == 3
    with pytest.raises(ConfigError, match="aggregation: 'median'.*max, mean"):
        aggregate_cells(frame, "median")


def _mirror_gap(encoding, processor="none", kernel_size=1):
    """max |f(reverse(x)) − reverse(f(x))| with parameters moved off their (possibly symmetric) initial values."""
    torch.manual_seed(0)
    config = EncoderConfig(input_vocab=4, output_vocab=3, **TINY_MODEL, encoding=encoding, processor=processor,
                           kernel_size=kernel_size)  # fmt: skip
    model = Encoder(config).double().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.02 * torch.randn_like(parameter))
        tokens = torch.randint(0, 5, (2, 11))
        return (model(tokens.flip(1)).flip(1) - model(tokens)).abs().max().item()


@pytest.mark.parametrize("encoding", sorted(set(ENCODINGS) - {"nope"}))
def test_encoder_encodings_tell_left_from_right(encoding):
    assert _mirror_gap(encoding) > 1e-7


def test_nope_is_blind_to_direction_unless_a_1xk_convolution_recovers_it():
    assert _mirror_gap("nope") < 1e-12
    assert _mirror_gap("nope", "dape_v1") < 1e-12
    assert _mirror_gap("nope", "dape_v2", 3) > 1e-7
