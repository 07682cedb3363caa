"""The Snakemake workflow: lint, dry runs of the three configurations, the smoke DAG end to end, partial reruns,
and the conda environment files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from dape_core.config import build_plan, load_yaml

from workflow_fixture import CONFIGS, REPO, job_counts, job_outputs, smoke_run, snakemake  # noqa: F401

REPORT_RULES = {"write_plan", "aggregate_lm", "aggregate_sink", "aggregate_timing", "aggregate_che", "leakage_table",
                "tables", "ppl_figure", "sweep_figure", "timing_figure", "che_figure", "attention_figure",
                "sink_figure", "claims", "paper_comparison", "all"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_lint_reports_nothing(tmp_path):
    result = snakemake(tmp_path, CONFIGS["default"], "--lint", timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Lints for" not in out and "Congratulations, your workflow is in a good condition!" in out


@pytest.mark.slow
def test_a_configuration_giving_a_key_twice_stops_the_dag_naming_the_key_and_both_lines(tmp_path):
    """Snakemake's own loader would keep the last value; the workflow reads the file once more and refuses it."""
    text = CONFIGS["smoke"].read_text(encoding="utf-8")
    assert text.count("    steps: 20\n") >= 1
    twice = tmp_path / "twice.yaml"
    twice.write_text(text.replace("    steps: 20\n", "    steps: 20\n    steps: 40\n", 1), encoding="utf-8")
    line = text[:text.index("    steps: 20\n")].count("\n") + 1
    result = snakemake(tmp_path, twice, "-n", "--cores", "1", timeout=300)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert f"twice.yaml: the key 'steps' is given twice in one mapping, on lines {line} and {line + 1}" in out
    assert 'File "' not in out and "Traceback" not in out  # the cause in one line, not the parse's stack


@pytest.mark.slow
def test_without_a_configfile_the_working_directorys_config_yaml_is_the_one_checked(tmp_path):
    """Snakemake reads the Snakefile's config.yaml from the working directory (--directory), so the repeated-key check
    reads that file too, not the checkout's."""
    text = CONFIGS["default"].read_text(encoding="utf-8")
    line = text.index("estimate: ")
    repeated = text[line:text.index("\n", line) + 1]
    (tmp_path / "config.yaml").write_text(text + repeated, encoding="utf-8")
    first, second = text[:line].count("\n") + 1, text.count("\n") + 1
    result = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                             str(tmp_path), "-n", "--cores", "1"], capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"config.yaml: the key 'estimate' is given twice in one mapping, on lines {first} and {second}" in out, out


@pytest.mark.slow
def test_a_missing_extra_stops_the_dag_in_one_line_with_the_install_command(tmp_path):
    """The smoke configuration's fine-tune family where transformers cannot be imported (a sitecustomize makes
    importlib find no such module, as without the package): the one line names the family and the install."""
    hidden = tmp_path / "no_transformers"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text("import sys\nsys.modules['transformers'] = None\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                             str(tmp_path / "work"), "--configfile", str(CONFIGS["smoke"]), "-n", "--cores", "1"],
                            capture_output=True, text=True, timeout=300, env=env)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert ("configuration error: families.hf_finetune: the finetune stage needs transformers (the hf extra), which "
            "this Python lacks; install it: pip install -e '.[hf]'") in out
    assert 'File "' not in out and "Traceback" not in out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["default", "smoke", "paper"])
