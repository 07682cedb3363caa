"""benchmarks/bench_dape.py runs end to end on its quick suite and writes one row per method; a compiled variant
that cannot compile (here: no working C++ compiler) is left out with its reason, the other methods still timed."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from benchmarks import bench_dape

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_dape.py"


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


def test_a_group_naming_methods_times_only_those_and_each_name_exists():
    for suite, groups in bench_dape.SUITES.items():
        for group in groups:
            if "methods" not in group:
                continue
            offered = [m["label"] for m in bench_dape.methods(group["seq_len"], group["mode"])]
            assert set(group["methods"]) <= set(offered), (suite, group["methods"])
            kept = [m["label"] for m in bench_dape.group_methods(group)]
            assert kept == [label for label in offered if label in group["methods"]]
            compiled = [m["label"] for m in bench_dape.group_methods(group, compiled=True)]
            assert "Kerple compiled" in compiled and "DAPE-Kerple plain" not in compiled


def test_gpu_step_times_every_method_round_robin_with_ratios(tmp_path):
    """benchmarks/gpu_step.py on the CPU at a tiny shape: one row per method, its ratio to NoPE and Kerple."""
    out = tmp_path / "gpu_step.csv"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_step.py"), "--device", "cpu", "--size",
                             "tiny", "--vocab-size", "128", "--tokens", "256", "--lengths", "32", "--rounds", "2",
                             "--warmup", "1", "--modes", "eager", "--out", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = pd.read_csv(out)
    assert list(rows["method"]) == ["NoPE", "RoPE", "ALiBi", "T5", "Kerple", "FIRE", "DAPE-Kerple", "DAPE1x3-Kerple"]
    assert (rows["status"] == "ok").all() and (rows["micro_batch"] == 8).all() and (rows["rounds"] == 2).all()
    nope, kerple = rows.set_index("method").loc["NoPE"], rows.set_index("method").loc["Kerple"]
    assert nope["x_nope"] == 1.0 and kerple["x_kerple"] == 1.0
    assert (rows["x_nope"] - rows["step_ms"] / nope["step_ms"]).abs().max() < 1e-9


def test_op_counts_counts_each_path_and_setting(tmp_path):
    """benchmarks/op_counts.py at a tiny shape: a row per case and batch; the accelerator path's Kerple layer makes
    one SDPA call, its DAPE layer no padded copy and the same calls at both batches; recomputation adds the
    replayed forward operators."""
    out = tmp_path / "op_counts.csv"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "op_counts.py"), "--size", "tiny", "--length",
                             "32", "--batches", "2", "8", "--out", str(out)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = pd.read_csv(out)
    assert len(rows) == 12 and set(rows["batch"]) == {2, 8}
    kerple = rows[(rows["method"] == "Kerple") & (rows["attention_impl"] == "materialized")]
    assert (kerple["sdpa"] == 1).all()
    dape = rows[(rows["method"] == "DAPE1x3-Kerple") & (rows["attention_impl"] == "materialized")]
    assert (dape["constant_pad_nd"] == 0).all() and (dape["convolution"] > 0).all()
    assert (rows[(rows["attention_impl"] == "plain")]["constant_pad_nd"] > 0).all()  # the paper's form pads
    by = dape.set_index(["recompute_scores", "batch"])["top_level"]
    assert by[("True", 2)] == by[("True", 8)] and by[("False", 2)] == by[("False", 8)]
    assert by[("True", 2)] > by[("False", 2)]


def _interpreted_env():
    """The environment of a benchmark subprocess whose fused kernels run in Triton's CPU interpreter."""
    pytest.importorskip("triton", minversion="3.9", reason="the fused kernels' CPU interpreter needs Triton ≥ 3.9")
    return {**os.environ, "TRITON_INTERPRET": "1"}


def test_gpu_step_times_dape_on_each_named_path(tmp_path):
    """--dape-impls: each DAPE method once per attention_impl, beside the baseline, with its ratio to Kerple."""
    out = tmp_path / "gpu_step.csv"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_step.py"), "--device", "cpu", "--size",
                             "tiny", "--vocab-size", "64", "--tokens", "32", "--lengths", "16", "--rounds", "1",
                             "--warmup", "1", "--modes", "eager", "--methods", "Kerple", "DAPE1x3-Kerple",
                             "--dape-impls", "fast", "fused", "materialized-keep", "materialized-triton", "--out",
                             str(out)],
                            capture_output=True, text=True, timeout=600, env=_interpreted_env())
    assert result.returncode == 0, result.stderr[-2000:]
    rows = pd.read_csv(out).set_index("method")
    assert list(rows.index) == ["Kerple", "DAPE1x3-Kerple (fast)", "DAPE1x3-Kerple (fused)",
                                "DAPE1x3-Kerple (materialized-keep)", "DAPE1x3-Kerple (materialized-triton)"]
    assert (rows["status"] == "ok").all()
    fused = rows.loc["DAPE1x3-Kerple (fused)"]
    assert fused["x_kerple"] == pytest.approx(fused["step_ms"] / rows.loc["Kerple", "step_ms"])
    assert (rows["vocab_size"] == 64).all()  # what benchmarks/memory_fit.py rebuilds each case from
    assert rows.loc["DAPE1x3-Kerple (materialized-triton)", "path_options"] == (
        "feature_map=triton causal_chunks=1 tf32_scores=False")
    assert rows.loc["DAPE1x3-Kerple (materialized-keep)", "path_options"] == rows.loc["Kerple", "path_options"] == (
        "feature_map=conv causal_chunks=1 tf32_scores=False")


