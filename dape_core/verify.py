"""``dape verify``: every sealed file of a results directory checked before the DAG is built, so that the same
command recovers from damage with no manual step.

A file that fails its seal (``<file>.sha256``, :mod:`dape_core.io`; token files: the sha256 their ``meta.json``
records) or cannot be read, and a seal whose file is gone, is moved, never deleted, to ``<results>/.damaged/<time>/``
at its relative path, with a line in that folder's ``NOTE.txt`` and on the console. Also set aside: a result made from
an input changed since (an ``input:`` line of its seal); with ``--configfile``, one whose seal records other settings
than the plan gives its job (:mod:`dape_core.config.provenance`); a file of a sealed kind (CSV, JSON, model, archive)
without a seal (removed, or not what its job wrote; a failed run's orphan seals are removed by
:func:`dape_core.failed_run.remove_orphan_seals`); a file copied with its seal from another folder. Named and pending,
with nothing to move: a result the plan expects that is gone while reports made from it are there
(:func:`missing_results`), and a token file ``meta.json`` records that is gone. With ``--reports``, a damaged sealed
table is set aside too, so its aggregation is redone.

Snakemake does not redo a missing file that finished outputs were made from, so set-aside files stay listed in
``<results>/.damaged/pending.txt`` until they exist again, and ``--pending`` prints the ``--forcerun`` that redoes
exactly their jobs and those after them (``make reproduce`` and ``make robustness`` pass it); on a cluster::

    dape verify --reports reports --configfile CONFIG && snakemake --configfile CONFIG $(dape verify --pending)

Seals of an older version (a sha256 without the file's identity) are not damage: nothing is set aside, the command
names them and the migration (``dape seal``, :mod:`dape_core.seal`, once) and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from dape_core import io
from dape_core.errors import ArtefactError, ConfigError
from dape_core.seal import unsealed

DAMAGED = ".damaged"
PENDING = "pending.txt"  # under DAMAGED: what was set aside and is not yet remade
GONE = "is gone"  # a finding of a result that is not there (nothing to set aside)


@dataclass(frozen=True)
class Finding:
    """A file that cannot be used and why (a relative path, and the problem in a few words)."""

    path: Path
    problem: str


def sealed_files(results: Path):
    """(file, seal) of every sealed file under ``results`` (not under its .damaged folder), in path order."""
    for record in sorted(results.rglob(f"*{io.HASH_SUFFIX}")):
        if DAMAGED in record.relative_to(results).parts:
            continue
        yield record.with_name(record.name[:-len(io.HASH_SUFFIX)]), record


def check_sealed(path: Path, record: Path, plan=None) -> str | None:
    """Why ``path`` fails its seal ``record`` (content, identity, with ``plan`` its job's settings, and its recorded
    inputs, :func:`stale_input`), or None when it matches."""
    from dape_core.artefacts import verify_hash
    from dape_core.config.provenance import planned_spec

    if not path.exists():
        return "a seal whose file is gone"
    try:
        verify_hash(path, spec=planned_spec(plan, path) if plan is not None else None)
    except ArtefactError as err:
        return str(err).split(": ", 1)[1]
    return stale_input(record)


def stale_input(record: Path) -> str | None:
    """Why an output is stale: an ``input:`` line of its seal whose file's own seal now holds another sha256 (an
    input that is gone or unsealed is its own finding); None otherwise."""
    try:
        seal = io.read_seal(record)
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        return None  # verify_hash named it
    for identity, digest, _ in seal.inputs:
        source = io.hash_path(identity)
        try:
            now = io.read_seal(source).digest if source.is_file() else None
        except (OSError, UnicodeDecodeError, IndexError, ValueError):
            continue
        if now is not None and now != digest:
            return (f"made from an earlier {identity} (its sha256 has changed since this file was written): a stale "
                    "result")
    return None


def token_file_findings(results: Path) -> tuple[int, list[Finding]]:
    """(token files checked, those that differ from the sha256 their data folder's ``meta.json`` recorded)."""
    from dape_core.data.token_files import verify_token_file

    findings, checked = [], 0
    for meta_path in sorted(results.rglob("meta.json")):
        if DAMAGED in meta_path.relative_to(results).parts:
            continue
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not ours to judge here: its readers name it (dape_core.data.token_files.read_meta)
        if not isinstance(meta, dict) or not isinstance(meta.get("splits"), dict):
            continue
        recorded = [(f"{split}.bin", s.get("tokens_sha256")) for split, s in meta["splits"].items()
                    if isinstance(s, dict)]
        recorded += [(f"{split}.docs.npy", s.get("docs_sha256")) for split, s in meta["splits"].items()
                     if isinstance(s, dict)]
        tokenizer = meta.get("tokenizer") if isinstance(meta.get("tokenizer"), dict) else {}
        recorded += [("token_bytes.npy", tokenizer.get("token_bytes_sha256")),
                     ("tokenizer.json", tokenizer.get("sha256"))]
        for name, wanted in recorded:
            path = meta_path.with_name(name)
            if not wanted:
                continue
            checked += 1
            if not path.exists():
                findings.append(Finding(path, f"{GONE}, a token file its meta.json records"))
                continue
            try:
                verify_token_file(path, wanted)
            except ArtefactError:
                findings.append(Finding(path, "its content does not match the sha256 meta.json recorded"))
    return checked, findings


def _relative(results: Path, path: Path) -> Path:
    """``path`` under a .damaged folder: relative to ``results``, or for a reports folder's file, to the working
    directory (``reports/…``)."""
    try:
        return path.relative_to(results)
    except ValueError:
        return Path(os.path.relpath(path, results.parent))


def set_aside(results: Path, findings: list[Finding], stamp: str) -> Path:
    """Moves each finding's file (and its seal) to ``<results>/.damaged/<stamp>/`` at its relative path, with a
    NOTE.txt line each; returns that folder."""
    folder = results / DAMAGED / stamp
    for finding in findings:
        seal = () if finding.path.suffix == io.HASH_SUFFIX else (io.hash_path(finding.path),)
        for path in (finding.path, *seal):
            if path.exists():
                target = folder / _relative(results, path)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(path), str(target))
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "NOTE.txt", "a", encoding="utf-8") as handle:
        for finding in findings:
            handle.write(f"{_relative(results, finding.path)}: {finding.problem}\n")
    return folder


