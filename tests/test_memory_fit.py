"""The memory model against the GPU (benchmarks/memory_fit.py, dape_core.memory): the committed fit is the model's
of today, COMPILED_KEPT_SCALE is the scale its measured peaks need and bounds every one of them, and the trace stands
for the pass a job runs — the feature map in bf16 under bf16 autocast, the chunks cut at the job's micro-batch and
the compiled path's options on CUDA (the Triton feature map, causal chunks)."""

from __future__ import annotations

import dataclasses
import math
import types
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import memory_fit
from dape_core import implementations, memory
from dape_core.model import GPTConfig
from dape_core.settings.attention import COMPILED_OPTIONS_OFF

ROOT = Path(__file__).resolve().parents[1]

KEPT = dict(size="125M", vocab_size=50304, encoding="kerple", processor="dape_v2", kernel_size=3,
            recompute_scores=False, attention_impl="compiled")
TRITON_C4 = {**COMPILED_OPTIONS_OFF, "feature_map": "triton", "causal_chunks": 4}


def test_the_committed_fit_is_todays_model_and_the_kept_scale_the_one_it_needs(tmp_path):
    """benchmarks/results/memory_fit.csv is what the script computes now from the committed peaks, every peak sits
    at or below the modelled one, and COMPILED_KEPT_SCALE is the needed scale rounded up (not a number chosen)."""
    out = tmp_path / "fit.csv"
    assert memory_fit.main(["--out", str(out)]) == 0
    now, committed = pd.read_csv(out), pd.read_csv(ROOT / "benchmarks" / "results" / "memory_fit.csv")
    assert list(now.columns) == list(committed.columns) and len(now) == len(committed)
    pd.testing.assert_frame_equal(now, committed, rtol=1e-6)
    assert now["bounded"].all()
    kept = now[now["kept_scale_needed"].notna()]
    assert len(kept) >= 4 and set(kept["train_len"]) >= {512, 2048}
    assert memory.COMPILED_KEPT_SCALE == memory_fit.needed_scale(now.to_dict("records"))
    assert kept["kept_scale_needed"].max() > memory.COMPILED_KEPT_SCALE - memory_fit.SCALE_STEP  # tight


def test_a_resident_case_s_states_are_taken_off_the_measured_peak(tmp_path):
    """gpu_step.csv: every case of a length is resident while each is timed; the others' 16 bytes a parameter
    come off a case's peak (a case skipped at build time holds nothing)."""
    rows = [dict(gpu="G", size="tiny", vocab_size=512, method=m, mode="eager", train_len=64, micro_batch=4,
                 precision="bf16", status=s, peak_gib=p) for m, s, p in
            (("NoPE", "ok", 1.0), ("Kerple", "ok", 1.5), ("DAPE1x3-Kerple (compiled-keep)", "ok", 2.0),
             ("ALiBi", "skipped", math.nan))]
    path = tmp_path / "gpu_step.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    fit = {r["method"]: r for r in memory_fit.step_rows(path)}
    assert set(fit) == {"NoPE", "Kerple", "DAPE1x3-Kerple (compiled-keep)"}
    states = {m: memory_fit.resident_bytes(memory_fit.step_config(
        types.SimpleNamespace(**r), 512)[0]) / memory_fit.GIB for m, r in ((r["method"], r) for r in rows)}
    for method, row in fit.items():
        others = sum(v for m, v in states.items() if m not in (method, "ALiBi"))
        assert row["others_gib"] == pytest.approx(others)
        assert row["own_gib"] == pytest.approx(row["measured_gib"] - others)
    assert math.isnan(fit["Kerple"]["kept_scale_needed"]) and fit["DAPE1x3-Kerple (compiled-keep)"][
        "kept_scale_needed"] > 0


@pytest.mark.parametrize("text,message", [("a,b\n1,2\n", "lacks the columns gpu"), ("", "is damaged"),
                                          ("gpu,size,method,mode,train_len,micro_batch,precision,status,peak_gib\n"
                                           "G,tiny,NoPE,eager,sixty,4,bf16,ok,1.0\n", "is damaged")])
def test_a_damaged_or_foreign_csv_is_refused_in_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "gpu_step.csv"
    path.write_text(text)
    with pytest.raises(SystemExit, match=f"{path}.*{message}|{message}.*"):
        memory_fit.step_rows(path)


def test_the_trace_runs_the_feature_map_in_bf16_under_bf16_autocast():
    """Under bf16 autocast on CUDA the materialized path's feature map runs in bf16 whatever dape_dtype says
    (float32: the autocast dtype); the trace on meta, which has no autocast, counts it so."""
    cfg = GPTConfig(**{**KEPT, "size": "tiny", "train_len": 64})
    default = memory.model_saved_bytes(cfg, 4, precision="bf16")
    explicit = memory.model_saved_bytes(dataclasses.replace(cfg, dape_dtype="bfloat16"), 4, precision="bf16")
    assert default == explicit


