"""Atomic outputs: write under a temporary name in the destination directory, then rename.

A killed job never leaves a file that looks finished (Snakemake judges completeness by existence). A job's result
files are also *sealed* (``seal=True``): first ``<file>.sha256`` is written beside them, a ``sha256sum`` line and the
file's identity (``file: <its path>``, :func:`identity_of`), so the reader (:mod:`dape_core.artefacts`) can tell a
damaged, overwritten or copied file from the one this job wrote. A workflow job's seals also carry (:func:`stamp_job`)
``by: dape <command>``, ``spec: <digest>`` (:func:`spec_digest` of its ``--spec``) and, per sealed file the job read
and verified (:func:`record_input`), one ``input: <identity> <sha256> <spec>`` line.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from dape_core.errors import WriteFailure


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``, renamed to ``path`` on success, removed on error. A write refused for
    want of room or permission raises :class:`WriteFailure` (:func:`write_failure`); ``path`` keeps its content."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except Exception as err:
        failure = write_failure(path, tmp, err)
        if failure is None:
            raise
        raise failure from err
    finally:
        tmp.unlink(missing_ok=True)


#: errnos of a write that the disk or the process's limits refused, not the program
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES})


def write_failure(path: Path, tmp: Path, err: BaseException) -> WriteFailure | None:
    """A :class:`WriteFailure` for ``path`` when ``err`` came from the disk or a limit, else None. Where a writer
    hides the errno (torch.save's RuntimeError), appending one byte to ``tmp`` fails with it if that was the cause."""
    if isinstance(err, WriteFailure):
        return err
    cause = err if isinstance(err, OSError) and err.errno in WRITE_ERRNOS else None
    if cause is None and not isinstance(err, OSError) and tmp.exists():
        try:
            with open(tmp, "ab") as handle:
                handle.write(b"\0")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as probe:
            cause = probe if probe.errno in WRITE_ERRNOS else None
    if cause is None:
        return None
    kept = "its previous version is unchanged" if path.exists() else "nothing was written there"
    name = errno.errorcode.get(cause.errno, str(cause.errno))
    return WriteFailure(cause.errno, f"{path}: not written: {cause.strerror} ({name}); {kept}")


HASH_SUFFIX = ".sha256"


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


IDENTITY = "file: "  # the seal's line naming the file it was written for
COMMAND, SPEC, INPUT = "by: ", "spec: ", "input: "  # the command, its settings and its inputs (a workflow job's)
OLDER_SEAL = "an older version's seal"  # a sha256 without that line (dape_core.seal migrates it)
NO_SPEC = "-"  # an input line's spec where the input's seal records none


@dataclass(frozen=True)
class Seal:
    """A seal's content: the file's sha256, its identity (None: an older version's seal), and where a workflow job
    wrote it, the command, the digest of its settings and the sealed files it read ((identity, sha256, spec) each)."""

    digest: str
    identity: str | None
    command: str | None = None
    spec: str | None = None
    inputs: tuple[tuple[str, str, str | None], ...] = ()


_JOB: dict[str, Any] = {"command": None, "spec": None, "inputs": {}}  # the running job's (stamp_job)


def spec_digest(spec: dict) -> str:
    """A short hash of a spec (a job's settings or ``--spec`` JSON, the report spec), independent of key order; a
    job's seals record it (``spec:``), and a rule writing a spec file takes it as params (a change reruns it)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def stamp_job(command: str | None, spec: str | None) -> None:
    """Stamp this process's later seals with ``command`` (``dape evaluate``) and ``spec`` digest (None: run by hand
    without ``--spec``); forgets the inputs recorded so far."""
    _JOB.update(command=command, spec=spec, inputs={})


def record_input(seal: Seal) -> None:
    """Record a sealed file the running job read and verified, for its seals' ``input:`` lines (only in a job with a
    spec, :func:`stamp_job`: a report over hundreds of files lists none)."""
    if _JOB["spec"] is not None and seal.identity is not None:
        _JOB["inputs"][seal.identity] = (seal.digest, seal.spec)


def identity_of(path: str | Path) -> str:
    """A file's identity in its seal: its path relative to the working directory (the workflow's workdir:
    ``results/lm/<run>/seed0/eval.csv``), or absolute outside it."""
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return absolute.as_posix()


def names_file(recorded: str, path: str | Path) -> bool:
    """Whether the identity ``recorded`` names ``path``: their path components agree from the file name back over the
    shorter of the two (a moved project keeps its files; a file copied into another run's folder does not)."""
    theirs = [part for part in Path(recorded).parts if part not in ("/", ".", "..")]
    ours = [part for part in Path(os.path.abspath(path)).parts if part != "/"]
    n = min(len(theirs), len(ours))
    return n > 0 and theirs[-n:] == ours[-n:]


def read_seal(record: str | Path) -> Seal:
    """A seal file's content (:class:`Seal`); OSError, UnicodeDecodeError, IndexError or ValueError when it is
    unreadable, empty or garbled."""
    lines = Path(record).read_text(encoding="utf-8").splitlines()

    def value(prefix: str) -> str | None:
        return next((line[len(prefix):] for line in lines[1:] if line.startswith(prefix)), None)

    inputs = []
    for line in lines[1:]:
        if line.startswith(INPUT):
            identity, digest, spec = line[len(INPUT):].rsplit(" ", 2)
            inputs.append((identity, digest, None if spec == NO_SPEC else spec))
    return Seal(lines[0].split()[0], value(IDENTITY), value(COMMAND), value(SPEC), tuple(inputs))


def seal_text(path: str | Path, digest: str) -> str:
    """The seal of ``path`` whose content has sha256 ``digest``: ``<digest>  <name>`` and ``file: <identity>``; in a
    stamped job (:func:`stamp_job`) also ``by:``, ``spec:`` and its ``input:`` lines."""
    own = identity_of(path)
    lines = [f"{digest}  {Path(path).name}", f"{IDENTITY}{own}"]
    if _JOB["command"] is not None:
        lines.append(f"{COMMAND}{_JOB['command']}")
        if _JOB["spec"] is not None:
            lines.append(f"{SPEC}{_JOB['spec']}")
        lines += [f"{INPUT}{identity} {sha} {spec or NO_SPEC}"
                  for identity, (sha, spec) in sorted(_JOB["inputs"].items()) if identity != own]
    return "\n".join(lines) + "\n"


def hash_path(path: str | Path) -> Path:
    """Where a sealed file's recorded sha256 lives: ``<file>.sha256``."""
    path = Path(path)
    return path.with_name(path.name + HASH_SUFFIX)


def seal_file(path: str | Path) -> Path:
    """Seal an existing file (``<file>.sha256``), as a job seals what it writes."""
    record = hash_path(path)
    with atomic_path(record) as written:
        written.write_text(seal_text(path, file_sha256(path)), encoding="utf-8")
    return record


@contextmanager
def output_path(path: str | Path, seal: bool = False) -> Iterator[Path]:
    """:func:`atomic_path`; with ``seal`` the seal is written before the rename (a kill in between leaves a seal
    without its file, which Snakemake redoes); a failed write leaves no seal of a file that is not there."""
    record = hash_path(path)
    try:
        with atomic_path(path) as tmp:
            yield tmp
            if seal:
                with atomic_path(record) as written:
                    written.write_text(seal_text(path, file_sha256(tmp)), encoding="utf-8")
    except BaseException:
        if seal and not Path(path).exists():  # no seal of a file that is not there
            record.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str, seal: bool = False) -> None:
    with output_path(path, seal) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | Path, data: Any, seal: bool = False) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", seal)


def write_bytes(path: str | Path, data: bytes) -> str:
    """Bytes, atomically; returns their sha256 (the token files record theirs in meta.json)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def write_npy(path: str | Path, array) -> str:
    """A NumPy array in ``.npy`` format (no pickles), atomically; returns the file's sha256."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return write_bytes(path, buffer.getvalue())


def write_csv(path: str | Path, frame, seal: bool = False) -> None:
    """A pandas DataFrame as CSV, atomically."""
    with output_path(path, seal) as tmp:
        frame.to_csv(tmp, index=False)


def torch_save(path: str | Path, obj: Any, seal: bool = False) -> None:
    import torch

    with output_path(path, seal) as tmp:
        torch.save(obj, tmp)