class OlderResults(Exception):
    """Files whose seals are an older version's: the migration (``dape seal``) comes first."""

    def __init__(self, findings: list[Finding]):
        super().__init__(f"{len(findings)} files")
        self.findings = findings


def verify(results: str | Path, reports: tuple[str | Path, ...] = (),
           plan=None) -> tuple[int, list[Finding], Path | None]:
    """(files checked, findings, the folder they were moved to) for ``results`` and the ``reports`` folders' sealed
    tables; with ``plan`` (:class:`~dape_core.config.Plan`) a seal recording other settings than the plan's is a
    finding too. Raises :class:`OlderResults` (nothing set aside) where seals of an older version are found."""
    results = Path(results)
    if not results.is_dir():
        return 0, [], None
    findings, checked = [], 0
    # a reports folder's own tables only: another configuration's reports folder may lie inside (reports/<name>/)
    tables = [(record.with_name(record.name[:-len(io.HASH_SUFFIX)]), record) for folder in map(Path, reports)
              if folder.is_dir() for record in sorted(folder.glob(f"*{io.HASH_SUFFIX}"))]
    gone = missing_results(results, reports, plan) if plan is not None else {}
    for path, record in [*sealed_files(results), *tables]:
        checked += 1
        problem = check_sealed(path, record, plan)
        if problem is not None:  # a seal whose file is gone: the file is what is redone where the plan expects it
            findings.append(Finding(record if problem.startswith("a seal whose") and path not in gone else path,
                                    problem))
    checked += len(gone)
    findings += [Finding(path, f"{GONE} with its seal, a result the plan expects that {table} was made from")
                 for path, table in gone.items() if not io.hash_path(path).exists()]
    token_files, token_findings = token_file_findings(results)
    checked += token_files
    findings += token_findings
    from dape_core.artefacts import REPORT_TABLES

    bare = [folder / name for folder in map(Path, reports) for name in sorted(REPORT_TABLES)
            if (folder / name).is_file() and not io.hash_path(folder / name).exists()]
    for path in [*unsealed(results), *bare]:  # a file of a sealed kind without its seal: not what its job wrote
        checked += 1
        findings.append(Finding(path, f"has no seal ({io.hash_path(path).name}): its seal was removed, or it was "
                                      "written by an older version (whose results `dape seal` seals once, before "
                                      "`dape verify`)"))
    older = [finding for finding in findings if io.OLDER_SEAL in finding.problem]
    if older:
        raise OlderResults(older)
    if not findings:
        return checked, [], None
    findings = whole_model_directories(findings)
    return checked, findings, set_aside(results, findings, time.strftime("%Y%m%d-%H%M%S"))


def missing_results(results: Path, reports: tuple[str | Path, ...], plan) -> dict[Path, Path]:
    """Each result the plan expects (:func:`dape_core.config.planned_results`, a design's plan where there is one)
    that is gone (with or without its seal) although a reports table was made from it (its ``source_file``/``dataset``
    columns, :func:`job_of`), with that table: Snakemake, its targets made, would not redo it."""
    from dape_core import config as grid

    gone = {}
    for folder in map(Path, reports):
        for table, files in grid.planned_results(designed_plan(plan, folder)).items():
            made_from = table_sources(folder / table)
            for file in files:
                path = results / Path(file).relative_to("results")
                if job_of(file) in made_from and not path.exists():
                    gone[path] = folder / table
    return gone


def table_sources(table: Path) -> set[str]:
    """The jobs (:func:`job_of`) an aggregated table was made from (rows' ``source_file``, each ``dataset``'s
    tokenization); empty when it is unreadable or not there (its aggregation is then redone whole)."""
    import csv

    try:
        with open(table, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error):
        return set()
    sources = {row["source_file"] for row in rows if row.get("source_file")}
    sources |= {f"results/data/{row['dataset']}/meta.json" for row in rows if row.get("dataset")}
    return {job_of(source) for source in sources}


