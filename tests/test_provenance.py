"""A seal says whose a file is: the command and settings of the job that wrote it and the inputs it read; readers
compare the settings with the plan's for the file's path (dape_core.config.provenance), and `dape verify` sets aside a
file made with other settings or from an input that has changed since."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dape_core import artefacts, io
from dape_core import config as grid
from dape_core.config.provenance import expected_spec
from dape_core.errors import ArtefactError
from workflow_fixture import smoke_run  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def eval_frame() -> pd.DataFrame:
    return pd.DataFrame({"eval_len": [32, 64], "status": ["ok", "ok"], "ppl": [9.5, 9.9], "loss": [2.25, 2.29],
                         "method": ["Kerple", "Kerple"], "config_hash": ["abc", "abc"], "data_dir": ["d", "d"]})


@pytest.fixture
def stamped():
    """A job's stamp for the test's writes, cleared after it (as `dape` clears it after its command)."""
    yield io.stamp_job
    io.stamp_job(None, None)


@pytest.fixture(scope="module")
def default_runs():
    return grid.build_plan(grid.load_yaml(REPO / "config.yaml")).lm_runs


def test_a_jobs_seal_names_its_command_settings_and_the_inputs_it_verified(tmp_path, monkeypatch, stamped):
    monkeypatch.chdir(tmp_path)
    model, table = Path("results/lm/r/seed0/model.pt"), Path("results/lm/r/seed0/eval.csv")
    stamped("dape train", "1111111111111111")
    io.write_text(model, "weights", seal=True)
    stamped("dape evaluate", "2222222222222222")
    assert artefacts.verify_hash(model, commands=("dape train",), spec="1111111111111111")  # read: an input now
    io.write_csv(table, eval_frame(), seal=True)
    seal = io.read_seal(io.hash_path(table))
    assert (seal.identity, seal.command, seal.spec) == (table.as_posix(), "dape evaluate", "2222222222222222")
    assert seal.inputs == ((model.as_posix(), io.file_sha256(model), "1111111111111111"),)
    assert io.hash_path(table).read_text().splitlines()[0] == f"{io.file_sha256(table)}  eval.csv"  # sha256sum's
    stamped(None, None)
    io.write_csv(table, eval_frame(), seal=True)
    assert io.read_seal(io.hash_path(table)).command is None  # a write outside a job: content and identity only


def test_the_cli_stamps_a_jobs_seals_with_the_digest_the_plan_computes_for_its_spec(default_runs):
    """The settings a job's seal records are the digest of the JSON it got as --spec; the plan's side computes it
    from the same JobSpec (the workflow hands the job exactly that spec): the two agree for every LM run."""
    for run, entry in list(default_runs.items())[:5]:
        spec = grid.train_spec(entry["settings"], 3)
        assert io.spec_digest(json.loads(spec.json())) == io.spec_digest(spec.settings)
        assert expected_spec(default_runs, f"results/lm/{run}/seed3/model.pt") == io.spec_digest(spec.settings)
        assert expected_spec(default_runs, f"results/lm/{run}/seed3/summary.json") == io.spec_digest(spec.settings)
        assert expected_spec(default_runs, f"results/lm/{run}/seed4/model.pt") != io.spec_digest(spec.settings)
        evaluation = io.spec_digest(grid.eval_spec(entry["eval"]).settings)
        assert expected_spec(default_runs, f"results/lm/{run}/seed3/eval.csv") == evaluation
        assert expected_spec(default_runs, f"results/lm/{run}/seed3/windows.csv") == evaluation
    mapped = next(run for run, entry in default_runs.items() if entry["attention_seeds"])
    entry = default_runs[mapped]
    maps = io.spec_digest(grid.attention_map_spec(entry["eval"], entry["attention_settings"], 64).settings)
    assert expected_spec(default_runs, f"results/lm/{mapped}/seed0/attention/L64/sink.csv") == maps
    assert expected_spec(default_runs, "results/lm/no-such-run/seed0/eval.csv") is None
    assert expected_spec(default_runs, "results/che/cell/seed20/che.csv") is None
    assert expected_spec(default_runs, f"results/lm/{mapped}/seed0/checkpoints/last.pt") is None


def test_the_report_spec_gives_every_job_output_the_settings_the_plan_gives_it(default_runs):
    """results/plan.json (the report spec, through JSON) holds what the readers need to know each file's settings:
    every LM, attention-map, CHE and timing file of the default gets the digest the Plan itself gives it."""
    plan = grid.build_plan(grid.load_yaml(REPO / "config.yaml"))
    spec = json.loads(json.dumps(plan.report_spec(), default=str))
    paths = [f"results/lm/{run}/seed{seed}/{name}" for run, entry in plan.lm_runs.items() for seed in entry["seeds"]
             for name in ("model.pt", "summary.json", "eval.csv", "windows.csv",
                          *(f"attention/L{n}/sink.csv" for n in entry["attention_settings"]["heatmap_lens"]))]
    paths += [f"results/che/{cell}/seed{seed}.csv" for cell, entry in plan.che_cells.items() for seed in entry["seeds"]]
    paths += [f"results/timing/{job}{suffix}" for job in plan.timing_jobs for suffix in (".csv", ".repeats.csv")]
    replicas = [f"results/timing/{job}/rep{k}{suffix}" for job, entry in plan.timing_jobs.items()
                for k in range(entry["settings"]["replicates"]) for suffix in (".csv", ".repeats.csv")]
    paths += replicas
    # each replicate job is sealed with its own spec (its index), the merge with the job's (its replicate count)
    digests = {grid.planned_spec(plan, p) for p in replicas}
    assert len(digests) == len(replicas) // 2 and not digests & {grid.planned_spec(plan, p) for p in paths[-len(
        replicas) - 2 * len(plan.timing_jobs):-len(replicas)]}
    assert grid.planned_spec(plan, f"results/timing/{next(iter(plan.timing_jobs))}/rep-1.csv") is None
    assert len(paths) > 200
    for path in paths:
        assert grid.planned_spec(plan, path) is not None and grid.planned_spec(spec, path) == grid.planned_spec(
            plan, path), path
    assert grid.planned_spec(spec, "results/che/no-such-cell/seed0.csv") is None


def test_a_result_made_with_other_settings_is_named_where_it_is_read(tmp_path, monkeypatch, stamped, default_runs):
    """An eval.csv whose seal records another evaluation's settings (left from settings since changed, or copied
    from another configuration's run of the same name, with its seal) is refused in one line by the aggregation."""
    from dape_core.report import aggregate

    monkeypatch.chdir(tmp_path)
    run = next(iter(default_runs))
    path = Path(f"results/lm/{run}/seed0/eval.csv")
    plan = {"lm_runs": {run: {"settings": default_runs[run]["settings"], "eval": default_runs[run]["eval"]}},
            "lm_members": [], "families": {}}
    stamped("dape evaluate", expected_spec(plan["lm_runs"], path))
    io.write_csv(path, eval_frame(), seal=True)
    assert artefacts.read_csv(path, artefacts.EVAL, spec=aggregate.made_with(plan, path)) is not None
    stamped("dape evaluate", "0123456789abcdef")
    io.write_csv(path, eval_frame(), seal=True)
    with pytest.raises(ArtefactError, match=rf"{run}/seed0/eval.csv: made with other settings \(its job's spec "
                                            r"0123456789abcdef, where this configuration's job has [0-9a-f]{16}\): "
                                            r"a stale result, or another configuration's; redo it: snakemake "
                                            r"--forcerun"):
        aggregate.lm_results(plan, [str(path)], [])
    full = json.loads(json.dumps(grid.build_plan(grid.load_yaml(REPO / "config.yaml")).report_spec(), default=str))
    cell = next(iter(full["che_cells"]))  # a CHE result: the report spec gives its cell's settings too
    che = Path(f"results/che/{cell}/seed20.csv")
    stamped("dape che", "0123456789abcdef")
    io.write_csv(che, pd.DataFrame({"task": ["t"], "method": ["m"], "seed": [20], "accuracy": [0.5],
                                    "row_type": ["summary"], "n_samples": [8]}), seal=True)
    with pytest.raises(ArtefactError, match=rf"{cell}/seed20.csv: made with other settings"):
        aggregate.che_results(full, [str(che)])
    stamped("dape time", None)
    io.write_csv(path, eval_frame(), seal=True)
    with pytest.raises(ArtefactError, match=r"written by `dape time`, where this file is `dape evaluate`'s"):
        artefacts.read_csv(path, artefacts.EVAL)