def test_path_variants_name_the_paths_options():
    from benchmarks.harness import path_variant

    assert path_variant("compiled") == ("compiled", {})
    assert path_variant("compiled-triton-keep") == ("compiled", {"feature_map": "triton", "recompute_scores": False})
    assert path_variant("compiled-keep-c4") == ("compiled", {"causal_chunks": 4, "recompute_scores": False})
    assert path_variant("materialized-triton-c2") == ("materialized", {"causal_chunks": 2, "feature_map": "triton"})
    assert path_variant("compiled-triton-keep-tf32-c8") == ("compiled", {"causal_chunks": 8, "tf32_scores": True,
                                                                        "recompute_scores": False,
                                                                        "feature_map": "triton"})
    assert path_variant("") == ("", {})


def test_the_device_commands_in_the_docs_name_rows_and_cases_the_benchmarks_take():
    """Every LAYER_ROWS row of docs/performance.md's device commands is a row fused_layer.py accepts, every IMPLS
    case a path gpu_step.py builds, every FEATURE_TILES setting a tile the kernels take."""
    import re

    from benchmarks import fused_layer
    from benchmarks.harness import path_variant
    from dape_core.implementations.feature_map import FeatureTiles
    from dape_core.settings.attention import FEATURE_MAPS

    text = (ROOT / "docs" / "performance.md").read_text().replace("\\\n", " ")
    found = {name: " ".join(re.findall(rf'{name}="([^"]*)"', text)).split()
             for name in ("LAYER_ROWS", "LAYER_PROFILE", "IMPLS", "FEATURE_TILES")}
    assert found["LAYER_ROWS"] and found["IMPLS"]
    assert set(found["LAYER_PROFILE"]) <= set(found["LAYER_ROWS"])  # fused_layer.py profiles rows it times
    for row in found["LAYER_ROWS"]:
        assert fused_layer.row_name(row) == row
    for impl in found["IMPLS"]:
        path, options = path_variant(impl)
        assert path in ("materialized", "compiled") and options.get("feature_map", "conv") in FEATURE_MAPS, impl
    for spec in found["FEATURE_TILES"]:
        FeatureTiles.parse(spec)


def test_a_rows_scope_gives_the_paths_exactly_its_options_whatever_the_cuda_defaults(monkeypatch):
    """Inside ``harness.path_options`` the attention entry gives the materialized and compiled paths the row's
    options on any device (the others off, so a row keeps its meaning when ``CUDA_COMPILED_OPTIONS`` changes), and
    the entry's own choice after; the TF32 switch itself is never touched outside the score products."""
    import dape_core.attention as attention
    import dape_core.implementations as implementations
    from benchmarks.harness import path_options

    monkeypatch.setattr(implementations, "CUDA_COMPILED_OPTIONS", {"feature_map": "triton", "causal_chunks": 4,
                                                                   "tf32_scores": True})
    monkeypatch.setattr(implementations, "half_autocast", lambda device_type: True)  # as under bf16 autocast
    entry, before = attention.path_options, torch.backends.cuda.matmul.fp32_precision
    assert entry("compiled", "cuda")["causal_chunks"] == 4
    with path_options(tf32_scores=True):
        assert attention.path_options("compiled", "cuda") == {"tf32_scores": True}
        assert attention.path_options("materialized", "cpu") == {"tf32_scores": True}
        assert torch.backends.cuda.matmul.fp32_precision == before
    with path_options():
        assert attention.path_options("compiled", "cuda") == {}
    assert attention.path_options is entry


def test_the_layer_benchmark_refuses_a_row_it_does_not_know_naming_the_allowed_ones():
    for row in ("compiled-c0", "sdpa-tf32", "compiled-c4-tf32"):
        result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fused_layer.py"), "--device", "cpu",
                                 "--rows", row], capture_output=True, text=True, timeout=600)
        assert result.returncode == 2 and f"'{row}' is not allowed; allowed: sdpa" in result.stderr
        assert "-tf32 (TF32 score products) and then -cN (N ≥ 1 causal chunks)" in result.stderr


