"""Holm's step-down across the claims when no claim's effect is real: how often any claim of the family is decided."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dape_core.report.holm import holm_verdicts
from dape_core.report.intervals import CONFIRMED, REFUTED, decide, interval
from .common import REGIMES, WINDOW_SE, _rate, cell_rng, each_cell

HOLM_CLAIMS = (12, 18)  # the claims a family evaluates: an earlier design pilot's 12, every claim
HOLM_SEEDS = (2, 3, 4, 8)
HOLM_REGIMES = {  # the claims' pairs: equal noise, or one method of each pair at 3× the others' interaction SD
    "equal noise": 1.0,
    "one method of each pair at 3× the interaction SD": 3.0,
}


def null_family(rng, claims: int, n: int, factor: float) -> list[np.ndarray]:
    """Per claim, the per-seed statistics [n, 2] of two identical methods sharing seeds (a seed main effect, a
    method × seed interaction whose SD is ``factor`` × larger for the second method, and the windows' SE)."""
    main_sd, inter_sd = REGIMES["seed noise dominates"]
    family = []
    for _ in range(claims):
        seed = rng.normal(0.0, main_sd, n)[:, None]
        scale = np.array([inter_sd, factor * inter_sd])[None, :]
        family.append(seed + scale * rng.normal(0.0, 1.0, (n, 2)) + rng.normal(0.0, WINDOW_SE, (n, 2)))
    return family


def claim_verdicts(family: list[np.ndarray], ids: list[str]) -> pd.DataFrame:
    """Each claim's verdict as the claims read a paired check: the pair's own spread, CONFIRMED above 0 and REFUTED
    below (a zero margin: the most a rule can decide), at the level in force (:func:`family_level`)."""
    verdicts = []
    for claim_id in ids:
        values = family[int(claim_id)]
        iv = interval([v[None, :] for v in values], lambda m: m[:, 1] - m[:, 0])
        verdicts.append(decide(iv, side=1, confirm=0.0, refute=0.0))
    return pd.DataFrame({"claim_id": ids, "verdict": verdicts})


def holm_trial(rng, claims: int, n: int, factor: float) -> tuple[bool, bool]:
    """(any claim decided at its own 95 %, any claim decided by Holm's step-down) for one null family."""
    family = null_family(rng, claims, n, factor)
    ids = [str(i) for i in range(claims)]
    verdicts = claim_verdicts(family, ids)
    held = holm_verdicts(verdicts, lambda some: claim_verdicts(family, some))
    decided = (CONFIRMED, REFUTED)
    return bool(verdicts["verdict"].isin(decided).any()), bool(held.isin(decided).any())


def holm_cell(task: tuple) -> dict:
    claims, n, label, trials, seed = task
    rng = cell_rng(seed, "holm", claims, n, label)
    per_claim = family = 0
    for _ in range(trials):
        any_claim, any_holm = holm_trial(rng, claims, n, HOLM_REGIMES[label])
        per_claim += any_claim
        family += any_holm
    rate, se = _rate(family, trials)
    unadjusted, unadjusted_se = _rate(per_claim, trials)
    return {"basis": f"Holm's step-down across {claims} claims (any false decision in the family)",
            "per_window_data": False, "regime": label, "seeds": n,
            "sigma_from": f"each pair's own spread; any decision at the claims' own 95 %: {unadjusted:.3f} ± "
                          f"{unadjusted_se:.3f}",
            "trials": trials, "false_decisions": rate, "false_decisions_se": se}


def holm_rows(trials: int, seed: int, jobs: int = 1) -> list[dict]:
    """The family-wise error of Holm's step-down over null families of 12 and 18 paired claims."""
    cells = [(claims, n, label, trials, seed) for claims in HOLM_CLAIMS for n in HOLM_SEEDS
             for label in HOLM_REGIMES]
    return each_cell(holm_cell, cells, jobs)
