"""dape_core.config: the grid expansion (families → runs, names, sharing) and the configuration checks."""

from __future__ import annotations

import argparse
import copy
import shlex
from pathlib import Path

import pytest

from dape_core import config as grid
from dape_core.errors import ConfigError
from dape_core.methods import parse_method

REPO = Path(__file__).resolve().parents[1]
CONFIG_FILES = [REPO / "config.yaml", REPO / "configs" / "smoke.yaml", REPO / "configs" / "paper.yaml"]


def base_config(**families) -> dict:
    """A small valid configuration: one built-in dataset, the schema's defaults, the given families."""
    return {
        "datasets": {"code": {"source": "builtin-code", "vocab_size": 300}},
        "defaults": {"lm": {"size": "tiny", "train_len": 32, "steps": 10, "batch_size": 4,
                            "eval": {"eval_lens": [32, 64]}}},
        "families": families or {"baselines": {"axes": {"method": ["Kerple", "DAPE1x3-Kerple"]}}},
    }


def rejected(config: dict) -> str:
    with pytest.raises(ConfigError) as info:
        grid.build_plan(config)
    return str(info.value)


# ------------------------------------------------------------------------------------------------ expansion
def test_axes_are_crossed_and_names_are_deterministic():
    plan = grid.build_plan(base_config(every={"axes": {"encoding": ["alibi", "kerple"], "variant": [
        {"processor": "none"}, {"processor": "dape_v2", "kernel_size": 3}]}}))
    assert list(plan.lm_runs) == ["code-T32-alibi-none", "code-T32-alibi-dape_v2-k3-w32", "code-T32-kerple-none",
                                  "code-T32-kerple-dape_v2-k3-w32"]
    assert plan.lm_jobs() == [(name, 0) for name in plan.lm_runs]
    assert grid.build_plan(base_config(every={"axes": {"encoding": ["alibi", "kerple"], "variant": [
        {"processor": "none"}, {"processor": "dape_v2", "kernel_size": 3}]}})).lm_runs == plan.lm_runs


def test_method_labels_follow_the_paper():
    from dape_core.methods import method_label, parse_method

    assert parse_method("Kerple") == {"encoding": "kerple", "processor": "none", "kernel_size": 1, "tril": True}
    assert parse_method("DAPE-Kerple") == {"encoding": "kerple", "processor": "dape_v1", "kernel_size": 1,
                                           "tril": True}
    assert parse_method("DAPE1x5-FIRE") == {"encoding": "fire", "processor": "dape_v2", "kernel_size": 5,
                                            "tril": True}
    assert parse_method("DAPE1×3-NoPE")["kernel_size"] == 3
    for label in ("Kerple", "DAPE-ALiBi", "DAPE1x3-Kerple (no tril)", "DAPE1x7-FIRE", "XL"):
        assert method_label(**parse_method(label)) == label


def test_a_run_shared_by_families_is_trained_once_and_listed_in_each():
    plan = grid.build_plan(base_config(
        baselines={"seeds": [0, 1], "axes": {"method": ["Kerple", "DAPE1x3-Kerple"]}},
        kernel_sizes={"axes": {"method": ["DAPE1x3-Kerple", "DAPE1x5-Kerple"]}, "set": {"eval": {"eval_lens": [128]}}},
    ))
    shared = "code-T32-kerple-dape_v2-k3-w32"
    assert plan.lm_runs[shared]["seeds"] == [0, 1]
    assert plan.lm_runs[shared]["families"] == ["baselines", "kernel_sizes"]
    assert plan.lm_runs[shared]["eval"]["eval_lens"] == [32, 64, 128]  # union of the families' lengths
    assert len(plan.lm_jobs()) == 5
    members = [(m["family"], m["seed"], m["eval_lens"]) for m in plan.lm_members if m["run"] == shared]
    assert members == [("baselines", 0, [32, 64]), ("baselines", 1, [32, 64]), ("kernel_sizes", 0, [128])]


