"""Every per-job output is checked where it is read: a cut, garbled or overwritten file, or a foreign one, stops its
reader with one line naming the file, what is wrong and the command that redoes it (dape_core.artefacts)."""

from __future__ import annotations

import json
import subprocess
import sys
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from dape_core import artefacts, io
from dape_core.cli import main
from dape_core.errors import ArtefactError
from dape_core.model import GPT, GPTConfig
from dape_core.model_file import load_model


def eval_frame(lengths=(32, 64)) -> pd.DataFrame:
    return pd.DataFrame({"eval_len": list(lengths), "status": "ok", "ppl": [9.0, 11.0][:len(lengths)],
                         "loss": np.log([9.0, 11.0][:len(lengths)]), "method": "Kerple", "config_hash": "abc",
                         "n_windows": [3, 2][:len(lengths)], "data_dir": "results/data/code"})


def windows_frame() -> pd.DataFrame:
    return pd.DataFrame({"eval_len": [32, 32, 32, 64, 64], "document": [0, 1, 2, 0, 1], "anchor": [40, 50, 60, 70, 80],
                         "tokens": 16, "loss": [2.1, 2.2, 2.3, 2.4, 2.5], "loss_dp": 2.0, "loss_local": 2.0})


def cut(path, keep: float = 0.6) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def overwrite_same_size(path) -> None:
    data = bytearray(path.read_bytes())
    index = data.index(b"9")  # a digit of a number: the file still parses, with another value
    data[index:index + 1] = b"8"
    path.write_bytes(bytes(data))