def test_dape_verify_sets_aside_what_was_made_with_other_settings_or_from_a_changed_input(tmp_path, monkeypatch,
                                                                                          stamped, capsys):
    """With the configuration, `dape verify` sets aside a result whose seal records settings the plan does not give
    its job, and one made from an input whose sha256 has changed since (its model retrained, its data remade): the
    DAG redoes them; files of runs this configuration does not have, and matching ones, stay."""
    from dape_core import verify
    from dape_core.cli import main

    monkeypatch.chdir(tmp_path)
    runs = grid.build_plan(grid.load_yaml(REPO / "config.yaml")).lm_runs
    first, second = list(runs)[:2]
    for run in (first, second):
        model = Path(f"results/lm/{run}/seed0/model.pt")
        stamped("dape train", expected_spec(runs, model))
        io.write_text(model, f"weights of {run}", seal=True)
        stamped("dape evaluate", expected_spec(runs, model.with_name("eval.csv")))
        artefacts.verify_hash(model)
        io.write_csv(model.with_name("eval.csv"), eval_frame(), seal=True)
    stamped("dape train", "0123456789abcdef")  # another configuration's settings under this run's name
    io.write_text(Path(f"results/lm/{second}/seed0/model.pt"), "other weights", seal=True)
    stamped("dape train", None)
    io.write_text(Path("results/lm/not-planned/seed0/model.pt"), "weights", seal=True)
    stamped(None, None)
    assert main(["verify", "--results", "results", "--configfile", str(REPO / "config.yaml")]) == 0
    out = capsys.readouterr().out
    assert f"results/lm/{second}/seed0/model.pt: made with other settings (its job's spec 0123456789abcdef" in out
    assert (f"results/lm/{second}/seed0/eval.csv: made from an earlier results/lm/{second}/seed0/model.pt (its "
            "sha256 has changed since this file was written): a stale result" in out)
    assert "5 sealed and token files of results checked" in out and ", 2 set aside" in out
    assert not Path(f"results/lm/{second}/seed0/model.pt").exists()
    assert Path(f"results/lm/{first}/seed0/eval.csv").is_file()
    assert Path("results/lm/not-planned/seed0/model.pt").is_file()  # a run this configuration does not have
    assert verify.forcerun_arguments(verify.pending(Path("results"))) == (
        f"--forcerun results/lm/{second}/seed0/eval.csv results/lm/{second}/seed0/model.pt")


