"""Holm's step-down across the claims (dape_core/report/holm.py): the family divisor reaches every interval, the
step-down reads the remaining claims at the next divisor, and a claim decided at 95 % only is undecided for the
family."""

from __future__ import annotations

import pandas as pd

from dape_core.report.claims import CONFIRMED, NOT_RUN, REFUTED, UNDECIDED, claims_markdown, evaluate_claims
from dape_core.report.holm import holm_verdicts
from dape_core.report.intervals import Interval, SeedNoise, family_level, interval, percentile, simultaneous
from test_claims import frame, runs

import numpy as np


def test_the_family_divisor_widens_t_bootstrap_and_bonferroni_intervals():
    units = [np.array([[v]]) for v in (1.0, 1.2, 0.9, 1.1)]
    plain = interval(units, lambda m: m[:, 0])
    with family_level(10):
        strict = interval(units, lambda m: m[:, 0])
        assert simultaneous(strict, 2).low < strict.low  # Bonferroni on top of the family's level
        boot = percentile(0.0, np.linspace(-1, 1, 2001), "b", 4)
    assert strict.low < plain.low and strict.high > plain.high
    assert boot.high > percentile(0.0, np.linspace(-1, 1, 2001), "b", 4).high
    assert simultaneous(plain, 10).low == strict.low  # one divisor: the same level either way


def test_holm_steps_down_as_claims_are_decided():
    verdicts = pd.DataFrame({"claim_id": ["a", "b", "c", "d", "e"],
                             "verdict": [CONFIRMED, REFUTED, CONFIRMED, UNDECIDED, NOT_RUN]})
    strongest = {"a": 4, "b": 3, "c": 1}  # the largest divisor each is still decided at
    calls = []

    def evaluate(ids):
        from dape_core.report.intervals import _FAMILY

        d = _FAMILY.get()
        calls.append((d, sorted(ids)))
        return pd.DataFrame({"claim_id": ids, "verdict": [dict(zip(verdicts["claim_id"], verdicts["verdict"]))[c]
                                                          if strongest[c] >= d else UNDECIDED for c in ids]})

    holm = holm_verdicts(verdicts, evaluate)
    # m = 4 evaluated: a decided at 4, then b at 3, then c at 2 fails (decided only up to 1)
    assert calls == [(4, ["a", "b", "c"]), (3, ["b", "c"]), (2, ["c"])]
    assert holm.to_dict() == {"a": CONFIRMED, "b": REFUTED, "c": UNDECIDED, "d": UNDECIDED, "e": NOT_RUN}


def _lm(within_gain):
    """A clear DAPE1x3-Kerple (20 % at ×1, 1 % spread) and DAPE1x3 over NoPE and RoPE by gains (per seed) that
    hold at 95 % but not at 97.5 % (t on 3 seeds); ``within_gain`` scales the Kerple pair's gain."""
    def scaled(base, gains):
        return [b * (1 - g) for b, g in zip(base, gains)]

    marginal = (0.066, 0.090, 0.113)  # log-gains 0.094 ± 0.026: t 5.9 at ×1, 4.9 beyond (t₂: 4.30 at 95 %, 6.21 at 97.5 %)
    base = [10.0, 10.2, 9.8]
    kerple = {1: base, 2: [10.5, 10.7, 10.3]}
    return frame(runs("central", "Kerple", kerple),
                 runs("central", "DAPE1x3-Kerple", {m: scaled(v, within_gain) for m, v in kerple.items()}),
                 *[runs("every_encoding", name, {1: base, 2: [20.0, 20.4, 19.6]}) for name in ("NoPE", "RoPE")],
                 *[runs("every_encoding", f"DAPE1x3-{name}", {1: scaled(base, marginal),
                                                               2: scaled([20.0, 20.4, 19.6], marginal)})
                   for name in ("NoPE", "RoPE")])


IDS = ["dape1x3_best_within", "dape1x3_improves_nope_rope"]


def test_two_marginal_claims_hold_each_at_95_percent_and_neither_for_the_family():
    lm = _lm((0.066, 0.090, 0.113))
    verdicts = evaluate_claims(lm, claim_ids=IDS)
    assert set(verdicts["verdict"]) == {CONFIRMED}
    holm = holm_verdicts(verdicts, lambda c: evaluate_claims(lm, claim_ids=c))
    assert set(holm) == {UNDECIDED}  # at d = 2 neither holds: the step-down stops
    verdicts["holm_verdict"] = holm.reindex(verdicts["claim_id"]).to_numpy()
    text = claims_markdown(verdicts)
    assert "| verdict | Holm |" in text and "keeps 0 of the 2 decided" in text


def test_after_a_clear_claim_the_next_is_read_at_the_next_divisor():
    lm = _lm((0.20, 0.21, 0.19))
    verdicts = evaluate_claims(lm, claim_ids=IDS)
    holm = holm_verdicts(verdicts, lambda c: evaluate_claims(lm, claim_ids=c))
    # the clear claim holds at d = 2; the marginal one is then read at d = 1, i.e. at 95 %: Holm keeps both
    assert holm.to_dict() == {"dape1x3_best_within": CONFIRMED, "dape1x3_improves_nope_rope": CONFIRMED}