def test_settings_outside_the_name_differing_from_defaults_add_a_suffix_only_for_name_settings():
    plan = grid.build_plan(base_config(reduced={"set": {"steps": 5, "batch_size": 2, "lr": 0.01},
                                                "axes": {"method": ["Kerple"]}}))
    assert list(plan.lm_runs) == ["code-T32-kerple-none-B2-S5"]  # lr is not part of the name
    assert plan.lm_runs["code-T32-kerple-none-B2-S5"]["settings"]["lr"] == 0.01


def test_runs_without_a_processor_ignore_processor_settings():
    plan = grid.build_plan(base_config(a={"set": {"kernel_size": 3, "dape_width": 10},
                                          "axes": {"method": ["Kerple", "DAPE1x3-Kerple"]}},
                                       b={"axes": {"method": ["Kerple"]}}))
    assert "code-T32-kerple-none" in plan.lm_runs and len(plan.lm_runs) == 2


def test_every_stage_resets_the_settings_its_declaration_says_only_the_processor_reads():
    """Without a processor, the processor's form (kernel, width, tril, padding) is reset to the stage's defaults in
    LM, timing and CHE runs alike, so runs that build the same model share a name; a fine-tune, whose decoder stays
    unpatched without one, also its encoding and path. A timed method keeps its path: it is what is timed."""
    from dape_core.settings import AttentionSettings
    from dape_core.settings.finetune import FinetuneSettings

    assert AttentionSettings.processor_settings() == ("kernel_size", "dape_width", "tril", "padding")
    assert FinetuneSettings.processor_settings() == ("encoding", "kernel_size", "dape_width", "tril", "padding",
                                                     "attention_impl", "dape_dtype")
    form = {"dape_width": 8, "tril": False, "padding": "causal"}
    plan = grid.build_plan(base_config(
        lm={"set": form, "axes": {"method": ["Kerple"]}},
        time={"stage": "timing", "set": {**form, "attention_impl": "plain"}, "axes": {"method": ["Kerple"]}},
        che={"stage": "che", "set": {"dape_width": 8, "padding": "causal"}, "axes": {"method": ["Kerple"]}}))
    assert list(plan.lm_runs) == ["code-T32-kerple-none"]
    assert list(plan.timing_runs) == ["forward-small-kerple-none-B1-plain"]
    assert list(plan.che_cells) == ["even_pairs-kerple-none-lr0.0005"]
    assert {(s["dape_width"], s["padding"]) for s in (plan.timing_runs["forward-small-kerple-none-B1-plain"],
                                                     plan.che_cells["even_pairs-kerple-none-lr0.0005"]["settings"])
            } == {(32, "same")}
    ft = {"processor": "none", "encoding": "alibi", "kernel_size": 3, "attention_impl": "plain",
          "dape_dtype": "bfloat16", "recompute_scores": True}
    defaults = {**ft, "encoding": "nope", "kernel_size": 1, "attention_impl": "auto", "dape_dtype": "float32",
                "recompute_scores": None}
    assert FinetuneSettings.reset_processor_settings(ft, defaults) == {**defaults, "recompute_scores": True}
    assert FinetuneSettings.reset_processor_settings({**ft, "processor": "dape_v2"}, defaults) == {
        **ft, "processor": "dape_v2"}


def test_grids_share_the_family_set_and_may_replace_seeds():
    plan = grid.build_plan(base_config(baselines={"set": {"lr": 0.01}, "grids": [
        {"seeds": [0, 1], "axes": {"method": ["Kerple"]}},
        {"set": {"steps": 5}, "axes": {"method": ["RoPE"]}}]}))
    assert plan.lm_runs["code-T32-kerple-none"]["seeds"] == [0, 1]
    assert plan.lm_runs["code-T32-rope-none-S5"]["seeds"] == [0]
    assert {run["settings"]["lr"] for run in plan.lm_runs.values()} == {0.01}


def test_leakage_runs_get_their_tril_twin():
    plan = grid.build_plan(base_config(leakage={"stage": "leakage", "set": {"tril": False, "processor": "dape_v2",
                                                                            "kernel_size": 3},
                                                "axes": {"encoding": ["kerple"]}}))
    assert plan.leakage_pairs["leakage"] == [{"run": "code-T32-kerple-dape_v2-k3-w32-notril",
                                              "twin": "code-T32-kerple-dape_v2-k3-w32"}]


