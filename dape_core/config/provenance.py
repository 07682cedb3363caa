"""Which settings a result file was made from: the spec of the job that writes each file of the workflow.

Rules hand their jobs these specs (``workflow/rules/*.smk``); each job seals its spec's digest with what it writes
(``spec:``, :func:`dape_core.io.spec_digest`), so a reader (the aggregation, ``dape verify``) names a file made with
other settings than the plan gives its path (another configuration's run, cell or dataset of that name, or settings
since changed). Under ``results/``: ``lm/<run>/seed<seed>/`` (``eval.csv``, ``windows.csv``: rule evaluate_lm;
``attention/L<length>/…``: attention_maps; every other sealed file: train_lm), ``che/<cell>/seed<seed>.csv`` (che),
``timing/<job>/rep<k>[.repeats].csv`` (time_lm, one replicate), ``timing/<job>[.repeats].csv`` (merge_timing),
``data/<dataset>/meta.json`` (tokenize)."""

from __future__ import annotations

from pathlib import Path

from dape_core.config.options import (JobSpec, attention_map_options, che_options, corpus_options, eval_options,
                                      timing_job_options, train_options)
from dape_core.io import spec_digest

EVALUATION_FILES = ("eval.csv", "windows.csv")  # rule evaluate_lm's outputs
ATTENTION_FOLDER = "attention"  # rule attention_maps: attention/L<length>/
TIMING_SUFFIXES = (".repeats.csv", ".csv")  # rule time_lm's outputs, longest first


def train_spec(settings: dict, seed: int | str) -> JobSpec:
    """The spec of an LM run's training at ``seed`` (rule train_lm): its attention, shape and training settings."""
    return JobSpec(*train_options(settings).values(), seed=int(seed))


def eval_spec(evaluation: dict) -> JobSpec:
    """The spec of an LM run's evaluation (rule evaluate_lm): its evaluation settings."""
    return JobSpec(eval_options(evaluation))


def attention_map_spec(evaluation: dict, attention: dict, length: int | str) -> JobSpec:
    """The spec of an attention-map job at one heat-map length (rule attention_maps)."""
    return JobSpec(attention_map_options(evaluation, attention, int(length)))


def che_spec(settings: dict, seed: int | str) -> JobSpec:
    """The spec of a CHE cell's job at ``seed`` (rule che): its attention and CHE settings."""
    return JobSpec(*che_options(settings).values(), seed=int(seed))


def timing_spec(job: dict, timing_runs: dict[str, dict], replicate: int | str | None = None) -> JobSpec:
    """The spec of replicate k (``replicate``) of a timing job (rule time_lm): the runs' shared timing settings, each
    run's attention settings and shape (``methods``), k; without k, the merge's (merge_timing, ``replicates`` for k)."""
    groups = timing_job_options(job, timing_runs)
    if replicate is None:
        return JobSpec(groups["timing"], groups["replicates"], methods=dict(groups["methods"]))
    return JobSpec(groups["timing"], methods=dict(groups["methods"]), replicate=int(replicate))


def corpus_spec(dataset: dict) -> JobSpec:
    """The spec of a dataset's tokenization (rule tokenize)."""
    return JobSpec(corpus_options(dataset))


def _seed(name: str, suffix: str = "") -> str | None:
    """The seed of ``seed<k><suffix>``, or None."""
    if not (name.startswith("seed") and name.endswith(suffix)):
        return None
    digits = name[4:len(name) - len(suffix)]
    return digits if digits.isdigit() else None


def planned_spec(plan, path: str | Path) -> str | None:
    """The spec digest of the job writing ``path`` (under ``results/``) in ``plan`` (a :class:`~dape_core.config.Plan`,
    or its report spec, the same less the datasets); None where the plan says nothing of the file (another folder,
    another configuration's name, a file no job seals with its settings)."""
    def part(name: str) -> dict:
        found = plan.get(name) if isinstance(plan, dict) else getattr(plan, name, None)
        return found if isinstance(found, dict) else {}

    parts = Path(path).parts
    if "results" not in parts:
        return None
    rest = parts[len(parts) - parts[::-1].index("results"):]
    if len(rest) >= 3 and rest[0] == "lm":
        return expected_spec(part("lm_runs"), path)
    cells, jobs, datasets = part("che_cells"), part("timing_jobs"), part("datasets")
    if len(rest) == 3 and rest[0] == "che" and rest[1] in cells and _seed(rest[2], ".csv"):
        return spec_digest(che_spec(cells[rest[1]]["settings"], _seed(rest[2], ".csv")).settings)
    if len(rest) == 2 and rest[0] == "timing":
        job = next((rest[1][:-len(s)] for s in TIMING_SUFFIXES if rest[1].endswith(s)), None)
        if job in jobs:
            return spec_digest(timing_spec(jobs[job], part("timing_runs")).settings)
    if len(rest) == 3 and rest[0] == "timing" and rest[1] in jobs:
        stem = next((rest[2][:-len(s)] for s in TIMING_SUFFIXES if rest[2].endswith(s)), "")
        if stem.startswith("rep") and stem[3:].isdigit():
            return spec_digest(timing_spec(jobs[rest[1]], part("timing_runs"), stem[3:]).settings)
    if len(rest) == 3 and rest[0] == "data" and rest[2] == "meta.json" and rest[1] in datasets:
        return spec_digest(corpus_spec(datasets[rest[1]]).settings)
    return None


