"""Two runs' verdicts side by side (``reports/robustness.md``, ``reports/robustness.csv``): the configuration's run
and its shifted run (:mod:`dape_core.config.shift`: other seeds, another data split, another training length).

Per claim, the change from this run's verdict to the shifted run's is one of:

- ``agree``: the same verdict;
- ``flip``: CONFIRMED in one run and REFUTED in the other — the failure the verdict rules exist to prevent;
- ``to UNDECIDED`` / ``from UNDECIDED``: decided in one run only;
- ``NOT-RUN``: a run lacks the rows.

The summary counts the claims compared (run in both), agreements, flips and claims decided in both.
"""

from __future__ import annotations

import pandas as pd

from dape_core.report.intervals import CONFIRMED, NOT_RUN, REFUTED, UNDECIDED

AGREE, FLIP, TO_UNDECIDED, FROM_UNDECIDED = "agree", "flip", "to UNDECIDED", "from UNDECIDED"
COLUMNS = ["claim_id", "section", "verdict", "shifted_verdict", "change", "basis", "shifted_basis",
           "seed_noise", "shifted_seed_noise"]


def change(verdict: str, shifted: str) -> str:
    """The change between two verdicts of one claim (module docstring)."""
    if NOT_RUN in (verdict, shifted):
        return AGREE if verdict == shifted else NOT_RUN
    if verdict == shifted:
        return AGREE
    if {verdict, shifted} == {CONFIRMED, REFUTED}:
        return FLIP
    return TO_UNDECIDED if shifted == UNDECIDED else FROM_UNDECIDED


def compare(claims: pd.DataFrame, shifted: pd.DataFrame) -> pd.DataFrame:
    """One row per claim of either table: both verdicts, their bases and seed noise, and the change."""
    a, b = (df.set_index("claim_id").reindex(columns=["section", "verdict", "basis", "seed_noise"])
            for df in (claims, shifted))
    ids = list(dict.fromkeys([*a.index, *b.index]))
    a, b = a.reindex(ids), b.reindex(ids)
    out = pd.DataFrame({"claim_id": ids, "section": a["section"].fillna(b["section"]).to_numpy(),
                        "verdict": a["verdict"].fillna(NOT_RUN).to_numpy(),
                        "shifted_verdict": b["verdict"].fillna(NOT_RUN).to_numpy(),
                        "basis": a["basis"].fillna("").to_numpy(), "shifted_basis": b["basis"].fillna("").to_numpy(),
                        "seed_noise": a["seed_noise"].fillna("").to_numpy(),
                        "shifted_seed_noise": b["seed_noise"].fillna("").to_numpy()})
    out["change"] = [change(x, y) for x, y in zip(out["verdict"], out["shifted_verdict"])]
    return out[COLUMNS]


def counts(table: pd.DataFrame) -> dict[str, int]:
    """Claims compared (run in both), agreeing, flipping, decided in both, and moving to or from UNDECIDED."""
    run = table[(table["verdict"] != NOT_RUN) & (table["shifted_verdict"] != NOT_RUN)]
    decided = {CONFIRMED, REFUTED}
    return {"compared": len(run), "agree": int((run["change"] == AGREE).sum()),
            "flip": int((run["change"] == FLIP).sum()),
            "decided_in_both": int((run["verdict"].isin(decided) & run["shifted_verdict"].isin(decided)).sum()),
            "to_undecided": int((run["change"] == TO_UNDECIDED).sum()),
            "from_undecided": int((run["change"] == FROM_UNDECIDED).sum())}


def _tally(series: pd.Series) -> str:
    c = series.value_counts()
    return ", ".join(f"{c.get(v, 0)} {v}" for v in (CONFIRMED, REFUTED, UNDECIDED, NOT_RUN))


def robustness_markdown(table: pd.DataFrame, summary: dict | None = None) -> str:
    """The report: what the shifted run changed, the counts, then the verdicts side by side."""
    n = counts(table)
    out = ["# Robustness: the verdicts of a shifted run", ""]
    if summary:
        shift = summary["shift"]
        before, after = summary["train_lens"]
        seeds = "; ".join(f"{name} {old} → {new}" for name, (old, new) in summary["seeds"].items())
        data = "; ".join(f"{name} {old} → {new}" for name, (old, new) in summary["data_seeds"].items())
        out += [f"The shifted run is this configuration with every seed + {shift['seed_shift']}, every dataset's "
                f"split seed + {shift['data_seed_shift']} and every LM length × {shift['train_len_scale']:g} "
                f"(training lengths {before} → {after}, evaluated at the same multiples), in `{shift['workdir']}/`"
                " (dape_core/config/shift.py).", "", f"- seeds: {seeds}", f"- dataset seeds: {data}", ""]
    out += [f"This run: {_tally(table['verdict'])}. Shifted run: {_tally(table['shifted_verdict'])}.", "",
            f"Of {n['compared']} claims run in both, **{n['agree']} agree** and **{n['flip']} flip** between "
            f"CONFIRMED and REFUTED; decided in both: {n['decided_in_both']}; decided in this run only: "
            f"{n['to_undecided']}; in the shifted run only: {n['from_undecided']}.", "",
            "| claim | section | this run | shifted run | change | basis (this run) | basis (shifted) |",
            "|---|---|---|---|---|---|---|"]

    def cell(x) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ") or "–"

    for _, r in table.iterrows():
        mark = "**flip**" if r["change"] == FLIP else r["change"]
        out.append(f"| `{r['claim_id']}` | {cell(r['section'])} | {r['verdict']} | {r['shifted_verdict']} | {mark} | "
                   f"{cell(r['basis'])} | {cell(r['shifted_basis'])} |")
    return "\n".join(out) + "\n"


def read_summary(path) -> dict | None:
    """The shift summary JSON written with the shifted configuration, verified (None without one)."""
    from dape_core import artefacts

    return artefacts.read_json(path, artefacts.SHIFT) if path else None
