"""What the workflow's ``onerror`` does after a failed Snakemake run: removes the seals of the outputs Snakemake
deleted (the jobs wrote them, Snakemake does not know them) and names each failed job's own one-line error."""

from __future__ import annotations

import re
from pathlib import Path

from dape_core.verify import sealed_files


def remove_orphan_seals(*folders: str | Path) -> list[Path]:
    """Remove and return the seals under ``folders`` (not their .damaged folders) whose file is gone: Snakemake
    deletes a failed job's outputs but not their seals (the workflow's ``onerror`` calls this)."""
    removed = []
    for folder in map(Path, folders):
        if not folder.is_dir():
            continue
        for path, record in sealed_files(folder):
            if not path.exists():
                record.unlink(missing_ok=True)
                removed.append(record)
    return removed


def failed_job_errors(snakemake_logs) -> list[str]:
    """``<job log>: <error>`` for each ``dape <command>: error: …`` line of the jobs the run's log file(s)
    ``snakemake_logs`` (``onerror``'s ``log``) report failed in "Error in rule" blocks; empty when none can be read."""
    paths = [snakemake_logs] if isinstance(snakemake_logs, (str, Path)) else list(snakemake_logs or ())
    text = ""
    for path in paths:
        try:
            text += Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    lines = []
    for block in text.split("Error in rule ")[1:]:
        match = re.search(r"^\s*log: (\S+)", block, re.MULTILINE)
        try:
            job_log = Path(match.group(1)).read_text(encoding="utf-8", errors="replace") if match else ""
        except OSError:
            continue
        lines += [f"{match.group(1)}: {line.strip()}" for line in job_log.splitlines()
                  if re.match(r"^dape [\w-]+: error: ", line.strip())]
    return list(dict.fromkeys(lines))
