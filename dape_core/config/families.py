"""Family expansion: a configuration's families crossed into runs (LM, fine-tune, timing, CHE) and checked.

:func:`build_plan` validates a configuration (the JSON schema, defaults filled in; then :mod:`dape_core.config.checks`),
crosses each family (``stage``, ``role``, ``axes`` in order, ``seeds``, ``set`` over ``defaults.<stage>``;
:mod:`~dape_core.config.grids`) into a :class:`Plan`'s runs and applies ``run_overrides``. A run listed by several
families is trained once; two families giving one name different settings are an error. Errors are
:class:`~dape_core.errors.ConfigError` naming the field and the allowed values.

A ``finetune`` family's runs are Hugging Face decoders (``dape finetune``) evaluated as every language model (``eval``
from ``defaults.lm.eval``); with a ``base`` block, its base model (``base`` over ``set``: a fresh ``base_config`` model
or a ``base_model`` directory, trained by the same stage) is one more run, whose output every run of its axes
fine-tunes, seed by seed. A run without a processor has the processor-only settings reset to the stage's defaults
(:meth:`~dape_core.settings.AttentionSettings.reset_processor_settings`), so runs that build the same model share a
name."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from dape_core.config.checks import (check_che_run, check_dataset, check_finetune_run, check_lm_run, check_timing_run,
                                     check_train_processes)
from dape_core.config.grids import expand_family, family_grids, merge_settings, plain_copy
from dape_core.config.names import (FINETUNE_NAME_SETTINGS, LM_NAME_SETTINGS, che_cell_name, finetune_run_name,
                                    lm_run_name, timing_job_name, timing_run_name)
from dape_core.config.options import group
from dape_core.config.plan import EVALUATED_STAGES, LM_STAGES, Plan
from dape_core.config.schema import SCHEMA_PATH, validate_schema
from dape_core.errors import ConfigError, require_choice
from dape_core.settings import AttentionSettings, field_names
from dape_core.settings.che import CHESettings
from dape_core.settings.finetune import FinetuneSettings
from dape_core.settings.model import GPTConfig
from dape_core.settings.timing import TIMED_SHAPE, TimingSettings


def _lm_settings() -> tuple[str, ...]:
    """The settings of an LM run that its training job reads (plus its dataset and tag)."""
    return ("dataset", "tag", *group("attention"), *group("shape"), *group("training"))


def _finetune_settings() -> tuple[str, ...]:
    """The settings a fine-tune run's job reads, its dataset, tag and ``base_run`` (the run it starts from, or None)."""
    return ("dataset", "tag", "base_run", *group("finetune_model"), *group("finetune_training"))


def build_plan(config: dict, *, check_schema: bool = True, schema_path: str | Path = SCHEMA_PATH) -> Plan:
    """Validate a configuration and expand its families into runs (the configuration is not modified)."""
    config = copy.deepcopy(config)
    if check_schema:
        validate_schema(config, schema_path)
    plan = Plan(config=config)
    for name, settings in config["datasets"].items():
        plan.datasets[name] = check_dataset(name, settings)
    defaults = config["defaults"]
    check_lm_run(defaults["lm"], "defaults.lm", plan.datasets, extrapolates=False)
    check_timing_run(defaults["timing"], "defaults.timing")
    check_che_run(defaults["che"], "defaults.che")
    for family, spec in config["families"].items():
        stage = spec["stage"]
        where = f"families.{family}"
        _check_family_keys(family, spec)
        grids = family_grids(spec)
        plan.families[family] = {**{k: v for k, v in spec.items() if k not in ("set", "axes", "grids", "seeds")},
                                 "axes": list(dict.fromkeys(axis for grid in grids for axis in grid["axes"])),
                                 "seeds": sorted({seed for grid in grids for seed in grid["seeds"]}), "runs": []}
        if stage == "finetune":
            _add_finetune_family(plan, family, spec, grids, where)
            continue
        for i, grid in enumerate(grids):
            grid_where = where if len(grids) == 1 else f"{where}.grids[{i}]"
            grid_spec = dict(spec, **grid)
            for settings in expand_family(grid_spec, defaults["lm" if stage in LM_STAGES else stage], grid_where):
                if stage in LM_STAGES:
                    _add_lm(plan, family, grid_spec, settings, grid_where)
                elif stage == "timing":
                    _add_timing(plan, family, settings, grid_where)
                else:
                    _add_che(plan, family, grid_spec, settings, grid_where)
    _apply_run_overrides(plan, config.get("run_overrides") or {})
    plan.timing_jobs = timing_jobs(plan.timing_runs, defaults["timing"])
    for run in [*plan.lm_runs.values(), *plan.finetune_runs.values()]:
        run["eval"]["eval_lens"] = sorted(set(run["eval"]["eval_lens"]))
        run["seeds"] = sorted(set(run["seeds"]))
    for cell in plan.che_cells.values():
        cell["seeds"] = sorted(set(cell["seeds"]))
    check_train_processes(plan)
    _check_design(plan)
    return plan


