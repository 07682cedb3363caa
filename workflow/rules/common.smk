"""The plan (config.yaml's families expanded into runs by dape_core.config), each job's options and the targets.

Rules read their settings only through the functions below. Each rule hands its job one spec (`params.spec`, a
grid.JobSpec: every setting the job reads, `dape <stage> --spec JSON`), and lists the same settings as named
`params:` groups (attention, shape, training, evaluation, timing, methods, che, corpus, and a fine-tune's model and
training: the dataclasses that declare them) — the fingerprint Snakemake compares between runs, so a changed setting
reruns exactly the jobs it reaches. Resources (threads, mem_mb, runtime, gpu) come from the configuration's
`resources` block alone (`job_resources`; a training job's follow its run's model size, `train_job`); the report
rules are local rules and need none.
"""

import json
import os
import re
import sys
from functools import lru_cache
from pathlib import Path

from snakemake.logging import logger

# Snakemake documents only `workflow.cores` and `workflow.source_path` of its Workflow object (source_path copies the
# file into a cache, so it names no file of this checkout). The workflow reads four more attributes, each for something
# Snakemake offers no documented way to know, which is why pyproject.toml pins snakemake below 10:
#   overwrite_configfiles  the --configfile files: a given configuration replaces config.yaml, names its reports
#                          folder, and is reread for repeated keys (below and the Snakefile)
#   basedir                the checkout, which the conda environments install (DAPE_CORE_SRC)
#   main_snakefile         the Snakefile the nested robustness run executes (robustness.smk)
#   deployment_settings    whether jobs run in conda environments (where a fine-tune's transformers comes from)

from dape_core import config as grid
from dape_core.config import job_cost
from dape_core.errors import ConfigError

