"""`dape time` and the attention maps on the device a process picks (the CPU here): the precision setting, the device
and path written in the outputs, Table 7's panels per path with a Total over the testing lengths."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from dape_core import attention_maps
from dape_core.cli import main
from dape_core.errors import ConfigError
from dape_core.model import GPT, GPTConfig
from dape_core.report import tables
from dape_core.timing import PRECISIONS, TimingSettings, measure, timing_device

TINY_CASE = dict(encoding="kerple", processor="dape_v2", kernel_size=3, size="tiny", vocab_size=64, seq_len=32,
                 batch_size=2, repeats=2, warmup=1, threads=1)


def test_the_device_is_chosen_once_and_written_in_each_row():
    row = measure(dict(TINY_CASE, mode="forward"))
    expected = timing_device()
    assert row["device_type"] == expected.type
    assert row["device"] == (torch.cuda.get_device_name(expected) if expected.type == "cuda" else "cpu")
    assert row["status"] == "ok" and row["median_ms"] > 0 and row["peak_mem_mb"] > 0
    assert row["tokens_per_s"] == pytest.approx(2 * 32 / (row["median_ms"] / 1000))
    from dape_core.implementations import resolve_attention_impl

    assert row["attention_path"] == resolve_attention_impl(row["attention_impl"], expected)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", ["forward", "train_step"])
def test_every_precision_runs_and_is_recorded(precision, mode):
    row = measure(dict(TINY_CASE, mode=mode, precision=precision))
    assert row["precision"] == precision and row["status"] == "ok" and row["median_ms"] > 0
    qualified = precision != TimingSettings.precision
    assert row["method"] == ("DAPE1x3-Kerple" + (f" ({precision})" if qualified else ""))


def test_autocast_runs_the_model_in_the_precision_it_names():
    """The timed forward really computes in bf16 / fp16: the logits come out in that dtype."""
    from dape_core.timing import AUTOCAST_DTYPES

    model = GPT(GPTConfig(size="tiny", vocab_size=64, processor="dape_v2", kernel_size=3))
    x = torch.randint(0, 64, (1, 16))
    for precision, dtype in AUTOCAST_DTYPES.items():
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            logits = model(x)
        assert logits.dtype == (dtype or torch.float32), precision


def test_dape_time_writes_the_precision_and_the_device(tmp_path):
    out = tmp_path / "timing.csv"
    assert main(["time", "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3", "--size", "tiny",
                 "--vocab-size", "64", "--seq-lens", "16", "32", "--precision", "bf16", "--attention-impl", "plain",
                 "--repeats", "1", "--warmup", "0", "--threads", "1", "--out", str(out)]) == 0
    rows = pd.read_csv(out)
    assert list(rows["seq_len"]) == [16, 32] and set(rows["precision"]) == {"bf16"}
    assert set(rows["device"]) == {"cpu"} and set(rows["device_type"]) == {"cpu"}
    assert set(rows["method"]) == {"DAPE1x3-Kerple (plain, bf16)"} and set(rows["attention_path"]) == {"plain"}


def test_a_bad_precision_names_the_field_and_the_allowed_values(capsys):
    with pytest.raises(ConfigError, match=r"^precision: 'fp8' is not allowed; allowed values: fp32, bf16, fp16$"):
        TimingSettings(precision="fp8")
    with pytest.raises(SystemExit) as exit_info:
        main(["time", "--precision", "fp8", "--out", "x.csv"])
    assert exit_info.value.code == 2
    assert "precision: 'fp8' is not allowed; allowed values: fp32, bf16, fp16" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- Table 7
def table7_rows() -> pd.DataFrame:
    """Two paths × two methods × two testing lengths at one size; the plain path twice as slow."""
    rows = []
    for impl, slower in (("plain", 2.0), ("auto", 1.0)):
        for processor, kernel, ms in (("none", 1, 10.0), ("dape_v2", 3, 20.0)):
            for n in (512, 1024):
                label = "Kerple" if processor == "none" else "DAPE1x3-Kerple"
                qualifiers = ", ".join(q for q in (impl if impl == "plain" else "", "fp16") if q)
                rows.append({"families": "t", "method": f"{label} ({qualifiers})", "encoding": "kerple",
                             "processor": processor, "kernel_size": kernel, "mode": "forward", "size": "350M",
                             "seq_len": n, "batch_size": 1, "median_ms": ms * slower * n / 512, "device": "GPU",
                             "threads": 8, "attention_impl": impl, "attention_path": "plain" if impl == "plain"
                             else "materialized", "dape_dtype": "float32", "precision": "fp16"})
    return pd.DataFrame(rows)


def test_table7_has_a_panel_per_path_with_each_length_a_total_and_its_ratio():
    plain, default = tables.timing_tables(table7_rows(), "t")
    assert plain.title == "attention_impl plain, dape_dtype float32, precision fp16 — the paper's materialised form"
    assert default.title == ("attention_impl auto (materialized), dape_dtype float32, precision fp16 — the default "
                             "path")
    for table, factor in ((plain, 2.0), (default, 1.0)):
        assert table.rows == ["Kerple", "DAPE1x3-Kerple"]  # the path is the panel's, not the row's
        assert table.columns == ["350M T=512 B=1 ms", "350M T=1024 B=1 ms", "350M Total B=1 ms",
                                 "350M Total B=1 ratio"]
        kerple, dape = (10 * factor, 20 * factor, 30 * factor), (20 * factor, 40 * factor, 60 * factor)
        assert table.cells == [[f"{v:.2f}" for v in kerple] + ["0.5000"], [f"{v:.2f}" for v in dape] + ["1.0000"]]
        assert table.best[0] == [True, True, True, False]
        assert "Total = sum over T = 512, 1024" in table.note and "on the same path" in table.note
    markdown = tables.to_markdown([plain, default], "forward time")
    assert "## attention_impl plain" in markdown and "## attention_impl auto (materialized)" in markdown


def test_table7_total_is_missing_when_a_length_is_missing():
    rows = table7_rows()
    rows = rows[~((rows["processor"] == "none") & (rows["seq_len"] == 1024))]
    plain, _ = tables.timing_tables(rows, "t")
    assert plain.cells[0] == ["20.00", "n/a", "n/a", "n/a"]


# --------------------------------------------------------------------------------------------- attention maps
@pytest.fixture
def dape_model():
    torch.manual_seed(0)
    return GPT(GPTConfig(size="tiny", vocab_size=64, processor="dape_v2", kernel_size=3)).eval()


def test_attention_rows_are_the_last_rows_of_the_maps_and_carry_the_sink(dape_model):
    tokens = torch.randint(0, 64, (1, 24))
    maps = attention_maps.layer_maps(dape_model, tokens)
    rows = attention_maps.layer_rows(dape_model, tokens)
    assert len(maps) == len(rows) == dape_model.cfg.n_layer
    for full, row in zip(maps, rows):
        for name in attention_maps.MAP_NAMES:
            assert full[name].shape == (4, 24, 24) and row[name].shape == (4, 24)
            np.testing.assert_allclose(row[name], full[name][:, -1, :], rtol=1e-6, atol=1e-6)
        assert row["sink_mass"] == pytest.approx(attention_maps.sink_mass(full["probs"]))
        np.testing.assert_allclose(full["probs"].sum(-1), 1.0, rtol=1e-5)


def test_the_maps_are_computed_on_the_model_device_and_written_with_it(dape_model, tmp_path):
    device = attention_maps.model_device(dape_model)
    assert device == next(dape_model.parameters()).device
    rows = attention_maps.layer_rows(dape_model, torch.randint(0, 64, (1, 20)))
    sink = attention_maps.sink_frame(rows, method="DAPE1x3-Kerple", eval_len=20, device=str(device))
    assert list(sink["layer"]) == [0, 1] and set(sink["device"]) == {str(device)}
    assert sink["sink_mass"].between(0, 1).all()
    out = tmp_path / "maps.npz"
    attention_maps.write_heatmaps(out, rows, method="DAPE1x3-Kerple", device=str(device))
    with np.load(out) as npz:
        assert str(npz["device"]) == str(device) and str(npz["method"]) == "DAPE1x3-Kerple"
        assert npz["layer1_dape"].shape == (4, 20) and np.abs(npz["layer1_dape"]).sum() > 0
    assert attention_maps.sink_frame([], method="x", eval_len=20, device="cpu").empty  # a diverged run