def test_the_traces_cut_the_chunks_of_the_job_s_micro_batch():
    """The path sizes its chunks by the whole batch: the traces at batches 1 and 2 cut those of the job's (two at
    T 2048 × 8 for the 125M model), so the model is a trace of the whole micro-batch (to 0.1 %: a few batch-free
    storages are shared at batch 1; traced with the chunks of batches 1 and 2 it counted 0.70 of it)."""
    cfg = GPTConfig(**KEPT, train_len=2048)
    rows = memory.dape_chunk_rows(cfg, 8, "bf16")
    assert rows < 2048 and memory.dape_chunk_rows(cfg, 1, "bf16") == 2048
    whole = memory.saved_bytes(dataclasses.replace(cfg, query_chunk_size=rows), 8, precision="bf16")
    assert memory.model_saved_bytes(cfg, 8, precision="bf16") == pytest.approx(whole, rel=1e-2)


def test_the_trace_and_the_transient_follow_the_compiled_path_s_options(monkeypatch):
    """A job runs the compiled path's options on CUDA under bf16: the Triton feature map keeps no hidden map and
    causal chunks keep and hold less; the model traces them where the job runs them and nowhere else."""
    cfg = GPTConfig(**KEPT, train_len=512)
    off = memory.training_memory(cfg, 32, precision="bf16")
    on = memory.training_memory(cfg, 32, precision="bf16", path_options=TRITON_C4)
    assert on.saved < off.saved
    long = GPTConfig(**KEPT, train_len=2048)  # where a DAPE chunk, not the loss, is the largest working set
    assert memory.transient_bytes(long, 8, precision="bf16", path_options=TRITON_C4) < memory.transient_bytes(
        long, 8, precision="bf16")
    assert memory.training_memory(cfg, 32, precision="bf16", path_options={**TRITON_C4, "causal_chunks": 1}).saved \
        < off.saved
    assert implementations.path_options("compiled", "meta") == {}  # no trace: the functions' defaults
    with implementations.options_on_meta(TRITON_C4):
        assert implementations.path_options("materialized", "meta") == TRITON_C4
    monkeypatch.setattr(implementations, "CUDA_COMPILED_OPTIONS", types.MappingProxyType(TRITON_C4))
    assert memory.job_path_options(cfg, "bf16") == TRITON_C4
    assert memory.training_memory(cfg, 32, precision="bf16") == on  # the job's options: today's on CUDA
    assert memory.job_path_options(cfg, "fp32") == {}  # the options apply under 16-bit autocast only
    small = GPTConfig(**{**KEPT, "size": "tiny", "train_len": 64})  # a CPU job runs none of them
    assert memory.cpu_preflight(small, 4, precision="bf16", machine_bytes=2**40) == memory.training_memory(
        small, 4, precision="bf16", attention_kernel="math", reserve_bytes=memory.CPU_RESERVE_BYTES, path_options={})
    assert memory.training_memory(small, 4, precision="bf16", attention_kernel="math",
                                  reserve_bytes=memory.CPU_RESERVE_BYTES) != memory.cpu_preflight(
        small, 4, precision="bf16", machine_bytes=2**40)
    assert memory.job_path_options(dataclasses.replace(cfg, attention_impl="materialized"), "bf16") == {}
    assert memory.job_path_options(dataclasses.replace(cfg, processor="none", kernel_size=1), "bf16") == {}


def test_a_calibration_row_is_traced_with_the_options_it_ran_with_and_a_foreign_one_refused(tmp_path):
    """A device run's calibration rows record their path options: the fit traces each row with its own (the Triton
    feature map and causal chunks keep less than the committed row without them); a row whose configuration is
    not here stops the script with one line naming the file and the row."""
    committed = pd.read_csv(ROOT / "benchmarks" / "results" / "gpu_calibration.csv")
    row = committed[(committed["method"] == "DAPE1x3-Kerple") & (committed["train_len"] == 512)
                    & committed["gpu_mem_gb"].notna()].head(1)
    path = tmp_path / "gpu_calibration.csv"
    pd.concat([row, row.assign(path_options="feature_map=triton causal_chunks=4 tf32_scores=True")]).to_csv(
        path, index=False)
    off, on = memory_fit.calibration_rows(path)
    assert off["path_options"] == "feature_map=conv causal_chunks=1 tf32_scores=False"
    assert on["path_options"] == "feature_map=triton causal_chunks=4 tf32_scores=True"
    assert on["saved_gib"] < off["saved_gib"] and on["own_gib"] == off["own_gib"]
    row.assign(path_options="feature_map=cudnn").to_csv(path, index=False)
    with pytest.raises(SystemExit, match=r"gpu_calibration.csv: row DAPE1x3-Kerple T512: path_options: "
                                         r"feature_map=cudnn is not allowed; allowed values: conv, triton"):
        memory_fit.calibration_rows(path)
    row.assign(config="configs/elsewhere.yaml").to_csv(path, index=False)
    with pytest.raises(SystemExit, match=r"gpu_calibration.csv: row DAPE1x3-Kerple T512 names configs/elsewhere"):
        memory_fit.calibration_rows(path)