def test_run_overrides_change_one_run_without_renaming_it():
    config = base_config()
    config["run_overrides"] = {"code-T32-kerple-none": {"lr": 0.5}}
    plan = grid.build_plan(config)
    assert plan.lm_runs["code-T32-kerple-none"]["settings"]["lr"] == 0.5
    assert plan.lm_runs["code-T32-kerple-dape_v2-k3-w32"]["settings"]["lr"] != 0.5


def test_timing_and_che_families():
    config = base_config(
        time={"stage": "timing", "set": {"equal_tokens": 128, "seq_lens": [32, 64]}, "axes": {"method": ["Kerple"]}},
        che={"stage": "che", "seeds": [0, 1], "axes": {"task": ["even_pairs"], "lr": [0.001, 0.0003]}},
    )
    plan = grid.build_plan(config)
    assert list(plan.timing_runs) == ["forward-small-kerple-none-N128"]
    paths = grid.build_plan(base_config(time={"stage": "timing", "axes": {"attention_impl": ["auto", "fast", "plain"]}}))
    assert list(paths.timing_runs) == ["forward-small-kerple-none-B1", "forward-small-kerple-none-B1-fast",
                                       "forward-small-kerple-none-B1-plain"]
    assert plan.timing_runs["forward-small-kerple-none-N128"]["batch_size"] is None
    assert list(plan.che_cells) == ["even_pairs-kerple-none-lr0.001", "even_pairs-kerple-none-lr0.0003"]
    assert len(plan.che_jobs()) == 4


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_shipped_configurations_expand(path):
    plan = grid.build_plan(grid.load_yaml(path))
    assert plan.lm_runs and plan.timing_runs and plan.che_cells
    assert len(set(plan.lm_runs)) == len(plan.lm_runs)
    stages = {spec["stage"] for spec in plan.families.values()}
    assert stages == {"lm", "leakage", "timing", "che"} | ({"finetune"} if path.name == "smoke.yaml" else set())


def test_default_config_holds_every_family_and_the_central_comparison_at_its_documented_scale():
    """config.yaml is the design-stage configuration: its families, the pilot, cover every claim at 600 steps × 16
    with three seeds of the central comparison, and its design block spends the fresh seeds."""
    plan = grid.build_plan(grid.load_yaml(REPO / "config.yaml"))
    families = set(plan.families)
    assert {"baselines", "dape_every_encoding", "naive_dape", "kernel_sizes", "hidden_width", "equal_tokens",
            "model_size", "leakage", "attention_maps", "forward_time", "che"} <= families
    central = ["NoPE", "RoPE", "ALiBi", "Kerple", "DAPE-Kerple", "DAPE1x3-Kerple"]
    for label in central:
        method = {k: v for k, v in parse_method(label).items() if k != "tril"}
        runs = [name for name in plan.families["baselines"]["runs"]
                if {k: plan.lm_runs[name]["settings"][k] for k in method} == method
                and plan.lm_runs[name]["settings"]["dataset"] == "code"]
        assert runs, label
        run = plan.lm_runs[runs[0]]
        s = run["settings"]
        assert run["seeds"] == [0, 1, 2], label
        assert (s["size"], s["train_len"], s["batch_size"], s["steps"]) == ("small", 32, 16, 600), label
        assert max(run["eval"]["eval_lens"]) == 16 * s["train_len"], label
    assert plan.families["baselines"]["delta_p"] and plan.attention_jobs()
    design = plan.config["design"]
    assert design["budget_minutes"] > 0 and design["fresh_seeds_from"] > max(
        seed for run in plan.lm_runs.values() for seed in run["seeds"])


def test_the_earlier_default_grid_is_a_configuration_of_its_own():
    """configs/grid.yaml: every family on both datasets, the central comparison at 1200 steps × 32 with two seeds,
    most other runs with one, and no design block — the tables and figures of every cell, not verdicts."""
    plan = grid.build_plan(grid.load_yaml(REPO / "configs" / "grid.yaml"))
    assert set(plan.datasets) == {"code", "prose"} and not plan.config.get("design")
    assert {"step_time", "che", "leakage"} <= set(plan.families)
    central = [plan.lm_runs[name]["settings"] for name in plan.families["baselines"]["runs"]]
    assert {(s["train_len"], s["batch_size"], s["steps"]) for s in central} >= {(32, 32, 1200)}