# Jobs call `dape` of the Python that runs Snakemake, so a virtual environment need not be activated; under
# --use-conda the environment's own bin directory still comes first. The environments of envs/ install this
# checkout's dape_core from DAPE_CORE_SRC (their post-deploy scripts).
os.environ.update(PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
os.environ.setdefault("DAPE_CORE_SRC", str(Path(workflow.basedir).resolve()))

try:  # a configuration the plan refuses stops the parse in one line (Snakemake would print its stack)
    # Snakemake's own loader keeps a repeated key's last value: the configuration files are read once more,
    # refusing one (the Snakefile's config.yaml is the working directory's, as Snakemake reads it)
    grid.check_yaml_files(workflow.overwrite_configfiles or ["config.yaml"])
    PLAN = grid.build_plan(config)
    # every size the plan can check (memory; evaluation windows in a corpus already tokenized) before any job runs
    grid.check_sizes(PLAN)
    # a family whose jobs need an optional extra (transformers for fine-tunes) says so now
    grid.require_extras(PLAN, job_environments=any(str(getattr(method, "value", method)) == "conda"
                                                   for method in workflow.deployment_settings.deployment_method))
except ConfigError as err:
    sys.exit(f"configuration error: {err}")
# config.yaml reports into reports/ (the committed reference); any other configuration into reports/<its name>/
CONFIGURATION = grid.configuration_name(workflow.overwrite_configfiles)
REPORTS = grid.reports_dir(CONFIGURATION)
PLAN_JSON = grid.plan_path(CONFIGURATION)
# a configuration with a design block runs its families as a pilot, then the seeds the design chose (design.smk)
DESIGN = PLAN.config.get("design")
DESIGN_JSON = f"{REPORTS}/design.json"
PROTOCOL_JSON = f"{REPORTS}/protocol.json"
DESIGNED_PLAN_JSON = PLAN_JSON.removesuffix(".json") + ".designed.json"
ESTIMATE_LOGGED = "DAPE_ESTIMATE_LOGGED"
# The estimate is logged once a run: a job step that parses this Snakefile again (a cluster job, a spawned job process)
# inherits the environment of the run that logged it.
if not os.environ.get(ESTIMATE_LOGGED):
    os.environ[ESTIMATE_LOGGED] = "1"
    logger.info(grid.estimate_line(PLAN))
    if job_cost.design_line(PLAN):
        logger.info(job_cost.design_line(PLAN))

DATA_FILES = ("train.bin", "val.bin", "train.docs.npy", "val.docs.npy", "token_bytes.npy", "tokenizer.json",
              "meta.json")


def alternatives(names):
    """A wildcard constraint that matches exactly these names (and nothing when there are none)."""
    names = sorted(names)
    return "|".join(re.escape(name) for name in names) if names else "(?!x)x"


# One path segment. Run and cell names are checked by the plan, and a target the plan does not know stops in the
# rule's input function; a constraint that lists every name instead grows with the grid (hundreds of names in the
# paper's) and Snakemake matches it against every file of the DAG.
SEGMENT = r"[^/]+"


def segment_other_than(names):
    """One path segment that is none of ``names`` (a run wildcard followed by ``/``)."""
    names = sorted(names)
    return f"(?!(?:{'|'.join(re.escape(name) for name in names)})/){SEGMENT}" if names else SEGMENT


wildcard_constraints:
    dataset=alternatives(PLAN.datasets),
    run=SEGMENT,  # train_lm and finetune_lm split it between them
    timing_job=alternatives(PLAN.timing_jobs),
    replicate=r"\d+",
    cell=SEGMENT,
    seed=r"\d+",
    length=r"\d+",


# ------------------------------------------------------------------------------------------------ job functions
def input_folder(name):
    """A params function: the folder of the job's input file ``name``."""
    return lambda wildcards, input: str(Path(getattr(input, name)).parent)


def output_folder(name):
    """A params function: the folder of the job's output file ``name`` (a name, or its position)."""
    return lambda wildcards, output: str(Path(output[name] if isinstance(name, int) else getattr(output, name)).parent)


# ------------------------------------------------------------------------------------------------ resources
def threads_of(rule_name):
    return PLAN.resources(rule_name)["threads"]


def local_cores() -> int:
    """The threads of a local job that uses what this Snakemake gives it: Snakemake lowers a rule's threads to
    --cores (`threads = min(threads, cores)`, its documented rule), so this asks for every core of the host."""
    return os.cpu_count() or 1


def slurm_resources(values):
    """mem_mb, runtime, gpu (and gpu_model) of one job's resources; a GPU job asks for its threads per GPU
    (`cpus_per_gpu`, which the slurm executor passes instead of --cpus-per-task, so a job gets gpu × threads CPUs)."""
    resources = {key: value for key, value in values.items()
                 if key not in ("threads", "distributed", "gpu_mem_gb") and value is not None}
    if resources.get("gpu"):
        resources["cpus_per_gpu"] = values["threads"]
    else:
        resources.pop("gpu_model", None)
    return resources


def job_resources(rule_name):
    """A rule's resources, from the configuration's `resources` block (see slurm_resources)."""
    return slurm_resources(PLAN.resources(rule_name))


# A training job's resources depend on its run's model size (resources.train_lm.sizes): several GPUs run one
# torchrun process each.
class TrainLauncher:
    """The command that starts a training job: `dape train`, or with several GPUs torchrun with one process per GPU
    (NCCL; gloo processes where there is no GPU) and `--distributed`; `--threads` per process.

    Not a builtin type, so Snakemake leaves it out of the params rerun trigger: like the thread count, how a job is
    spread over devices does not rerun a finished run (`--forcerun` does)."""

    def __init__(self, processes, distributed, threads, gpu_mem_gb=None):
        self.processes, self.distributed, self.threads = processes, distributed, threads
        self.gpu_mem_gb = gpu_mem_gb  # resources.train_lm.gpu_mem_gb: the job picks the micro-batch that fits it

    def __str__(self):
        micro = f" --gpu-mem-gb {self.gpu_mem_gb:g}" if self.gpu_mem_gb else ""
        if self.processes > 1:
            return (f"torchrun --standalone --nproc-per-node {self.processes} -m dape_core.cli train"
                    f" --distributed {self.distributed} --threads {self.threads}{micro}")
        return f"dape train --threads {self.threads}{micro}"


@lru_cache(maxsize=None)  # read by each of a training job's resources, its threads and its launcher
def train_job(run):
    """resources.train_lm for one LM run: the rule's values updated by those of the run's size."""
    return PLAN.resources("train_lm", PLAN.lm_runs[run]["settings"]["size"])


def train_processes(run):
    return max(1, train_job(run)["gpu"])


def train_threads(wildcards):
    """The job's CPUs: threads per process × processes."""
    return train_job(wildcards.run)["threads"] * train_processes(wildcards.run)


def train_launcher(wildcards, threads):
    """`threads` is the job's (capped at --cores by Snakemake), shared among its processes."""
    processes = train_processes(wildcards.run)
    job = train_job(wildcards.run)
    return TrainLauncher(processes, job["distributed"], max(1, threads // processes), job.get("gpu_mem_gb"))


def train_job_resources():
    """train_lm's resources as functions of the run. Every job has the same keys: where some jobs have GPUs, one
    without gets cpus_per_gpu too (the slurm executor reads it only with a GPU) and an empty gpu_model."""
    with_gpu = any(train_job(run)["gpu"] for run in PLAN.lm_runs)
    keys = ["mem_mb", "runtime", "gpu"]
    keys += ["cpus_per_gpu", *(["gpu_model"] if PLAN.resources("train_lm")["gpu_model"] else [])] if with_gpu else []

    def value(key):
        def of_run(wildcards):
            job = train_job(wildcards.run)
            return slurm_resources(job).get(key, {"cpus_per_gpu": job["threads"], "gpu_model": ""}.get(key))

        return of_run

    return {key: value(key) for key in keys}


# ------------------------------------------------------------------------------------------------ data
def data_path(dataset, name):
    return f"results/data/{dataset}/{name}"


def corpus_options(wildcards):
    return grid.corpus_options(PLAN.datasets[wildcards.dataset])


def tokenize_inputs(wildcards):
    """Local corpora and tokenizer files (Hub datasets are read by the job itself)."""
    return grid.dataset_inputs(PLAN.datasets[wildcards.dataset])


# ------------------------------------------------------------------------------------------------ LM
def lm_dataset(wildcards):
    return PLAN.evaluated_run(wildcards.run)["settings"]["dataset"]


def train_inputs(wildcards):
    dataset = lm_dataset(wildcards)
    return {"tokens": data_path(dataset, "train.bin"), "meta": data_path(dataset, "meta.json")}


def eval_inputs(wildcards):
    dataset = lm_dataset(wildcards)
    model = "model" if wildcards.run in PLAN.finetune_runs else "model.pt"  # a Hugging Face model directory
    return {"model": f"results/lm/{wildcards.run}/seed{wildcards.seed}/{model}",
            "tokens": data_path(dataset, "val.bin"), "meta": data_path(dataset, "meta.json")}


def model_environment(wildcards):
    """The conda environment of a job that loads a run's model: envs/hf.yaml (with transformers) for a Hugging
    Face decoder of a finetune family, envs/lm.yaml otherwise (relative to workflow/rules/, as a literal path)."""
    return "../../envs/hf.yaml" if wildcards.run in PLAN.finetune_runs else "../../envs/lm.yaml"


def spec_of(groups, seed=False):
    """A params function: the job's spec — the option groups ``groups(wildcards)`` returns (name → group, or one
    group), with the seed of its wildcards where ``seed``."""

    def spec(wildcards):
        values = groups(wildcards)
        values = [values] if isinstance(values, grid.CliOptions) else values.values()
        return grid.JobSpec(*values, **({"seed": int(wildcards.seed)} if seed else {}))

    return spec


def timing_spec(wildcards):
    """One replicate of a timing job's spec: its timing settings, ``methods`` (run name → attention settings and
    shape) and ``replicate``; the merge's (no replicate wildcard): ``replicates`` in its place."""
    return grid.timing_spec(PLAN.timing_jobs[wildcards.timing_job], PLAN.timing_runs,
                            getattr(wildcards, "replicate", None))


def che_spec(wildcards):
    return grid.che_spec(PLAN.che_cell(wildcards.cell)["settings"], wildcards.seed)


def corpus_spec(wildcards):
    return grid.corpus_spec(PLAN.datasets[wildcards.dataset])


def lm_groups(wildcards):
    """An LM run's training options: attention, shape and training."""
    return _lm_groups(wildcards.run)


@lru_cache(maxsize=None)  # each job's spec and its three groups read them (the same mappings: Snakemake only reads)
def _lm_groups(run):
    return grid.train_options(PLAN.lm_runs[run]["settings"])


def lm_options(group):
    """One group of an LM run's training options, as a params function."""
    return lambda wildcards: lm_groups(wildcards)[group]


def eval_options(wildcards):
    return grid.eval_options(PLAN.evaluated_run(wildcards.run)["eval"])


def attention_map_options(wildcards):
    run = PLAN.lm_runs[wildcards.run]
    return grid.attention_map_options(run["eval"], run["attention_settings"], int(wildcards.length))


# The LM jobs' specs (and the CHE, timing and tokenize jobs', above) come from dape_core.config.provenance, which
# also gives the readers the settings each result file was made from (its seal records the digest of its job's spec)
def train_spec(wildcards):
    return grid.train_spec(PLAN.lm_runs[wildcards.run]["settings"], wildcards.seed)


def eval_spec(wildcards):
    return grid.eval_spec(PLAN.evaluated_run(wildcards.run)["eval"])


def attention_map_spec(wildcards):
    run = PLAN.lm_runs[wildcards.run]
    return grid.attention_map_spec(run["eval"], run["attention_settings"], wildcards.length)


# ------------------------------------------------------------------------------------------------ fine-tunes
def finetune_base(run, seed):
    """The directory a fine-tune run starts from: its family's base run's model/ of the same seed, its own
    base_model, or None (a fresh model from base_config)."""
    settings = PLAN.finetune_runs[run]["settings"]
    if settings["base_run"] is not None:
        return f"results/lm/{settings['base_run']}/seed{seed}/model"
    return settings["base_model"]


def finetune_inputs(wildcards):
    dataset = PLAN.finetune_runs[wildcards.run]["settings"]["dataset"]
    inputs = {name.replace(".", "_"): data_path(dataset, name) for name in ("train.bin", "meta.json", "tokenizer.json")}
    base = finetune_base(wildcards.run, wildcards.seed)
    return inputs | ({"base": base} if base else {})


def finetune_groups(wildcards):
    """A fine-tune run's model and training options."""
    return grid.finetune_options(PLAN.finetune_runs[wildcards.run]["settings"], finetune_base(wildcards.run, wildcards.seed))


def finetune_options(group):
    """model or training options of one fine-tune run, as a params function."""
    return lambda wildcards: finetune_groups(wildcards)[group]


def lm_files(name, jobs=None, plan=None):
    """``results/lm/{run}/seed{seed}/{name}`` for every (run, seed) of the plan (``plan``, else the
    configuration's), trained or fine-tuned (or of ``jobs``)."""
    jobs = (plan or PLAN).lm_jobs() if jobs is None else jobs
    return [grid.lm_file(run, seed, name) for run, seed in jobs]


def attention_files(name, plan=None):
    return [grid.attention_file(run, seed, length, name) for run, seed, length in (plan or PLAN).attention_jobs()]


def leakage_jobs(plan=None):
    """(run, seed) of every leakage run and its tril twin (of ``plan``, else the configuration's)."""
    plan = plan or PLAN
    jobs = []
    for pairs in plan.leakage_pairs.values():
        for pair in pairs:
            for name in (pair["run"], pair["twin"]):
                jobs += [(name, seed) for seed in plan.lm_runs[name]["seeds"]]
    return sorted(set(jobs))


# ------------------------------------------------------------------------------------------------ timing, CHE
def timing_groups(wildcards):
    """timing (what its runs share) and methods (their attention settings) of one timing job."""
    return _timing_groups(wildcards.timing_job)


@lru_cache(maxsize=None)
def _timing_groups(job):
    return grid.timing_job_options(PLAN.timing_jobs[job], PLAN.timing_runs)


def timing_options(group):
    """One group of a timing job's options, as a params function."""
    return lambda wildcards: timing_groups(wildcards)[group]


def timing_files(suffix="csv"):
    """``results/timing/{job}.csv`` (one row per method × length) or ``….repeats.csv`` (per repeat) of every job."""
    return [grid.timing_file(name, suffix) for name in PLAN.timing_jobs]


def timing_replicates(suffix="csv"):
    """An input function: ``results/timing/{job}/rep{k}.csv`` (or ``.repeats.csv``) of the job's replicates."""
    def files(wildcards):
        count = int(PLAN.timing_jobs[wildcards.timing_job]["settings"]["replicates"])
        return [f"results/timing/{wildcards.timing_job}/rep{k}.{suffix}" for k in range(count)]

    return files


def che_groups(wildcards):
    """attention and che options of one CHE cell."""
    return _che_groups(wildcards.cell)


@lru_cache(maxsize=None)
def _che_groups(cell):
    return grid.che_options(PLAN.che_cell(cell)["settings"])


def che_options(group):
    """One group of a CHE cell's options, as a params function."""
    return lambda wildcards: che_groups(wildcards)[group]


def che_files(plan=None):
    return [grid.che_file(cell, seed) for cell, seed in (plan or PLAN).che_jobs()]


# ------------------------------------------------------------------------------------------------ design
@lru_cache(maxsize=None)
def _designed_plan(path, stamp):
    from dape_core.report.design import read_design

    design = read_design(path)
    return PLAN.with_design(design["fresh"], design["fresh_maps"])


def final_plan():
    """The plan the reports read: the configuration's; with a design block, its runs with the fresh seeds the
    design chose beside the pilot's (known once the design checkpoint has run)."""
    if not DESIGN:
        return PLAN
    path = checkpoints.design.get().output.design
    return _designed_plan(path, os.stat(path).st_mtime_ns)


def final_plan_json(wildcards):
    """The report spec the aggregates read: with a design, the designed plan's."""
    return DESIGNED_PLAN_JSON if DESIGN else PLAN_JSON


def final_files(files, *args):
    """An input function: ``files(*args, plan=final_plan())`` (the aggregates' per-job files)."""
    return lambda wildcards: files(*args, final_plan())


def pilot_benchmarks():
    """The Snakemake benchmark files of the pilot's jobs (their seconds price the fresh seeds)."""
    files = [f"logs/lm/{run}/seed{seed}/{job}.benchmark.tsv" for run, seed in PLAN.train_jobs()
             for job in ("train", "evaluate")]
    files += [f"logs/lm/{run}/seed{seed}/attention-L{length}.benchmark.tsv" for run, seed, length in PLAN.attention_jobs()]
    return files + [f"logs/che/{cell}/seed{seed}.benchmark.tsv" for cell, seed in PLAN.che_jobs()]


# ------------------------------------------------------------------------------------------------ report
def lm_families():
    """Families with perplexity tables and figures."""
    return PLAN.families_of_stage("lm", "leakage", "finetune")


def report_spec():
    return PLAN.report_spec()


def family_param(key):
    """A family's setting (title, paper, sweep, …) as a params function."""
    return lambda wildcards: PLAN.families[wildcards.family].get(key)


def table_files():
    """Markdown and LaTeX tables: one per LM family (ΔP too where asked), per CHE, timing and leakage family."""
    stems = [f"{family}_ppl" for family in lm_families()]
    stems += [f"{family}_delta_p" for family in lm_families() if PLAN.families[family]["delta_p"]]
    stems += [f"{family}_accuracy" for family in PLAN.families_of_stage("che")]
    stems += [f"{family}_time" for family in PLAN.families_of_stage("timing")]
    stems += [f"{family}_leakage" for family in PLAN.families_of_stage("leakage")]
    return [f"{REPORTS}/tables/{stem}.{ext}" for stem in stems for ext in ("md", "tex")]


def figure_files():
    """Every figure of the report (their rules caption them)."""
    files = [f"{REPORTS}/figures/ppl_{family}.png" for family in lm_families()]
    files += [f"{REPORTS}/figures/sweep_{family}.png" for family in lm_families() if PLAN.families[family]["sweep"]]
    files += [f"{REPORTS}/figures/timing_{family}.png" for family in PLAN.families_of_stage("timing")]
    files += [f"{REPORTS}/figures/che_{family}.png" for family in PLAN.families_of_stage("che")]
    files += [f"{REPORTS}/figures/attention/{run}-seed{seed}-L{length}.png"
              for run, seed, length in PLAN.attention_jobs()]
    if PLAN.attention_jobs():
        files.append(f"{REPORTS}/figures/sink.png")
    return files


def aggregate_files():
    files = [f"{REPORTS}/lm_results.csv"] if PLAN.lm_jobs() else []
    files += [f"{REPORTS}/timing.csv", f"{REPORTS}/timing_repeats.csv"] if PLAN.timing_runs else []
    files += [f"{REPORTS}/che_results.csv"] if PLAN.che_cells else []
    files += [f"{REPORTS}/sink.csv"] if PLAN.attention_jobs() else []
    files += [f"{REPORTS}/leakage.csv"] if PLAN.leakage_pairs else []
    return files


def all_targets():
    """Every report of the configuration; the paper comparison (language-model perplexities against the paper's)
    only with language models (a CHE- or timing-only configuration has no lm_results.csv to compare)."""
    paper = [f"{REPORTS}/paper_comparison.md", f"{REPORTS}/paper_comparison.csv"] if PLAN.lm_jobs() else []
    return [*aggregate_files(), *table_files(), *figure_files(), f"{REPORTS}/claims.md", f"{REPORTS}/claims.csv",
            *paper]


def report_inputs(wildcards):
    """The plan and the aggregated CSVs this configuration produces (as named inputs)."""
    csvs = {"lm": f"{REPORTS}/lm_results.csv", "timing": f"{REPORTS}/timing.csv",
            "timing_repeats": f"{REPORTS}/timing_repeats.csv", "che": f"{REPORTS}/che_results.csv",
            "sink": f"{REPORTS}/sink.csv", "leakage": f"{REPORTS}/leakage.csv"}
    present = aggregate_files()
    return {"plan": PLAN_JSON, **{key: path for key, path in csvs.items() if path in present}}


def report_sources(wildcards, input):
    """``--plan … --lm …``: the named inputs as options of `dape report`."""
    return " ".join(f"--{key} {path}" for key, path in input.items())
