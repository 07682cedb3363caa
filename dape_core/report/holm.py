"""Holm's step-down across the claims: verdicts that hold for the family, beside the per-claim ones.

Each claim's rule decides two identical methods at most 5 % of the time, and at most 5 %/d with every interval read
at 1 − 0.05/d (:func:`~dape_core.report.intervals.family_level`). So "decided at divisor d" is "p ≤ 0.05/d" for the
claim's own p-value (intervals nest: decided at d, decided at every smaller d), and Holm's procedure (Holm, *Scand. J.
Statist.* 6, 1979) needs no p-values: of m claims evaluated, those decided at d = m are decided for the family; d
drops by their number and the rest are read again, until none is decided. The chance of any false decision among the
claims when none of their effects is real is then at most 5 %.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from dape_core.report.intervals import CONFIRMED, NOT_RUN, REFUTED, UNDECIDED, family_level

DECIDED = (CONFIRMED, REFUTED)


def holm_verdicts(verdicts: pd.DataFrame, evaluate: Callable[[list[str]], pd.DataFrame]) -> pd.Series:
    """claim_id → its Holm-adjusted verdict: CONFIRMED or REFUTED where Holm's step-down keeps it, UNDECIDED where
    not, NOT-RUN where not evaluated. ``evaluate(ids)`` re-evaluates those claims as
    :func:`~dape_core.report.claims.evaluate_claims` does, inside :func:`family_level`; a claim undecided at 95 % is
    undecided at every stricter level and is not read again."""
    out = pd.Series(UNDECIDED, index=verdicts["claim_id"], dtype=object)
    out[verdicts.set_index("claim_id")["verdict"] == NOT_RUN] = NOT_RUN
    remaining = list(verdicts.loc[verdicts["verdict"].isin(DECIDED), "claim_id"])
    divisor = int((verdicts["verdict"] != NOT_RUN).sum())
    while remaining and divisor >= 1:
        with family_level(divisor):
            again = evaluate(remaining).set_index("claim_id")["verdict"]
        decided = [c for c in remaining if again.get(c) in DECIDED]
        if not decided:
            break
        for claim in decided:
            out[claim] = again[claim]
        remaining = [c for c in remaining if c not in decided]
        divisor -= len(decided)
    return out