def test_paper_config_uses_the_appendix_i_settings():
    plan = grid.build_plan(grid.load_yaml(REPO / "configs" / "paper.yaml"))
    runs = plan.lm_runs.values()
    assert {r["settings"]["train_len"] for r in runs} >= {128, 512, 1024}
    assert {(r["settings"]["size"], r["settings"]["lr"]) for r in runs} >= {("125M", 0.0006), ("350M", 0.0003)}
    assert all(r["settings"]["steps"] == 50000 and r["settings"]["batch_size"] * r["settings"]["grad_accum"]
               * r["settings"]["train_len"] >= 32 * 8 * 128 for r in runs)
    assert max(max(r["eval"]["eval_lens"]) for r in runs) == 8192
    assert {d["filter_value"] for d in plan.datasets.values()} == {"ArXiv", "Gutenberg (PG-19)"}
    assert plan.config["resources"]["train_lm"]["gpu"] == 1
    estimate = grid.estimate(plan)
    assert estimate["gpu_hours"] > 100 and estimate["jobs"]["train_lm"] == len(plan.lm_jobs())


def test_estimate_is_printed(capsys):
    from dape_core.config.__main__ import main

    assert main([str(REPO / "configs" / "paper.yaml")]) == 0
    out = capsys.readouterr().out
    assert "GPU-hours" in out and "baselines" in out


# ------------------------------------------------------------------------------------------------ CLI options
def _parse(module_name: str, options: str, *required: str) -> argparse.Namespace:
    import importlib

    parser = argparse.ArgumentParser()
    importlib.import_module(module_name).add_arguments(parser)
    return parser.parse_args([*shlex.split(options), *required])


def _parse_spec(module_name: str, spec: grid.JobSpec, *required: str) -> argparse.Namespace:
    """A job's spec read as `dape` reads it: the stage's options, their defaults set from the spec."""
    import importlib

    from dape_core.settings import fields

    parser = argparse.ArgumentParser()
    importlib.import_module(module_name).add_arguments(parser)
    fields.apply_spec(parser, spec.json())
    return parser.parse_args(list(required))


def _check_groups(args, groups: dict, settings: dict):
    for options in groups.values():
        assert options, "an empty option group"
        for key in options:
            assert getattr(args, key) == settings[key], (key, settings[key])


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_a_jobs_spec_reads_as_its_options_given_one_by_one(path):
    """What a rule hands its job (one JSON spec of its groups and seed) gives the command the same values, of the same
    types, as the groups' options on the command line (kept for hand use)."""
    from dape_core.settings import from_args
    from dape_core.settings.model import GPTConfig
    from dape_core.settings.training import TrainSettings

    plan = grid.build_plan(grid.load_yaml(path))
    for run in plan.lm_runs.values():
        groups = grid.train_options(run["settings"])
        by_spec = _parse_spec("dape_core.train", grid.JobSpec(*groups.values(), seed=3), "--data-dir", "d",
                              "--out-dir", "o")
        by_options = _parse("dape_core.train", " ".join(map(str, groups.values())) + " --seed 3", "--data-dir", "d",
                            "--out-dir", "o")
        assert vars(by_spec) == vars(by_options)
        for cls in (GPTConfig, TrainSettings):
            assert from_args(cls, by_spec) == from_args(cls, by_options)
            assert all(type(getattr(by_spec, k)) is type(getattr(by_options, k)) for k in vars(by_options))
        options = grid.eval_options(run["eval"])
        required = ("--checkpoint", "c", "--data-dir", "d", "--out", "o")
        assert vars(_parse_spec("dape_core.evaluate", grid.JobSpec(options), *required)) == vars(
            _parse("dape_core.evaluate", str(options), *required))
    for job in plan.timing_jobs.values():
        groups = grid.timing_job_options(job, plan.timing_runs)
        args = _parse_spec("dape_core.timing", grid.JobSpec(groups["timing"], methods=dict(groups["methods"])),
                           "--out", "o")
        assert args.methods == dict(groups["methods"])
        assert vars(args) | {"methods": None} == vars(_parse("dape_core.timing", str(groups["timing"]), "--out", "o")
                                                      ) | {"methods": None}
    for cell in plan.che_cells.values():
        groups = grid.che_options(cell["settings"])
        assert vars(_parse_spec("dape_core.che.runner", grid.JobSpec(*groups.values(), seed=1), "--out", "o")) == vars(
            _parse("dape_core.che.runner", " ".join(map(str, groups.values())) + " --seed 1", "--out", "o"))


