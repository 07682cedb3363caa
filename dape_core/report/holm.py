"""Holm's step-down across the claims: verdicts that hold for the family, beside the per-claim ones.

Each claim's rule is calibrated to decide two identical methods at most 5 % of the time; read with every interval
at 1 − 0.05/d (:func:`~dape_core.report.intervals.family_level`), at most 5 %/d. So "decided at divisor d" is
"p ≤ 0.05/d" for the claim's own p-value (the smallest α its rule decides at: intervals nest, so a claim decided at
d is decided at every smaller d), and Holm's procedure (Holm, *Scand. J. Statist.* 6, 1979) needs no p-values: with
m claims evaluated, the claims decided at d = m are decided for the family; d drops by their number and the rest
are read again at the new d, until none is decided. The family-wise error rate — the chance of any false decision
among the claims when none of their effects is real — is then at most 5 %.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from dape_core.report.intervals import CONFIRMED, NOT_RUN, REFUTED, UNDECIDED, family_level

DECIDED = (CONFIRMED, REFUTED)


def holm_verdicts(verdicts: pd.DataFrame, evaluate: Callable[[list[str]], pd.DataFrame]) -> pd.Series:
    """claim_id → its Holm-adjusted verdict: CONFIRMED or REFUTED where Holm's step-down across the evaluated
    claims keeps it, UNDECIDED where it does not, NOT-RUN where the claim was not evaluated. ``evaluate(ids)``
    re-evaluates those claims (their verdicts, as :func:`~dape_core.report.claims.evaluate_claims` gives them) and
    is called inside :func:`family_level`; a claim undecided at 95 % is undecided at every stricter level and is
    not read again."""
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
