"""The GPU-hour estimate counts the `dape finetune` jobs: a Hugging Face decoder's FLOPs per token follow the GPT's
formula (6·N_non-embedding + 6·V·d + attention + DAPE), checked here against models built for real; the configs with
fine-tune families report their hours; without transformers the fine-tunes are left out, and the line says so."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from dape_core import config as grid
from dape_core.config.estimate import (FLOPS, NO_TRANSFORMERS, estimate_details, finetune_flops,
                                       finetune_flops_per_token, finetune_model, finetune_shape, training_tokens)
from dape_core.model import GPT, GPTConfig

REPO = Path(__file__).resolve().parents[1]
TRAIN_LEN = 48
ATTENTION = dict(encoding="nope", processor="none", kernel_size=1, dape_width=32, tril=True, padding="same",
                 encoding_shared=None, attention_impl="auto", dape_dtype="float32")


def hand_formula(non_embedding: int, vocab: int, d_model: int, n_layer: int, heads: int, head_dim: int, seq_len: int,
                 processor: str = "none", channels: int = 0, width: int = 0, k: int = 1) -> float:
    """6·N + 6·V·d + 6·L·T·(heads·head_dim) + 6·L·T·(channels·D·k + D·heads·k), written out."""
    dape = 6 * n_layer * seq_len * (channels * width * k + width * heads * k) if processor != "none" else 0
    return 6 * non_embedding + 6 * vocab * d_model + 6 * n_layer * seq_len * heads * head_dim + dape


def real_hf_model(config: dict, attention: dict):
    """The model built for real on the CPU (weights allocated), with its processor if it has one."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from dape_core.hf import add_processor

    fields = dict(config)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(fields.pop("model_type"), **fields))
    if attention["processor"] != "none":
        add_processor(model, attention, train_len=TRAIN_LEN)
    return model


def counted_by_hand(model, embeddings: tuple[str, ...]) -> int:
    """Parameters whose names are not the embeddings' (tied weights appear once in named_parameters)."""
    return sum(p.numel() for name, p in model.named_parameters() if name not in embeddings)


HF_CASES = [
    # Llama with GQA and a head_dim that makes heads·head_dim (4·8 = 32) differ from hidden_size (64)
    (dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, head_dim=8, vocab_size=300), {}, 4 * 8, 0),
    (dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
          num_key_value_heads=2, vocab_size=300), dict(processor="dape_v2", kernel_size=3), 4 * 16, 4),
    (dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=4, vocab_size=300), dict(processor="dape_v2", kernel_size=5, encoding="kerple",
                                                        dape_width=16), 4 * 16, 8),
    # Qwen2: biases on q, k, v and tied embeddings
    (dict(model_type="qwen2", hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
          num_key_value_heads=2, tie_word_embeddings=True, vocab_size=500), {}, 6 * 8, 0),
    (dict(model_type="qwen2", hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
          num_key_value_heads=2, vocab_size=500), dict(processor="dape_v1", encoding="alibi"), 6 * 8, 12),
]


@pytest.mark.parametrize("config, method, attention_width, channels", HF_CASES,
                         ids=["llama-gqa-head_dim", "llama-dape1x3-nope", "llama-dape1x5-kerple", "qwen2-tied",
                              "qwen2-dape-alibi"])
def test_hf_flops_per_token_equal_the_formula_with_the_real_models_parameters(config, method, attention_width,
                                                                              channels):
    attention = {**ATTENTION, **method}
    model = real_hf_model(config, attention)
    assert not any(p.is_meta for p in model.parameters())
    n = counted_by_hand(model, ("model.embed_tokens.weight", "lm_head.weight"))
    heads, layers = config["num_attention_heads"], config["num_hidden_layers"]
    assert attention_width == heads * model.model.layers[0].self_attn.head_dim
    if attention["processor"] != "none":
        processor_parameters = sum(p.numel() for name, p in model.named_parameters() if ".dape_" in name)
        assert processor_parameters > 0  # counted in N, as the GPT counts its processors
    expected = hand_formula(n, config["vocab_size"], config["hidden_size"], layers, heads, attention_width // heads,
                            TRAIN_LEN, attention["processor"], channels, attention["dape_width"],
                            attention["kernel_size"])
    shape = finetune_shape(config, attention)
    assert (shape["non_embedding"], shape["n_layer"], shape["attention_width"]) == (n, layers, attention_width)
    assert finetune_flops_per_token(shape, attention, TRAIN_LEN) == pytest.approx(expected, rel=1e-12)


