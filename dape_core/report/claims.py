"""The paper's qualitative claims as checks over the aggregated CSVs, each with an explicit rule and a verdict read
off a 95 % interval: CONFIRMED, REFUTED or UNDECIDED (NOT-RUN when the rows a claim needs are absent).

Verdicts (the rules of ``claims.md``):

- Every check has a statistic, an interval and a claimed side (:mod:`dape_core.report.intervals`): CONFIRMED when the
  whole interval lies on the claimed side beyond the claim's margin, REFUTED when it lies wholly on the opposite side
  of zero (for the threshold claims, beyond the contrasting threshold their rule names), UNDECIDED otherwise: a
  difference inside the noise is never a refutation, a real gain below the margin not a confirmation.
- A claim of several checks is CONFIRMED when all are (each at 95 %: an intersection), REFUTED when any is at the
  Bonferroni level over its m intervals (1 − 0.05/m, :func:`~dape_core.report.claim_context.jointly`; REFUTED at 95 %
  alone but not jointly is UNDECIDED and says so), UNDECIDED otherwise. Rules that need j of n (the CHE majority) read
  each interval at 1 − 0.05·j/n (:func:`~dape_core.report.intervals.level_for`). So no claim decides two identical
  methods more often than one 95 % interval does.
- Intervals are Student's t on per-seed statistics (:mod:`dape_core.report.intervals`). Runs are paired by seed (and
  window) only where they share initialisation and batch stream (the same setting and seed), else unpaired (Welch);
  each reads its own seeds' spread (ν = n − 1; unpaired, the fewer of the sides' ν), since methods differ in noise.
  With one seed the interval is (−∞, +∞), UNDECIDED; a σ pooled over its setting's methods
  (:mod:`dape_core.report.seed_noise`), or over the CHE cells or sink pairs with several seeds, only sizes the seeds
  a verdict needs (:mod:`dape_core.report.claim_costs`).
- The timing claim reads the rise between sizes of a ratio of medians of interleaved rounds over replicate jobs
  (:mod:`~dape_core.report.timing_check`), on the device each row names; without per-repeat times, UNDECIDED.
- The paper's own numbers (one value per cell) get point verdicts, labelled "point (the paper's printed numbers)".
- A diverged run has perplexity +∞: it loses every comparison it should win, whatever the noise.

Conventions shared by the rules:

- Lengths are multiples of the training length: "within" is ×1, "beyond" every evaluated multiple > 1.
- "A beats B" (at ×1, or beyond): the relative gain 1 − ppl_A / ppl_B, ppl the geometric mean over the seeds both
  methods have and the multiples both were evaluated at (seeds missing one are dropped), CONFIRMED when its interval
  lies at or above the margin, REFUTED when below 0. The margins follow the paper's own gaps: 0.5 % at ×1 (its
  DAPE1x3 vs DAPE gaps at ×1 are 0.6–1.8 %), 1 % for DAPE1x3 against DAPE (k = 1) beyond, 2 % for everything else.
- Rows are found by role, never by a family's name: a claim reads the rows whose ``roles`` include its role, so
  families may be named freely and several of one role are read together; a timing, CHE or sink table without a
  ``roles`` column is read whole.
- Settings are dataset × training length × size inside the claim's role; each evaluable setting gives its checks.

Each claim yields a record: ``claim_id``, ``section``, ``statement``, ``rule``, ``core``, ``informational``,
``verdict``, ``basis`` (what its intervals saw), ``summary`` (the numbers behind the verdict), ``numbers`` (per check).

Layout: a claim here is a declaration (identifier, section, statement, the rule claims.md prints, its check and
thresholds); the checks live in ``lm_checks``, ``timing_check``, ``che_check`` and ``sink_check`` on
:mod:`~dape_core.report.claim_context`; costs and rendering in ``claim_costs`` and ``claims_markdown``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import pandas as pd

from dape_core.report import che_check, lm_checks, sink_check, timing_check
from dape_core.report.che_check import PERMUTATION_INVARIANT
from dape_core.report.claim_context import Context, judged_intervals, jointly, public, rows_text
from dape_core.report.claim_costs import decide_route, run_costs, what_decides
from dape_core.report.claims_markdown import claims_markdown
from dape_core.report.intervals import (CONFIRMED, MARKS, NOT_RUN, REFUTED, UNDECIDED, combine, fresh_sizing,
                                        sizing_fresh_seeds)
from dape_core.report.lm_checks import against_every_other, beats_each

__all__ = ["CLAIMS", "CONFIRMED", "CORE_CLAIMS", "NOT_RUN", "REFUTED", "UNDECIDED", "claims_markdown",
           "evaluate_claims", "evaluate_claims_on_paper"]

# ------------------------------------------------------------------------------------------------ thresholds
WITHIN_MARGIN = 0.005  # "A beats B" at ×1: the paper's DAPE1x3 vs DAPE gaps at ×1 are 0.6–1.8 %
DAPE_MARGIN = 0.01  # DAPE1x3 against DAPE (k = 1) beyond the training length
MARGIN = 0.02  # every other "A beats B"
BOUNDED = 1.5
EXPLODES = 2.0
BOUNDED_RANGE = (2, 4)
EXPLODE_RANGE = (2, 16)
LEAK_RATIO, LEAK_ABSOLUTE = 0.5, 1.5
COMPARABLE = 0.05
DELTA_P_MARGIN = 0.01
TIMING_RISE = 0.02
CHE_MARGIN = 0.01
SINK_RATIO = 1.1
_MARGINS = {"within": WITHIN_MARGIN, "beyond": MARGIN, "dape_beyond": DAPE_MARGIN, "all": MARGIN}


def _margins(*names: str) -> dict[str, float]:
    """The margins of "A beats B" checks by name (within ×1, beyond, DAPE1x3 vs DAPE beyond, all multiples)."""
    return {name: _MARGINS[name] for name in names}


def _dape1x3_over(encodings, against=lambda enc: enc, beyond: str = "beyond") -> list[tuple]:
    """DAPE1x3-X beats ``against(X)`` within (×1) and beyond, for each encoding X."""
    return [(f"DAPE1x3-{enc}", against(enc), where, margin) for enc in encodings
            for where, margin in (("within", "within"), ("beyond", beyond))]


def _estimate_rate() -> tuple[float, float]:
    """The estimate block's defaults (dape_core/config/config.schema.yaml): gpu_tflops, utilisation."""
    from dape_core.config.schema import SCHEMA_PATH, load_yaml

    props = load_yaml(SCHEMA_PATH)["properties"]["estimate"]["properties"]
    return float(props["gpu_tflops"]["default"]), float(props["utilisation"]["default"])


