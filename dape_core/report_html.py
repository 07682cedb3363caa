"""``python -m dape_core.report_html OUT -- SNAKEMAKE_COMMAND``: Snakemake's HTML report written atomically.

The command (``snakemake --configfile … --profile …``) runs with ``--report`` of a temporary file beside ``OUT``,
moved into place only on success: an unfinished report (a full disk, a file-size limit) leaves the previous ``OUT``
whole, and the cause is said in one line, not Snakemake's stack. ``make reproduce`` writes ``report.html`` this way.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def cause(output: str) -> str:
    """The line of a failed command's output that says why: a configuration error, else the last exception's
    line (``OSError: [Errno 27] File too large``), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for pattern in (r"^configuration error: ", r"^\w+(Error|Exception)\b.*: "):
        found = [line for line in lines if re.match(pattern, line)]
        if found:
            return found[-1]
    return lines[-1] if lines else "no output"


def write_report(out: Path, command: list[str]) -> int:
    """Run ``command --report <temporary file>`` and move the file to ``out`` when it succeeded; the status."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp{out.suffix}")  # Snakemake reads the format from the suffix
    try:
        done = subprocess.run([*command, "--report", str(tmp)], capture_output=True, text=True)
        if done.returncode == 0 and tmp.is_file():
            os.replace(tmp, out)
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            return 0
    finally:
        tmp.unlink(missing_ok=True)
    kept = "its previous version is unchanged" if out.exists() else "nothing was written there"
    print(f"snakemake --report: {out}: not written: {cause(done.stdout + done.stderr)}; {kept}", file=sys.stderr)
    return done.returncode or 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m dape_core.report_html OUT -- SNAKEMAKE_COMMAND …", file=sys.stderr)
        return 2
    return write_report(Path(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main())