GPT_CASES = [
    (dict(size="tiny", encoding="rope"), 0),
    (dict(size="tiny", encoding="kerple", processor="dape_v2", kernel_size=3), 2 * 4),
    (dict(size="small", encoding="nope", processor="dape_v2", kernel_size=3, dape_width=16), 4),
    (dict(size="small", encoding="alibi", processor="dape_v1"), 2 * 4),
    (dict(size="tiny", encoding="fire", processor="dape_v2", kernel_size=5, tie_embeddings=True), 2 * 4),
]


@pytest.mark.parametrize("settings, channels", GPT_CASES, ids=[str(i) for i in range(len(GPT_CASES))])
def test_gpt_flops_per_token_is_the_formula_written_out(settings, channels):
    model = GPT(GPTConfig(vocab_size=300, train_len=64, **settings))
    cfg = model.cfg
    skip = {id(model.embed.weight), id(model.head.weight)}
    n = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    expected = hand_formula(n, 300, cfg.d_model, cfg.n_layer, cfg.n_head, cfg.d_model // cfg.n_head, 64,
                            cfg.processor, channels, cfg.dape_width, cfg.kernel_size)
    assert model.flops_per_token(64) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", ["hf.yaml", "smoke.yaml"])
def test_the_configs_with_finetune_families_count_their_jobs(name):
    plan = grid.build_plan(grid.load_yaml(REPO / "configs" / name))
    e = grid.estimate(plan)
    jobs = plan.finetune_jobs()
    assert len(jobs) == 3 and e["finetune_note"] is None
    assert sum(s["jobs"] for s in e["finetune_shapes"]) == len(jobs)
    assert e["finetune_gpu_hours"] > 0 and all(s["gpu_hours"] > 0 for s in e["finetune_shapes"])
    assert e["gpu_hours"] == pytest.approx(e["lm_gpu_hours"] + e["finetune_gpu_hours"])
    flops = sum(finetune_flops(plan, run) for run, _ in jobs)
    assert e["finetune_flops"] == pytest.approx(flops)
    rate = plan.config["estimate"]["gpu_tflops"] * 1e12 * plan.config["estimate"]["utilisation"]
    assert e["finetune_gpu_hours"] == pytest.approx(flops / rate / 3600)
    base = plan.config["defaults"]["finetune"]["base_config"]
    for run, _ in jobs:  # the fine-tunes of the family's base take the base's model and data vocabulary
        config, _ = finetune_model(plan, run)
        assert config == {**base, "vocab_size": plan.datasets["code"]["vocab_size"]}
    line = grid.estimate_line(plan, e)
    assert "3 finetune_lm" in line and "; fine-tunes ≈ " in line and "not included" in line
    assert "fine-tune" not in line.split("not included")[0].rsplit(";", 1)[1]  # the fine-tunes are counted
    details = [line for line in estimate_details(e) if line.startswith("  llama")]
    d, layers = base["hidden_size"], base["num_hidden_layers"]
    t, b = plan.config["defaults"]["finetune"]["train_len"], plan.config["defaults"]["finetune"]["batch_size"]
    assert len(details) == 3 and all(line.endswith(f"GPU-hours, {FLOPS}") for line in details)
    assert any(line.startswith(f"  llama d={d} L={layers} Llama (base) T={t} B={b} fp32: 1 jobs, ")
               for line in details)
    assert any(line.startswith(f"  llama d={d} L={layers} DAPE1x3-Llama fine-tuned D=32 T={t} B={b} fp32: 1 jobs, ")
               for line in details)


def test_hf_yaml_figures_match_the_formula_for_each_job():
    plan = grid.build_plan(grid.load_yaml(REPO / "configs" / "hf.yaml"))
    e = grid.estimate(plan)
    vocab = plan.datasets["code"]["vocab_size"]
    by_method = {s["method"]: s for s in e["finetune_shapes"]}
    assert set(by_method) == {"Llama (base)", "Llama fine-tuned", "DAPE1x3-Llama fine-tuned"}
    rate = 312e12 * 0.3
    for name, _ in plan.finetune_jobs():
        settings = plan.finetune_runs[name]["settings"]
        config, attention = finetune_model(plan, name)
        model = real_hf_model(config, attention)
        n = counted_by_hand(model, ("model.embed_tokens.weight", "lm_head.weight"))
        per_token = hand_formula(n, vocab, 128, 2, 4, 32, settings["train_len"], attention["processor"], 4,
                                 attention["dape_width"], attention["kernel_size"])
        hours = per_token * training_tokens(settings) / rate / 3600
        method = "Llama (base)" if settings["base_run"] is None else (
            "Llama fine-tuned" if settings["processor"] == "none" else "DAPE1x3-Llama fine-tuned")
        assert by_method[method]["gpu_hours"] == pytest.approx(hours)


