"""The ledger of looks: every block of fresh seeds a committed version of a configuration's reports has read.

    python benchmarks/ledger.py [--reports reports]     # → reports/ledger.md and reports/ledger.csv

A design's verdicts are a first look only at seeds nothing before them saw. A configuration whose committed
reports were redone — the design, its rules or its budget changed after a block of fresh seeds was read, then a
new block drawn — holds several looks in its history. This walks the git history of ``REPORTS/claims.csv`` and
``REPORTS/design.json`` and writes one row per commit whose reports hold a design: the block it read
(``fresh_seeds_from``), the protocol it ran under (the design's version, budget, seed cap and chosen claims, and
the digest of the analysis code at that commit, as :func:`dape_core.report.protocol.analysis_digest` computes it
now) and each claim's verdict, side by side. claims.md reads the ledger and states how many looks and blocks the
history holds (:func:`dape_core.report.protocol.looks_line`). A commit whose files cannot be read is named in one
line and left out; a shallow clone (no history) stops with one line.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str, root: Path = ROOT) -> str | None:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def digest_at(commit: str, root: Path = ROOT) -> str:
    """The analysis digest of the verdict modules' code at ``commit`` ('–' where one is missing)."""
    from dape_core.report.protocol import analysis_digest

    return analysis_digest(lambda name: _git("show", f"{commit}:dape_core/report/{name}.py", root=root)) or "–"


def looks(reports: str = "reports", root: Path = ROOT) -> pd.DataFrame:
    """One row per commit (oldest first) whose ``reports`` hold a design and claims: its block and protocol, the
    verdict counts and each claim's verdict (a column per claim)."""
    from dape_core.report.intervals import CONFIRMED, NOT_RUN, REFUTED, UNDECIDED

    if (_git("rev-parse", "--is-shallow-repository", root=root) or "").strip() == "true":
        raise SystemExit("ledger: this clone is shallow (no history to read); fetch it whole: git fetch --unshallow")
    log = _git("log", "--reverse", "--format=%h %ad", "--date=short", "--", f"{reports}/claims.csv",
               f"{reports}/design.json", root=root) or ""
    rows = []
    for line in log.splitlines():
        commit, date = line.split()
        design_text = _git("show", f"{commit}:{reports}/design.json", root=root)
        claims_text = _git("show", f"{commit}:{reports}/claims.csv", root=root)
        if design_text is None or claims_text is None:
            continue  # reports of a configuration without a design at that commit: no block of fresh seeds
        try:
            design = json.loads(design_text)
            claims = pd.read_csv(io.StringIO(claims_text))
            verdicts = dict(zip(claims["claim_id"], claims["verdict"]))
            row = {"commit": commit, "date": date, "block": int(design["fresh_seeds_from"]),
                   "design_version": design.get("version"), "budget_minutes": design.get("budget_minutes"),
                   "max_seeds": design.get("max_seeds"), "chosen": len(design["chosen"]),
                   "analysis_digest": digest_at(commit, root)}
        except (ValueError, KeyError, TypeError) as err:
            print(f"ledger: {commit}: {reports}/design.json or claims.csv cannot be read ({type(err).__name__}); "
                  "left out", flush=True)
            continue
        row.update({v: sum(x == v for x in verdicts.values()) for v in (CONFIRMED, REFUTED, UNDECIDED, NOT_RUN)})
        rows.append({**row, **verdicts})
    return pd.DataFrame(rows)


def ledger_markdown(table: pd.DataFrame) -> str:
    """The ledger as Markdown: the looks with their protocols, then each claim's verdict per look."""
    from dape_core.report.protocol import looks_line

    meta = ["commit", "date", "block", "design_version", "budget_minutes", "max_seeds", "chosen", "analysis_digest",
            "CONFIRMED", "REFUTED", "UNDECIDED", "NOT-RUN"]
    claims = [c for c in table.columns if c not in meta]
    out = ["# Ledger of looks", "", looks_line(table), "",
           "Each row: a commit whose reports hold a design, the block of fresh seeds it read (seeds from `block`), "
           "the protocol it ran under (design version, budget in minutes, seed cap, claims chosen, the digest of the "
           "analysis code at that commit) and its verdict counts. Written by `python benchmarks/ledger.py` from the "
           "git history.", "",
           "| " + " | ".join(meta) + " |", "|" + "---|" * len(meta)]
    out += ["| " + " | ".join(str(r[c]) for c in meta) + " |" for _, r in table.iterrows()]
    out += ["", "## Verdicts per look", "", "| claim | " + " | ".join(f"{r['commit']} ({r['block']})"
                                                                     for _, r in table.iterrows()) + " |",
            "|---|" + "---|" * len(table)]
    out += [f"| `{c}` | " + " | ".join(str(v) for v in table[c].fillna("–")) + " |" for c in claims]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    from dape_core import io as dape_io

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reports", default="reports", help="the configuration's reports folder, relative to the "
                   "repository (reports for config.yaml)")
    args = p.parse_args(argv)
    table = looks(args.reports)
    if table.empty:
        raise SystemExit(f"ledger: no commit holds {args.reports}/design.json with {args.reports}/claims.csv")
    dape_io.write_csv(ROOT / args.reports / "ledger.csv", table, seal=True)
    dape_io.write_text(ROOT / args.reports / "ledger.md", ledger_markdown(table))
    print(f"{len(table)} looks at {table['block'].nunique()} blocks → {args.reports}/ledger.md, ledger.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