# ----------------------------------------------------------------------------------------------- the claims
@dataclass(frozen=True)
class Claim:
    """One claim of the paper: what it says, where, the rule claims.md prints, and its check with the thresholds
    the check decides against (``check(context, thresholds)`` → one record per check)."""
    claim_id: str
    section: str
    statement: str
    rule: str
    check: Callable[[Context, Mapping], list[dict]]
    core: bool = False
    informational: bool = False
    needs: tuple[str, ...] = field(default=("lm",))
    thresholds: Mapping = field(default_factory=dict)


_BEATS = ("'A beats B' = the relative gain 1 − ppl_A / ppl_B (geometric means over the shared seeds and "
          "multiples) has its 95 % interval at or above the margin (CONFIRMED), or below 0 (REFUTED)")

CLAIMS: tuple[Claim, ...] = (
    Claim("baselines_explode_bounded", "§4.1, Fig. 2",
          "NoPE and RoPE perplexity explodes beyond the training length while ALiBi and Kerple stay bounded.",
          f"{rows_text('central')}, per setting and method: the statistic is the largest ppl(×m) / ppl(×1) over the "
          f"evaluated multiples m in the range (geometric mean over seeds). Explodes (×{EXPLODE_RANGE[0]}–"
          f"{EXPLODE_RANGE[1]}): CONFIRMED when the interval is ≥ {EXPLODES:g}, REFUTED when it is < {BOUNDED:g} "
          f"(bounded). Bounded (×{BOUNDED_RANGE[0]}–{BOUNDED_RANGE[1]}): CONFIRMED when the interval is ≤ "
          f"{BOUNDED:g}, REFUTED when it is > {EXPLODES:g}; a diverged run is not bounded (REFUTED) and its "
          "explosion undecided (the paper's own Kerple reaches 1.7–2.1× at ×8–16, Tables 2 and 5). CONFIRMED needs "
          "all four methods evaluated; a REFUTED check refutes it with those evaluated.",
          lm_checks.explode_bounded, core=True,
          thresholds=dict(explodes=EXPLODES, bounded=BOUNDED, explode_range=EXPLODE_RANGE,
                          bounded_range=BOUNDED_RANGE)),
    Claim("dape_ordering_beyond", "§4.1",
          "Beyond the training length DAPE1x3-Kerple ≤ DAPE-Kerple ≤ Kerple.",
          f"{rows_text('central')}, every setting with the three methods, beyond (×>1): DAPE1x3-Kerple beats "
          f"DAPE-Kerple with margin {DAPE_MARGIN:.0%} and DAPE-Kerple beats Kerple with margin {MARGIN:.0%}; "
          + _BEATS + ".",
          beats_each("central", [("DAPE1x3-Kerple", "DAPE-Kerple", "beyond", "dape_beyond"),
                                 ("DAPE-Kerple", "Kerple", "beyond", "beyond")],
                     require=("Kerple", "DAPE-Kerple", "DAPE1x3-Kerple")),
          core=True, thresholds=_margins("beyond", "dape_beyond")),
    Claim("dape1x3_best_within", "§4.1",
          "DAPE1x3-Kerple has the best perplexity within the training length.",
          f"{rows_text('central')}, at ×1: DAPE1x3-Kerple beats every other method of the setting with margin "
          f"{WITHIN_MARGIN:.1%}; " + _BEATS + ".",
          beats_each("central", against_every_other("DAPE1x3-Kerple", "within", "within")),
          thresholds=_margins("within")),
    Claim("dape1x3_improves_nope_rope", "§4.4, Fig. 1",
          "DAPE1x3 improves NoPE and RoPE, within and beyond the training length.",
          f"{rows_text('every_encoding')}, for NoPE and RoPE (each evaluated): DAPE1x3-X beats X at ×1 (margin "
          f"{WITHIN_MARGIN:.1%}) and beyond (margin {MARGIN:.0%}); " + _BEATS + ".",
          beats_each("every_encoding", _dape1x3_over(("NoPE", "RoPE"))), core=True,
          thresholds=_margins("within", "beyond")),
    Claim("dape1x3_improves_additive", "§4.4, Fig. 5",
          "DAPE1x3 improves ALiBi, Kerple and FIRE, within and beyond the training length.",
          f"{rows_text('every_encoding')}, for ALiBi, Kerple and FIRE (each evaluated): DAPE1x3-X beats X at ×1 "
          f"(margin {WITHIN_MARGIN:.1%}) and beyond (margin {MARGIN:.0%}); " + _BEATS + ".",
          beats_each("every_encoding", _dape1x3_over(("ALiBi", "Kerple", "FIRE"))),
          thresholds=_margins("within", "beyond")),
    Claim("dape1x3_beats_dape_additive", "§4.4",
          "DAPE1x3 outperforms DAPE (kernel 1×1) for every additive encoding.",
          f"{rows_text('every_encoding')}, for ALiBi, Kerple and FIRE (each evaluated): DAPE1x3-X beats DAPE-X at "
          f"×1 (margin {WITHIN_MARGIN:.1%}) and beyond (margin {DAPE_MARGIN:.0%}); " + _BEATS + ".",
          beats_each("every_encoding", _dape1x3_over(("ALiBi", "Kerple", "FIRE"), against=lambda enc: f"DAPE-{enc}",
                                                     beyond="dape_beyond")),
          thresholds=_margins("within", "dape_beyond")),
    Claim("naive_dape_degrades_rope", "§3.2, Fig. 1",
          "Naive DAPE (kernel 1×1) degrades RoPE.",
          f"{rows_text('every_encoding')}: RoPE beats DAPE-RoPE over all evaluated multiples ≥ ×1 together "
          f"(margin {MARGIN:.0%}); " + _BEATS + ".",
          beats_each("every_encoding", [("RoPE", "DAPE-RoPE", "all", "all")]), thresholds=_margins("all")),
    Claim("leakage_collapse", "§4.5, Fig. 6",
          "Without tril the DAPE1x3 perplexity collapses towards 1.",
          f"{rows_text('leakage')}, per encoding and setting, at ×1, no-tril against its tril twin (paired by seed "
          f"and window, σ from runs with tril on and off together, never from tril-only runs): CONFIRMED when the "
          f"interval of ppl(no tril) / ppl(tril) is ≤ {LEAK_RATIO:g} or the interval of the no-tril perplexity "
          f"is ≤ {LEAK_ABSOLUTE:g}, each route's interval at 1 − 0.05/{lm_checks.LEAK_ROUTES} (Bonferroni over the "
          "two); REFUTED when the ratio's 95 % interval is > 1 (no gain from reading future keys).",
          lm_checks.leakage, core=True,
          thresholds=dict(ratio=LEAK_RATIO, absolute=LEAK_ABSOLUTE)),
    Claim("narrow_dape1x3_beats_wide_dape", "§4.6",
          "DAPE1x3-Kerple with D_DAPE 10 or 21 beats DAPE-Kerple with D_DAPE 64.",
          f"{rows_text('width_sweep')}, for D_DAPE 10 and 21 (each evaluated): DAPE1x3-Kerple beats DAPE-Kerple at "
          f"D_DAPE 64 at ×1 (margin {WITHIN_MARGIN:.1%}) and beyond (margin {DAPE_MARGIN:.0%}); " + _BEATS + ".",
          beats_each("width_sweep", [(("DAPE1x3-Kerple", width), ("DAPE-Kerple", 64), where, margin)
                                     for width in (10, 21)
                                     for where, margin in (("within", "within"), ("beyond", "dape_beyond"))]),
          core=True, thresholds=_margins("within", "dape_beyond")),
    Claim("kernel_size_not_always_largest", "§4.7, Tables 4–5",
          "The optimal kernel size is not always the largest one.",
          f"Informational. {rows_text('kernel_sweep')}, per setting, encoding and multiple ≥ ×1 with at least three "
          "kernel sizes, each smaller kernel against the largest (gain 1 − ppl_k / ppl_largest, no margin): "
          "CONFIRMED when in some cell a smaller kernel's gain interval lies above 0 at the Bonferroni level over "
          "all m comparisons (each interval at 1 − 0.05/m, so that identical kernels confirm at most 5 % of the "
          "time), REFUTED when in every cell every smaller kernel's 95 % interval lies below 0. The paper's own "
          "evidence is a 0.2–0.4% gap (Books3 at 8192).", lm_checks.kernel_not_largest,
          informational=True, thresholds=dict(margin=0.0)),
    Claim("equal_tokens_comparable", "§4.2, Fig. 3",
          "With the same training tokens, DAPE1x3-Kerple trained on shorter sequences performs comparably to "
          "training on longer ones.",
          f"{rows_text('equal_tokens')}, DAPE1x3-Kerple, per dataset and size: with L the longest training length, "
          f"for every training length T in [L/8, L), the ratio ppl_T / ppl_L at evaluation length L (paired by "
          f"seed and window): CONFIRMED when its interval is ≤ {1 + COMPARABLE:g} (one-sided: better is "
          f"comparable), REFUTED when it is > {1 + COMPARABLE:g} (the claim's own tolerance is its boundary).",
          lm_checks.equal_tokens_comparable, thresholds=dict(tolerance=COMPARABLE)),
    Claim("long_training_hurts_short", "§4.2",
          "Training on longer sequences hurts performance at short evaluation lengths.",
          f"{rows_text('equal_tokens')}, every method with ≥ 2 training lengths: at evaluation length T0 (the "
          f"shortest training length) the T0-trained model beats the longest-trained one with margin "
          f"{MARGIN:.0%}; " + _BEATS + ".",
          lm_checks.long_training_hurts_short, thresholds=dict(margin=MARGIN)),
    Claim("delta_p_sign", "App. A, Table 1",
          "ΔP is positive for DAPE variants and negative for RoPE at long evaluation lengths.",
          f"{rows_text('central')}, multiples ≥ ×2: the relative ΔP 1 − ppl_dp / ppl_local (geometric means over "
          f"seeds and those multiples; per window, the loss with the full and with the local context) is "
          f"CONFIRMED ≥ +{DELTA_P_MARGIN:.0%} for DAPE-Kerple and DAPE1x3-Kerple and ≤ −{DELTA_P_MARGIN:.0%} "
          f"for RoPE, REFUTED when its interval lies on the other side of 0. Needs RoPE and a DAPE variant.",
          lm_checks.delta_p_sign, thresholds=dict(margin=DELTA_P_MARGIN)),
    Claim("timing_overhead_shrinks", "§4.9, Table 7",
          "The time overhead of DAPE1x3-Kerple relative to Kerple shrinks as the model grows.",
          "timing_repeats.csv rows of role forward_time (the whole table when it has no roles), mode forward, per "
          "device × seq_len × batch × threads with ≥ 2 sizes (ordered by n_layer · d_model²), every block of fresh "
          "worker processes timing both sizes and both methods in interleaved rounds (methods alternated, warm-up "
          "discarded), the blocks spread over separate replicate jobs: per size and block the ratio of medians "
          "ms(Kerple) / ms(DAPE1x3-Kerple) over the block's rounds; per replicate job and size the mean over its "
          "blocks, and the job's rise from each size to the next; the rise's 95 % t-interval over the jobs, ν = jobs "
          "− 1 (what changes between jobs is shared by all of a job's blocks; at least "
          f"{timing_check.MIN_JOBS} jobs, each timing both sizes in the same blocks, else no interval): "
          f"CONFIRMED when every rise's interval lies at or above {TIMING_RISE:g}, "
          "REFUTED when some rise's interval lies below 0, UNDECIDED otherwise (also without per-repeat times). "
          "The device is named in the check: the paper's claim is about GPUs.",
          timing_check.timing_overhead_shrinks, core=True, needs=("timing",), thresholds=dict(rise=TIMING_RISE)),
    Claim("che_dape1x3_beats_kerple", "§4.8, Table 6",
          "On CHE, DAPE1x3-Kerple beats Kerple on most of the permutation-variant tasks.",
          f"che_results.csv rows of role che, tasks other than {', '.join(PERMUTATION_INVARIANT)}: per task, the "
          f"difference DAPE1x3-Kerple − Kerple of the best OOD accuracy over learning rates, with a t-interval "
          f"over seeds on the task's own seeds' spread (paired by seed where both methods ran it: the spread of "
          f"the per-seed differences, ν = n − 1; else unpaired, each side's own spread on the fewer degrees of "
          f"freedom); one seed gives no interval (one cell's seed SD pooled over the CHE cells with several seeds "
          f"sizes the seeds it needs). A task is won when the interval is "
          f"≥ {100 * CHE_MARGIN:g} point, lost when it is < 0. CONFIRMED when more than half of the evaluated "
          f"tasks are won, REFUTED when the tasks not lost are at most half, UNDECIDED otherwise; of n tasks, j "
          f"decide (⌊n/2⌋ + 1 won, ⌈n/2⌉ lost), so each task's interval is read at 1 − 0.05·j/n for that side "
          f"(at most as many false verdicts as one 95 % interval).",
          che_check.che_beats_kerple, needs=("che",), thresholds=dict(margin=CHE_MARGIN)),
    Claim("sink_stronger_with_dape1x3", "App. K",
          "DAPE1x3 shows a stronger attention sink than DAPE.",
          "sink.csv rows of role attention_maps (sink_mass = mean attention probability on the first key from "
          "queries at positions ≥ 16, per sequence and layer), per encoding and evaluation length: the ratio of "
          "the layer-mean sink mass of DAPE1x3 to DAPE (geometric mean over sequences and seeds), paired by seed "
          "and sequence, a t-interval over seeds on the spread of the pair's own per-seed differences (ν = n − 1): "
          f"CONFIRMED when ≥ {SINK_RATIO:g}, REFUTED when < 1; one seed gives no interval (UNDECIDED; the σ pooled "
          "over the DAPE1x3 / DAPE pairs with several seeds at that length sizes the seeds it needs).",
          sink_check.sink_stronger, needs=("sink",),
          thresholds=dict(ratio=SINK_RATIO)),
    Claim("dape1x3_beats_dape_larger_models", "§4.3, Table 3",
          "DAPE1x3-Kerple outperforms DAPE-Kerple at larger model sizes too.",
          f"{rows_text('model_size')}, per size: DAPE1x3-Kerple beats DAPE-Kerple at ×1 (margin "
          f"{WITHIN_MARGIN:.1%}) and beyond (margin {DAPE_MARGIN:.0%}); " + _BEATS + ".",
          beats_each("model_size", _dape1x3_over(("Kerple",), against=lambda enc: "DAPE-Kerple", beyond="dape_beyond")),
          thresholds=_margins("within", "dape_beyond")),
    Claim("dape1x3_beats_data_adaptive", "App. J, Table 9",
          "DAPE1x3-Kerple beats the data-adaptive encodings CoPE and Transformer-XL.",
          f"{rows_text('central')}: DAPE1x3-Kerple beats CoPE and XL (each evaluated) at ×1 (margin "
          f"{WITHIN_MARGIN:.1%}) and beyond (margin {MARGIN:.0%}); " + _BEATS + ".",
          beats_each("central", [("DAPE1x3-Kerple", other, where, where) for other in ("CoPE", "XL")
                                 for where in ("within", "beyond")]),
          thresholds=_margins("within", "beyond")),
)