def test_gpu_step_runs_a_triton_case_with_the_triton_feature_map_and_the_others_without(monkeypatch):
    """``impl-triton``: the case's steps (and no other case's) compute f with the Triton kernels, ``-c4`` in 4
    chunks per layer, and the paths' entry points are themselves again after each step."""
    _interpreted_env()
    from benchmarks import gpu_step

    import dape_core.attention as attention
    import dape_core.implementations.feature_map as feature_map

    calls = []
    original = feature_map.triton_feature_map
    monkeypatch.setattr(feature_map, "triton_feature_map", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    entry = attention.path_options
    idx = torch.randint(0, 64, (2, 16))
    for impl, expected in (("materialized", 0), ("materialized-triton", 4),  # two layers, each recomputed
                           ("materialized-triton-c4", 16)):
        calls.clear()
        _, _, forward, scope = gpu_step.build_case(f"DAPE1x3-Kerple ({impl})", "tiny", 16, 64, torch.device("cpu"),
                                                   False)
        with scope():
            forward(idx, idx)[1].backward()
        assert len(calls) == expected and attention.path_options is entry
    _, _, _, scope = gpu_step.build_case("DAPE1x3-Kerple", "tiny", 16, 64, torch.device("cpu"), False)
    with scope():  # no impl named: the step as training runs it, with the entry's own options
        assert attention.path_options is entry


def test_fused_layer_benchmark_times_every_row_and_states_the_fused_error(tmp_path):
    out = tmp_path / "fused_layer.csv"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fused_layer.py"), "--device", "cpu",
                             "--shapes", "2x20", "--heads", "2", "--head-dim", "8", "--dape-width", "4", "--rounds",
                             "1", "--warmup", "0", "--rows", "sdpa", "sdpa-bias", "materialized", "paper", "fused",
                             "materialized-triton", "materialized-tf32-c3", "--fused-tiles", "16.16.4.16.4+uncapped", "--check",
                             "--profile", "materialized",
                             "--profile-top", "3", "--eval-size", "tiny",
                             "--eval-length", "24", "--vocab-size", "64", "--out",
                             str(out)], capture_output=True, text=True, timeout=600,
                            env=_interpreted_env())
    assert result.returncode == 0, result.stderr[-2000:]
    rows = pd.read_csv(out).set_index("row")
    assert list(rows.index) == ["sdpa", "sdpa-bias", "materialized", "paper", "fused", "materialized-triton",
                                "materialized-tf32-c3", "fused-16.16.4.16.4+uncapped", "fused-error",
                                "materialized-error", "materialized-triton-error", "materialized-tf32-c3-error",
                                *["profile-materialized"] * 4,
                                "eval-tiny-materialized", "eval-tiny-materialized-triton", "eval-tiny-fused"]
    profile = rows.loc["profile-materialized"]  # the three largest kernels, then the rest; shares of one total
    assert list(profile["kernel"])[-1] == "(other)" and profile["share"].sum() == pytest.approx(1.0)
    assert list(profile["ms"][:3]) == sorted(profile["ms"][:3], reverse=True)
    assert rows.loc["eval-tiny-materialized", "x_materialized"] == 1.0 and rows.loc["eval-tiny-fused", "ms"] > 0
    assert rows.loc["eval-tiny-materialized-triton", "ms"] > 0
    assert rows.loc["sdpa-bias", "x_sdpa_bias"] == 1.0
    for path in ("fused", "materialized", "materialized-triton", "materialized-tf32-c3"):
        errors = rows.loc[f"{path}-error", ["error_output", "error_grad_q", "error_grad_k", "error_grad_v"]]
        assert (errors < 1e-5).all()  # fp32 on the CPU: each path equals the reference to rounding
    assert rows.loc["fused", "forward_gflop"] > 0 and rows.loc["fused", "backward_gflop"] > rows.loc["fused",
                                                                                                   "forward_gflop"]


def test_fused_check_passes_the_kernel_and_fails_a_wrong_gradient(monkeypatch):
    import argparse

    from benchmarks import fused_check
    args = argparse.Namespace(batch=2, length=20, heads=2, head_dim=8, dape_width=4)
    row = fused_check.check("kerple:v2-causal", args, torch.device("cpu"))
    assert row["ok"] and row["repeatable"] and row["tensors"] >= 10 and row["worst_error"] < 1e-5
    original = fused_check.run

    def wrong(*a):  # the fused path with one weight's gradient off by 1 %
        result = original(*a)
        if a[5] == "fused":
            result["grad processor.conv1.weight"] = result["grad processor.conv1.weight"] * 1.01
        return result
    monkeypatch.setattr(fused_check, "run", wrong)
    row = fused_check.check("kerple:v2-causal", args, torch.device("cpu"))
    assert not row["ok"] and row["worst_tensor"] == "grad processor.conv1.weight"