@pytest.mark.parametrize("spec, message", [
    ('{"kernel_sise": 3}', "spec.kernel_sise: not a setting of this command; allowed values: activation_checkpointing"),
    ('{"kernel_size": "3"}', "spec.kernel_size: '3' is not allowed; allowed values: an integer"),
    ('{"kernel_size": 3.0}', "spec.kernel_size: 3.0 is not allowed; allowed values: an integer"),
    ('{"tril": 1}', "spec.tril: 1 is not allowed; allowed values: true, false"),
    ('{"eval_lens": [64]}', "spec.eval_lens: not a setting of this command"),  # an option of `dape evaluate`
    ('{"data_dir": "d"}', "spec.data_dir: not a setting of this command"),  # a path stays an option of the job
    ('[1, 2]', "spec: allowed values: a JSON object setting → value"),
    ('{"lr": ', "spec: not valid JSON"),
])
def test_a_spec_that_does_not_fit_its_command_names_the_setting(spec, message):
    import importlib

    from dape_core.settings import fields

    parser = argparse.ArgumentParser()
    importlib.import_module("dape_core.train").add_arguments(parser)
    with pytest.raises(ConfigError) as err:
        fields.apply_spec(parser, spec)
    assert str(err.value).startswith(message), str(err.value)


def test_a_spec_promotes_integers_to_declared_floats_and_keeps_unset_settings_unset():
    """``lr: 1`` in YAML is an integer; `--lr 1` parsed it to 1.0, and the spec gives the same float; None (an unset
    ``bool | None``) stays None; an option given beside the spec wins."""
    import importlib

    from dape_core.settings import fields

    parser = argparse.ArgumentParser()
    importlib.import_module("dape_core.train").add_arguments(parser)
    fields.apply_spec(parser, '{"lr": 1, "recompute_scores": null, "kernel_size": 3, "processor": "dape_v2"}')
    args = parser.parse_args(["--data-dir", "d", "--out-dir", "o", "--kernel-size", "5"])
    assert args.lr == 1.0 and type(args.lr) is float and args.recompute_scores is None
    assert args.kernel_size == 5 and args.processor == "dape_v2"


