"""Atomic outputs: write under a temporary name in the destination directory, then rename.

A killed job never leaves a file that looks finished (Snakemake judges completeness by existence). A job's
result files are also *sealed* (``seal=True``): the sha256 of their content is written beside them first, as
``<file>.sha256`` — a ``sha256sum`` line, then the file's identity (``file: <its path>``, :func:`identity_of`) —
so the reader (:mod:`dape_core.artefacts`) can tell a damaged or overwritten file from the one the job wrote, and a
copy of another run's file (with its seal) from this run's own.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from dape_core.errors import WriteFailure


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it is renamed to ``path``, on error removed. A write
    that fails for want of room or permission (:func:`write_failure`) is raised as a :class:`WriteFailure` naming
    ``path`` and the errno; ``path`` itself keeps its previous content."""
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
    """A :class:`WriteFailure` for ``path`` when ``err`` came from the disk or a limit, else None. An OSError says
    its errno; a writer that hides it (torch.save raises a RuntimeError) is asked by appending one byte to the
    partial temporary file: that write fails with the same errno if the disk or a limit stopped it."""
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
OLDER_SEAL = "an older version's seal"  # a sha256 without that line (dape_core.seal migrates it)


def identity_of(path: str | Path) -> str:
    """A file's identity in its seal: its path relative to the working directory it is written from (the workflow's
    workdir: ``results/lm/<run>/seed0/eval.csv``), or absolute outside it."""
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return absolute.as_posix()


def names_file(recorded: str, path: str | Path) -> bool:
    """Whether the identity ``recorded`` names ``path``: their path components agree from the file name back over
    the shorter of the two (so a project moved or read from another working directory keeps its files, and a
    file copied into another run's, seed's or configuration's folder does not)."""
    theirs = [part for part in Path(recorded).parts if part not in ("/", ".", "..")]
    ours = [part for part in Path(os.path.abspath(path)).parts if part != "/"]
    n = min(len(theirs), len(ours))
    return n > 0 and theirs[-n:] == ours[-n:]


def read_seal(record: str | Path) -> tuple[str, str | None]:
    """(sha256, identity or None for an older version's seal) of a seal file; OSError, UnicodeDecodeError or
    IndexError when it is unreadable or empty."""
    lines = Path(record).read_text(encoding="utf-8").splitlines()
    digest = lines[0].split()[0]
    return digest, next((line[len(IDENTITY):] for line in lines[1:] if line.startswith(IDENTITY)), None)


def seal_text(path: str | Path, digest: str) -> str:
    """The seal of ``path`` whose content has sha256 ``digest``: ``<digest>  <name>`` and ``file: <identity>``."""
    return f"{digest}  {Path(path).name}\n{IDENTITY}{identity_of(path)}\n"


def hash_path(path: str | Path) -> Path:
    """Where a sealed file's recorded sha256 lives: ``<file>.sha256``."""
    path = Path(path)
    return path.with_name(path.name + HASH_SUFFIX)


def seal_file(path: str | Path) -> Path:
    """Records the sha256 and identity of an existing file beside it (``<file>.sha256``), as a job records what it
    writes."""
    path = Path(path)
    record = hash_path(path)
    with atomic_path(record) as written:
        written.write_text(seal_text(path, file_sha256(path)), encoding="utf-8")
    return record


@contextmanager
def output_path(path: str | Path, seal: bool = False) -> Iterator[Path]:
    """:func:`atomic_path`; with ``seal`` the finished temporary file's sha256 is recorded beside ``path`` before the
    file is renamed into place (a kill in between leaves a record without its file, which Snakemake redoes). A
    failed write leaves no record of a file that is not there."""
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
        Path(tmp).write_bytes(data)
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