def _check_design(plan: Plan) -> None:
    """The fresh seeds of a design lie above every seed the families run (the pilot's)."""
    design = plan.config.get("design")
    if not design:
        return
    seeds = [seed for _, seed in plan.lm_jobs()] + [seed for _, seed in plan.che_jobs()]
    if seeds and design["fresh_seeds_from"] <= max(seeds):
        raise ConfigError(f"design.fresh_seeds_from: {design['fresh_seeds_from']} is not allowed; allowed values: an "
                          f"integer above every seed of the families (the pilot's; the largest is {max(seeds)})")
    if plan.finetune_runs:
        raise ConfigError("design: not allowed with a finetune family; allowed values: null (a fine-tune family's "
                          "seeds are its own), or a configuration without finetune families")


def finetune_defaults(defaults: dict) -> dict:
    """Every setting of a fine-tune run: ``defaults.finetune`` and the evaluation of ``defaults.lm.eval``."""
    return {**defaults["finetune"], "eval": copy.deepcopy(defaults["lm"]["eval"])}


def _check_family_keys(family: str, spec: dict) -> None:
    where = f"families.{family}"
    stage = spec["stage"]
    for key, stages in (("sweep", EVALUATED_STAGES), ("delta_p", EVALUATED_STAGES), ("attention_maps", LM_STAGES),
                        ("base", ("finetune",))):
        if spec.get(key) not in (None, False) and stage not in stages:
            raise ConfigError(f"{where}.{key}: not used by stage {stage!r}; allowed with stages: {', '.join(stages)}")


# ----------------------------------------------------------------------------------------------- LM runs
def normalise_evaluated(settings: dict, defaults: dict, cls=GPTConfig) -> dict:
    """An evaluated run's settings (LM, or fine-tune with ``cls`` FinetuneSettings): without a processor, the
    processor-only settings reset so such runs share a name; ΔP's window train_len unless given."""
    settings = cls.reset_processor_settings(settings, defaults)
    if settings["eval"].get("delta_p_window") is None:
        settings["eval"] = dict(settings["eval"], delta_p_window=settings["train_len"])
    return settings


def _add_lm(plan: Plan, family: str, spec: dict, settings: dict, where: str) -> None:
    defaults = plan.config["defaults"]["lm"]
    settings = normalise_evaluated(settings, defaults)
    stage = spec["stage"]
    if stage == "leakage":
        if settings["tril"]:
            raise ConfigError(f"{where}.tril: True is not allowed in a leakage family; allowed values: false "
                              "(each leakage run is paired with its tril twin automatically)")
        if settings["processor"] == "none":
            raise ConfigError(f"{where}.processor: 'none' is not allowed in a leakage family; allowed values: "
                              "dape_v1, dape_v2 (tril only acts on a processor's input)")
    check_lm_run(settings, where, plan.datasets, extrapolates=spec["extrapolates"])
    runs = [settings]
    if stage == "leakage":
        twin = dict(settings, tril=True)
        runs.append(twin)
        plan.leakage_pairs.setdefault(family, []).append(
            {"run": lm_run_name(settings, defaults), "twin": lm_run_name(twin, defaults)})
    for run_settings in runs:
        fields = {"settings": {k: run_settings[k] for k in _lm_settings()}, "eval": dict(run_settings["eval"]),
                  "attention_settings": dict(run_settings["attention"])}
        run = _register_evaluated(plan, plan.lm_runs, family, spec, lm_run_name(run_settings, defaults), fields,
                                  new={"attention_seeds": []})
        if spec["attention_maps"]:
            run["attention_seeds"] = sorted(set(run["attention_seeds"]) | set(spec["seeds"]))