def test_a_target_of_no_run_stops_with_one_line_naming_it():
    """Run wildcards match any one path segment; a name the plan does not know stops where its job is built."""
    plan = grid.build_plan(grid.load_yaml("config.yaml"))
    with pytest.raises(ConfigError, match=r"^run: 'nonexistent' is not a run of this configuration; allowed values"):
        plan.evaluated_run("nonexistent")
    cell = next(iter(plan.che_cells))
    assert plan.che_cell(cell) is plan.che_cells[cell]
    with pytest.raises(ConfigError, match=r"^cell: 'nonexistent' is not a CHE cell of this configuration; allowed"):
        plan.che_cell("nonexistent")


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_every_setting_reaches_its_command_under_the_same_name(path):
    """The option groups a rule passes parse with each stage's own parser, to the same values."""
    plan = grid.build_plan(grid.load_yaml(path))
    for settings in plan.datasets.values():
        args = _parse("dape_core.data", str(grid.corpus_options(settings)), "--out-dir", "x")
        assert args.source == settings["source"] and list(args.data_files) == settings["data_files"]
    for run in plan.lm_runs.values():
        s = run["settings"]
        groups = grid.train_options(s)
        assert set(groups) == {"attention", "shape", "training"}
        args = _parse("dape_core.train", " ".join(map(str, groups.values())), "--data-dir", "d", "--out-dir", "o")
        _check_groups(args, groups, s)
        options = grid.eval_options(run["eval"])
        args = _parse("dape_core.evaluate", str(options), "--checkpoint", "c", "--data-dir", "d", "--out", "o")
        _check_groups(args, {"evaluation": options}, run["eval"])
        for length in run["attention_settings"]["heatmap_lens"]:
            options = grid.attention_map_options(run["eval"], run["attention_settings"], length)
            args = _parse("dape_core.evaluate", str(options), "--checkpoint", "c", "--data-dir", "d", "--out", "o")
            assert args.heatmap_len == length and args.eval_lens == [length]
            assert args.sink_sequences == run["attention_settings"]["sink_sequences"]
    for settings in plan.timing_runs.values():
        from dape_core.settings import from_args
        from dape_core.timing import TimingSettings

        groups = grid.timing_options(settings)
        args = _parse("dape_core.timing", " ".join(map(str, groups.values())), "--out", "o")
        timing = from_args(TimingSettings, args)  # equal_tokens replaces the batch size
        for options in groups.values():
            for key in options:
                assert getattr(timing, key) == settings[key], (key, settings[key])
    for cell in plan.che_cells.values():
        groups = grid.che_options(cell["settings"])
        args = _parse("dape_core.che.runner", " ".join(map(str, groups.values())), "--out", "o")
        _check_groups(args, groups, cell["settings"])


def test_option_groups_compare_as_mappings_and_format_as_options():
    """What Snakemake stores for a rerun decision is the mapping's repr; a shell command sees options."""
    options = grid.CliOptions(kernel_size=3, tril=False, eval_lens=[32, 64], n_layer=None, lr=0.001)
    assert repr(options) == repr({"kernel_size": 3, "tril": False, "eval_lens": [32, 64], "n_layer": None,
                                  "lr": 0.001})
    assert str(options) == f"{options}" == "--kernel-size 3 --no-tril --eval-lens 32 64 --lr 0.001"


def test_the_params_fingerprint_of_a_finished_run_stays_as_recorded():
    """Snakemake reruns a finished job whose recorded params differ (its params trigger): the attention group of a
    default DAPE1x3-Kerple run, as recorded by earlier versions (unset bool | None settings spelled "default"),
    is what the plan gives now, while its command line says nothing of the unset settings and --x / --no-x of set
    ones."""
    run = grid.build_plan(grid.load_yaml("configs/grid.yaml")).lm_runs["code-T128-kerple-dape_v2-k3-w32-B8-S600"]
    attention = grid.train_options(run["settings"])["attention"]
    assert repr(attention) == (
        "{'encoding': 'kerple', 'processor': 'dape_v2', 'kernel_size': 3, 'dape_width': 32, 'tril': True, "
        "'padding': 'same', 'encoding_shared': 'default', 'attention_impl': 'auto', 'dape_dtype': 'float32', "
        "'recompute_scores': 'default'}")
    assert attention["recompute_scores"] is None and "recompute" not in str(attention)
    assert str(grid.CliOptions(recompute_scores=False, encoding_shared=True)) == "--no-recompute-scores --encoding-shared"
    assert repr(grid.CliOptions(recompute_scores=False)) == "{'recompute_scores': 'false'}"


# ------------------------------------------------------------------------------------------------ schema
def test_family_stages_are_the_library_stages():
    defs = grid.load_yaml(grid.SCHEMA_PATH)["$defs"]
    assert defs["family"]["properties"]["stage"]["enum"] == list(grid.STAGES)


def test_schema_fills_defaults():
    config = grid.validate_schema(base_config())
    assert config["defaults"]["lm"]["padding"] == "same"
    assert config["defaults"]["che"]["train_max_len"] == 40
    assert config["families"]["baselines"]["seeds"] == [0]
    assert config["resources"]["train_lm"]["threads"] == 1


# ------------------------------------------------------------------------------------------------ errors
def _with(family: dict) -> dict:
    return base_config(bad=family)