def test_every_job_output_of_the_smoke_run_records_the_settings_its_plan_gives_it(smoke_run):  # noqa: F811
    """The workflow hands each job the spec dape_core.config.provenance computes for its outputs: every sealed file a
    job of the smoke run wrote records that digest and its command, and an evaluation records the model it read."""
    from workflow_fixture import CONFIGS

    assert smoke_run.returncode == 0, smoke_run.log_tail
    plan = grid.build_plan(grid.load_yaml(CONFIGS["smoke"]))
    seen = {}
    for record in sorted((smoke_run.workdir / "results").rglob(f"*{io.HASH_SUFFIX}")):
        path = record.with_name(record.name[:-len(io.HASH_SUFFIX)])
        wanted = grid.planned_spec(plan, path.relative_to(smoke_run.workdir))
        if wanted is None:
            continue
        seal = io.read_seal(record)
        assert seal.spec == wanted, path
        seen.setdefault(seal.command, 0)
        seen[seal.command] = seen[seal.command] + 1
        if path.name == "eval.csv" and "attention" not in path.parts:
            model = path.with_name("model.pt").relative_to(smoke_run.workdir).as_posix()
            assert [(i, spec) for i, _, spec in seal.inputs if i == model] == [
                (model, grid.planned_spec(plan, model))], path
    assert {"dape train", "dape evaluate", "dape che", "dape time", "dape tokenize"} <= set(seen), seen


def test_dape_verify_names_a_configuration_file_it_cannot_read(tmp_path, capsys):
    from dape_core.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["verify", "--results", str(tmp_path), "--configfile", str(tmp_path / "nope.yaml")])
    assert stopped.value.code == 2
    assert "--configfile: " + str(tmp_path / "nope.yaml") + ": No such file or directory" in capsys.readouterr().err