def _register_evaluated(plan: Plan, table: dict, family: str, spec: dict, name: str, fields: dict, *,
                        new: dict | None = None) -> dict:
    """Register an evaluated run (LM or fine-tune) in ``table`` for ``family``, or join the same-named run of other
    families (equal ``fields``; evaluation lengths add up); its seeds become family members. Returns the run."""
    run = table.get(name)
    if run is None:
        run = table[name] = {**fields, **(new or {}), "seeds": [], "families": []}
    else:
        for key, value in fields.items():
            if key == "eval":
                value = {**value, "eval_lens": run["eval"]["eval_lens"]}
            _require_same(name, family, run, key, value)
        run["eval"]["eval_lens"] = run["eval"]["eval_lens"] + fields["eval"]["eval_lens"]
    if family not in run["families"]:
        run["families"].append(family)
    run["seeds"] = run["seeds"] + list(spec["seeds"])
    if name not in plan.families[family]["runs"]:
        plan.families[family]["runs"].append(name)
    for seed in spec["seeds"]:
        plan.lm_members.append({"family": family, "run": name, "seed": seed,
                                "eval_lens": sorted(set(fields["eval"]["eval_lens"]))})
    return run


def _require_same(name: str, family: str, run: dict, key: str, new: dict) -> None:
    old = run[key]
    diff = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if diff:
        details = "; ".join(f"{k}: {old.get(k)!r} vs {new.get(k)!r}" for k in diff)
        raise ConfigError(f"families.{family}: duplicate run name {name!r} with different settings "
                          f"(families {', '.join(run['families'])} give {details}); allowed values: equal settings "
                          "for a run shared by several families, or a distinct `tag` for each")


def _apply_run_overrides(plan: Plan, overrides: dict) -> None:
    """One run's non-name settings (lr, warm-up, …; a name setting would make another run), LM or fine-tune; a base
    run's override reaches its fine-tunes through its output."""
    runs = [*plan.lm_runs, *plan.finetune_runs]
    for name, update in overrides.items():
        require_choice("run_overrides", name, runs)
        where, is_lm = f"run_overrides.{name}", name in plan.lm_runs
        run = plan.lm_runs[name] if is_lm else plan.finetune_runs[name]
        keys, name_keys = ((_lm_settings(), LM_NAME_SETTINGS) if is_lm
                           else (_finetune_settings(), FINETUNE_NAME_SETTINGS))
        for key in update:
            require_choice(where, key, [k for k in keys if k not in name_keys])
        settings = dict(run["settings"], **update, eval=run["eval"])
        if is_lm:
            check_lm_run(dict(settings, attention=run["attention_settings"]), where, plan.datasets, extrapolates=False)
        else:
            check_finetune_run(settings, where, plan.datasets, extrapolates=False)
        run["settings"] = {k: settings[k] for k in keys}


# ----------------------------------------------------------------------------------------------- fine-tune runs
def _add_finetune_family(plan: Plan, family: str, spec: dict, grids: list[dict], where: str) -> None:
    """A finetune family: its base run (``base`` over ``set``, every family seed) if any, then its grids' runs, each
    from the base run's output of its seed."""
    defaults = finetune_defaults(plan.config["defaults"])
    base_run = None
    if spec.get("base") is not None:
        base = plain_copy(merge_settings(merge_settings(defaults, spec["set"], f"{where}.set", defaults), spec["base"],
                                         f"{where}.base", defaults))
        base_run = _add_finetune(plan, family, dict(spec, seeds=plan.families[family]["seeds"]), base, f"{where}.base",
                                 base_run=None)
    for i, grid in enumerate(grids):
        grid_where = where if len(grids) == 1 else f"{where}.grids[{i}]"
        grid_spec = dict(spec, **grid)
        for settings in expand_family(grid_spec, defaults, grid_where):
            _add_finetune(plan, family, grid_spec, settings, grid_where, base_run=base_run)