def test_dry_run_builds_the_dag(tmp_path, name):
    """The paper's DAG builds here, without its Hub data or tokenizer file."""
    result = snakemake(tmp_path, CONFIGS[name], "-n", "--cores", "2", timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    counts = job_counts(out)
    assert counts["train_lm"] > 0 and counts["evaluate_lm"] == counts["train_lm"] + counts.get("finetune_lm", 0)
    for rule in ("tokenize", "time_lm", "che", "tables", "claims", "paper_comparison"):
        assert counts.get(rule, 0) > 0, (rule, counts)
    # config.yaml reports into reports/ (the committed reference), any other configuration into reports/<name>/
    reports = "reports" if name == "default" else f"reports/{name}"
    assert job_outputs(out, "claims") == [f"{reports}/claims.md", f"{reports}/claims.csv"]
    written = [p for rule in REPORT_RULES for p in job_outputs(out, rule)]
    assert written and all(p.startswith(f"{reports}/") or p.startswith("results/plan") for p in written), written
    assert "GPU-hours" in out  # the printed estimate
    plan = build_plan(load_yaml(CONFIGS[name]))
    assert counts.get("finetune_lm", 0) == len(plan.finetune_jobs()) == (3 if name == "smoke" else 0), counts
    assert counts["evaluate_lm"] == len(plan.lm_jobs())  # the fine-tunes are evaluated as every LM run


@pytest.mark.slow
def test_a_job_step_that_parses_the_snakefile_again_logs_no_second_estimate(tmp_path):
    """A run logs its estimate once: a job step (a cluster job, a spawned job process) inherits the run's environment,
    where the estimate is marked logged. The nested robustness run asks for the cores this Snakemake was given."""
    env = {**os.environ, "DAPE_ESTIMATE_LOGGED": "1"}
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
               "--configfile", str(CONFIGS["smoke"]), "-n", "--cores", "2", "reports/smoke/robustness.md"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "GPU-hours" not in out and "plan: " not in out
    nested = out[out.index("rule robustness_run:"):]
    assert re.search(r"^\s+threads: 2$", nested[:nested.index("Shell command")], re.M), nested[:800]


@pytest.mark.slow
def test_the_timing_cell_is_timed_in_separate_replicate_jobs_that_one_rule_merges(tmp_path):
    """The default's forward-time family alone: one timing job times both sizes and both methods (its spec lists the
    four), repeated as `replicates` time_lm jobs (rep0, rep1, …, each with its own blocks) that merge_timing reads
    and merges into the one file the aggregation reads."""
    config = yaml.safe_load(CONFIGS["default"].read_text())
    config["families"] = {"forward_time": config["families"]["forward_time"]}
    replicates = config["families"]["forward_time"]["set"]["replicates"]
    assert replicates >= 2
    path = tmp_path / "timing_only.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = snakemake(tmp_path, path, "-n", "-p", "--cores", "2", timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    counts = job_counts(out)
    assert counts["time_lm"] == replicates and counts["merge_timing"] == 1, counts
    job = "forward-small-medium-B1"
    assert sorted(job_outputs(out, "time_lm")) == sorted(
        f"results/timing/{job}/rep{k}.{suffix}" for k in range(replicates) for suffix in ("csv", "repeats.csv"))
    assert {f"results/timing/{job}.csv", f"results/timing/{job}.repeats.csv"} <= set(job_outputs(out, "merge_timing"))
    specs = [json.loads(s) for s in re.findall(r"dape time --spec '([^']*)' --threads", out)]
    assert sorted(s["replicate"] for s in specs) == list(range(replicates))
    assert all({m["size"] for m in s["methods"].values()} == {"small", "medium"} and len(s["methods"]) == 4
               for s in specs)
    merge = re.search(r"dape time --spec '([^']*)' --merge ((?:\S+ )+)--out", out)
    assert json.loads(merge.group(1))["replicates"] == replicates
    assert merge.group(2).split() == [f"results/timing/{job}/rep{k}.csv" for k in range(replicates)]


@pytest.mark.slow
def test_a_configuration_without_language_models_asks_for_no_language_model_report(tmp_path):
    """A CHE-only configuration (the default's CHE family alone) builds a DAG of CHE runs and their reports, with
    no aggregate_lm (it has no evaluations to aggregate, and `dape report lm` needs at least one) and no paper
    comparison (perplexities only)."""
    config = yaml.safe_load(CONFIGS["default"].read_text())
    config["families"] = {"che": config["families"]["che"]}
    path = tmp_path / "che_only.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = snakemake(tmp_path, path, "-n", "--cores", "2", timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    counts = job_counts(out)
    che = config["families"]["che"]
    cells = len(che["axes"]["task"]) * len(che["axes"]["method"]) * len(che["seeds"])
    assert counts["che"] == cells and counts["claims"] == 1 and counts["aggregate_che"] == 1, counts
    assert not {"aggregate_lm", "paper_comparison", "train_lm"} & set(counts), counts


@pytest.mark.slow
def test_smoke_dag_produces_every_report_artefact(smoke_run):
    assert smoke_run.returncode == 0, smoke_run.log_tail
    assert smoke_run.report_returncode == 0, smoke_run.log_tail
    check_report_artefacts(smoke_run.report())


def check_report_artefacts(reports) -> None:
    """Every report artefact of a finished smoke run (its reports folder): CSV rows, non-empty tables, valid figures,
    report.html."""
    for name in ("lm_results.csv", "timing.csv", "che_results.csv", "sink.csv", "leakage.csv", "claims.csv",
                 "paper_comparison.csv"):
        lines = (reports / name).read_text().splitlines()
        assert len(lines) >= 2, name  # header and at least one row
    tables = sorted((reports / "tables").iterdir())
    assert {t.suffix for t in tables} == {".md", ".tex"} and len(tables) >= 10
    for table in tables:
        text = table.read_text()
        assert ("|---|" in text) if table.suffix == ".md" else (r"\begin{tabular}" in text), table
    figures = sorted((reports / "figures").rglob("*.png"))
    assert len(figures) >= 7
    for figure in figures:
        assert_valid_png(figure.read_bytes())
    for name in ("claims.md", "paper_comparison.md"):
        assert (reports / name).read_text().startswith("# ")
    html = (reports / "report.html").read_text(errors="replace")
    assert "<html" in html.lower() and len(html) > 10_000


def assert_valid_png(data: bytes) -> None:
    """Signature, an IHDR chunk of positive size first and an IEND chunk last."""
    assert data[:8] == PNG_MAGIC
    length, kind = int.from_bytes(data[8:12], "big"), data[12:16]
    assert kind == b"IHDR" and length == 13
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 0 and height > 0
    assert data[-8:-4] == b"IEND"


@pytest.mark.slow
def test_smoke_shows_the_diverged_run(smoke_run):
    assert smoke_run.returncode == 0, smoke_run.log_tail
    table = smoke_run.report("tables/divergence_ppl.md").read_text()
    assert "diverged" in table
    lm = smoke_run.report("lm_results.csv").read_text()
    assert "diverged" in lm


@pytest.mark.slow
def test_smoke_reports_the_finetune_family(smoke_run):
    """The Hugging Face family's base model and its two fine-tunes land in lm_results.csv with their labels, in
    a table and a figure of their own."""
    import pandas as pd

    assert smoke_run.returncode == 0, smoke_run.log_tail
    labels = ["Llama (base)", "Llama fine-tuned", "DAPE1x3-Llama fine-tuned"]
    lm = pd.read_csv(smoke_run.report("lm_results.csv"))
    rows = lm[lm["roles"] == "hf_finetune"]
    assert sorted(set(rows["method"])) == sorted(labels) and len(rows) == 3 * 2  # 3 runs × eval_lens [32, 64]
    assert (rows["status"] == "ok").all() and rows["ppl"].between(1, 300).all()
    header = smoke_run.report("tables/hf_finetune_ppl.md").read_text().splitlines()[2]
    assert header == "| eval_len | " + " | ".join(labels) + " |"
    assert_valid_png(smoke_run.report("figures/ppl_hf_finetune.png").read_bytes())
    model = smoke_run.path(f"results/lm/{rows['run'].iloc[-1]}/seed0/model")
    assert (model / "config.json").is_file() and (model / "tokenizer.json").is_file()


def _modified_config(tmp_path, change) -> str:
    config = yaml.safe_load(CONFIGS["smoke"].read_text())
    change(config)
    path = tmp_path / "smoke.yaml"  # the smoke configuration's name: its reports/smoke/ and plan
    path.write_text(yaml.safe_dump(config, sort_keys=False))  # family order is the order of tables
    return path


def _dry_run_after(smoke_run, config_path, *args) -> str:
    assert smoke_run.returncode == 0, smoke_run.log_tail
    result = snakemake(smoke_run.workdir, config_path, "-n", "--nolock", "--rerun-triggers", "params", "--cores", "2",
                       *args, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result.stdout + result.stderr


@pytest.mark.slow
def test_unchanged_configuration_schedules_nothing(smoke_run, tmp_path):
    out = _dry_run_after(smoke_run, _modified_config(tmp_path, lambda c: None))
    assert job_counts(out) == {}, out[-3000:]


@pytest.mark.slow
def test_new_eval_lens_rerun_evaluation_and_reports_only(smoke_run, tmp_path):
    def change(config):
        config["defaults"]["lm"]["eval"]["eval_lens"] = [32, 64, 128]

    counts = job_counts(_dry_run_after(smoke_run, _modified_config(tmp_path, change)))
    assert counts["evaluate_lm"] == len(build_plan(load_yaml(CONFIGS["smoke"])).lm_jobs())  # every (run, seed)
    assert set(counts) - {"evaluate_lm"} <= REPORT_RULES, counts
    assert "train_lm" not in counts and "tokenize" not in counts


@pytest.mark.slow
def test_one_runs_learning_rate_reruns_that_run_and_the_aggregation(smoke_run, tmp_path):
    run = "code-T32-kerple-dape_v1-k1-w32"  # listed by kernel_sizes only, one seed

    def change(config):
        config["run_overrides"] = {run: {"lr": 0.002}}

    out = _dry_run_after(smoke_run, _modified_config(tmp_path, change), "-p")
    counts = job_counts(out)
    assert counts["train_lm"] == 1 and counts["evaluate_lm"] == 1, counts
    assert job_outputs(out, "train_lm")[0].startswith(f"results/lm/{run}/seed0/")
    assert set(counts) - {"train_lm", "evaluate_lm"} <= REPORT_RULES, counts
    spec = _specs(out, "dape train")  # the job's one spec, readable in the printed command
    assert len(spec) == 1 and spec[0]["lr"] == 0.002 and spec[0]["kernel_size"] == 1 and spec[0]["seed"] == 0


def _specs(text: str, command: str) -> list[dict]:
    """The JSON specs of every `command --spec '…'` in ``text`` (a dry run's printed commands, or a job's log)."""
    import json
    import shlex

    found = []
    for line in text.splitlines():
        if command in line and " --spec " in line:
            words = shlex.split(line.split(command, 1)[1].split(" > ", 1)[0])
            found.append(json.loads(words[words.index("--spec") + 1]))
    return found


@pytest.mark.slow
def test_each_job_is_handed_one_spec_that_its_log_records(smoke_run):
    """A rule hands its job one spec, the settings of its fingerprint groups (and its seed): the job's log starts
    with it, and it holds the run's settings by their names in config.yaml — so the job ran with the plan's
    values, with no setting given as a separate option."""
    from dape_core import config as grid

    assert smoke_run.returncode == 0, smoke_run.log_tail
    plan = build_plan(load_yaml(CONFIGS["smoke"]))
    for name, seed in plan.train_jobs():
        log = smoke_run.path(f"logs/lm/{name}/seed{seed}/train.log").read_text()
        (spec,) = _specs(log.splitlines()[0], "dape train")
        groups = grid.train_options(plan.lm_runs[name]["settings"])
        assert spec == {k: v for group in groups.values() for k, v in group.items()} | {"seed": seed}
    for name, seed in plan.lm_jobs():
        log = smoke_run.path(f"logs/lm/{name}/seed{seed}/evaluate.log").read_text()
        (spec,) = _specs(log.splitlines()[0], "dape evaluate")
        assert spec == dict(grid.eval_options(plan.evaluated_run(name)["eval"]))
    for name, job in plan.timing_jobs.items():
        for k in range(job["settings"]["replicates"]):
            log = smoke_run.path(f"logs/timing/{name}/rep{k}.log").read_text()
            (spec,) = _specs(log.splitlines()[0], "dape time")
            assert sorted(spec["methods"]) == sorted(job["runs"]) and spec["replicate"] == k
        (spec,) = _specs(smoke_run.path(f"logs/timing/{name}.merge.log").read_text().splitlines()[0], "dape time")
        assert spec["replicates"] == job["settings"]["replicates"] and "replicate" not in spec
    for name, seed in plan.finetune_jobs():
        log = smoke_run.path(f"logs/lm/{name}/seed{seed}/finetune.log").read_text()
        (spec,) = _specs(log.splitlines()[0], "dape finetune")
        settings = plan.finetune_runs[name]["settings"]
        assert spec["seed"] == seed and spec["processor"] == settings["processor"]
        assert spec["kernel_size"] == settings["kernel_size"] and spec["steps"] == settings["steps"]
    for dataset, settings in plan.datasets.items():
        (spec,) = _specs(smoke_run.path(f"logs/data/{dataset}.log").read_text().splitlines()[0], "dape tokenize")
        assert spec == dict(grid.corpus_options(settings))
    for cell, seed in plan.che_jobs():
        (spec,) = _specs(smoke_run.path(f"logs/che/{cell}/seed{seed}.log").read_text().splitlines()[0], "dape che")
        assert spec["task"] == plan.che_cells[cell]["settings"]["task"] and spec["seed"] == seed


# ------------------------------------------------------------------------------------------------ environments
def _pyproject_dependencies() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = {}
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        specs[name] = requirement.replace(" ", "")
    return specs


def test_environment_files_pin_as_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = _pyproject_dependencies()
    hf = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower(): r.replace(" ", "")
          for r in project["optional-dependencies"]["hf"]}
    env_files = sorted((REPO / "envs").glob("*.yaml"))
    assert {p.stem for p in env_files} == {"data", "lm", "hf", "report"}
    covered = set()
    for path in env_files:
        env = yaml.safe_load(path.read_text())
        conda = [d for d in env["dependencies"] if isinstance(d, str)]
        assert f"python{project['requires-python']}" in conda, path
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        allowed = {**pins, **hf} if path.stem == "hf" else pins  # the hf environment: lm's and the hf extra
        for requirement in pip:
            name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
            assert allowed.get(name) == requirement, (path.name, requirement, allowed.get(name))
            covered.add(name)
        assert (path.with_suffix(".post-deploy.sh")).is_file(), path  # installs the checkout's dape_core
    assert set(pins) - covered == {"snakemake"}, set(pins) - covered  # Snakemake runs the jobs, it is not in them
    lm, hf_env = (yaml.safe_load((REPO / "envs" / f"{name}.yaml").read_text()) for name in ("lm", "hf"))
    lm_pip, hf_pip = (next(d["pip"] for d in e["dependencies"] if isinstance(d, dict)) for e in (lm, hf_env))
    assert hf_pip == lm_pip + list(hf.values())  # every model the lm environment runs, and transformers


def _smk_function_source(name: str) -> str:
    """The text of a function defined in workflow/rules/*.smk."""
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        match = re.search(rf"^def {name}\(.*?(?=^\S)", smk.read_text() + "\n#", flags=re.M | re.S)
        if match:
            return match.group(0)
    raise AssertionError(f"no function {name} in workflow/rules")


def test_every_rule_names_an_existing_environment():
    """Every rule with a shell runs in an environment of envs/: a literal path, or a function of the wildcards
    (model_environment) whose every path exists."""
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        text = smk.read_text()
        rules = re.findall(r"^\s*(?:rule|checkpoint) (\w+):", text, flags=re.M)  # design.smk's under an `if`
        literal = re.findall(r'conda:\s*\n\s*"([^"]+)"', text)
        functions = re.findall(r"conda:\s*\n\s*(\w+)", text)
        runs = len(re.findall(r"^\s+run:", text, flags=re.M))
        assert len(literal) + len(functions) + runs == len(rules), smk.name
        envs = literal + [env for name in functions
                          for env in re.findall(r'"([^"]+\.yaml)"', _smk_function_source(name))]
        for env in envs:
            assert (smk.parent / env).resolve().is_file(), (smk.name, env)
    assert re.findall(r'"([^"]+\.yaml)"', _smk_function_source("model_environment")) == [
        "../../envs/hf.yaml", "../../envs/lm.yaml"]


def test_the_main_install_can_write_the_html_report():
    """`snakemake --report` runs in the driver's environment (no rule env) and imports pygments: the package's
    own dependencies must bring it, not the test extras (pytest happens to depend on pygments too)."""
    from packaging.requirements import Requirement

    requirements = [Requirement(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    snakemake = next(r for r in requirements if r.name == "snakemake")
    assert "reports" in snakemake.extras or any(r.name == "pygments" for r in requirements)


@pytest.mark.parametrize("profile", ["default", "slurm", "slurm-gpu"])
def test_a_changed_command_text_alone_reruns_nothing_under_the_profiles(profile, tmp_path):
    """The profiles' rerun triggers: a finished job whose rule only launches differently (a new flag such as
    --gpu-mem-gb, another thread count) is kept; a changed params value still reruns it."""
    import subprocess
    import sys

    triggers = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())["rerun-triggers"]
    rule = 'rule one:\n    output: "out.txt"\n    params: setting={setting}\n    shell: "{command} > {{output}}"\n'
    snakefile = tmp_path / "Snakefile"

    def run(*args):
        return subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory",
                               str(tmp_path), "--cores", "1", "--rerun-triggers", *triggers, *args],
                              capture_output=True, text=True, timeout=120)

    snakefile.write_text(rule.format(setting=1, command="echo 1"))
    assert run().returncode == 0
    snakefile.write_text(rule.format(setting=1, command="echo 1 --threads 2"))
    assert "Nothing to be done" in run("-n").stdout + run("-n").stderr
    snakefile.write_text(rule.format(setting=2, command="echo 1 --threads 2"))
    dry = run("-n")
    assert "rule one:" in dry.stdout + dry.stderr and "Params have changed" in dry.stdout + dry.stderr