def test_a_run_of_zero_steps_has_zero_hours():
    plan = grid.build_plan(grid.load_yaml(REPO / "configs" / "hf.yaml"))
    before = grid.estimate(plan)
    plan = copy.deepcopy(plan)
    base = next(name for name, run in plan.finetune_runs.items() if run["settings"]["base_run"] is None)
    plan.finetune_runs[base]["settings"]["steps"] = 0  # a base that only exports its checkpoint
    e = grid.estimate(plan)
    hours = {s["method"]: s["gpu_hours"] for s in e["finetune_shapes"]}
    assert hours["Llama (base)"] == 0 and finetune_flops(plan, base) == 0
    old = {s["method"]: s["gpu_hours"] for s in before["finetune_shapes"]}
    assert old["DAPE1x3-Llama fine-tuned"] > 0 and old["Llama (base)"] > 0
    assert hours["DAPE1x3-Llama fine-tuned"] == pytest.approx(old["DAPE1x3-Llama fine-tuned"])
    assert e["gpu_hours"] == pytest.approx(before["gpu_hours"] - old["Llama (base)"])


def test_without_transformers_the_finetunes_are_left_out_and_the_line_says_so(monkeypatch):
    plan = grid.build_plan(grid.load_yaml(REPO / "configs" / "smoke.yaml"))
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    e = grid.estimate(plan)
    assert e["finetune_note"] == NO_TRANSFORMERS and e["finetune_shapes"] == []
    assert e["finetune_gpu_hours"] == 0 and e["gpu_hours"] == e["lm_gpu_hours"] > 0
    assert e["jobs"]["finetune_lm"] == 3
    line = grid.estimate_line(plan, e)
    assert "fine-tune jobs not counted: transformers not installed" in line and "fine-tunes ≈" not in line


def base_model_config(directory: Path, vocab_size: int = 300) -> dict:
    """One run fine-tuning the model of ``directory`` without adding a processor."""
    return {
        "datasets": {"code": {"source": "builtin-code", "vocab_size": vocab_size}},
        "defaults": {"finetune": {"dataset": "code", "base_model": str(directory), "train_len": 32, "steps": 10,
                                  "batch_size": 4},
                     "lm": {"eval": {"eval_lens": [32, 64]}}},
        "families": {"ft": {"stage": "finetune", "axes": {"processor": [{"processor": "none"}]}}},
    }


def test_a_base_model_directory_gives_its_config_its_larger_vocabulary_and_its_processor(tmp_path):
    from dape_core.hf import add_processor, build_causal_lm, save_causal_lm

    spec = dict(model_type="llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=700)
    model = build_causal_lm(spec, seed=0)
    save_causal_lm(model, tmp_path / "plain")
    add_processor(model, {**ATTENTION, "processor": "dape_v2", "kernel_size": 3, "encoding": "kerple"}, train_len=32)
    save_causal_lm(model, tmp_path / "patched")

    plain = grid.build_plan(base_model_config(tmp_path / "plain"))
    (name, _), = plain.finetune_jobs()
    config, attention = finetune_model(plain, name)
    assert config["vocab_size"] == 700 and attention["processor"] == "none"  # the model's 700 > the data's 300
    e = grid.estimate(plain)
    (shape,) = e["finetune_shapes"]
    assert (shape["vocab_size"], shape["method"], shape["hidden_size"]) == (700, "Llama fine-tuned", 32)
    n = counted_by_hand(build_causal_lm(spec), ("model.embed_tokens.weight", "lm_head.weight"))
    per_token = hand_formula(n, 700, 32, 2, 4, 8, 32)
    assert e["finetune_flops"] == pytest.approx(per_token * 10 * 4 * 32)

    assert finetune_model(grid.build_plan(base_model_config(tmp_path / "plain", 1000)), name)[0]["vocab_size"] == 1000

    patched = grid.build_plan(base_model_config(tmp_path / "patched"))
    (name, _), = patched.finetune_jobs()
    _, attention = finetune_model(patched, name)
    assert (attention["processor"], attention["kernel_size"], attention["encoding"]) == ("dape_v2", 3, "kerple")
    (shape,) = grid.estimate(patched)["finetune_shapes"]
    assert shape["method"] == "DAPE1x3-Llama+Kerple fine-tuned"
    n_patched = counted_by_hand(model, ("model.embed_tokens.weight", "lm_head.weight"))
    per_token = hand_formula(n_patched, 700, 32, 2, 4, 8, 32, "dape_v2", 2 * 4, 32, 3)
    assert grid.estimate(patched)["finetune_flops"] == pytest.approx(per_token * 10 * 4 * 32)