def test_a_conv2_bias_gradient_is_measured_against_its_weights_gradient():
    from benchmarks import fused_check
    reference = {"grad processor.conv2.bias": torch.tensor([1e-12]), "grad processor.conv2.weight": torch.ones(4)}
    assert fused_check.scale(reference, "grad processor.conv2.bias") == 2.0
    assert fused_check.scale(reference, "grad processor.conv2.weight") == 2.0


def test_fused_compile_reports_the_resources_of_each_kernel_without_a_gpu():
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fused_compile.py"), "--heads", "16",
                             "--width", "16", "--head-dim", "16", "--key-tile", "16", "--kernels", "forward"],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("forward:"))
    assert "registers" in line and "stack" in line and "hmma" in line


def test_the_feature_map_floors_count_the_kernels_padded_products():
    """The 125M layer's map (C 24, D_DAPE 32, H 12, k 3; padded 32, 32, 16): 10,752 multiply-adds per pixel
    forward (Conv1 once per Conv2 tap), 12,288 backward; DAPE V1 (k 1) 1,536 and 4,096."""
    from benchmarks import feature_map

    assert feature_map.floor_flop(1000, 24, 32, 12, 3) == pytest.approx(
        dict(forward_gflop=2 * 1000 * 10_752 / 1e9, backward_gflop=2 * 1000 * 12_288 / 1e9))
    assert feature_map.floor_flop(1000, 24, 32, 12, 1) == pytest.approx(
        dict(forward_gflop=2 * 1000 * 1_536 / 1e9, backward_gflop=2 * 1000 * 4_096 / 1e9))


def test_feature_map_benchmark_times_the_convolutions_beside_each_tile_setting(tmp_path):
    """benchmarks/feature_map.py in the interpreter: per shape and mode a row for the convolutions and one per
    tile setting, each with its error against fp32 (rounding, in fp32 on the CPU) and the floor's bandwidth, on a
    decoder's causal map (the floor counts its half) and with --two-sided on every pixel; a tile setting that is not
    three powers of two is refused, naming --tiles and the allowed values."""
    out = tmp_path / "feature_map.csv"
    command = [sys.executable, str(ROOT / "benchmarks" / "feature_map.py"), "--device", "cpu", "--shapes", "1x12",
               "--heads", "2", "--dape-width", "4", "--rounds", "1", "--warmup", "0", "--out", str(out)]
    result = subprocess.run([*command, "--tiles", "2.8.4", "1.16.4"], capture_output=True, text=True, timeout=600,
                            env=_interpreted_env())
    assert result.returncode == 0, result.stderr[-2000:]
    rows = pd.read_csv(out)
    assert list(zip(rows["mode"], rows["row"])) == [(mode, row) for mode in ("train", "forward")
                                                    for row in ("conv", "triton-2.8.4", "triton-1.16.4")]
    assert (rows["error"] < 1e-5).all() and (rows.loc[rows["row"] == "conv", "x_conv"] == 1.0).all()
    floor = rows.groupby("mode")["floor_gb"].first()
    assert floor["train"] > floor["forward"] > 0
    assert rows["gb_per_s"].to_numpy() == pytest.approx((rows["floor_gb"] / (rows["ms"] / 1000)).to_numpy())
    assert rows["tflop_per_s"].to_numpy() == pytest.approx((rows["floor_gflop"] / rows["ms"]).to_numpy())
    assert (rows["map"] == "causal").all()
    result = subprocess.run([*command, "--tiles", "2.8.4", "--two-sided"], capture_output=True, text=True,
                            timeout=600, env=_interpreted_env())
    assert result.returncode == 0, result.stderr[-2000:]
    two_sided = pd.read_csv(out)
    assert (two_sided["map"] == "two-sided").all() and (two_sided["error"] < 1e-5).all()
    assert two_sided.groupby("mode")["floor_gb"].first()["train"] == pytest.approx(floor["train"] * 144 / 78)
    bad = subprocess.run([*command, "--tiles", "2.12.4"], capture_output=True, text=True, timeout=600,
                         env=_interpreted_env())
    assert bad.returncode == 2 and "--tiles" in bad.stderr and "allowed values: powers of two" in bad.stderr