CORE_CLAIMS: tuple[str, ...] = tuple(c.claim_id for c in CLAIMS if c.core)


def evaluate_claims(lm: pd.DataFrame | None, timing: pd.DataFrame | None = None, che: pd.DataFrame | None = None,
                    sink: pd.DataFrame | None = None, claim_ids=None, *, windows: pd.DataFrame | None = None,
                    point: bool = False, gpu_tflops: float | None = None,
                    utilisation: float | None = None, timing_repeats: pd.DataFrame | None = None,
                    claims: tuple[Claim, ...] = CLAIMS, fresh: bool = False,
                    min_comparisons: dict[str, int] | None = None) -> pd.DataFrame:
    """One record per claim: its verdict, basis, seed noise, rule and numbers, and for an UNDECIDED claim the seeds per
    method that would decide it and their cost (``gpu_tflops``, ``utilisation``: the configuration's ``estimate``
    block, its schema defaults when None). ``lm``, ``windows`` (without it each seed's statistic comes from its
    perplexities), ``timing``, ``timing_repeats``, ``che``, ``sink``: the aggregated tables; ``point``: point verdicts
    (the paper's numbers); ``claim_ids``: a subset of ``claims``. ``fresh``: a pilot's evaluation
    (:mod:`dape_core.report.design`): every claim also gets ``fresh_seeds`` (the fresh seeds per method that alone
    would decide it at the pilot's effects), ``fresh_text``, ``fresh_runs`` (LM runs or CHE cells) and
    ``fresh_run_seeds`` (each one's seeds, :func:`~dape_core.report.claim_costs.decide_route`). ``min_comparisons``:
    claim_id → the least Bonferroni m its REFUTED is read over (:func:`jointly`; a design's fresh seeds pass the
    pilot's); each record gives its own (``judged_intervals``)."""
    if fresh:
        with sizing_fresh_seeds():
            return evaluate_claims(lm, timing, che, sink, claim_ids, windows=windows, point=point,
                                   gpu_tflops=gpu_tflops, utilisation=utilisation, timing_repeats=timing_repeats,
                                   claims=claims, min_comparisons=min_comparisons)
    ctx = Context(lm, timing, che, sink, windows, point, timing_repeats)
    default_tflops, default_utilisation = _estimate_rate()
    costs = run_costs(lm, gpu_tflops or default_tflops, utilisation or default_utilisation)
    rows = []
    for claim in claims:
        if claim_ids is not None and claim.claim_id not in claim_ids:
            continue
        raw = claim.check(ctx, claim.thresholds)
        checks = jointly(raw, at_least=(min_comparisons or {}).get(claim.claim_id, 0))
        verdict = combine([c["verdict"] for c in checks])
        if not checks:
            summary, basis = "no rows for this check (" + ", ".join(claim.needs) + ")", ""
        else:
            summary = "; ".join(f"{MARKS[c['verdict']]} {c['text']}" for c in checks)
            basis = "; ".join(dict.fromkeys(c["basis"] for c in checks if c.get("basis")))
        numbers = {f"{i}: {c['text'].split(':')[0]}": public(c) for i, c in enumerate(checks)}
        noise = "; ".join(dict.fromkeys(f"σ {c['seed_sd']:.3g} (ν {c['seed_df']:.3g})" for c in checks
                                        if c.get("seed_sd") is not None))
        record = {"claim_id": claim.claim_id, "section": claim.section, "statement": claim.statement,
                  "rule": claim.rule, "core": claim.core, "informational": claim.informational,
                  "verdict": verdict, "basis": basis, "seed_noise": noise, "summary": summary,
                  "seeds_to_decide": "", "extra_jobs": None, "extra_cpu_hours": None, "extra_gpu_hours": None,
                  "gpu_bound": "", "numbers": numbers, "judged_intervals": judged_intervals(raw)}
        if verdict == UNDECIDED:
            record.update(what_decides(checks, costs))
        if fresh_sizing():
            n, text, runs = decide_route(checks, every=True) if checks else (None, "no rows for this check", {})
            record.update(fresh_seeds=n, fresh_text=text, fresh_runs=sorted(runs), fresh_run_seeds=runs)
        rows.append(record)
    return pd.DataFrame(rows)


def evaluate_claims_on_paper() -> pd.DataFrame:
    """The same rules applied to the paper's own printed numbers (Tables 1–7, 9 and §4) as point verdicts: a check
    of the rules. Claims the paper supports only with figures come out NOT-RUN."""
    from dape_core.report.paper import as_che, as_lm_results, as_timing

    return evaluate_claims(as_lm_results(), timing=as_timing(), che=as_che(), point=True)