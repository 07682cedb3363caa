"""benchmarks/bench_dape.py runs end to end on its quick suite and writes one row per method; a compiled variant
that cannot compile (here: no working C++ compiler) is left out with its reason, the other methods still timed."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_dape.py"

sys.path.insert(0, str(SCRIPT.parent))
import bench_dape  # noqa: E402


def test_compiled_variants_are_listed_only_when_asked():
    plain = [m["label"] for m in bench_dape.methods(64, "train")]
    compiled = [m["label"] for m in bench_dape.methods(64, "train", compiled=True)]
    assert not any("compiled" in label for label in plain)
    assert compiled[: len(plain)] == plain
    assert compiled[len(plain):] == ["Kerple compiled", "DAPE1x3-Kerple plain compiled"]


@pytest.mark.slow
def test_quick_suite_without_a_compiler_times_every_eager_method(tmp_path):
    out = tmp_path / "quick.csv"
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    done = subprocess.run([sys.executable, str(SCRIPT), "--suite", "quick", "--compile", "--no-memory", "--repeats", "1",
                           "--threads", "1", "--out", str(out)], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_csv(out)
    assert list(rows["method"]) == [m["label"] for m in bench_dape.methods(64, "train")]
    assert (rows["median_ms"] > 0).all() and (rows["ratio_vs_kerple"] > 0).all()
    assert rows.loc[rows["method"] == rows["kerple_reference"].iloc[0], "ratio_vs_kerple"].item() == 1.0
    for label in ("Kerple compiled", "DAPE1x3-Kerple plain compiled"):
        assert f"bench: {label}: torch.compile failed, left out" in done.stderr