def test_fused_compile_reports_the_feature_map_kernels_at_each_tile_setting():
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fused_compile.py"), "--heads", "16",
                             "--width", "16", "--channels", "16", "--map-channels", "16", "--map-heads", "8", "--kernels",
                             "feature", "--feature-tiles", "1.16.4"], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("feature ")]
    assert [line.split(":")[0] for line in lines] == [f"feature {name} 1.16.4" for name in
                                                      ("forward", "backward_hidden", "backward_input")]
    assert all("registers" in line and "stack" in line and "hgmma" in line for line in lines)
    assert all(" ldg_stg_16 0" in line for line in lines)  # the map's loads and stores are vectors, not bf16 by bf16
    assert "k 3 causal" in result.stdout  # the decoder's kernels by default (--two-sided: the encoder's)


def test_the_device_scripts_parse():
    for script in ("fused_device.sh", "device_wheels.sh"):
        assert subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / script)]).returncode == 0, script


def device_script(tmp_path: Path, **settings) -> tuple[str, list[str]]:
    """benchmarks/fused_device.sh run with a stand-in for Python that records each call's arguments (and sleeps
    ``SLEEP`` seconds in the layer timing): its log and the calls in order."""
    calls = tmp_path / "calls"
    stub = tmp_path / "python"
    stub.write_text('#!/usr/bin/env bash\necho "$*" >> "$CALLS"\n'
                    '[[ "$*" == *--check* ]] && sleep "${SLEEP:-0}"\n'
                    '[[ "$*" == *--text* ]] && echo "${OPTIONS:-}"\nexit 0\n')
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("SMOKE", "BUDGET", "STEPS", "LIMIT")}
    env.update(PYTHON=str(stub), CALLS=str(calls), OUT=str(tmp_path / "out"), TILES="", **settings)
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "fused_device.sh")], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, calls.read_text().splitlines()


def test_the_device_script_compiles_every_graph_beside_the_others_then_times_in_its_order(tmp_path):
    """Each compiled layer row warms up in its own process, the steps' compiled cases at the first length; then
    the timed steps run in the documented order: layer, step, feature, eval."""
    log, calls = device_script(tmp_path, STEPS="eval feature step layer",
                               LAYER_ROWS="sdpa-bias compiled-keep compiled-triton-keep-c4",
                               METHODS="Kerple DAPE1x3-Kerple", IMPLS="materialized compiled-keep")
    warm = [c for c in calls if "--rounds 1 --warmup 0" in c or "--rounds 0 --warmup 1" in c]
    assert sorted(c.split("--rows ")[1].split()[0] for c in warm if "--rows" in c) == [
        "compiled-keep", "compiled-triton-keep-c4"]
    step_warm = [c for c in warm if "gpu_step.py" in c]
    assert len(step_warm) == 1 and "--methods DAPE1x3-Kerple --lengths 512 " in step_warm[0]
    assert "--dape-impls compiled-keep " in step_warm[0]
    timed = [c for c in calls if c not in warm and "fused_layer.py" in c or "gpu_step.py" in c and c not in warm
             or "feature_map.py" in c]
    assert [c.split()[0] for c in timed] == ["benchmarks/fused_layer.py", "benchmarks/gpu_step.py",
                                             "benchmarks/feature_map.py", "benchmarks/fused_layer.py"]
    assert "--check" in timed[0] and "--eval-size" in timed[3]
    assert "skipped" not in log and log.index("layer timing done") < log.index("evaluation timing done")


def test_the_device_script_gives_each_step_what_is_left_of_its_budget_and_skips_the_rest(tmp_path):
    """Under BUDGET a step that outlasts what is left is stopped, and a later one with too little left is skipped
    and said so: a lease's time goes to the first steps."""
    log, calls = device_script(tmp_path, STEPS="layer step", LAYER_ROWS="sdpa-bias", METHODS="Kerple",
                               IMPLS="materialized", BUDGET="3", MIN_STEP="1", SLEEP="30")
    assert "layer timing failed (exit 124)" in log
    assert "step timing skipped" in log and not any("gpu_step.py" in c for c in calls)


def test_the_device_script_refuses_a_budget_that_is_not_whole_seconds(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SMOKE", "STEPS")}
    env.update(OUT=str(tmp_path / "out"), BUDGET="9m", PYTHON=str(tmp_path / "no-python"))
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "fused_device.sh")], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "BUDGET: 9m is not allowed; allowed values: a whole number" in done.stderr


