"""How often the verdict rules call two identically distributed methods different, at every basis they meet.

Per-window losses of a grid are simulated as L[r, s, w] = β_s + u_rs + γ_w + e_rsw: a seed main effect β_s shared by
every method trained on the seed's batch stream (one setting), a method × seed interaction u_rs, a window effect γ_w
shared by every model (the same evaluation windows) and per-window noise e_rsw; R = 7 methods per setting (the central
comparison's size), W = 64 windows. Methods 0 and 1 are the pair compared; ``effect`` shifts method 1 by that many SDs
of one seed's statistic (the power column). The bases, each a module driving :mod:`dape_core.report`'s own rules:

- the interval bases of :mod:`dape_core.report.intervals` (:mod:`.bases`): ``paired`` (one setting, σ from its R × n
  table's interaction mean square), ``unpaired`` (two settings, i.e. batch streams; each side's σ from its own table's
  seed and interaction mean squares, Satterthwaite ν; Welch's combination) and ``one run`` (a run's own statistic, an
  explosion or a ΔP, against its true value; σ as unpaired), each borrowing σ from another setting's 7 × 2 table with
  one seed; ``own spread`` (paired, n ≥ 2, σ of the pair's per-seed differences, ν = n − 1); with per-window data (units
  of W rows) and without (the seed's mean); in three regimes (:data:`REGIMES`, seed main effect and interaction SDs in
  windows' SEs): seed noise dominating (3, 2), the seed main effect (4, 0.5), window noise (0.5, 0.25);
- ``timing`` (:mod:`.timing`): the rise of ms(A) / ms(B) between two sizes, the workflow's replicate jobs at the shipped
  (jobs, blocks) and the design before, job effects of none, SD 0.04 (as measured across runs), 0.1 or t₃ tails;
- ``sink`` and ``CHE`` (:mod:`.sink`, :mod:`.che`): :func:`dape_core.report.sink_check.sink_stronger` on DAPE1x3-X
  against DAPE-X for three encodings, and :func:`dape_core.report.che_check.che_beats_kerple` on Kerple and
  DAPE1x3-Kerple over the 12 permutation-variant tasks (the share of tasks decided), each pair's or task's own spread,
  under equal noise and with the pair, or a third of the tasks, at 2× and 3× the others' interaction SD;
- ``kernel size`` (:mod:`.kernel`): the informational rule :func:`dape_core.report.lm_checks.kernel_not_largest` on
  kernels 1, 3, 5 and 7 at ×1 … ×16 (15 comparisons against the largest, Bonferroni over them), each pair's own spread
  (none with one seed, the default's case); power: kernel 3 better by 2 SDs of a run's statistic at every length;
- ``claim of 6 checks`` and ``claim: CHE`` (:mod:`.claims`): ``dape1x3_improves_additive`` (DAPE1x3-X against X for
  ALiBi, Kerple and FIRE, within and beyond) through :func:`dape_core.report.claims.evaluate_claims`: CONFIRMED needs
  all six, REFUTED any one at the Bonferroni level; the CHE claim's majority on 2 tasks (the default's and the grid's)
  and on 12 (the paper's Table 6), each task at :func:`dape_core.report.intervals.level_for`'s level;
- ``heterogeneous`` (:mod:`.heterogeneity`): the paired, unpaired and one-run comparisons when one of the pair is 2× or
  3× noisier or interactions are t₃, with the pooled σ (the rule before), their own spread, the pair's spread borrowed
  from a grid (one seed), or the claims' rule (own spread; with one seed a borrowed σ that sizes seeds but decides
  nothing); the leakage claim through its own check, beside the σ of another kind (a tril-only grid) it borrowed before;
- ``design stage`` (:mod:`.design`): :mod:`dape_core.report.design` itself, a pilot of 2–4 seeds sizing fresh seeds (at
  most 8) read alone; the rate is among the trials the design ran;
- ``Holm's step-down`` (:mod:`.holm`): null families of 12 and 18 claims read by
  :func:`dape_core.report.holm.holm_verdicts`, the family-wise error beside the rate at the claims' own 95 %;
- ``Welch`` (:mod:`.welch`): Welch's comparison at unequal seed counts (2–5 against 2–32) and SDs (1/3 … 10 ×), exact,
  with the rule's ν (the fewer of the sides') and Welch–Satterthwaite's (the rule before).

A trial is *decided* when :func:`dape_core.report.intervals.decide` at a zero margin is not UNDECIDED. The CSV holds
each basis's false-decision rate (effect 0) and power (effect 2 seed-SDs; timing: 2 SDs of one job's rise) with their
Monte-Carlo SEs √(p(1 − p)/trials); for the interval, sink, unequal-noise and Welch rows also the null rate at Holm's
strictest level 1 − 0.05/18 (``false_decisions_at_18``: the step-down's first step across the 18 claims; 0.28 % nominal,
resolved by 20,000 trials a cell, or exact); the timing rule writes a row at each level. :func:`main` writes :data:`OUT`
(``--help`` lists its options; ``--only`` recomputes one group of rows and keeps the others). Every claim a new rule
decides needs its rows here (docs/extending.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from .bases import basis_cell, paired_trial  # noqa: F401
from .che import CHE_HETEROGENEITY, CHE_REGIMES, CHE_TASKS, che_claim_trial, che_rows, che_table, che_trial  # noqa: F401
from .claims import CHE_CLAIM_TASKS, claim_rows, claim_trial  # noqa: F401
from .common import (HOLM_DIVISOR, MANY_SEEDS, REGIMES, SEEDS, TAIL_TRIALS, cell_rng, decided, each_cell,  # noqa: F401
                     grid, seed_sd)
from .design import DESIGN_PILOT_SEEDS, design_cell, design_rows, design_trial  # noqa: F401
from .heterogeneity import (HETERO_RULES, HETEROGENEITY, LEAK_FACTOR, LEAK_SEEDS, hetero_rows,  # noqa: F401
                            leakage_table, leakage_trial)
from .holm import HOLM_CLAIMS, HOLM_REGIMES, HOLM_SEEDS, holm_rows  # noqa: F401
from .kernel import KERNEL_REGIMES, kernel_rows, kernel_trial  # noqa: F401
from .sink import SINK_HETEROGENEITY, SINK_REGIMES, sink_rows, sink_table, sink_trial  # noqa: F401
from .timing import (FAMILY_CLAIMS, TIMING_DESIGNS, TIMING_REGIMES, replicate_rise, replicate_rises,  # noqa: F401
                     simulate, timing_rows_all)
from .welch import WELCH_RATIOS, WELCH_SEEDS, welch_rate, welch_rows  # noqa: F401

#: the results file (of the repository this package is installed from in place, as ``make install`` does)
OUT = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "verdict_calibration.csv"


def calibration(trials: int, seed: int = 0, seeds=SEEDS + MANY_SEEDS, regimes=tuple(REGIMES), power: bool = True,
                jobs: int = 1) -> pd.DataFrame:
    """The interval bases' rows, one per basis × window variant × regime × seed count: false-decision rate and power
    with their Monte-Carlo SEs, each cell on its own random stream (:func:`cell_rng`), ``jobs`` cells at a time in
    worker processes. :func:`main` adds the rows of the rules run through the claims' own checks."""
    cells = [(kind, windows, regime, n, trials, seed, power) for regime in regimes for n in seeds
             for kind in ("paired", "unpaired", "one run", "own spread") if not (kind == "own spread" and n < 2)
             for windows in (True, False)]
    return pd.DataFrame(each_cell(basis_cell, cells, jobs))


