"""benchmarks/bench_hf.py: the original and the DAPE1x3-patched Llama timed side by side in one process, with the
ratio of the two and each variant's peak memory from its own process."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from dape_core.implementations import resolve_attention_impl

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_hf_writes_both_variants_side_by_side(tmp_path):
    out = tmp_path / "hf_patch.csv"
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_hf.py"), "--suite", "check", "--rounds",
                             "3", "--threads", "1", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = pd.read_csv(out)
    assert list(zip(rows["mode"], rows["seq_len"])) == [("forward", 32), ("forward_backward", 32)]
    assert (rows["hidden_size"] == 32).all() and (rows["vocab_size"] == 300).all()  # configs/smoke.yaml's model
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert (rows["dape_path"] == resolve_attention_impl("auto", device)).all()  # fast on a CPU
    for _, row in rows.iterrows():
        assert row["original_ms"] > 0 and row["dape1x3_ms"] > 0 and row["time_ratio"] > 0
        assert row["dape1x3_peak_mb"] > row["dape1x3_over_model_mb"] > 0
        assert row["peak_ratio"] == pytest.approx(row["dape1x3_peak_mb"] / row["original_peak_mb"])
    assert "original" in result.stderr and "DAPE1x3" in result.stderr