def job_of(file: str) -> str:
    """The job a result file comes from: a language model's folder (``results/lm/<run>/seed<k>``, or
    ``…/attention/L<n>``), else the file without its suffixes (a CHE seed, a timing job, a tokenization)."""
    path = Path(file)
    return (path.parent if "lm" in path.parts else path.parent / path.name.split(".")[0]).as_posix()


def designed_plan(plan, reports: Path):
    """``plan`` with the fresh seeds of ``reports``/design.json where it has a design block and that file is
    readable; ``plan`` otherwise."""
    if not plan.config.get("design") or not (reports / "design.json").is_file():
        return plan
    from dape_core.report.design import read_design

    try:
        design = read_design(reports / "design.json")
    except (ArtefactError, ConfigError, KeyError):  # a damaged design is its own finding, redone by its rule
        return plan
    return plan.with_design(design["fresh"], design["fresh_maps"])


def whole_model_directories(findings: list[Finding]) -> list[Finding]:
    """Findings with a fine-tune's ``model/`` file replaced by the whole folder (its job's one output, read whole by
    transformers), named with the file and its problem."""
    from dape_core.seal import model_directory_of

    out: dict[Path, Finding] = {}
    for finding in findings:
        model = model_directory_of(finding.path)
        if model is None:
            out.setdefault(finding.path, finding)
        else:
            out.setdefault(model, Finding(model, f"{finding.path.relative_to(model)} {finding.problem}"))
    return list(out.values())


def pending(results: Path, set_aside_now: list[Path] = ()) -> list[Path]:
    """The set-aside files not remade yet (earlier runs' still missing, and ``set_aside_now``), kept in
    ``<results>/.damaged/pending.txt`` (removed when empty)."""
    record = results / DAMAGED / PENDING
    earlier = record.read_text(encoding="utf-8").split("\n") if record.is_file() else []
    paths = sorted({Path(p) for p in earlier if p and not Path(p).exists()} | set(set_aside_now))
    if paths:
        io.write_text(record, "".join(f"{p}\n" for p in paths))
    else:
        record.unlink(missing_ok=True)
    return paths


def forcerun_arguments(paths: list[Path]) -> str:
    """Snakemake's arguments that redo ``paths`` and what depends on them ('' for none)."""
    return " ".join(["--forcerun", *map(str, paths)]) if paths else ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default="results", help="the results directory of the workflow (its workdir's)")
    parser.add_argument("--reports", nargs="*", default=[], metavar="DIR",
                        help="the configuration's reports folder (reports/ or reports/<name>/): its sealed tables "
                             "(the files directly in it) are checked too")
    parser.add_argument("--configfile", nargs="*", default=[], metavar="YAML",
                        help="the configuration the results are for (as Snakemake's --configfile): a result whose "
                             "seal records other settings than its plan gives the file's job is set aside too")
    parser.add_argument("--pending", action="store_true",
                        help="check nothing; print the Snakemake arguments that redo the set-aside files not yet "
                             "remade (--forcerun …), or nothing")


def configured_plan(configfiles: list[str], results: str | Path = "results"):
    """The :class:`dape_core.config.Plan` of config files merged in order (as Snakemake's --configfile), its sizes
    checked against the corpora tokenized under ``results`` (:func:`dape_core.config.check_sizes`)."""
    from dape_core import config as grid

    merged: dict = {}
    for path in configfiles:
        try:
            merged = _merged(merged, grid.load_yaml(path))
        except ConfigError as err:  # a file it cannot read or parse
            raise ConfigError(f"--configfile: {err}") from None
    plan = grid.build_plan(merged)
    grid.check_sizes(plan, results)
    return plan


def _merged(base: dict, update: dict) -> dict:
    """``update`` over ``base``, mappings merged key by key (Snakemake's --configfile semantics)."""
    out = dict(base)
    for key, value in update.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def run(args: argparse.Namespace) -> int:
    results = Path(args.results)
    if args.pending:
        print(forcerun_arguments(pending(results)))
        return 0
    start = time.perf_counter()
    plan = configured_plan(args.configfile, results) if args.configfile else None
    try:
        checked, findings, folder = verify(results, tuple(args.reports), plan)
    except OlderResults as older:
        print(f"dape verify: {len(older.findings)} files of {args.results} carry {io.OLDER_SEAL} (no file identity), "
              f"e.g. {older.findings[0].path}: run `dape seal {args.results}` once (it upgrades the seals of files "
              "that still match them), then the same command; nothing was set aside", flush=True)
        return 2
    pending(results, [finding.path for finding in findings if finding.path.suffix != io.HASH_SUFFIX])
    for finding in findings:
        moved = "" if finding.problem.startswith(GONE) else f"set aside under {folder}, "
        print(f"dape verify: {finding.path}: {finding.problem}; {moved}the DAG redoes it with what depends on it",
              flush=True)
    gone = sum(finding.problem.startswith(GONE) for finding in findings)
    print(f"dape verify: {checked} sealed and token files of {args.results} checked in "
          f"{time.perf_counter() - start:.1f} s, {gone} gone, {len(findings) - gone} set aside", flush=True)
    return 0