def sink_che_rows(sink_trials: int, che_trials: int, seed: int) -> list[dict]:
    """The sink and CHE rules' rows, on one random stream."""
    rng = cell_rng(seed, "sink and CHE")
    return sink_rows(sink_trials, rng) + che_rows(che_trials, rng)


#: the groups of rows a partial rerun recomputes (``--only``): each a test of a row's basis
GROUPS = {
    "bases": lambda basis: not basis.startswith(("sink", "CHE", "kernel", "claim", "heterogeneous", "design",
                                                 "Holm", "timing", "Welch")),
    "timing": lambda basis: basis.startswith("timing"),
    "heterogeneity": lambda basis: basis.startswith("heterogeneous"),
    "sink": lambda basis: basis.startswith(("sink", "CHE")),
    "kernel": lambda basis: basis.startswith("kernel"),
    "claims": lambda basis: basis.startswith("claim"),
    "design": lambda basis: basis.startswith("design"),
    "holm": lambda basis: basis.startswith("Holm"),
    "welch": lambda basis: basis.startswith("Welch"),
}


def positive_int(text: str) -> int:
    """An argument that must be a whole number ≥ 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed values: a whole number ≥ 1")
    return value


def kept_rows(path: str, recomputed: str) -> pd.DataFrame:
    """The rows of an earlier results file that a partial rerun of the group ``recomputed`` (of ``GROUPS``) keeps:
    those of the other groups. A missing, cut or foreign file stops with one line naming it."""
    columns = {"basis", "per_window_data", "regime", "seeds", "trials", "false_decisions", "false_decisions_se"}
    try:
        earlier = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise SystemExit(f"{path}: cannot read the earlier results this partial rerun keeps rows of ({err})")
    if not columns <= set(earlier.columns) or earlier[sorted(columns - {"basis"})].isna().any().any():
        raise SystemExit(f"{path}: not a complete verdict_calibration results file (it needs the columns "
                         f"{', '.join(sorted(columns))}, filled in every row)")
    return earlier[~earlier["basis"].astype(str).map(GROUPS[recomputed])]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dape_core.report.calibration",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=positive_int, default=TAIL_TRIALS, help="null trials per cell of the interval "
                   "bases, the timing rule and unequal noise (each read at 95 %% and at 1 − 0.05/18; power on up to "
                   "10,000)")
    p.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1,
                   help="cells computed at a time (processes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timing-trials", type=positive_int, default=20000, help="null trials per cell of the timing "
                   "rule (read at 95 %% and at 1 − 0.05/18 on the same trials; a tenth as many at a rise for power)")
    p.add_argument("--sink-trials", type=positive_int, default=500, help="trials per cell of the sink rule "
                   "(slower: it runs the claim's own check on simulated tables)")
    p.add_argument("--che-trials", type=positive_int, default=100, help="trials per cell of the CHE rule (12 tasks "
                   "each)")
    p.add_argument("--kernel-trials", type=positive_int, default=1000, help="null trials per cell of the "
                   "kernel-size rule (its own check on simulated tables, about 0.2 s a trial)")
    p.add_argument("--kernel-power-trials", type=positive_int, default=200, help="trials per cell of the "
                   "kernel-size rule's power")
    p.add_argument("--claim-trials", type=positive_int, default=1000, help="null trials per cell of the claim-level "
                   "rules (a claim of six checks through evaluate_claims; the CHE claim on 2 and 12 tasks)")
    p.add_argument("--claim-power-trials", type=positive_int, default=200, help="trials per cell of the "
                   "claim-level rules' power")
    p.add_argument("--holm-trials", type=positive_int, default=4000, help="null families per cell of Holm's "
                   "step-down across the claims (12 or 18 paired claims each)")
    p.add_argument("--only", choices=sorted(GROUPS), help="recompute one group of rows (bases: the interval bases; "
                   "timing: the timing rule; sink: the sink and CHE rules; kernel: the kernel-size rule; claims: the "
                   "claim-level rules; heterogeneity: the paired comparison under unequal method noise; design: the "
                   "design stage, pilot → fresh seeds; holm: Holm's step-down across the claims; welch: Welch's "
                   "comparison at unequal seed counts and noise, exact) and keep the others from --out")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    rows = {"bases": lambda: calibration(args.trials, args.seed, jobs=args.jobs).to_dict("records"),
            "timing": lambda: timing_rows_all(args.timing_trials, args.seed, args.timing_trials // 10, jobs=args.jobs),
            "sink": lambda: sink_che_rows(args.sink_trials, args.che_trials, args.seed),
            "kernel": lambda: kernel_rows(args.kernel_trials, args.seed, power_trials=args.kernel_power_trials,
                                          jobs=args.jobs),
            "claims": lambda: claim_rows(args.claim_trials, args.seed, power_trials=args.claim_power_trials,
                                         jobs=args.jobs),
            "heterogeneity": lambda: hetero_rows(args.trials, args.seed, jobs=args.jobs),
            "design": lambda: design_rows(args.trials, args.seed, jobs=args.jobs),
            "holm": lambda: holm_rows(args.holm_trials, args.seed, jobs=args.jobs),
            "welch": welch_rows}  # each group's rows, in the order of the results file
    if args.only is None:
        df = pd.DataFrame([row for group in rows.values() for row in group()])
    else:
        df = pd.concat([kept_rows(args.out, args.only), pd.DataFrame(rows[args.only]())], ignore_index=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False, float_format="%.6g")  # 0.05/18 = 0.002778: four decimals would not do
    worst = df.loc[df["false_decisions"].idxmax()]
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"largest false-decision rate: {worst['false_decisions']:.3f} ± {worst['false_decisions_se']:.3f} "
          f"({worst['basis']}, {worst['seeds']} seeds, {worst['regime']}); nominal 0.05")
    return 0
