"""Clear a stale Snakemake lock before a run, leave a live one alone.

A Snakemake run killed with SIGKILL leaves ``.snakemake/locks/*.lock``, and the next run stops with a LockException
until ``snakemake --unlock``. Usage, with the arguments of the snakemake command that follows::

    python -m dape_core.workflow_lock [--directory DIR] -- SNAKEMAKE_ARGS...

- no lock files: nothing is done (exit 0);
- lock files and no Snakemake process alive for the directory (read from ``/proc``: a process running snakemake
  whose working directory or ``--directory``/``-d`` argument is the directory): ``snakemake SNAKEMAKE_ARGS --unlock``
  is run with this interpreter and one line says so (exit 0, or the exit status of the unlock);
- lock files and a live Snakemake process: the lock is kept, its PID and command are printed (exit 1).

The directory is ``--directory``, else the ``--directory``/``-d`` of SNAKEMAKE_ARGS, else the current directory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DIRECTORY_FLAGS = ("--directory", "-d")


@dataclass(frozen=True)
class SnakemakeProcess:
    pid: int
    argv: tuple[str, ...]


def lock_files(directory: str | Path) -> list[Path]:
    """The lock files of Snakemake's file persistence in ``directory``."""
    return sorted((Path(directory) / ".snakemake" / "locks").glob("*.lock"))


def directory_argument(argv: list[str] | tuple[str, ...]) -> str | None:
    """The value of ``--directory``/``-d`` (also ``--directory=DIR``) in snakemake arguments, if any."""
    for i, arg in enumerate(argv):
        if arg in DIRECTORY_FLAGS and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--directory="):
            return arg.split("=", 1)[1]
    return None


def runs_snakemake(argv: list[str] | tuple[str, ...]) -> bool:
    """True for ``snakemake ...``, ``python .../bin/snakemake ...`` (a script's shebang) and ``python -m snakemake``."""
    if not argv:
        return False
    if Path(argv[0]).name == "snakemake":
        return True
    if not Path(argv[0]).name.startswith("python"):
        return False
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return i + 1 < len(argv) and argv[i + 1] == "snakemake"
        if not arg.startswith("-"):  # the script the interpreter runs
            return Path(arg).name == "snakemake"
    return False


def works_in(argv: tuple[str, ...], cwd: Path, directory: Path) -> bool:
    """Whether a snakemake process with this command line and working directory runs in ``directory``; Snakemake
    changes into its ``--directory`` after start-up, so a relative one matches ``cwd/DIR`` or ``cwd`` itself."""
    workdir = directory_argument(argv[1:])
    if workdir is None:
        return cwd.resolve() == directory
    if Path(workdir).is_absolute():
        return Path(workdir).resolve() == directory
    return cwd.resolve() == directory or (cwd / workdir).resolve() == directory


def snakemake_processes(directory: str | Path) -> list[SnakemakeProcess]:
    """Live processes running snakemake in ``directory`` (their working directory or ``--directory``)."""
    directory, own = Path(directory).resolve(), os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        pid = int(entry.name)
        try:
            raw = (entry / "cmdline").read_bytes()
            argv = tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)
            if not runs_snakemake(argv):
                continue
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:  # ended meanwhile, or another user's process
            continue
        if works_in(argv, cwd, directory):
            found.append(SnakemakeProcess(pid, argv))
    return found


def check(directory: str | Path, snakemake_args: list[str]) -> int:
    """Clear a stale lock in ``directory`` or report the live process holding it; returns the exit status."""
    if not lock_files(directory):
        return 0
    alive = snakemake_processes(directory)
    if alive:
        for p in alive:
            print(f"Snakemake process {p.pid} is running in {directory}: {' '.join(p.argv)}", file=sys.stderr)
        print(f"{directory} is locked by a running Snakemake: wait for it to end or stop it first", file=sys.stderr)
        return 1
    unlock = [sys.executable, "-m", "snakemake", *snakemake_args, "--unlock"]
    if directory_argument(snakemake_args) is None:
        unlock += ["--directory", str(directory)]
    done = subprocess.run(unlock, capture_output=True, text=True)
    if done.returncode != 0 or lock_files(directory):
        sys.stderr.write(done.stdout + done.stderr)
        print(f"could not clear the stale Snakemake lock in {directory}: {' '.join(unlock)}", file=sys.stderr)
        return done.returncode or 1
    print(f"cleared a stale Snakemake lock in {directory} (no Snakemake process alive)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dape_core.workflow_lock", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--directory", default=None, help="the working directory of the snakemake command")
    parser.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="after --: the snakemake arguments")
    args = parser.parse_args(argv)
    snakemake_args = args.snakemake_args[1:] if args.snakemake_args[:1] == ["--"] else args.snakemake_args
    directory = args.directory or directory_argument(snakemake_args) or "."
    return check(Path(directory).resolve(), snakemake_args)


if __name__ == "__main__":
    sys.exit(main())
