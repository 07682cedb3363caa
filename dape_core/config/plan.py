"""The plan: a configuration expanded into runs, jobs and memberships — everything the DAG and the report need —
with the queries the workflow asks of it and the report spec it writes (``results/plan.json``).
:func:`dape_core.config.families.build_plan` makes it."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from dape_core import io
from dape_core.errors import ConfigError

STAGES = ("lm", "leakage", "timing", "che", "finetune")
LM_STAGES = ("lm", "leakage")
EVALUATED_STAGES = (*LM_STAGES, "finetune")  # stages whose runs `dape evaluate` scores (perplexity tables)
RULES = ("tokenize", "train_lm", "evaluate_lm", "attention_maps", "time_lm", "che", "finetune_lm")  # with resources


@dataclass
class Plan:
    """Everything the DAG and the report need, expanded from a configuration."""

    config: dict
    datasets: dict[str, dict] = field(default_factory=dict)
    lm_runs: dict[str, dict] = field(default_factory=dict)  # name → settings, eval, seeds, attention_seeds, families
    finetune_runs: dict[str, dict] = field(default_factory=dict)  # name → settings, eval, seeds, families
    lm_members: list[dict] = field(default_factory=list)  # {"family", "run", "seed", "eval_lens"} (both kinds)
    leakage_pairs: dict[str, list[dict]] = field(default_factory=dict)  # family → [{"run", "twin"}]
    timing_runs: dict[str, dict] = field(default_factory=dict)
    timing_members: list[dict] = field(default_factory=list)  # {"family", "run"}
    # timing job → {"settings": what its runs share, "runs": the methods timed together, interleaved}
    timing_jobs: dict[str, dict] = field(default_factory=dict)
    che_cells: dict[str, dict] = field(default_factory=dict)  # name → {"settings", "seeds"}
    che_members: list[dict] = field(default_factory=list)  # {"family", "cell", "seed"}
    families: dict[str, dict] = field(default_factory=dict)  # name → family spec plus its run names
    # LM run → its modelled memory on one GPU (dape_core.memory.TrainingMemory), with resources.train_lm.gpu_mem_gb;
    # filled by dape_core.config.memory_plan.fit_micro_batches (torch), never while the workflow is parsed
    memory: dict[str, object] = field(default_factory=dict)

    def micro_batch_size(self, run: str) -> int | None:
        """The micro-batch the memory model chose for an LM run (None: not modelled, or no gpu_mem_gb)."""
        return self.memory[run].micro_batch if run in self.memory else None

    # ---- jobs
    def lm_jobs(self) -> list[tuple[str, int]]:
        """(run, seed) of every evaluated language model: trained by `dape train` or by `dape finetune`."""
        return self.train_jobs() + self.finetune_jobs()

    def train_jobs(self) -> list[tuple[str, int]]:
        return [(name, seed) for name, run in self.lm_runs.items() for seed in run["seeds"]]

    def finetune_jobs(self) -> list[tuple[str, int]]:
        return [(name, seed) for name, run in self.finetune_runs.items() for seed in run["seeds"]]

    def evaluated_run(self, name: str) -> dict:
        """An LM or fine-tune run (``settings``, ``eval``, ``seeds``, ``families``); ConfigError if unknown."""
        if name in self.lm_runs:
            return self.lm_runs[name]
        if name in self.finetune_runs:
            return self.finetune_runs[name]
        raise ConfigError(f"run: {name!r} is not a run of this configuration; allowed values: the {len(self.lm_runs)} "
                          f"LM and {len(self.finetune_runs)} fine-tune runs of the plan (results/plan.json lists them)")

    def che_cell(self, name: str) -> dict:
        """A CHE cell (``settings`` and ``seeds``); a name the plan does not know is a ConfigError naming it."""
        if name in self.che_cells:
            return self.che_cells[name]
        raise ConfigError(f"cell: {name!r} is not a CHE cell of this configuration; allowed values: the "
                          f"{len(self.che_cells)} cells of the plan (results/plan.json lists them)")

    def attention_jobs(self) -> list[tuple[str, int, int]]:
        """(run, seed, heat-map length) of the runs of families with attention_maps."""
        return [(name, seed, length) for name, run in self.lm_runs.items() for seed in run["attention_seeds"]
                for length in run["attention_settings"]["heatmap_lens"]]

    def che_jobs(self) -> list[tuple[str, int]]:
        return [(name, seed) for name, cell in self.che_cells.items() for seed in cell["seeds"]]

    def families_of_stage(self, *stages: str) -> list[str]:
        return [name for name, fam in self.families.items() if fam["stage"] in stages]

    def resources(self, rule: str, size: str | None = None) -> dict:
        """A rule's resources; for train_lm, those of a run of model ``size`` (``resources.train_lm.sizes``)."""
        values = dict(self.config["resources"][rule])
        return {**values, **values.pop("sizes", {}).get(size, {})}

    def with_design(self, fresh: dict[str, list[int]], maps: dict[str, list[int]]) -> "Plan":
        """This plan with a design's fresh seeds beside the pilot's, in every family listing the run or cell (at its
        evaluation lengths); ``fresh``: run or cell → seeds (:func:`dape_core.report.design.choose`). Attention maps
        only at the seeds ``maps`` gives a run with maps (a chosen maps claim's seeds: no other claim reads them)."""
        plan = copy.deepcopy(self)
        for unit, seeds in fresh.items():
            if unit in plan.lm_runs:
                run = plan.lm_runs[unit]
                run["seeds"] = sorted({*run["seeds"], *seeds})
                if run["attention_seeds"] and maps.get(unit):
                    run["attention_seeds"] = sorted({*run["attention_seeds"], *maps[unit]})
                lens: dict[str, set] = {}
                for m in self.lm_members:
                    if m["run"] == unit:
                        lens.setdefault(m["family"], set()).update(m["eval_lens"])
                plan.lm_members += [{"family": family, "run": unit, "seed": seed, "eval_lens": sorted(lengths)}
                                    for family, lengths in lens.items() for seed in seeds]
            elif unit in plan.che_cells:
                cell = plan.che_cells[unit]
                cell["seeds"] = sorted({*cell["seeds"], *seeds})
                families = dict.fromkeys(m["family"] for m in self.che_members if m["cell"] == unit)
                plan.che_members += [{"family": family, "cell": unit, "seed": seed}
                                     for family in families for seed in seeds]
            else:
                raise ConfigError(f"design: {unit!r} is neither an LM run nor a CHE cell of this configuration; "
                                  "allowed values: the plan's runs and cells (rerun the design rule)")
        return plan

    def report_spec(self) -> dict:
        """What the report stage needs (results/plan.json): families with their runs, memberships, run settings."""
        lm_runs = {name: {"settings": run["settings"], "eval": run["eval"],
                          "attention_settings": run["attention_settings"]} for name, run in self.lm_runs.items()}
        finetune_runs = {name: {"settings": run["settings"], "eval": run["eval"]}
                         for name, run in self.finetune_runs.items()}
        # the settings of the CHE cells and timing jobs (and the timing runs' attention): what each of their files
        # was made with, checked where the report reads it (dape_core.config.provenance.planned_spec)
        che_cells = {name: {"settings": cell["settings"]} for name, cell in self.che_cells.items()}
        return {"families": self.families, "lm_runs": lm_runs, "finetune_runs": finetune_runs,
                "lm_members": self.lm_members,
                "leakage_pairs": self.leakage_pairs, "timing_members": self.timing_members,
                "che_members": self.che_members, "che_cells": che_cells, "timing_jobs": self.timing_jobs,
                "timing_runs": self.timing_runs}

    def job_counts(self) -> dict[str, dict[str, int]]:
        """Family → jobs of each kind it lists (a job shared by families counts in each)."""
        counts: dict[str, dict[str, int]] = {}
        for name, fam in self.families.items():
            pairs = {(m["run"], m["seed"]) for m in self.lm_members if m["family"] == name}  # LM and fine-tune jobs
            if fam["stage"] in LM_STAGES:
                attention = sum(len(self.lm_runs[run]["attention_settings"]["heatmap_lens"]) for run, _ in pairs
                                ) if fam["attention_maps"] else 0
                counts[name] = {"train_lm": len(pairs), "evaluate_lm": len(pairs), "attention_maps": attention}
            elif fam["stage"] == "finetune":
                counts[name] = {"finetune_lm": len(pairs), "evaluate_lm": len(pairs)}
            elif fam["stage"] == "timing":
                runs = {m["run"] for m in self.timing_members if m["family"] == name}
                counts[name] = {"time_lm": sum(int(job["settings"]["replicates"]) for job in self.timing_jobs.values()
                                               if runs & set(job["runs"]))}
            else:
                counts[name] = {"che": sum(1 for m in self.che_members if m["family"] == name)}
        return counts


def write_report_spec(path: str | Path, spec: dict, log: str | Path | None = None) -> None:
    """Write the report spec (``Plan.report_spec``) atomically; one summary line goes to ``log``."""
    io.write_json(path, spec, seal=True)
    if log is not None:
        io.write_text(log, f"{len(spec['families'])} families, {len(spec['lm_runs'])} LM runs → {path}\n")
