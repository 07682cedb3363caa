"""`dape finetune`: a Hugging Face decoder from a fresh configuration or a checkpoint directory, trained with or
without a DAPE processor; its resume after a kill; `dape evaluate` on its model directory; the finetune family of
the configuration system (offline, tiny Llama models built here)."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # never reach the Hub

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from dape_core import config as grid
from dape_core.cli import main
from dape_core.errors import ConfigError
from dape_core.finetune import FinetuneSettings, finetune
from dape_core.hf import load_causal_lm, processors
from dape_core.train import TrainSettings

REPO = Path(__file__).resolve().parents[1]
BASE_CONFIG = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32}
TRAIN = dict(train_len=32, batch_size=4, lr=3e-3, threads=1, log_every=1)


def train_settings(**changes) -> TrainSettings:
    return TrainSettings(**{**TRAIN, "steps": 8, "checkpoint_every": 4, **changes})


@pytest.fixture(scope="module")
def base(tiny_corpus, tmp_path_factory):
    """A tiny Llama trained from a fresh configuration: the base of the fine-tunes below."""
    out = tmp_path_factory.mktemp("base")
    summary = finetune(FinetuneSettings(base_config=BASE_CONFIG), train_settings(), tiny_corpus, out, progress=False)
    assert summary["status"] == "ok" and summary["method"] == "Llama (base)"
    return out / "model"


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(path / "model.safetensors")


# --- command-line errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    (["--processor", "dape_v3"], "processor: 'dape_v3' is not allowed; allowed values: none, dape_v1, dape_v2"),
    (["--processor", "dape_v2", "--kernel-size", "3", "--encoding", "rope"],
     "encoding: 'rope' is not allowed; allowed values: nope, alibi, kerple, fire"),
    (["--padding", "valid"], "padding: 'valid' is not allowed; allowed values: same, causal"),
    (["--precision", "fp8"], "precision: 'fp8' is not allowed; allowed values: fp32, bf16"),
    (["--base-config", '{"model_type": "gpt2"}'],
     "base_config.model_type: 'gpt2' is not allowed; allowed values: llama, mistral, qwen2"),
    (["--base-config", "[1, 2]"], "base_config: '[1, 2]' is not allowed; allowed values: a mapping with model_type"),
    (["--base-config", "{model_type: llama"], "base_config: '{model_type: llama' is not JSON"),
], ids=["processor", "encoding", "padding", "precision", "model_type", "not-a-mapping", "not-json"])
def test_bad_options_name_the_field_and_the_allowed_values(options, message, tmp_path, capsys):
    if "--base-config" not in options:
        options = [*options, "--base-config", json.dumps(BASE_CONFIG)]
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune", "--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "out"), *options])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_exactly_one_of_base_model_and_base_config(tmp_path, capsys):
    for options in ([], ["--base-model", str(tmp_path), "--base-config", json.dumps(BASE_CONFIG)]):
        with pytest.raises(SystemExit):
            main(["finetune", "--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "out"), *options])
        err = capsys.readouterr().err
        assert "base_model / base_config" in err and "allowed values: exactly one" in err


def test_a_checkpoint_must_bring_the_tokenizer_of_its_data(base, tiny_corpus, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    for name in ("config.json", "model.safetensors"):
        (other / name).write_bytes((base / name).read_bytes())
    with pytest.raises(ConfigError, match="has no tokenizer.json; allowed values"):
        finetune(FinetuneSettings(base_model=str(other)), train_settings(), tiny_corpus, tmp_path / "a", progress=False)
    tokenizer = json.loads((base / "tokenizer.json").read_text())
    tokenizer["added_tokens"][0]["content"] = "<|other|>"
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(ConfigError, match=r"data_dir: its tokens were made with another tokenizer.*--tokenizer file"):
        finetune(FinetuneSettings(base_model=str(other)), train_settings(), tiny_corpus, tmp_path / "b", progress=False)


# --- fine-tunes -------------------------------------------------------------------------------------------------

def test_a_plain_fine_tune_leaves_the_model_unpatched(base, tiny_corpus, tmp_path):
    summary = finetune(FinetuneSettings(base_model=str(base)), train_settings(steps=4), tiny_corpus, tmp_path,
                       progress=False)
    saved = tmp_path / "model"
    assert summary["status"] == "ok" and summary["method"] == "Llama fine-tuned"
    assert "dape" not in json.loads((saved / "config.json").read_text())
    model = load_causal_lm(saved)
    assert model.config._attn_implementation != "dape" and processors(model) == []
    assert not any("dape" in name for name in weights(saved))
    before, after = weights(base), weights(saved)
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)  # trained
    assert (saved / "tokenizer.json").read_bytes() == (base / "tokenizer.json").read_bytes()
    record = json.loads((saved / "finetune.json").read_text())
    assert record["model_config"]["processor"] == "none" and record["train_settings"]["steps"] == 4


def test_a_dape_fine_tune_adds_trained_processors_to_the_base(base, tiny_corpus, tmp_path):
    settings = FinetuneSettings(base_model=str(base), processor="dape_v2", kernel_size=3, encoding="kerple")
    summary = finetune(settings, train_settings(steps=4), tiny_corpus, tmp_path, progress=False)
    assert summary["method"] == "DAPE1x3-Llama+Kerple fine-tuned"
    model = load_causal_lm(tmp_path / "model")
    assert model.config._attn_implementation == "dape" and len(processors(model)) == 2
    assert model.config.dape["train_len"] == 32 and model.config.dape["kernel_size"] == 3
    # the processors started as the identity (second layer zero) and training moved them
    assert all(p.conv2.weight.abs().sum() > 0 for p in processors(model))
    with pytest.raises(ConfigError, match="processor: base_model already has DAPE processors; allowed values: none"):
        finetune(settings.__class__(base_model=str(tmp_path / "model"), processor="dape_v1"), train_settings(),
                 tiny_corpus, tmp_path / "again", progress=False)


def test_zero_steps_export_the_checkpoint_as_the_original_method(base, tiny_corpus, tmp_path):
    summary = finetune(FinetuneSettings(base_model=str(base)), train_settings(steps=0), tiny_corpus, tmp_path,
                       progress=False)
    assert summary["status"] == "ok" and summary["steps_done"] == 0 and summary["method"] == "Llama (base)"
    exported, original = weights(tmp_path / "model"), weights(base)
    assert exported.keys() == original.keys() and all(torch.equal(exported[k], original[k]) for k in original)
    record = json.loads((tmp_path / "model" / "finetune.json").read_text())
    assert record["method"] == "Llama (base)" and record["train_settings"]["steps"] == 0
    assert (tmp_path / "metrics.jsonl").read_text() == "" and not (tmp_path / "checkpoints").exists()
    # a trained fine-tune of the same checkpoint is labelled as one
    tuned = finetune(FinetuneSettings(base_model=str(base)), train_settings(steps=1), tiny_corpus, tmp_path / "t",
                     progress=False)
    assert tuned["method"] == "Llama fine-tuned" and tuned["steps_done"] == 1


@pytest.mark.parametrize("model, message", [
    (dict(base_config=BASE_CONFIG), "steps: 0 is not allowed with base_config; allowed values: ≥ 1, or 0 with a "
                                    "base_model directory and processor none"),
    (dict(processor="dape_v2", kernel_size=3), "steps: 0 is not allowed with processor dape_v2"),
])
def test_zero_steps_only_export_a_checkpoint(model, message, base, tiny_corpus, tmp_path):
    model = {"base_model": str(base), **model} if "base_config" not in model else model
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        finetune(FinetuneSettings(**model), train_settings(steps=0), tiny_corpus, tmp_path, progress=False)
    assert not (tmp_path / "model").exists()


def test_dape_train_refuses_zero_steps(tiny_corpus, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path), "--steps", "0", "--no-progress"])
    assert "steps: 0 is not allowed for `dape train`; allowed values: a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "model.pt").exists()


def _finetune_command(data, out, steps, every):
    return [sys.executable, "-m", "dape_core.cli", "finetune", "--data-dir", str(data), "--out-dir", str(out),
            "--base-config", json.dumps(BASE_CONFIG), "--processor", "dape_v2", "--kernel-size", "3",
            "--train-len", "32", "--batch-size", "4", "--lr", "0.003", "--threads", "1", "--steps", str(steps),
            "--checkpoint-every", str(every), "--log-every", "1", "--no-progress"]


@pytest.mark.slow
def test_a_killed_finetune_resumes_to_the_uninterrupted_result(tiny_corpus, tmp_path):
    steps, every = 150, 5
    killed = tmp_path / "killed"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(_finetune_command(tiny_corpus, killed, steps, every), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    checkpoint = killed / "checkpoints" / "last.pt"
    deadline = time.time() + 300
    while not checkpoint.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert checkpoint.exists(), proc.communicate()[0][-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (killed / "model").exists() and not (killed / "summary.json").exists()
    killed_at = torch.load(checkpoint, weights_only=False)["step"]
    assert 0 < killed_at < steps
    resumed = subprocess.run(_finetune_command(tiny_corpus, killed, steps, every), env=env, capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {checkpoint}" in resumed.stderr

    uninterrupted = tmp_path / "uninterrupted"
    assert main(_finetune_command(tiny_corpus, uninterrupted, steps, every)[3:]) == 0
    a, b = weights(killed / "model"), weights(uninterrupted / "model")
    assert a.keys() == b.keys() and any("dape_processor" in k for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a)
    curve = lambda p: [json.loads(line)["loss"] for line in (p / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert curve(killed) == curve(uninterrupted) and len(curve(killed)) == steps
    assert not checkpoint.exists()  # a finished run keeps no checkpoint


# --- evaluation -------------------------------------------------------------------------------------------------

def test_evaluate_reads_a_model_directory_beyond_max_position_embeddings(base, tiny_corpus, tmp_path):
    out = tmp_path / "eval.csv"
    options = ["--eval-lens", "32", "64", "128", "--window", "16", "--min-scored-tokens", "16", "--max-windows", "4",
               "--batch-size", "2", "--bootstrap", "0", "--threads", "1"]
    assert main(["evaluate", "--checkpoint", str(base), "--data-dir", str(tiny_corpus), *options, "--out", str(out),
                 "--windows-out", str(tmp_path / "windows.csv")]) == 0
    frame = pd.read_csv(out)
    assert list(frame["eval_len"]) == [32, 64, 128] and (frame["status"] == "ok").all()  # 128 > 32 positions
    assert (frame["method"] == "Llama (base)").all() and (frame["train_len"] == 32).all()
    assert frame["ppl"].between(1, 512 * 4).all()

    # the adapter scores exactly what the model's own forward gives: the 128-length windows by hand
    from dape_core.data import load_split
    from dape_core.evaluate import window_anchors

    split = load_split(tiny_corpus, "val")
    anchors = window_anchors(split.document_lengths, 128, 16, 4, 0)
    model = load_causal_lm(base).eval()
    losses = []
    for doc, end in anchors:
        tokens = torch.from_numpy(np.asarray(split.document(doc)[end - 129 : end], dtype=np.int64))[None]
        with torch.no_grad():
            logits = model(input_ids=tokens[:, :-1], use_cache=False).logits[:, -16:]
        losses.append(torch.nn.functional.cross_entropy(logits[0], tokens[0, -16:]).item())
    windows = pd.read_csv(tmp_path / "windows.csv")
    assert np.allclose(windows[windows["eval_len"] == 128]["loss"], losses, rtol=1e-5, atol=1e-6)

    with pytest.raises(ConfigError, match="sink_out / heatmap_out: not available"):
        from dape_core.cli import build_parser

        sys.argv = ["dape", "evaluate"]
        args = build_parser().parse_args(["evaluate", "--checkpoint", str(base), "--data-dir", str(tiny_corpus),
                                          "--out", str(out), "--sink-out", str(tmp_path / "sink.csv")])
        args._module.run(args)


# --- the finetune family --------------------------------------------------------------------------------------

def smoke_plan():
    return grid.build_plan(grid.load_yaml(REPO / "configs" / "smoke.yaml"))


def test_the_smoke_family_has_a_base_job_and_two_fine_tunes_of_it():
    plan = smoke_plan()
    (base_run, *tunes) = plan.families["hf_finetune"]["runs"]
    assert plan.finetune_runs[base_run]["settings"]["base_run"] is None
    assert plan.finetune_runs[base_run]["settings"]["base_config"]["model_type"] == "llama"
    assert [plan.finetune_runs[t]["settings"]["base_run"] for t in tunes] == [base_run, base_run]
    assert [plan.finetune_runs[t]["settings"]["processor"] for t in tunes] == ["none", "dape_v2"]
    assert plan.finetune_jobs() == [(base_run, 0), *[(t, 0) for t in tunes]]
    assert set(plan.finetune_jobs()) <= set(plan.lm_jobs()) and not set(plan.finetune_runs) & set(plan.lm_runs)
    assert plan.job_counts()["hf_finetune"] == {"finetune_lm": 3, "evaluate_lm": 3}
    lm_eval = plan.config["defaults"]["lm"]["eval"]["eval_lens"]
    assert all(plan.finetune_runs[r]["eval"]["eval_lens"] == lm_eval for r in plan.families["hf_finetune"]["runs"])
    assert plan.report_spec()["finetune_runs"].keys() == plan.finetune_runs.keys()


def test_the_plan_lists_the_family_jobs():
    result = subprocess.run([sys.executable, "-m", "dape_core.config", str(REPO / "configs" / "smoke.yaml")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("hf_finetune"))
    assert "(hf_finetune)" in line and "finetune" in line and "3 finetune_lm, 3 evaluate_lm" in line
    plan_line = next(line for line in result.stdout.splitlines() if line.startswith("plan: "))
    assert "3 finetune_lm" in plan_line and "fine-tunes ≈ " in plan_line
    details = [line for line in result.stdout.splitlines() if line.startswith("  llama d=32 L=2 ")]
    assert [line.split(" T=")[0].split("L=2 ")[1] for line in details] == [
        "Llama (base)", "Llama fine-tuned", "DAPE1x3-Llama fine-tuned D=32"]  # one line per fine-tune shape


@pytest.mark.parametrize("path", [REPO / "configs" / "smoke.yaml", REPO / "configs" / "hf.yaml"],
                         ids=lambda p: p.name)
def test_every_finetune_setting_reaches_the_command_under_the_same_name(path):
    plan = grid.build_plan(grid.load_yaml(path))
    assert plan.finetune_runs
    import argparse

    from dape_core import finetune as stage
    from dape_core.settings import from_args

    for name, run in plan.finetune_runs.items():
        s = run["settings"]
        groups = grid.finetune_options(s, "results/lm/base/seed0/model" if s["base_run"] else None)
        parser = argparse.ArgumentParser()
        stage.add_arguments(parser)
        options = shlex.split(" ".join(map(str, groups.values())))
        args = parser.parse_args([*options, "--data-dir", "d", "--out-dir", "o"])
        model = from_args(FinetuneSettings, args, base_config=stage.parse_base_config(args.base_config))
        training = from_args(TrainSettings, args)
        for key in groups["model"]:
            if key != "base_model":
                assert getattr(model, key) == s[key], (name, key)
        for key in groups["training"]:
            assert getattr(training, key) == s[key], (name, key)
        assert (model.base_model is not None) == (s["base_run"] is not None or s["base_model"] is not None)


def test_the_measurement_config_fine_tunes_a_fresh_llama_at_length_64_and_evaluates_to_16x():
    plan = grid.build_plan(grid.load_yaml(REPO / "configs" / "hf.yaml"))
    (family,) = plan.families_of_stage("finetune")
    base_run, *tunes = plan.families[family]["runs"]
    base = plan.finetune_runs[base_run]["settings"]
    assert base["base_config"]["model_type"] == "llama" and base["base_config"]["hidden_size"] == 128
    assert base["train_len"] == 64 and base["base_config"]["max_position_embeddings"] == 64
    assert sorted(plan.finetune_runs[t]["settings"]["processor"] for t in tunes) == ["dape_v2", "none"]
    assert all(plan.finetune_runs[t]["settings"]["train_len"] == 64 for t in tunes)
    assert plan.finetune_runs[base_run]["eval"]["eval_lens"] == [64, 128, 256, 512, 1024]
    assert not plan.lm_runs and not plan.timing_runs  # the family alone


def _family_config(**family) -> dict:
    return {"datasets": {"code": {"source": "builtin-code", "vocab_size": 300}},
            "defaults": {"lm": {"eval": {"eval_lens": [32, 64]}},
                         "finetune": {"train_len": 32, "base_config": BASE_CONFIG}},
            "families": {"ft": {"stage": "finetune", **family}}}


@pytest.mark.parametrize("family, message", [
    ({"set": {"base_config": None}}, "families.ft.base_model / base_config: neither given; allowed values"),
    ({"set": {"encoding": "rope", "processor": "dape_v2"}},
     "families.ft.encoding: 'rope' is not allowed; allowed values: nope, alibi"),
    ({"base": {"processor": "dape_v1"}, "axes": {"processor": ["dape_v2"]}},
     "families.ft.processor: 'dape_v2' is not allowed on the family's base run"),
    ({"set": {"base_config": {"model_type": "gpt2"}}}, "base_config.model_type: 'gpt2' is not allowed"),
    ({"set": {"base_config": None, "base_model": "/no/such/model"}},
     "families.ft.base_model: '/no/such/model' is not a directory; allowed values"),
    ({"base": {"steps": 0}}, "families.ft.base.steps: 0 is not allowed with base_config; allowed values: ≥ 1, or 0 "
                             "with a base_model directory and processor none"),
    ({"set": {"base_config": None, "base_model": str(REPO / "configs")}, "base": {"steps": 0, "processor": "dape_v1"},
      "axes": {"steps": [1]}}, "families.ft.base.steps: 0 is not allowed with processor dape_v1"),
    ({"set": {"steps": -1}}, "families.ft.steps: -1 is not allowed; allowed values: an integer ≥ 1"),
    ({"attention_maps": True}, "families.ft.attention_maps: not used by stage 'finetune'; allowed with stages: lm"),
    ({"set": {"train_len": 128}}, "eval_lens: 32 is shorter than train_len 128"),
])
def test_bad_family_settings_name_the_field_and_the_allowed_values(family, message):
    with pytest.raises(ConfigError) as info:
        grid.build_plan(_family_config(**family))
    assert message in str(info.value), str(info.value)


def test_run_overrides_change_one_fine_tune_without_renaming_it():
    family = {"base": {"steps": 7}, "axes": {"processor": [{"processor": "none"},
                                                           {"processor": "dape_v2", "kernel_size": 3}]}}
    plain = grid.build_plan(_family_config(**family))
    base_run, tune, dape_tune = plain.families["ft"]["runs"]
    config = _family_config(**family)
    config["run_overrides"] = {dape_tune: {"lr": 0.125, "warmup_ratio": 0.2}, base_run: {"weight_decay": 0.0}}
    plan = grid.build_plan(config)
    assert plan.families["ft"]["runs"] == [base_run, tune, dape_tune]
    assert plan.finetune_runs[dape_tune]["settings"] == {**plain.finetune_runs[dape_tune]["settings"],
                                                         "lr": 0.125, "warmup_ratio": 0.2}
    assert plan.finetune_runs[tune]["settings"] == plain.finetune_runs[tune]["settings"]
    assert plan.finetune_runs[base_run]["settings"]["weight_decay"] == 0.0
    options = grid.finetune_options(plan.finetune_runs[dape_tune]["settings"], "results/lm/b/seed0/model")
    assert "--lr 0.125" in str(options["training"]) and "--warmup-ratio 0.2" in str(options["training"])
    for update, message in [({"steps": 9}, f"run_overrides.{tune}: 'steps' is not allowed; allowed values: "),
                            ({"base_config": {"hidden_size": 8}}, "'base_config' is not allowed"),
                            ({"lr": -1.0}, f"run_overrides.{tune}.lr: -1.0 is not allowed")]:
        config["run_overrides"] = {tune: update}
        with pytest.raises(ConfigError) as info:
            grid.build_plan(config)
        assert message in str(info.value), str(info.value)


def test_base_is_refused_outside_a_finetune_family():
    config = _family_config()
    config["families"]["lm"] = {"base": {"steps": 3}, "axes": {"method": ["Kerple"]}}
    with pytest.raises(ConfigError, match="families.lm.base: not used by stage 'lm'; allowed with stages: finetune"):
        grid.build_plan(config)


def test_base_config_merges_key_by_key_and_names_tell_runs_apart():
    plan = grid.build_plan(_family_config(base={"base_config": {"hidden_size": 64}, "steps": 7}, axes={
        "variant": [{"processor": "dape_v1"}, {"processor": "dape_v2", "kernel_size": 3, "encoding": "fire"}]}))
    base_run, *tunes = plan.families["ft"]["runs"]
    assert plan.finetune_runs[base_run]["settings"]["base_config"] == {**BASE_CONFIG, "hidden_size": 64}
    assert base_run == "code-T32-llama-nope-none-S7"
    assert tunes == [f"{base_run}.ft-code-T32-nope-dape_v1-k1-w32", f"{base_run}.ft-code-T32-fire-dape_v2-k3-w32"]
    directory = grid.build_plan(_family_config(set={"base_config": None, "base_model": str(REPO / "configs")}))
    (name,) = directory.finetune_runs
    assert name == "code-T32-from_configs-nope-none"


@pytest.mark.slow
def test_a_checkpoint_family_evaluates_the_original_beside_its_fine_tunes(base, tmp_path):
    """A family that starts from a local checkpoint with ``base: {steps: 0}``: the DAG tokenizes with the model's
    own tokenizer, exports the checkpoint as it is, fine-tunes it with and without DAPE1x3 and evaluates all three
    with the same evaluation stage; the original is one more method."""
    import yaml

    from workflow_fixture import snakemake

    config = {
        "datasets": {"code": {"source": "builtin-code", "max_docs": 150, "tokenizer": "file",
                              "tokenizer_file": str(base / "tokenizer.json"), "val_fraction": 0.1}},
        "defaults": {"lm": {"eval": {"eval_lens": [32, 64], "window": 16, "min_scored_tokens": 16, "max_windows": 4,
                                     "batch_size": 2, "bootstrap": 0}},
                     "finetune": {"base_model": str(base), "train_len": 32, "batch_size": 4, "steps": 3,
                                  "lr": 0.003, "log_every": 1}},
        "families": {"ft": {"stage": "finetune", "role": "hf_finetune", "title": "from a checkpoint",
                            "paper": "§3", "base": {"steps": 0},
                            "axes": {"processor": [{"processor": "none"},
                                                   {"processor": "dape_v2", "kernel_size": 3}]}}},
    }
    plan = grid.build_plan(config)
    base_run, *tunes = plan.families["ft"]["runs"]
    assert plan.finetune_runs[base_run]["settings"]["steps"] == 0
    assert [plan.finetune_runs[t]["settings"]["base_run"] for t in tunes] == [base_run, base_run]
    figures = grid.estimate(plan)  # the export costs nothing and is labelled as the evaluation will label it
    assert [(s["method"], s["gpu_hours"] > 0) for s in figures["finetune_shapes"]] == [
        ("Llama (base)", False), ("Llama fine-tuned", True), ("DAPE1x3-Llama fine-tuned", True)]
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    targets = [f"results/lm/{run}/seed0/eval.csv" for run in (base_run, *tunes)]
    result = snakemake(tmp_path, configfile, "--cores", "2", *targets)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = pd.concat([pd.read_csv(tmp_path / target) for target in targets])
    assert list(rows["method"].unique()) == ["Llama (base)", "Llama fine-tuned", "DAPE1x3-Llama fine-tuned"]
    assert (rows["status"] == "ok").all() and sorted(rows["eval_len"].unique()) == [32, 64]
    exported = weights(tmp_path / "results" / "lm" / base_run / "seed0" / "model")
    assert all(torch.equal(exported[k], v) for k, v in weights(base).items())  # the original, untouched
    tuned = weights(tmp_path / "results" / "lm" / tunes[0] / "seed0" / "model")
    assert any(not torch.equal(tuned[k], v) for k, v in weights(base).items())  # trained from it