def test_a_sealed_file_records_its_sha256_in_sha256sum_format_and_its_identity(tmp_path):
    path = tmp_path / "eval.csv"
    io.write_csv(path, eval_frame(), seal=True)
    record = io.hash_path(path).read_text()
    assert record == f"{io.file_sha256(path)}  eval.csv\nfile: {path.as_posix()}\n"  # written outside the cwd
    check = subprocess.run(["sha256sum", "-c", path.name + ".sha256"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert artefacts.verify_hash(path)
    frame = artefacts.read_csv(path, artefacts.EVAL, rows=2)
    assert list(frame["eval_len"]) == [32, 64]


def test_a_copy_of_another_runs_file_with_its_seal_is_named_foreign(tmp_path, monkeypatch):
    """One run's eval.csv and its seal copied over another run's (same seed): the content matches the seal, but the
    seal names the first run's file; the project moved elsewhere, or read from another working directory, keeps
    its files."""
    monkeypatch.chdir(tmp_path)
    kerple, dape = (Path("results/lm") / run / "seed0" / "eval.csv" for run in ("Kerple", "DAPE1x3-Kerple"))
    for path in (kerple, dape):
        io.write_csv(path, eval_frame(), seal=True)
    assert io.hash_path(kerple).read_text().endswith("\nfile: results/lm/Kerple/seed0/eval.csv\n")
    for name in (kerple.name, kerple.name + ".sha256"):
        shutil.copy(kerple.parent / name, dape.parent / name)
    with pytest.raises(ArtefactError, match=r"DAPE1x3-Kerple/seed0/eval.csv: its seal was written for "
                                            r"results/lm/Kerple/seed0/eval.csv: a copy of another file"):
        artefacts.read_csv(dape, artefacts.EVAL)
    moved = tmp_path / "elsewhere" / "project"
    shutil.copytree(tmp_path / "results", moved / "results")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert artefacts.verify_hash(moved / "results/lm/Kerple/seed0/eval.csv")
    assert artefacts.verify_hash(Path("project/results/lm/Kerple/seed0/eval.csv"))
    with pytest.raises(ArtefactError, match="a copy of another file"):
        artefacts.verify_hash(moved / "results/lm/DAPE1x3-Kerple/seed0/eval.csv")


def test_an_older_versions_seal_is_upgraded_once_by_dape_seal(tmp_path, monkeypatch):
    """A seal of a sha256 alone (an older version's) is refused, naming the migration; `dape seal` upgrades those
    that still match their file (and leaves a changed file for the readers to name)."""
    monkeypatch.chdir(tmp_path)
    old, changed = Path("results/a/eval.csv"), Path("results/b/eval.csv")
    for path in (old, changed):
        io.write_csv(path, eval_frame())
        io.hash_path(path).write_text(f"{io.file_sha256(path)}  eval.csv\n")
    changed.write_text(changed.read_text().replace("32", "33"))
    with pytest.raises(ArtefactError, match=r"a/eval.csv: its seal \(eval.csv.sha256\) names no file: an older "
                                            r"version's seal, which `dape seal` upgrades once"):
        artefacts.verify_hash(old)
    assert main(["seal", "results"]) == 0
    assert artefacts.verify_hash(old)
    with pytest.raises(ArtefactError, match="does not match the sha256 its job recorded"):
        artefacts.verify_hash(changed)


@pytest.mark.parametrize("damage, message", [
    (cut, "does not match the sha256 its job recorded"),
    (overwrite_same_size, "does not match the sha256 its job recorded"),
    (lambda p: p.write_text('{"eval_len": 32}'), "does not match the sha256 its job recorded"),
])
def test_a_damaged_sealed_file_is_named_with_the_command_that_redoes_it(tmp_path, damage, message):
    path = tmp_path / "results/lm/run/seed0/eval.csv"
    io.write_csv(path, eval_frame(), seal=True)
    damage(path)
    with pytest.raises(ArtefactError) as err:
        artefacts.read_csv(path, artefacts.EVAL)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: ") and message in line
    assert f"snakemake --forcerun {path} (rule evaluate_lm" in line


def test_an_unsealed_file_is_damage_until_dape_seal_migrates_it_and_then_its_columns_and_rows_tell(tmp_path):
    """A file without its seal is named (its seal removed, or not what its job wrote), with the migration command for
    an older version's results; once `dape seal` sealed it, the declared columns, numbers, blanks and row counts
    still check what the seal cannot (a file sealed as it was)."""
    from dape_core.seal import seal_unsealed

    path = tmp_path / "eval.csv"
    eval_frame().to_csv(path, index=False)
    with pytest.raises(ArtefactError, match=r"eval.csv: has no seal \(eval.csv.sha256\): .*sealed once with "
                                            r"`dape seal`.*redo it: snakemake --forcerun"):
        artefacts.read_csv(path, artefacts.EVAL)
    assert seal_unsealed(tmp_path) == [path] and seal_unsealed(tmp_path) == []
    assert artefacts.verify_hash(path)
    assert len(artefacts.read_csv(path, artefacts.EVAL, rows=2)) == 2
    with pytest.raises(ArtefactError, match="2 data rows where its run has 3"):
        artefacts.read_csv(path, artefacts.EVAL, rows=3)
    cut(path, 0.9)  # the last row loses its tail: blank fields
    io.seal_file(path)
    with pytest.raises(ArtefactError, match="eval.csv: column .* is blank in data row 2 .*cut or damaged"):
        artefacts.read_csv(path, artefacts.EVAL)
    path.write_text(json.dumps({"eval_len": [32]}))  # JSON text where a CSV belongs
    io.seal_file(path)
    with pytest.raises(ArtefactError, match="eval.csv: no column .*expected the evaluation table"):
        artefacts.read_csv(path, artefacts.EVAL)
    frame = windows_frame().astype({"loss": object})
    frame.loc[4, "loss"] = "4 2.5"  # garbled number
    frame.to_csv(tmp_path / "windows.csv", index=False)
    io.seal_file(tmp_path / "windows.csv")
    with pytest.raises(ArtefactError, match="windows.csv: column loss holds '4 2.5' in data row 5, not a number"):
        artefacts.read_csv(tmp_path / "windows.csv", artefacts.WINDOWS)
    (tmp_path / "empty.csv").write_text("")
    io.seal_file(tmp_path / "empty.csv")
    with pytest.raises(ArtefactError, match="empty.csv: unreadable as the CHE results"):
        artefacts.read_csv(tmp_path / "empty.csv", artefacts.CHE)


def test_a_summary_that_is_not_json_is_named(tmp_path):
    path = tmp_path / "summary.json"
    io.write_json(path, {"status": "ok", "steps_done": 10, "config_hash": "abc"}, seal=True)
    assert artefacts.read_json(path, artefacts.SUMMARY)["steps_done"] == 10
    path.write_text('{"status": "ok",\n "steps_done": 1O}')
    io.seal_file(path)  # sealed as it is: the structural checks behind the seal
    with pytest.raises(ArtefactError, match=r"summary.json: not valid JSON \(Expecting .* line 2 column .*\); redo it: "
                                            r"snakemake --forcerun .*summary.json \(rule train_lm"):
        artefacts.read_json(path, artefacts.SUMMARY)
    path.write_text('["status"]')
    io.seal_file(path)
    with pytest.raises(ArtefactError, match="a JSON list; expected the training summary"):
        artefacts.read_json(path, artefacts.SUMMARY)
    io.hash_path(path).write_text("garbage")
    with pytest.raises(ArtefactError, match="summary.json: its content does not match"):
        artefacts.read_json(path, artefacts.SUMMARY)


def test_attention_maps_are_checked(tmp_path):
    path = tmp_path / "maps.npz"
    with io.output_path(path, seal=True) as tmp, open(tmp, "wb") as handle:
        np.savez_compressed(handle, method=np.array("m"), A=np.zeros((2, 3, 3)))
    assert set(artefacts.load_npz(path, ("A", "method"))) == {"A", "method"}
    with pytest.raises(ArtefactError, match="maps.npz: no array B"):
        artefacts.load_npz(path, ("B",))
    cut(path)
    io.seal_file(path)  # sealed as it is: the structural checks behind the seal
    with pytest.raises(ArtefactError, match="maps.npz: not a readable NumPy archive"):
        artefacts.load_npz(path, ("A",))


def _model_file(path, **drop):
    config = GPTConfig(vocab_size=50, n_layer=1, n_head=2, d_model=16, encoding="kerple", processor="none")
    model = GPT(config)
    import dataclasses

    state = {"model": model.state_dict(), "model_config": dataclasses.asdict(config), "train_settings": {},
             "status": "ok", "config_hash": "abc", "method": "Kerple"}
    for key in drop:
        state.pop(key)
    io.torch_save(path, state, seal=True)


def test_a_model_file_is_checked_where_it_is_loaded(tmp_path):
    path = tmp_path / "model.pt"
    _model_file(path)
    model, checkpoint = load_model(path)
    assert checkpoint["method"] == "Kerple"
    path.write_bytes(b"garbage" * 100)
    io.seal_file(path)  # sealed as it is: the structural checks behind the seal
    with pytest.raises(ArtefactError, match=r"model.pt: not a readable model.pt of `dape train` \(.*\); redo it: "
                                            r"snakemake --forcerun .*model.pt \(rule train_lm"):
        load_model(path)
    _model_file(path, model_config=True)
    with pytest.raises(ArtefactError, match="model.pt: not a model.pt of `dape train` \\(no model_config\\)"):
        load_model(path)
    torch.save({"model": {}, "model_config": {"vocab_size": 50, "n_layer": 1, "n_head": 2, "d_model": 16},
                "train_settings": {}, "status": "ok", "config_hash": "x", "method": "m"}, path)
    io.seal_file(path)  # sealed as it is: the structural checks behind the seal
    with pytest.raises(ArtefactError, match="model.pt: its weights do not fit the model its model_config describes"):
        load_model(path)


def test_dape_evaluate_names_a_garbage_model_in_one_line(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"\x80\x04garbage")
    io.seal_file(path)
    result = subprocess.run([sys.executable, "-m", "dape_core.cli", "evaluate", "--checkpoint", str(path),
                             "--data-dir", str(tmp_path), "--out", str(tmp_path / "eval.csv")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"dape evaluate: error: {path}: not a readable model.pt of `dape train` (UnpicklingError); redo it: "
        f"snakemake --forcerun {path} (rule train_lm; add this run's --configfile and --cores)"]


def _under_file_size_limit(code: str, limit_bytes: int) -> subprocess.CompletedProcess:
    """``python -c code`` with RLIMIT_FSIZE at ``limit_bytes`` (as a full disk: writes past it fail with EFBIG)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limit, timeout=120)


@pytest.mark.parametrize("writer", ["torch_save", "write_text"])
def test_a_write_past_a_file_size_limit_names_the_file_and_errno_and_keeps_the_previous_version(tmp_path, writer):
    """The previous sealed version stays as it was (file and seal); the failed write leaves no temporary file."""
    path = tmp_path / "state.bin"
    io.write_text(path, "previous\n", seal=True)
    before = (path.read_bytes(), io.hash_path(path).read_bytes())
    payload = "{'w': torch.zeros(200_000)}" if writer == "torch_save" else "'x' * 400_000"
    code = ("import sys, torch\nfrom dape_core import io\nfrom dape_core.errors import WriteFailure\n"
            f"try:\n    io.{writer}({str(path)!r}, {payload}, seal=True)\n"
            "except WriteFailure as err:\n    print(err.strerror)\n    sys.exit(3)\n")
    result = _under_file_size_limit(code, 64 * 1024)
    assert result.returncode == 3, result.stderr[-2000:]
    assert result.stdout.strip() == f"{path}: not written: File too large (EFBIG); its previous version is unchanged"
    assert (path.read_bytes(), io.hash_path(path).read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.bin", "state.bin.sha256"]


def test_a_first_write_that_fails_leaves_no_seal_and_an_unrelated_error_stays_itself(tmp_path):
    path = tmp_path / "new.json"
    code = ("import sys\nfrom dape_core import io\nfrom dape_core.errors import WriteFailure\n"
            f"try:\n    io.write_text({str(path)!r}, 'x' * 400_000, seal=True)\n"
            "except WriteFailure as err:\n    print(err.strerror)\n    sys.exit(3)\n")
    result = _under_file_size_limit(code, 64 * 1024)
    assert result.returncode == 3 and result.stdout.strip().endswith("(EFBIG); nothing was written there")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ZeroDivisionError):  # not a write failure: raised as it is, no file, no seal
        with io.output_path(path, seal=True) as tmp:
            tmp.write_text("partial", encoding="utf-8")
            1 / 0
    assert list(tmp_path.iterdir()) == []


def test_dape_train_under_a_file_size_limit_stops_with_one_line(tiny_corpus, tmp_path):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "dape_core.cli", "train", "--data-dir", str(tiny_corpus),
                             "--out-dir", str(out), "--size", "tiny", "--train-len", "32", "--batch-size", "8",
                             "--threads", "1", "--no-progress", "--steps", "4", "--checkpoint-every", "2"],
                            capture_output=True, text=True, preexec_fn=limit, timeout=300)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1] == (f"dape train: error: {out}/checkpoints/last.pt: not written: File too large (EFBIG); "
                         "nothing was written there"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not list(out.rglob("*.sha256"))


def test_dape_verify_sets_damaged_files_and_orphan_seals_aside_and_keeps_them_pending(tmp_path, monkeypatch):
    from dape_core import verify

    monkeypatch.chdir(tmp_path)
    results = Path("results")
    io.write_text(results / "lm" / "a" / "eval.csv", "eval_len,ppl\n32,9.5\n", seal=True)
    io.write_text(results / "lm" / "b" / "eval.csv", "eval_len,ppl\n32,8.5\n", seal=True)
    (results / "lm" / "b" / "eval.csv").write_text("eval_len,ppl\n32,8.6\n")  # overwritten, same size
    io.write_text(results / "lm" / "gone.json", "{}", seal=True)
    (results / "lm" / "gone.json").unlink()  # a seal whose file is gone
    checked, findings, folder = verify.verify(results)
    assert checked == 3
    assert {(str(f.path), f.problem.split(" (")[0]) for f in findings} == {
        ("results/lm/b/eval.csv", "its content does not match the sha256 its job recorded in eval.csv.sha256"),
        ("results/lm/gone.json.sha256", "a seal whose file is gone")}
    assert not (results / "lm" / "b" / "eval.csv").exists() and not (results / "lm" / "b" / "eval.csv.sha256").exists()
    assert (folder / "lm" / "b" / "eval.csv").read_text() == "eval_len,ppl\n32,8.6\n"  # moved, never deleted
    assert (folder / "lm" / "b" / "eval.csv.sha256").is_file() and (folder / "lm" / "gone.json.sha256").is_file()
    assert "lm/b/eval.csv: its content does not match" in (folder / "NOTE.txt").read_text()
    assert (results / "lm" / "a" / "eval.csv").is_file()  # untouched
    assert verify.pending(results, [results / "lm" / "b" / "eval.csv"]) == [results / "lm" / "b" / "eval.csv"]
    assert verify.pending(results) == [results / "lm" / "b" / "eval.csv"]  # still missing: still pending
    assert verify.forcerun_arguments(verify.pending(results)) == "--forcerun results/lm/b/eval.csv"
    io.write_text(results / "lm" / "b" / "eval.csv", "eval_len,ppl\n32,8.5\n", seal=True)  # remade
    assert verify.pending(results) == [] and not (results / ".damaged" / "pending.txt").exists()
    assert verify.verify(results)[1] == []  # the .damaged folder is not checked again


def test_dape_verify_checks_the_configurations_reports_tables_and_not_another_configurations(tmp_path,
                                                                                              monkeypatch):
    """--reports: a damaged or unsealed table directly in the configuration's reports folder is set aside (under
    results/.damaged/ at reports/…) and pending, so that its aggregation is redone; another configuration's folder
    inside it is not this run's to judge."""
    from dape_core import verify

    monkeypatch.chdir(tmp_path)
    results, reports = Path("results"), Path("reports")
    io.write_text(results / "lm" / "a" / "eval.csv", "eval_len,ppl\n32,9.5\n", seal=True)
    io.write_text(reports / "lm_results.csv", "run,ppl\na,9.5\n", seal=True)
    (reports / "lm_results.csv").write_text("run,ppl\na,9.6\n")  # overwritten at the same size
    (reports / "che_results.csv").write_text("cell,accuracy\nx,0.5\n")  # a table of a sealed kind, no seal
    (reports / "notes.csv").write_text("role,rho\nx,1\n")  # not a table the run writes: not this command's to judge
    io.write_text(reports / "decisive" / "lm_results.csv", "run,ppl\nb,1\n", seal=True)
    (reports / "decisive" / "lm_results.csv").write_text("run,ppl\nb,2\n")  # another configuration's
    (reports / "claims.md").write_text("# Claims\n")  # not a sealed kind
    checked, findings, folder = verify.verify(results, (reports,))
    assert {str(f.path) for f in findings} == {"reports/lm_results.csv", "reports/che_results.csv"}
    assert (folder / "reports" / "lm_results.csv").read_text() == "run,ppl\na,9.6\n"
    assert "reports/lm_results.csv: its content does not match" in (folder / "NOTE.txt").read_text()
    assert (reports / "decisive" / "lm_results.csv").exists() and (reports / "claims.md").exists()
    assert (reports / "notes.csv").exists()
    assert verify.verify(results)[1] == []  # without --reports only results/


def test_a_failed_jobs_one_line_error_is_found_through_snakemakes_log(tmp_path, monkeypatch):
    """The workflow's onerror prints each failed job's own error line (its log, which Snakemake's "Error in rule"
    block names), so that the file and the cause reach the console."""
    from dape_core.failed_run import failed_job_errors

    monkeypatch.chdir(tmp_path)
    job = Path("logs/lm/r/seed0/train.log")
    job.parent.mkdir(parents=True)
    job.write_text("dape train --spec '{}'\ndape train: error: results/checkpoints/r/seed0/last.pt: not written: File "
                   "too large (EFBIG); nothing was written there\n")
    main = Path("snakemake.log")
    main.write_text(f"[Fri]\nError in rule train_lm:\n    jobid: 9\n    log: {job} (check log file(s) for error "
                    "details)\n    shell:\n        dape train …\nError in rule evaluate_lm:\n    log: logs/gone.log\n")
    assert failed_job_errors(main) == [f"{job}: dape train: error: results/checkpoints/r/seed0/last.pt: not written: "
                                       "File too large (EFBIG); nothing was written there"]
    assert failed_job_errors([main, tmp_path / "missing.log"]) == failed_job_errors(main)  # onerror's log: a list
    assert failed_job_errors(tmp_path / "missing.log") == [] and failed_job_errors(None) == []


def test_dape_verify_names_a_token_file_changed_in_place(tiny_corpus, tmp_path):
    from dape_core import verify

    data = tmp_path / "results" / "data" / "code"
    shutil.copytree(tiny_corpus, data)
    io.seal_file(data / "meta.json")  # a copied data folder's meta.json names the original: sealed where it is now
    with open(data / "train.bin", "r+b") as handle:
        handle.seek(10)
        byte = handle.read(1)
        handle.seek(10)
        handle.write(bytes([byte[0] ^ 1]))
    checked, findings, folder = verify.verify(tmp_path / "results")
    assert checked >= 5 and [f.path.name for f in findings] == ["train.bin"]
    assert (folder / "data" / "code" / "train.bin").is_file() and not (data / "train.bin").exists()


def test_remove_orphan_seals_removes_only_seals_whose_file_is_gone(tmp_path):
    from dape_core import io
    from dape_core.failed_run import remove_orphan_seals

    kept, gone = tmp_path / "results" / "a.csv", tmp_path / "reports" / "b.csv"
    for path in (kept, gone):
        path.parent.mkdir(parents=True, exist_ok=True)
        io.write_text(path, "x\n1\n", seal=True)
    gone.unlink()
    aside = tmp_path / "results" / ".damaged" / "t" / "c.csv.sha256"
    aside.parent.mkdir(parents=True)
    aside.write_text("0" * 64)
    assert remove_orphan_seals(tmp_path / "results", tmp_path / "reports", tmp_path / "absent") == [
        io.hash_path(gone)]
    assert io.hash_path(kept).exists() and not io.hash_path(gone).exists() and aside.exists()


def test_dape_verify_sets_aside_a_file_whose_seal_was_removed_and_dape_seal_migrates_older_results(tmp_path):
    """The issue's case: a windows.csv whose seal was deleted and one digit changed is set aside, named with the
    migration command for an older version's results; after `dape seal`, an older version's files pass."""
    from dape_core import verify
    from dape_core.seal import seal_unsealed, unsealed

    results = tmp_path / "results"
    io.write_text(results / "lm" / "a" / "windows.csv", "document,loss\n0,4.25\n", seal=True)
    (results / "lm" / "a" / "windows.csv.sha256").unlink()
    (results / "lm" / "a" / "windows.csv").write_text("document,loss\n0,4.26\n")
    (results / "lm" / "a" / "metrics.jsonl").write_text("{}\n")  # a kind no reader checks: not sealed, not damage
    resume = results / "checkpoints" / "run" / "seed0"  # an interrupted training's: its own loader checks them
    resume.mkdir(parents=True)
    (resume / "last.pt").write_bytes(b"checkpoint")
    (resume / "step-10").mkdir()
    (resume / "step-10" / "checkpoint.json").write_text("{}")
    checked, findings, folder = verify.verify(results)
    assert [(f.path.name, f.problem.split(":")[0]) for f in findings] == [
        ("windows.csv", "has no seal (windows.csv.sha256)")]
    assert "`dape seal`" in findings[0].problem and not (results / "lm" / "a" / "windows.csv").exists()
    assert (resume / "last.pt").exists() and (resume / "step-10" / "checkpoint.json").exists()  # left to resume
    older = tmp_path / "older"  # an older version's results: eval.csv and summary.json, no seals
    (older / "lm" / "r" / "seed0").mkdir(parents=True)
    (older / "lm" / "r" / "seed0" / "eval.csv").write_text("eval_len,ppl\n32,9.5\n")
    (older / "lm" / "r" / "seed0" / "summary.json").write_text("{}")
    assert [p.name for p in unsealed(older)] == ["eval.csv", "summary.json"]
    assert len(seal_unsealed(older)) == 2 and verify.verify(older)[1] == []


def test_dape_verify_asks_for_the_migration_instead_of_setting_older_results_aside(tmp_path, monkeypatch, capsys):
    """Results whose seals are an older version's are not damage to redo: `dape verify` sets nothing aside, names
    them and `dape seal`, and exits 2; after the migration it finds nothing."""
    monkeypatch.chdir(tmp_path)
    old = Path("results/lm/run/seed0/eval.csv")
    io.write_csv(old, eval_frame())
    io.hash_path(old).write_text(f"{io.file_sha256(old)}  eval.csv\n")
    assert main(["verify", "--results", "results"]) == 2
    out = capsys.readouterr().out
    assert ("1 files of results carry an older version's seal (no file identity), e.g. "
            "results/lm/run/seed0/eval.csv: ") in out
    assert "run `dape seal results` once" in out and "nothing was set aside" in out
    assert old.is_file() and not Path("results/.damaged").exists()
    assert main(["seal", "results"]) == 0
    assert main(["verify", "--results", "results"]) == 0
    assert "0 set aside" in capsys.readouterr().out and old.is_file()


def test_dape_verify_names_a_deleted_result_the_reports_were_made_from_and_keeps_it_pending(tmp_path, monkeypatch):
    """A run's folder deleted with its seals, and one evaluation's eval.csv and windows.csv with theirs: each file the
    plan expects and the aggregated table read is named in one line and listed by --pending (Snakemake would see
    its targets made); results the table was not made from (a run added since) are not."""
    from dape_core import verify
    from dape_core.cli import main

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    plan = verify.configured_plan([str(repo / "configs" / "smoke.yaml")])
    first, second, third = list(plan.lm_runs)[:3]
    rows = "".join(f"{run},0,code,results/lm/{run}/seed0/eval.csv\n" for run in (first, second))
    io.write_text("reports/smoke/lm_results.csv", "run,seed,dataset,source_file\n" + rows, seal=True)
    io.write_text("results/data/code/meta.json", "{}", seal=True)
    for name in ("model.pt", "summary.json"):  # the second run: its evaluation deleted, the training kept
        io.write_text(f"results/lm/{second}/seed0/{name}", "x", seal=True)
    monkeypatch.setattr(verify, "check_sealed", lambda path, record, plan=None: None)  # stand-ins, not real results
    assert main(["verify", "--results", "results", "--reports", "reports/smoke", "--configfile",
                 str(repo / "configs" / "smoke.yaml")]) == 0
    gone = {f"results/lm/{first}/seed0/{name}" for name in ("model.pt", "summary.json", "eval.csv", "windows.csv")}
    gone |= {f"results/lm/{second}/seed0/{name}" for name in ("eval.csv", "windows.csv")}
    pending = {str(path) for path in verify.pending(Path("results"))}
    assert pending == gone and not any(third in path for path in pending)
    assert verify.forcerun_arguments(sorted(map(Path, gone))).startswith("--forcerun results/lm/")


def test_dape_verify_prints_one_line_per_deleted_result(tmp_path, monkeypatch, capsys):
    from dape_core import verify
    from dape_core.cli import main

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    run = verify.configured_plan([str(repo / "configs" / "smoke.yaml")]).train_jobs()[0][0]
    io.write_text("reports/smoke/lm_results.csv", f"run,seed,source_file\n{run},0,results/lm/{run}/seed0/eval.csv\n",
                  seal=True)
    io.write_text(f"results/lm/{run}/seed0/eval.csv", "eval_len,ppl\n32,9.5\n", seal=True)
    Path(f"results/lm/{run}/seed0/eval.csv").unlink()  # its seal left: the file is what is pending
    Path(f"results/lm/{run}/seed0/windows.csv.sha256").write_text("")  # no file either; a seal of nothing
    assert main(["verify", "--results", "results", "--reports", "reports/smoke", "--configfile",
                 str(repo / "configs" / "smoke.yaml")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("dape verify: results/")]
    assert {line.split(": ")[1] for line in lines} == {f"results/lm/{run}/seed0/{name}" for name in
                                                     ("eval.csv", "windows.csv", "summary.json", "model.pt")}
    assert all(line.endswith("the DAG redoes it with what depends on it") for line in lines), lines
    assert main(["verify", "--results", "results", "--pending"]) == 0
    assert f"results/lm/{run}/seed0/eval.csv" in capsys.readouterr().out