@pytest.mark.parametrize("family, field, allowed", [
    ({"axes": {"encoding": ["sinusoidal"]}}, "encoding", "kerple"),
    ({"set": {"processor": "dape_v3"}, "axes": {}}, "processor", "dape_v2"),
    ({"stage": "che", "axes": {"task": ["sorting"]}}, "task", "even_pairs"),
    ({"set": {"processor": "dape_v2", "kernel_size": 2}}, "kernel_size", "odd"),
    ({"set": {"processor": "dape_v2", "kernel_size": 3, "padding": "valid"}}, "padding", "causal"),
    ({"set": {"train_len": 64}}, "eval_lens", "≥ train_len"),
    ({"set": {"steps": 0}}, "steps", "positive integer"),
    ({"set": {"batch_size": -4}}, "batch_size", "positive integer"),
    ({"stage": "che", "set": {"steps": 0}}, "steps", "positive integer"),
    ({"set": {"size": "huge"}}, "size", "125M"),
    ({"stage": "leakage", "set": {"processor": "dape_v2", "kernel_size": 3}}, "tril", "false"),
    ({"axes": {"method": ["DAPE2x3-Kerple"]}}, "method", "DAPE1x<k>"),
    ({"axes": {"learning_rate_typo": [0.1]}}, "learning_rate_typo", "a setting"),
])
def test_bad_settings_are_rejected_naming_field_and_allowed_values(family, field, allowed):
    message = rejected(_with(family))
    assert field in message and "allowed values" in message and allowed in message, message


def test_schema_errors_name_field_and_allowed_values():
    config = base_config()
    config["defaults"]["lm"]["encoding"] = "sinusoidal"
    message = rejected(config)
    assert "defaults.lm.encoding" in message and "allowed values: nope, rope" in message
    config = base_config()
    config["families"]["baselines"]["stage"] = "pretrain"
    assert "families.baselines.stage" in rejected(config)
    config = base_config()
    config["unknown_block"] = {}
    assert "unknown_block" in rejected(config)


def test_local_data_path_must_exist_but_hub_sources_are_not_checked(tmp_path):
    config = base_config()
    config["datasets"]["mine"] = {"source": "local", "data_files": [str(tmp_path / "missing.jsonl")]}
    message = rejected(config)
    assert "datasets.mine.data_files" in message and "does not exist" in message and "allowed values" in message
    (tmp_path / "present.jsonl").write_text('{"text": "x"}\n')
    config["datasets"]["mine"]["data_files"] = [str(tmp_path / "present.jsonl")]
    grid.build_plan(config)
    config["datasets"]["hub"] = {"source": "hub", "dataset": "org/name", "tokenizer": "file",
                                 "tokenizer_file": str(tmp_path / "not-downloaded-yet.json")}
    grid.build_plan(config)  # the Hub and its tokenizer are the job's business, not the parser's


def test_duplicate_run_names_with_different_settings_are_rejected():
    message = rejected(base_config(a={"axes": {"method": ["Kerple"]}},
                                   b={"set": {"lr": 0.1}, "axes": {"method": ["Kerple"]}}))
    assert "duplicate run name 'code-T32-kerple-none'" in message and "lr" in message
    assert "allowed values" in message and "tag" in message
    grid.build_plan(base_config(a={"axes": {"method": ["Kerple"]}},
                                b={"set": {"lr": 0.1, "tag": "fast"}, "axes": {"method": ["Kerple"]}}))


def test_run_overrides_may_not_rename_a_run_or_name_an_unknown_one():
    config = base_config()
    config["run_overrides"] = {"code-T32-kerple-none": {"batch_size": 2}}
    assert "batch_size" in rejected(config) and "allowed values" in rejected(config)
    config["run_overrides"] = {"no-such-run": {"lr": 0.1}}
    assert "no-such-run" in rejected(config)


def test_extrapolation_check_can_be_turned_off():
    plan = grid.build_plan(_with({"extrapolates": False, "set": {"train_len": 64}}))
    assert plan.lm_runs["code-T64-kerple-none"]["eval"]["eval_lens"] == [32, 64]


def test_the_configuration_is_not_modified():
    config = base_config()
    before = copy.deepcopy(config)
    grid.build_plan(config)
    assert config == before


