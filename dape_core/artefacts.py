"""Every per-job output checked where it is read: the sha256 and identity its job recorded (``<file>.sha256``,
:mod:`dape_core.io`), the columns and types its kind declares, and its row counts where the plan knows them. A
damaged, cut or foreign file (also one without its seal, or whose seal names another file) stops the reader with one
line naming the file, the problem and the command that redoes it (:class:`~dape_core.errors.ArtefactError`): it never
becomes a number in reports/. An older version's results are sealed once by ``dape seal`` (:mod:`dape_core.seal`).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dape_core import io
from dape_core.errors import ArtefactError
from dape_core.model_folder import RUN_RECORD, model_files


@dataclass(frozen=True)
class Kind:
    """What a reader verifies of one kind of file: the ``columns`` (CSV) or ``keys`` (JSON) it needs; of the columns
    present, ``numeric`` ones hold numbers and ``filled`` ones no blank (``filled_when_ok``: none in a row of status
    ok; a job table's last column is among them, so a cut row shows); the ``rule`` that writes it (for the redo
    command) and the ``commands`` whose jobs write it (their seals name them)."""

    name: str
    rule: str
    columns: tuple[str, ...] = ()
    numeric: tuple[str, ...] = ()
    filled: tuple[str, ...] = ()
    filled_when_ok: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()


EVAL = Kind("evaluation table (dape evaluate --out)", "evaluate_lm", commands=("dape evaluate",),
            columns=("eval_len", "status", "ppl"),
            numeric=("eval_len", "ppl", "loss"), filled=("eval_len", "status", "method", "config_hash", "data_dir"),
            filled_when_ok=("ppl", "loss"))
_WINDOW_COLUMNS = ("eval_len", "document", "anchor", "tokens", "loss", "loss_dp", "loss_local")  # all numbers, filled
WINDOWS = Kind("per-window losses (dape evaluate --windows-out)", "evaluate_lm", commands=("dape evaluate",),
               columns=_WINDOW_COLUMNS, numeric=_WINDOW_COLUMNS, filled=_WINDOW_COLUMNS)
SINK = Kind("attention-sink table (dape evaluate --sink-out)", "attention_maps", commands=("dape evaluate",),
            columns=("method", "eval_len", "layer", "sequence", "sink_mass"),
            numeric=("eval_len", "layer", "sequence", "sink_mass"), filled=("method", "eval_len", "layer", "sink_mass"))
TIMING = Kind("timing table (dape time --out)", "time_lm", commands=("dape time",),
              columns=("method", "median_ms"),
              numeric=("seq_len", "batch_size", "repeats"), filled=("method", "seq_len", "mode", "status"))
REPEATS = Kind("timing repeats (dape time --repeats-out)", "time_lm", commands=("dape time",),
               columns=("run", "method", "size", "n_layer", "d_model", "seq_len", "batch_size", "mode", "precision",
                        "device", "threads", "cell", "block", "round", "position", "ms"),
               numeric=("n_layer", "d_model", "seq_len", "batch_size", "replicate", "block", "round", "position",
                        "ms"),
               filled=("run", "method", "cell", "round", "ms"))
CHE = Kind("CHE results (dape che --out)", "che", commands=("dape che",),
           columns=("task", "accuracy"),
           numeric=("seed", "accuracy", "n_samples"), filled=("task", "method", "seed", "accuracy", "row_type"))
SUMMARY = Kind("training summary (dape train)", "train_lm", keys=("status",), commands=("dape train", "dape finetune"))
PLAN = Kind("report spec (rule write_plan)", "write_plan", keys=("families", "lm_runs", "lm_members"))
SHIFT = Kind("robustness shift summary (rule robustness_config)", "robustness_config",
             keys=("shift", "seeds", "data_seeds", "train_lens"))

#: the aggregated tables of reports/ (sealed by the rules that write them), by file name
REPORT_TABLES = {
    "lm_results.csv": Kind("aggregated language-model results", "aggregate_lm",
                           columns=("run", "seed", "method", "eval_len", "status", "ppl"),
                           numeric=("seed", "eval_len", "ppl"), filled=("run", "seed", "eval_len", "status")),
    "lm_windows.csv": Kind("aggregated per-window losses", "aggregate_lm",
                           columns=("run", "seed", "eval_len", "document", "anchor", "loss"),
                           numeric=("seed", "eval_len", "document", "anchor", "loss"),
                           filled=("run", "seed", "eval_len", "document", "anchor", "loss")),
    "timing.csv": Kind("aggregated timing", "aggregate_timing", columns=("run", "method", "status", "median_ms"),
                       filled=("run", "method", "status")),
    "timing_repeats.csv": Kind("aggregated timing repeats", "aggregate_timing", columns=REPEATS.columns,
                               numeric=REPEATS.numeric, filled=REPEATS.filled),
    "che_results.csv": Kind("aggregated CHE results", "aggregate_che", columns=("cell", "task", "method", "seed",
                                                                             "accuracy", "row_type"),
                            numeric=CHE.numeric, filled=CHE.filled),
    "sink.csv": Kind("aggregated attention sink", "aggregate_sink", columns=("run", "seed", "method", "sink_mass"),
                     numeric=("seed", "sink_mass"), filled=("run", "seed", "method")),
    "leakage.csv": Kind("leakage table", "leakage_table", columns=("run", "twin", "seed", "eval_len", "ratio"),
                        numeric=("seed", "eval_len", "ratio"), filled=("run", "twin", "seed", "eval_len")),
    "claims.csv": Kind("claim verdicts", "claims", columns=("claim_id", "verdict"), filled=("claim_id", "verdict")),
}


def report_table(path: str | Path) -> Kind:
    """The kind of an aggregated table by its file name (a table of another name: read with the hash alone)."""
    name = Path(path).name
    return REPORT_TABLES.get(name, Kind(f"table {name}", "all"))


def fail(path: str | Path, problem: str, rule: str | None = None) -> ArtefactError:
    """The one line for a file that cannot be used: the file, what is wrong and, for a DAG output, the command that
    remakes it (with the run's own --configfile and --cores)."""
    if rule:
        problem += f"; redo it: snakemake --forcerun {path} (rule {rule}; add this run's --configfile and --cores)"
    return ArtefactError(f"{path}: {problem}")


def verify_hash(path: str | Path, rule: str | None = None, *, spec: str | None = None,
                commands: tuple[str, ...] = ()) -> bool:
    """Compare ``path`` with the sha256 and identity its job recorded; True when both match. Raises on a missing seal
    (removed, or an older version's file not yet migrated by ``dape seal``), an unreadable one, a seal of another file
    or a content mismatch. Where given, ``spec`` (the plan's digest for the file's job,
    :mod:`dape_core.config.provenance`) and ``commands`` must match what the seal records (a seal without them is
    checked for content and identity only). A verified file becomes an input of the running job
    (:func:`dape_core.io.record_input`)."""
    record = io.hash_path(path)
    if not record.is_file():
        raise fail(path, f"has no seal ({record.name}): its seal was removed, or it was written before outputs were "
                         "sealed (an older run's files are sealed once with `dape seal`)", rule)
    try:
        seal = io.read_seal(record)
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        raise fail(record, "not a sha256 record (expected `<hex>  <name>`)", rule) from None
    try:
        found = io.file_sha256(path)
    except OSError as err:
        raise fail(path, f"cannot be read ({err.strerror})", rule) from None
    if found != seal.digest:
        raise fail(path, f"its content does not match the sha256 its job recorded in {record.name} (cut, garbled "
                         "or overwritten since it was written)", rule)
    if seal.identity is None:
        raise fail(path, f"its seal ({record.name}) names no file: {io.OLDER_SEAL}, which `dape seal` upgrades once",
                   rule)
    if not io.names_file(seal.identity, path):
        raise fail(path, f"its seal was written for {seal.identity}: a copy of another file, not the one its job wrote "
                         "here", rule)
    if commands and seal.command is not None and seal.command not in commands:
        raise fail(path, f"written by `{seal.command}`, where this file is `{'` or `'.join(commands)}`'s: not the "
                         "file its job wrote", rule)
    if spec is not None and seal.spec is not None and seal.spec != spec:
        raise fail(path, f"made with other settings (its job's spec {seal.spec}, where this configuration's job has "
                         f"{spec}): a stale result, or another configuration's", rule)
    io.record_input(seal)
    return True


def verify_model_directory(path: str | Path, rule: str = "finetune_lm") -> bool:
    """Verify every file of a model directory this project wrote (with a run record, ``finetune.json``) against its
    seal (:func:`verify_hash`); False, verifying nothing, for one without a run record (a downloaded base model)."""
    path = Path(path)
    if not (path / RUN_RECORD).is_file():
        return False
    for file in model_files(path):
        verify_hash(file, rule)
    return True


def read_csv(path: str | Path, kind: Kind, *, rows: int | None = None, rule: str | None = None,
             spec: str | None = None) -> pd.DataFrame:
    """A CSV output of ``kind``, verified: its seal (:func:`verify_hash`, with ``spec``), parseable, the declared
    columns, numbers and no blanks where declared, and exactly ``rows`` rows when given."""
    rule = rule or kind.rule
    verify_hash(path, rule, spec=spec, commands=kind.commands)
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as err:
        raise fail(path, f"unreadable as the {kind.name} ({type(err).__name__}: {str(err).splitlines()[0][:120]})",
                   rule) from None
    except OSError as err:
        raise fail(path, f"cannot be read ({err.strerror})", rule) from None
    missing = [c for c in kind.columns if c not in frame]
    if missing:
        raise fail(path, f"no column {', '.join(missing)}; expected the {kind.name}", rule)
    for column in (c for c in kind.numeric if c in frame):
        values = frame[column]
        bad = values.notna() & pd.to_numeric(values, errors="coerce").isna()
        if bad.any():
            raise fail(path, f"column {column} holds {values[bad].iloc[0]!r} in data row {int(bad.idxmax()) + 1}, "
                             "not a number", rule)
    ok = frame["status"].eq("ok") if "status" in frame else pd.Series(True, index=frame.index)
    for column in (c for c in (*kind.filled, *kind.filled_when_ok) if c in frame):
        blank = frame[column].isna() & (ok if column in kind.filled_when_ok else True)
        if blank.any():
            raise fail(path, f"column {column} is blank in data row {int(blank.idxmax()) + 1} (a cut or damaged "
                             "file)", rule)
    if rows is not None and len(frame) != rows:
        raise fail(path, f"{len(frame)} data rows where its run has {rows}", rule)
    return frame


def read_json(path: str | Path, kind: Kind, *, rule: str | None = None, spec: str | None = None) -> dict[str, Any]:
    """A JSON output of ``kind``, verified: its seal (:func:`verify_hash`, with ``spec``), an object with the
    declared keys."""
    rule = rule or kind.rule
    verify_hash(path, rule, spec=spec, commands=kind.commands)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise fail(path, f"not valid JSON ({err.msg} at line {err.lineno} column {err.colno})", rule) from None
    except UnicodeDecodeError:
        raise fail(path, "not valid JSON (not UTF-8 text)", rule) from None
    except OSError as err:
        raise fail(path, f"cannot be read ({err.strerror})", rule) from None
    if not isinstance(data, dict):
        raise fail(path, f"a JSON {type(data).__name__}; expected the {kind.name} (an object)", rule)
    missing = [k for k in kind.keys if k not in data]
    if missing:
        raise fail(path, f"no key {', '.join(missing)}; expected the {kind.name}", rule)
    return data


def load_npz(path: str | Path, keys: tuple[str, ...], *, rule: str = "attention_maps") -> dict[str, Any]:
    """A NumPy archive (attention maps), verified: recorded hash, a readable archive holding ``keys``."""
    import numpy as np

    verify_hash(path, rule)
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise fail(path, f"not a readable NumPy archive ({type(err).__name__})", rule) from None
    missing = [k for k in keys if k not in data]
    if missing:
        raise fail(path, f"no array {', '.join(missing)}", rule)
    return data
