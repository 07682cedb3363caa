"""``dape verify``: every sealed file of a results directory checked before the DAG is built, so that the same
command recovers from damage with no manual step.

A job seals what it writes (``<file>.sha256``, :mod:`dape_core.io`) and the token files' hashes are in their
``meta.json``. This command hashes each such file and sets aside those that no longer match (cut, garbled,
overwritten, bit rot), those it cannot read, and seals whose file is gone: each is moved, never deleted, under
``<results>/.damaged/<time>/`` at its relative path, with a line in that folder's ``NOTE.txt`` saying why, and
named in one line on the console. Snakemake does not redo a missing file that finished outputs were made from (it
treats it as a temporary one), so the set-aside files stay listed in ``<results>/.damaged/pending.txt`` until they
exist again, and ``--forcerun`` of them makes Snakemake redo exactly their jobs and the jobs after them (whose inputs
are then newer). The configuration's reports folder (``--reports``) is checked too: its sealed tables, a damaged
one set aside like a result so that its aggregation is redone. ``make reproduce`` and ``make robustness`` run
``dape verify`` and pass that list; on a cluster::

    dape verify --reports reports --configfile CONFIG && snakemake --configfile CONFIG $(dape verify --pending)

With the configuration (``--configfile``) a result whose seal records other settings than the plan gives its job
(:mod:`dape_core.config.provenance`) is set aside as well, and so is one made from an input that has changed since
(an ``input:`` line of its seal, :mod:`dape_core.io`, whose file's seal now holds another sha256). A result the plan
expects that is gone, with or without its seal, while the reports made from it are there (a run's folder deleted,
an evaluation deleted with its seals) is named and pending too (:func:`missing_results`): Snakemake, whose targets
are made, would not redo it, and the reports would keep numbers whose source is gone. So is a token file that its
``meta.json`` records and that is gone.

A file of a kind the jobs seal (CSV, JSON, model, archive) that has no seal is set aside too: its seal was removed,
or it is not what its job wrote. Results of an older version, written before every output was sealed, are sealed
once by ``dape seal`` (:mod:`dape_core.seal`), the migration. A failed run leaves no seal of a file that does not
exist: the workflow's ``onerror`` removes the seals of the outputs Snakemake deleted
(:func:`dape_core.failed_run.remove_orphan_seals`).

A file copied with its seal from another run's folder is set aside as well: the seal names the file it was written
for. Results whose seals are an older version's (a sha256 without the file's identity) are not damage to redo: the
command sets nothing aside, names them and the migration (``dape seal``, once), and exits with status 2.
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
    """Why ``path`` cannot be used against its seal ``record``, or None when it matches: its content and identity,
    with a configuration's ``plan`` the settings it gives the file's job (:mod:`dape_core.config.provenance`), and
    the inputs its job recorded (:func:`stale_input`)."""
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
    """Whether a job's output was made from an input that has changed since: an ``input:`` line of its seal whose
    file is there with another sha256 in its own seal (an input that is gone, or unsealed, is its own finding)."""
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
        recorded += [("token_bytes.npy", tokenizer.get("token_bytes_sha256")), ("tokenizer.json", tokenizer.get("sha256"))]
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
    """Where ``path`` goes under a .damaged folder: its path in ``results``, or for a file of a reports folder beside
    it, its path in the working directory (``reports/…``)."""
    try:
        return path.relative_to(results)
    except ValueError:
        return Path(os.path.relpath(path, results.parent))


def set_aside(results: Path, findings: list[Finding], stamp: str) -> Path:
    """Moves each finding's file (and its seal) to ``<results>/.damaged/<stamp>/`` at its relative path, with a
    NOTE.txt line each; returns that folder."""
    folder = results / DAMAGED / stamp
    with_seals = []
    for finding in findings:
        with_seals.append(finding.path)
        if io.hash_path(finding.path).exists() and finding.path.suffix != io.HASH_SUFFIX:
            with_seals.append(io.hash_path(finding.path))
    for path in with_seals:
        if path.exists():
            target = folder / _relative(results, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), str(target))
    note = folder / "NOTE.txt"
    folder.mkdir(parents=True, exist_ok=True)
    with open(note, "a", encoding="utf-8") as handle:
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
    """(files checked, findings, the folder they were moved to) for a results directory and the configuration's
    ``reports`` folders beside it (their sealed tables: a damaged one is set aside like a result, so that its
    aggregation is redone); with the configuration's ``plan`` (:class:`~dape_core.config.Plan`), a file whose seal
    records other settings than the plan gives its job is set aside too; :class:`OlderResults` (nothing set aside)
    where seals of an older version are found."""
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
    """The results the plan expects that are gone (with or without their seal) although an aggregated table of the
    configuration's reports folder was made from them (its ``source_file`` and ``dataset`` columns name their job,
    :func:`job_of`; :func:`dape_core.config.planned_results`, with a design the designed plan's), each with that
    table: Snakemake would not redo them, its targets being made, and the reports would keep numbers whose source is
    gone."""
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
    """The jobs (:func:`job_of`) whose results an aggregated table was made from: its rows' ``source_file``, and the
    tokenization of each ``dataset``; empty when it is not there or cannot be read (then its aggregation is redone
    whole)."""
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
    """The job a result file of the workflow's layout comes from: a language model's folder (its training and
    evaluation, ``results/lm/<run>/seed<k>``, or an attention-map job's ``…/attention/L<n>``), else the file without
    its suffixes (a CHE cell's seed, a timing job, a dataset's tokenization)."""
    path = Path(file)
    if "lm" in path.parts:
        return path.parent.as_posix()
    return (path.parent / path.name.split(".")[0]).as_posix()


def designed_plan(plan, reports: Path):
    """``plan`` with the fresh seeds of the design in ``reports`` (design.json) where it has a design block and
    that design is there and readable; ``plan`` otherwise."""
    if not plan.config.get("design") or not (reports / "design.json").is_file():
        return plan
    from dape_core.report.design import read_design

    try:
        design = read_design(reports / "design.json")
    except (ArtefactError, ConfigError, KeyError):  # a damaged design is its own finding, redone by its rule
        return plan
    return plan.with_design(design["fresh"], design["fresh_maps"])


def whole_model_directories(findings: list[Finding]) -> list[Finding]:
    """A damaged file of a fine-tune's ``model/`` folder sets the whole folder aside (its job's one output, which
    transformers reads whole), named with the file and its problem; the other findings as they are."""
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
    """The set-aside files not remade yet: those of earlier runs still missing, and ``set_aside_now``; the list is
    kept in ``<results>/.damaged/pending.txt`` (removed when empty)."""
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
    """The plan of a configuration (its files merged in order, as Snakemake merges --configfile): the settings each
    job gets (:class:`dape_core.config.Plan`), its sizes checked against the corpora tokenized under ``results``
    (:func:`dape_core.config.check_sizes`)."""
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