def test_a_key_given_twice_in_a_yaml_mapping_is_refused_naming_it_and_both_lines(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("defaults:\n  lm:\n    steps: 20\n    lr: 0.003\n    steps: 40\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"twice.yaml: the key 'steps' is given twice in one mapping, on lines 3 "
                                          r"and 5; allowed: each key once"):
        grid.load_yaml(path)


@pytest.mark.parametrize("text, message", [
    ("defaults:\n  lm:\n    steps: 3\n    steps: 4\n", "the key 'steps' is given twice in one mapping, on lines 3 and 4"),
    ("defaults: [1,\n", "not YAML on line 2"),
    (None, "No such file or directory"),
])
def test_the_plan_command_and_dape_verify_refuse_an_unreadable_configuration_in_one_line(tmp_path, text, message):
    import subprocess
    import sys

    path = tmp_path / "broken.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    for command in ([sys.executable, "-m", "dape_core.config", str(path)],
                    [sys.executable, "-m", "dape_core.cli", "verify", "--results", str(tmp_path / "results"),
                     "--configfile", str(path)]):
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 2
        lines = (done.stdout + done.stderr).strip().splitlines()
        assert len(lines) == 1 and f"{path}: " in lines[0] and message in lines[0], lines


def test_a_key_beside_a_merge_overrides_it_and_every_shipped_yaml_reads_as_before(tmp_path):
    import yaml

    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {steps: 20, lr: 0.1}\nrun:\n  <<: *b\n  steps: 40\n", encoding="utf-8")
    assert grid.load_yaml(path)["run"] == {"steps": 40, "lr": 0.1}
    for shipped in [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml")), grid.SCHEMA_PATH]:
        assert grid.load_yaml(shipped) == (yaml.safe_load(shipped.read_text(encoding="utf-8")) or {}), shipped


def test_a_fine_tune_family_without_transformers_says_how_to_install_it(monkeypatch):
    import importlib.util

    plan = grid.build_plan(grid.load_yaml(REPO / "configs" / "smoke.yaml"))
    assert plan.finetune_runs
    grid.require_extras(plan)  # the test environment has the hf extra
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match=r"families.hf_finetune: the finetune stage needs transformers .*"
                                          r"pip install -e '.\[hf\]'"):
        grid.require_extras(plan)
    grid.require_extras(plan, job_environments=True)  # --use-conda: envs/hf.yaml brings it
    grid.require_extras(grid.build_plan(grid.load_yaml(REPO / "config.yaml")))  # no fine-tunes: nothing needed


def test_the_shipped_configurations_state_only_what_differs_and_resolved_prints_every_setting(capsys):
    """Each shipped configuration's `defaults` gives only settings whose value differs from the settings' own
    defaults (so a setting has one source), and `python -m dape_core.config CONFIG --resolved` prints every
    setting as the runs get it, marked stated or default."""
    import copy

    from dape_core.config.__main__ import main
    from dape_core.config.schema import load_yaml, validate_schema

    minimal = {"datasets": {"x": {"source": "builtin-code"}}, "families": {"f": {"axes": {"method": ["Kerple"]}}},
               "defaults": {"lm": {}, "timing": {}, "che": {}, "finetune": {"base_config": {"model_type": "llama"}}}}
    defaults = validate_schema(copy.deepcopy(minimal))["defaults"]
    root = Path(__file__).resolve().parents[1]
    for path in [root / "config.yaml", *sorted((root / "configs").glob("*.yaml"))]:
        def walk(stated, default, where):
            for key, value in stated.items():
                if isinstance(value, dict) and isinstance(default.get(key), dict) and key != "base_config":
                    walk(value, default[key], f"{where}.{key}")
                else:
                    assert key not in default or value != default[key], f"{path.name}: {where}.{key} restates {value!r}"
        for stage, block in load_yaml(path).get("defaults", {}).items():
            walk(block, defaults[stage], f"defaults.{stage}")
    assert main([str(root / "config.yaml"), "--resolved"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "defaults.lm.steps: 600  (stated)" in lines and "defaults.lm.kernel_size: 1  (default)" in lines