def write_device_run(run: Path, layer: dict, errors: dict | None = None, steps: dict | None = None) -> Path:
    """A device run's fused_layer.csv (``layer``: {row: (ms at B 32 × T 512, ms at B 8 × T 2048)}; ``errors``:
    {row: error of every tensor}, default 1e-2 for each row) and, with ``steps``, its gpu_step.csv ({impl: (ms at
    T 512, ms at T 2048)} of DAPE1x3-Kerple)."""
    import pandas as pd

    run.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (batch, n) in enumerate(((32, 512), (8, 2048))):
        for row, times in layer.items():
            rows.append(dict(batch=batch, train_len=n, row=row, ms=times[i]))
            rows.append(dict(batch=batch, train_len=n, row=f"{row}-error",
                             **{e: (errors or {}).get(row, 1e-2) for e in ("error_output", "error_grad_q",
                                                                           "error_grad_k", "error_grad_v")}))
        rows.append(dict(batch=batch, train_len=n, row="profile-compiled-keep", ms=1.0, kernel="k"))
    pd.DataFrame(rows).to_csv(run / "fused_layer.csv", index=False)
    if steps:
        pd.DataFrame([dict(method=f"DAPE1x3-Kerple ({impl})", mode="eager", train_len=n, status="ok", step_ms=times[i])
                      for impl, times in steps.items() for i, n in enumerate((512, 2048))]
                     + [dict(method="Kerple", mode="eager", train_len=512, status="ok", step_ms=60.0)]
                     ).to_csv(run / "gpu_step.csv", index=False)
    return run


DEVICE_ROWS = ("sdpa-bias", "compiled-keep", "compiled-triton-keep", "compiled-triton-keep-c4",
               "compiled-triton-keep-tf32", "compiled-triton-keep-tf32-c4")
DEVICE_TIMES = [(3.0, 7.7), (9.7, 29.6), (5.7, 18.0), (4.3, 12.0), (5.3, 16.5), (3.9, 11.0)]


def test_cuda_options_sets_each_option_measured_faster_with_the_same_error(tmp_path, capsys):
    """The documented device rows: each option pairs with the row without it; faster at both shapes and in both
    steps, errors as the row without it → all three set (and the names round-trip)."""
    from benchmarks import cuda_options

    layer = dict(zip(DEVICE_ROWS, DEVICE_TIMES))
    steps = {"compiled-keep": (164.0, 399.0), "compiled-triton-keep": (120.0, 300.0),
             "compiled-triton-keep-tf32-c4": (95.0, 230.0), "compiled-triton-keep-c4": (100.0, 240.0)}
    run = write_device_run(tmp_path / "run", layer, steps=steps)
    assert cuda_options.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "CUDA_COMPILED_OPTIONS = {'feature_map': 'triton', 'causal_chunks': 4, 'tf32_scores': True}" in out
    assert "step DAPE1x3-Kerple T 2048: compiled-triton-keep-tf32-c4 230.0 ms, compiled-triton-keep-c4 240.0 ms" in out
    for row in DEVICE_ROWS[1:]:
        assert cuda_options.name_of(cuda_options.row_key(row)) == row


@pytest.mark.parametrize("case,expected,chosen", [
    ("slower at T 2048", "tf32_scores = True: off: not faster in the layer at B 8 × T 2048", ("triton", 4, False)),
    ("larger error", "feature_map = 'triton': off: its bf16 error exceeds the row without it at B 32 × T 512",
     ("conv", 1, False)),  # the device rows time chunks and TF32 only with the Triton feature map
    # chunks off: TF32 is judged on its pair without them
    ("slower step", "causal_chunks = 4: off: not faster in the DAPE1x3-Kerple step at T 512", ("triton", 1, True)),
    ("one shape", "tf32_scores = True: off: not measured at B 8 × T 2048", ("triton", 4, False)),
])
def test_cuda_options_keeps_an_option_off_where_the_run_does_not_show_it_faster_at_the_same_error(
        tmp_path, capsys, case, expected, chosen):
    """An option stays off where it is slower in a pair, its error exceeds the other's, or a shape lacks its pair;
    an option after it in turn, measured only beside it, is not measured in the configuration then chosen, and one
    measured without it too (TF32 without the chunks) is judged there."""
    import pandas as pd

    from benchmarks import cuda_options

    layer = dict(zip(DEVICE_ROWS, DEVICE_TIMES))
    errors, steps = {}, None
    if case == "slower at T 2048":
        layer["compiled-triton-keep-tf32-c4"] = (3.9, 12.5)
    elif case == "larger error":
        errors["compiled-triton-keep"] = 3e-2  # allowed: max(2e-2, 2 × 1e-2)
    elif case == "slower step":
        steps = {"compiled-triton-keep": (120.0, 300.0), "compiled-triton-keep-c4": (121.0, 240.0)}
    run = write_device_run(tmp_path / "run", layer, errors, steps)
    if case == "one shape":
        frame = pd.read_csv(run / "fused_layer.csv")
        gone = (frame.train_len == 2048) & frame.row.str.startswith("compiled-triton-keep-tf32-c4")
        frame[~gone].to_csv(run / "fused_layer.csv", index=False)
    assert cuda_options.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert expected in out
    printed = eval(out.split("CUDA_COMPILED_OPTIONS = ")[1].split("  (")[0])
    assert printed == dict(zip(("feature_map", "causal_chunks", "tf32_scores"), chosen))
    if case == "larger error":
        assert "causal_chunks = 4: off: not measured (no layer pair with feature_map=conv tf32_scores=False)" in out