def expected_spec(lm_runs: dict[str, dict], path: str | Path) -> str | None:
    """The spec digest of the job writing ``path`` under ``…/lm/<run>/seed<seed>/`` for ``lm_runs`` (a Plan's or the
    report spec's: ``settings``, ``eval``, ``attention_settings`` for an attention-map file); None where the plan says
    nothing of the file (not its LM run's, a training's folders, an attention file without attention settings)."""
    parts = Path(path).parts
    if "lm" not in parts:
        return None
    rest = parts[len(parts) - parts[::-1].index("lm"):]
    if len(rest) < 3 or _seed(rest[1]) is None:
        return None
    run, seed, inner = rest[0], _seed(rest[1]), rest[2:]
    entry = lm_runs.get(run)
    if not isinstance(entry, dict) or "settings" not in entry or "eval" not in entry:
        return None
    if inner[0] == ATTENTION_FOLDER:
        attention = entry.get("attention_settings")
        if len(inner) < 3 or not inner[1].startswith("L") or not inner[1][1:].isdigit() or not attention:
            return None
        return spec_digest(attention_map_spec(entry["eval"], attention, inner[1][1:]).settings)
    if len(inner) != 1:  # a training's folders (checkpoints/, a fine-tune's model/): not sealed by a job's spec
        return None
    if inner[0] in EVALUATION_FILES:
        return spec_digest(eval_spec(entry["eval"]).settings)
    return spec_digest(train_spec(entry["settings"], seed).settings)


def lm_file(run: str, seed: int | str, name: str) -> str:
    """A language model's file: ``results/lm/<run>/seed<seed>/<name>`` (rules train_lm, finetune_lm, evaluate_lm)."""
    return f"results/lm/{run}/seed{seed}/{name}"


def attention_file(run: str, seed: int | str, length: int | str, name: str) -> str:
    """An attention-map job's file (rule attention_maps)."""
    return lm_file(run, seed, f"{ATTENTION_FOLDER}/L{length}/{name}")


def che_file(cell: str, seed: int | str) -> str:
    """A CHE cell's table at one seed (rule che)."""
    return f"results/che/{cell}/seed{seed}.csv"


def timing_file(job: str, suffix: str = "csv") -> str:
    """A timing job's table (``csv``) or its repeats (``repeats.csv``) (rule time_lm)."""
    return f"results/timing/{job}.{suffix}"


def planned_results(plan) -> dict[str, list[str]]:
    """Sealed results the plan's reports are made from, by the aggregated table reading them: ``lm_results.csv``
    (evaluations, summaries, models, meta.json), ``sink.csv`` (maps), ``timing.csv``, ``che_results.csv``."""
    lm = [lm_file(run, seed, name) for run, seed in plan.lm_jobs() for name in ("summary.json", *EVALUATION_FILES)]
    lm += [lm_file(run, seed, "model.pt") for run, seed in plan.train_jobs()]
    lm += sorted({f"results/data/{run['settings']['dataset']}/meta.json"
                  for run in (*plan.lm_runs.values(), *plan.finetune_runs.values())})
    return {
        "lm_results.csv": lm,
        "sink.csv": [attention_file(run, seed, length, name) for run, seed, length in plan.attention_jobs()
                     for name in ("sink.csv", "maps.npz")],
        "timing.csv": [timing_file(job, suffix) for job in plan.timing_jobs for suffix in ("csv", "repeats.csv")],
        "che_results.csv": [che_file(cell, seed) for cell, seed in plan.che_jobs()],
    }