def _add_finetune(plan: Plan, family: str, spec: dict, settings: dict, where: str, *, base_run: str | None) -> str:
    """Check one fine-tune run and register it (shared by families as LM runs are); returns its name."""
    defaults = finetune_defaults(plan.config["defaults"])
    settings = normalise_evaluated(settings, defaults, FinetuneSettings)  # unpatched without one: its path too
    if base_run is not None:  # its job starts from the base run's model/ of the same seed
        settings.update(base_model=None, base_config=None)
        if settings["processor"] != "none" and plan.finetune_runs[base_run]["settings"]["processor"] != "none":
            raise ConfigError(f"{where}.processor: {settings['processor']!r} is not allowed on the family's base run "
                              f"{base_run!r}, which has a processor already; allowed values: none (or a base "
                              "without a processor)")
    settings["base_run"] = base_run
    check_finetune_run(settings, where, plan.datasets, extrapolates=spec["extrapolates"])
    name = finetune_run_name(settings, defaults)
    if name in plan.lm_runs:
        raise ConfigError(f"{where}: run name {name!r} is an LM run's too; allowed values: a distinct `tag`")
    fields = {"settings": {k: settings[k] for k in _finetune_settings()}, "eval": dict(settings["eval"])}
    _register_evaluated(plan, plan.finetune_runs, family, spec, name, fields)
    return name


def _add_timing(plan: Plan, family: str, settings: dict, where: str) -> None:
    defaults = plan.config["defaults"]["timing"]
    settings = TimingSettings.reset_processor_settings(settings, defaults)
    if settings["equal_tokens"] is not None:
        settings = dict(settings, batch_size=None)
    check_timing_run(settings, where)
    name = timing_run_name(settings, defaults)
    old = plan.timing_runs.setdefault(name, settings)
    if old != settings:
        _require_same(name, family, {"settings": old, "families": _families_listing(plan, name)}, "settings", settings)
    plan.timing_members.append({"family": family, "run": name})
    plan.families[family]["runs"].append(name)


def timing_jobs(timing_runs: dict[str, dict], defaults: dict) -> dict[str, dict]:
    """Timing runs grouped into jobs: runs differing only in attention settings and shape (``size``, ``n_layer``: what a
    cell compares, Table 7 App. H, §4.2) are timed in one job, interleaved in each block of workers. A job is named by
    its runs' shared settings and sizes (``forward-small-medium-B1``; ``-2``, ``-3``, … for groups differing elsewhere,
    in configuration order); the DAG runs it ``replicates`` times (time_lm) and merges them (merge_timing)."""
    per_method = {*field_names(AttentionSettings), *TIMED_SHAPE}
    groups: dict[str, dict] = {}
    for run, settings in timing_runs.items():
        shared = {k: v for k, v in settings.items() if k not in per_method}
        groups.setdefault(json.dumps(shared, sort_keys=True, default=str), {"settings": shared, "runs": []})[
            "runs"].append(run)
    jobs: dict[str, dict] = {}
    for job in groups.values():
        runs = [timing_runs[run] for run in job["runs"]]
        depths = {s["n_layer"] for s in runs}
        named = dict(job["settings"], size="-".join(dict.fromkeys(s["size"] for s in runs)),
                     n_layer=depths.pop() if len(depths) == 1 else defaults["n_layer"])
        base = timing_job_name(named, defaults)
        name, n = base, 1
        while name in jobs:
            n += 1
            name = f"{base}-{n}"
        jobs[name] = job
    return jobs


def _add_che(plan: Plan, family: str, spec: dict, settings: dict, where: str) -> None:
    defaults = plan.config["defaults"]["che"]
    settings = CHESettings.reset_processor_settings(settings, defaults)
    check_che_run(settings, where)
    name = che_cell_name(settings, defaults)
    cell = plan.che_cells.setdefault(name, {"settings": settings, "seeds": []})
    if cell["settings"] != settings:
        _require_same(name, family, {"settings": cell["settings"], "families": _families_listing(plan, name)},
                      "settings", settings)
    cell["seeds"] = cell["seeds"] + list(spec["seeds"])
    for seed in spec["seeds"]:
        plan.che_members.append({"family": family, "cell": name, "seed": seed})
    if name not in plan.families[family]["runs"]:
        plan.families[family]["runs"].append(name)


def _families_listing(plan: Plan, name: str) -> list[str]:
    return [f for f, meta in plan.families.items() if name in meta["runs"]]