def test_cuda_options_takes_the_fastest_passing_chunk_count_and_refuses_a_run_without_the_layer(tmp_path, capsys):
    from benchmarks import cuda_options

    layer = {"compiled-keep": (9.7, 29.6), "compiled-keep-c2": (8.0, 25.0), "compiled-keep-c4": (7.0, 22.0),
             "compiled-keep-c8": (7.5, 22.5)}  # c4: the least summed time
    run = write_device_run(tmp_path / "run", layer)
    assert cuda_options.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "'causal_chunks': 4" in out and "feature_map = 'triton': off: not measured (no layer pair with" in out
    with pytest.raises(SystemExit) as refused:
        cuda_options.main([str(tmp_path / "empty")])
    assert refused.value.code == 2 and "has no fused_layer.csv" in capsys.readouterr().err
    layer_csv = run / "fused_layer.csv"
    whole = layer_csv.read_text()
    for damaged, message in ((whole[: len(whole) // 2] + "\x00garbage,", "is damaged"),
                             (whole.replace("error_grad_k", "other"), "lacks the columns error_grad_k"),
                             ("", "is damaged")):
        layer_csv.write_text(damaged)
        with pytest.raises(SystemExit) as refused:
            cuda_options.main([str(run)])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert refused.value.code == 2 and str(layer_csv) in err and message in err, err


def test_the_device_script_states_the_options_its_rows_support_and_calibrates_with_them(tmp_path):
    """After the step timing, with the layer's rows written, the script runs benchmarks/cuda_options.py on them;
    the calibration then times its cases with the options it names (none named: without --path-options)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "fused_layer.csv").write_text("row\n")
    options = "feature_map=triton causal_chunks=4 tf32_scores=True"
    log, calls = device_script(tmp_path, STEPS="step calibrate feature", METHODS="Kerple", IMPLS="materialized",
                               OPTIONS=options)
    names = [c.split()[0] for c in calls if not c.startswith("-")]
    assert names[names.index("benchmarks/gpu_step.py") + 1:] == ["benchmarks/cuda_options.py",
                                                                  "benchmarks/cuda_options.py",
                                                                  "benchmarks/calibrate_gpu.py",
                                                                  "benchmarks/feature_map.py"]
    assert f"benchmarks/cuda_options.py {tmp_path / 'out'}" in calls
    calibration = next(c for c in calls if c.startswith("benchmarks/calibrate_gpu.py"))
    assert "--config configs/paper.yaml --sizes 125M" in calibration and "--max-cases 2" in calibration
    assert calibration.endswith(f"--path-options {options} --out {tmp_path / 'out' / 'gpu_calibration.csv'}")
    assert "calibration done" in log
    (tmp_path / "bare").mkdir()
    _, calls = device_script(tmp_path / "bare", STEPS="calibrate", OPTIONS="")
    assert "--path-options" not in next(c for c in calls if c.startswith("benchmarks/calibrate_gpu.py"))


def test_calibrate_gpu_takes_the_compiled_paths_options_it_is_given_and_refuses_others_by_name(monkeypatch):
    import importlib

    from benchmarks import calibrate_gpu

    import dape_core.implementations as implementations
    from dape_core.settings.attention import parse_compiled_options

    monkeypatch.setattr(implementations, "half_autocast", lambda device_type: True)  # as under bf16 autocast
    given = parse_compiled_options("causal_chunks=4 feature_map=triton")
    assert given == {"feature_map": "triton", "causal_chunks": 4, "tf32_scores": False}
    with calibrate_gpu.cuda_compiled_options(given):
        assert implementations.path_options("compiled", "cuda") == given
        assert implementations.path_options("compiled", "cpu") == {}
    assert implementations.path_options("compiled", "cuda") == dict(
        importlib.import_module("dape_core.settings.attention").CUDA_COMPILED_OPTIONS)
    with calibrate_gpu.cuda_compiled_options(None):
        assert implementations.path_options("compiled", "cuda") == dict(implementations.CUDA_COMPILED_OPTIONS)
    for text, message in (("feature_map=cudnn", "feature_map=cudnn is not allowed; allowed values: conv, triton"),
                          ("causal_chunks=0", "causal_chunks=0 is not allowed; allowed values: a whole number ≥ 1"),
                          ("tf32_scores=yes", "tf32_scores=yes is not allowed; allowed values: True, False"),
                          ("chunks=4", "'chunks=4' is not allowed; allowed values: each of feature_map, "
                                       "causal_chunks, tf32_scores at most once"),
                          ("causal_chunks=2 causal_chunks=4", "'causal_chunks=4' is not allowed")):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "calibrate_gpu.py"), "--device", "cpu",
                               "--path-options", text], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and f"--path-options: {message}" in done.stderr, done.stderr


def test_seeds_per_core_second_runs_the_workflows_commands_both_ways(tiny_corpus, tmp_path):
    """The default's NoPE job, 2 steps, each way: rows with start-up and step time apart, and the summary's ratio
    against a job per process."""
    from benchmarks import seeds_per_core_second as spcs

    plan = spcs.plan_of(spcs.REPO / "config.yaml")
    out = tmp_path / "rows.csv"
    rows = spcs.measure_jobs(plan, ["NoPE"], list(spcs.WAYS), 1, tiny_corpus, tmp_path, 2, out)
    assert [(r["method"], r["way"], r["steps"]) for r in rows] == [("NoPE", "process", 2), ("NoPE", "server", 2)]
    assert all(r["train_startup_s"] > 0 and r["step_ms"] > 0 and r["eval_wall_s"] > 0 for r in rows)
    assert len(pd.read_csv(out)) == 2
    table = spcs.summarise(rows)
    assert table.set_index("way").loc["process", "vs_process"] == 1.0
    train, evaluate = spcs.job_commands(plan, spcs.CENTRAL["NoPE"], 0, tiny_corpus, tmp_path)
    assert train[:4] == ["train", "--threads", "1", "--spec"] and '"seed":0' in train[4] and evaluate[0] == "evaluate"


def test_the_anatomy_steps_the_model_dape_train_trains_and_counts_its_gemm_flops(tiny_corpus, tmp_path):
    """The anatomy's step is `dape train`'s (3 steps of the default's DAPE1x3-Kerple job: the same parameters bit
    for bit), and the profiler's GEMM FLOPs of a NoPE step are the model's own: 3 × 2·N·(12·L·d² + V·d)."""
    from benchmarks import seeds_per_core_second as spcs
    from dape_core.cli import main
    from dape_core.config import train_spec
    from dape_core.model_file import load_model

    plan = spcs.plan_of(spcs.REPO / "config.yaml")
    model, step = spcs.training_step(plan, "DAPE1x3-Kerple", tiny_corpus, steps=3)
    for i in range(3):
        step(i)
    spec = train_spec(plan.lm_runs[spcs.CENTRAL["DAPE1x3-Kerple"]]["settings"], 0)
    assert main(["train", "--spec", spec.json(), "--steps", "3", "--threads", "1", "--no-progress", "--data-dir",
                 str(tiny_corpus), "--out-dir", str(tmp_path / "run")]) == 0
    trained, _ = load_model(tmp_path / "run" / "model.pt")
    mine = model.state_dict()
    assert all(torch.equal(mine[k], v) for k, v in trained.state_dict().items())

    row = spcs.step_anatomy(plan, "NoPE", tiny_corpus, steps=2, warmup=1, peak_gflops=1e9)
    cfg = model.cfg
    tokens = 16 * cfg.train_len  # the default's batch 16
    assert row["gemm_gflop_per_step"] * 1e9 == pytest.approx(
        3 * 2 * tokens * (12 * cfg.n_layer * cfg.d_model**2 + cfg.vocab_size * cfg.d_model), rel=1e-9)
    assert 0 < row["gemm_share"] < 1 and row["floor_ms"] == pytest.approx(row["gemm_gflop_per_step"] / 1e6)


def test_the_ceilings_put_a_seed_of_gemm_floor_steps_against_a_job_per_process():
    """A worked example: process seed 20 s; the server's start-up 0.5 s and evaluation 1.5 s; 100 steps whose GEMM
    floor is 40 ms (4 s) → ceiling 20 / (0.5 + 4 + 1.5) = 3.33…, without the evaluation 20 / 4.5."""
    from benchmarks import seeds_per_core_second as spcs

    jobs = pd.DataFrame([dict(method="NoPE", way="process", train_wall_s=15.0, train_startup_s=3.0, step_ms=100.0,
                              eval_wall_s=5.0, seed_wall_s=20.0),
                         dict(method="NoPE", way="server", train_wall_s=10.5, train_startup_s=0.5, step_ms=100.0,
                              eval_wall_s=1.5, seed_wall_s=12.0)])
    table = spcs.ceilings([dict(method="NoPE", floor_ms=40.0)], jobs, steps=100).iloc[0]
    assert table["ceiling"] == pytest.approx(20 / 6.0) and table["ceiling_no_eval"] == pytest.approx(20 / 4.5)
    assert table["measured"] == pytest.approx(20 / 12.0) and table["process_seed_s"] == 20.0
