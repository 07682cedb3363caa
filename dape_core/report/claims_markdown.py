"""claims.md: the verdict counts and how to read them, the method orderings against the paper, the verdicts with
the numbers behind them, what would decide the open claims, and each claim's rule."""

from __future__ import annotations

import pandas as pd

from dape_core.report.intervals import CONFIRMED, LEVEL, MAX_SEEDS, NOT_RUN, REFUTED, UNDECIDED

#: what benchmarks/results/verdict_calibration.csv shows of the rules (tests/test_verdict_calibration.py checks it)
CALIBRATION = (
    "The calibration (python -m dape_core.report.calibration) shows every rule the claims decide by — each basis "
    "of an interval, Welch's comparison at unequal seed counts (computed exactly), the timing, sink and CHE rules, "
    "the informational kernel-size claim decided by one of m comparisons at the Bonferroni level 1 − 0.05/m, and "
    "claims read over their checks — decides two identical methods at most 5 % of the time within Monte-Carlo "
    "error, the comparisons read on their own spread also where one method, task or encoding is 2× or 3× noisier "
    "than the others; and at Holm's strictest level 1 − 0.05/18 the interval bases, Welch's comparison and the "
    "timing rule at most 0.28 % within the error of 20,000 trials a cell (exact for Welch's; "
    "benchmarks/results/verdict_calibration.csv, docs/verdicts.md).")

HOW_TO_READ = (
    f"Each check has a statistic and its {LEVEL:.0%} interval: CONFIRMED when the whole interval lies on the "
    "claimed side beyond the claim's margin, REFUTED when it lies wholly on the opposite side of zero (for the "
    "threshold claims, beyond the contrasting threshold their rule names), UNDECIDED otherwise — a difference "
    "inside the noise is never a refutation, and a real gain below the margin is not a confirmation. A claim of "
    "several checks is CONFIRMED when all are, REFUTED when any is at the Bonferroni level over its m intervals "
    "(1 − 0.05/m: a check REFUTED at 95 % alone but not jointly is UNDECIDED and says so), UNDECIDED otherwise; "
    "NOT-RUN when no setting has the rows it needs. Intervals are Student's t on per-seed statistics "
    "(each seed's statistic from all its evaluation windows): estimate ± t_ν · σ / √n, σ the SD of one seed's "
    "statistic, ν its degrees of freedom. A paired comparison (two methods of one setting, compared seed by seed) "
    "reads the spread of its own pair's per-seed differences (ν = n − 1; one seed: (−∞, +∞)), since methods do "
    "not share one noise level. A run on its own, and each side of an unpaired comparison (Welch), reads its own "
    "seeds' spread with two or more seeds (ν = n − 1), for the same reason; with one seed, (−∞, +∞): the "
    "within-run σ pooled over the grid's methods in its own setting (dataset, size, training length and budget; "
    "runs without tril apart from causal ones), or where the setting has one seed the grid's largest σ for that "
    "statistic, is borrowed to size the seeds a verdict needs, never to decide (a method noisier than the σ it "
    "borrows can be decided beyond 5 % of the time). Runs are paired by seed only where they share "
    "initialisation and batch stream (the same setting); otherwise the comparison is unpaired (Welch). "
    f"{CALIBRATION} The timing claim's interval is Student's t over replicate jobs, each timing both sizes and both "
    "methods in blocks of fresh worker processes (a job's rise the mean over its blocks of a ratio of medians of "
    "interleaved rounds: what changes between jobs is shared by all of a job's blocks), on the device it names. The "
    "column on the paper's numbers gives point verdicts (one printed number per cell: the interval is the point). A "
    "diverged run has perplexity +∞: it decides its comparison. Lengths are multiples of the training length "
    "(×1 = the training length); core claims are marked ★. Marks: ✓ CONFIRMED, ✗ REFUTED, ? UNDECIDED.")


def _rho_lines(rho: pd.DataFrame | None) -> list[str]:
    if rho is None or rho.empty:
        return ["No run setting shares methods with the paper's tables.", ""]
    out = ["| role | run setting | paper setting | ρ by multiple | mean ρ |", "|---|---|---|---|---|"]
    for _, r in rho.iterrows():
        paper = (f"{r['paper_dataset']}, train {int(r['paper_train_len'])}, {r['paper_size']}"
                 if pd.notna(r["paper_train_len"]) else "no printed numbers")
        mean = "–" if pd.isna(r["mean_spearman"]) else f"{r['mean_spearman']:.2f}"
        out.append(f"| {r['role']} | {r['dataset']}, train {r['train_len']}, {r['size']} | {paper} | "
                   f"{r['spearman_by_multiple'] or '–'} | {mean} |")
    return out + [""]


POWER_RULE = (
    "Seeds per method that would decide a check at its observed effect: n = ⌈((t_ν,0.975 + t_ν,0.8) · σ / δ)²⌉ "
    f"(the {LEVEL:.0%} interval excludes the threshold with 80 % power; the sample size of a comparison of means, "
    "Chow, Shao & Wang, Sample Size Calculations in Clinical Research, §3.1, with t quantiles on the seed noise's "
    "ν; for a paired comparison ν = n − 1, its own pair's spread), σ the SD of one seed's statistic (a paired "
    "comparison, a run or an unpaired side with one seed, which has no spread of its own, is sized with its "
    "setting's σ pooled over the methods: a plan, not a verdict), δ the distance from the estimate to the threshold "
    "it lies beyond — "
    "CONFIRMED's margin, or REFUTED's on the other side. An estimate between the two thresholds is decided by no "
    f"number of seeds (\"none\"); more than {MAX_SEEDS} is written \"> {MAX_SEEDS}\"; \"unknown\" without a "
    "seed-noise estimate. A claim is decided REFUTED by its cheapest check heading there, or CONFIRMED when every "
    "open check heads there (the largest n). Cost: each run of those checks retrained to n seeds — per extra seed "
    "a training and an evaluation job (a CHE cell: one job) — in training CPU-hours as this run measured them "
    "(train_wall_s × train_threads) and GPU-hours, the larger of the FLOP time (flops_per_token × tokens / "
    "(gpu_tflops × utilisation)) and the dispatch time (operator calls per step × the per-call host cost measured "
    "on this CPU, dape_core/config/measured/dispatch_cost.csv), as `python -m dape_core.config` prints them; the "
    "column bound says which decides.")


def family_line(df: pd.DataFrame) -> str:
    """The false decisions the claims together allow: each decides two identical methods at most 5 % of the time, so
    n make up to 0.05·n on average when nothing is true (P(≥ 1) ≤ 0.05·n; 1 − 0.95ⁿ if independent)."""
    evaluated = int((df["verdict"] != NOT_RUN).sum())
    decided = int(df["verdict"].isin([CONFIRMED, REFUTED]).sum())
    alpha = 1 - LEVEL
    line = (f"Read together: each of the {evaluated} evaluated claims decides two identical methods at most "
            f"{alpha:.0%} of the time, so when no claim's effect is real up to {alpha * evaluated:.1f} false "
            f"decisions are expected among them (at least one with probability up to "
            f"{1 - LEVEL ** evaluated:.0%} were they independent); {decided} are decided here, each at its own 5 %.")
    if "holm_verdict" in df:
        holm = int(df["holm_verdict"].isin([CONFIRMED, REFUTED]).sum())
        line += (f" For the family: Holm's step-down across the {evaluated} (each claim's rule read with every "
                 f"interval at 1 − 0.05/d, d = {evaluated}, {evaluated - 1}, … as claims are decided; the column "
                 f"Holm and claims.csv's holm_verdict) keeps {holm} of the {decided} decided, with at most "
                 f"{alpha:.0%} chance of any false decision among them.")
    return line


def _open_lines(df: pd.DataFrame) -> list[str]:
    """The section on what would decide each UNDECIDED claim."""
    open_claims = df[df["verdict"] == UNDECIDED] if "seeds_to_decide" in df else df.iloc[0:0]
    out = ["", "## What would decide the open claims", "", POWER_RULE, ""]
    if open_claims.empty:
        return out + ["No claim is UNDECIDED.", ""]
    out += ["| claim | seeds per method | extra jobs | training CPU-hours | GPU-hours | bound |",
            "|---|---|---|---|---|---|"]

    def num(x, fmt):
        return "–" if x is None or pd.isna(x) else format(x, fmt)

    for _, r in open_claims.iterrows():
        out.append(f"| `{r['claim_id']}` | {str(r['seeds_to_decide']).replace('|', '/')} | "
                   f"{num(r['extra_jobs'], '.0f')} | {num(r['extra_cpu_hours'], '.2f')} | "
                   f"{num(r['extra_gpu_hours'], '.2g')} | {r.get('gpu_bound') or '–'} |")
    return out + [""]


def claims_markdown(df: pd.DataFrame, paper: pd.DataFrame | None = None, rho: pd.DataFrame | None = None,
                    design: list[str] | None = None) -> str:
    """A Markdown report: the verdict counts and how to read them, Spearman's ρ of each setting's method ordering
    against the paper's (``rho``: :func:`dape_core.report.compare.setting_correlations`), the verdicts with their
    numbers, then each claim's rule. ``paper`` (:func:`evaluate_claims_on_paper`) adds a column of point verdicts on
    the paper's numbers; ``design`` (:func:`dape_core.report.design.design_lines`): the seeds chosen, and why."""
    def cell(x) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    on_paper = None if paper is None else paper.set_index("claim_id")["verdict"]
    counts = df["verdict"].value_counts()
    extra = "" if on_paper is None else " on the paper's numbers (point) |"
    out = ["# Claims", "",
           ", ".join(f"{counts.get(v, 0)} {v}" for v in (CONFIRMED, REFUTED, UNDECIDED, NOT_RUN)) + ".", "",
           HOW_TO_READ, "", family_line(df), "",
           *(["## Design", "", *design, ""] if design else []),
           "## Method orderings against the paper", "",
           "Spearman's ρ between the run's and the paper's ordering of the methods both have, per role and run "
           "setting, at each multiple (n = shared methods) and averaged over the multiples (see "
           "paper_comparison.md).", ""]
    out += _rho_lines(rho)
    holm = "holm_verdict" in df
    out += ["## Verdicts", "",
            "| claim | section | statement | verdict |" + (" Holm |" if holm else "") + " basis | seed noise |"
            + extra + " numbers |",
            "|---|---|---|---|" + ("---|" if holm else "") + "---|---|" + ("---|" if extra else "") + "---|"]
    for _, r in df.iterrows():
        star = " ★" if r["core"] else ""
        info = " (informational)" if r["informational"] else ""
        paper_cell = "" if on_paper is None else f" {on_paper.get(r['claim_id'], NOT_RUN)} |"
        holm_cell = f" {r['holm_verdict']} |" if holm else ""
        out.append(f"| `{r['claim_id']}`{star} | {cell(r['section'])} | {cell(r['statement'])} | "
                   f"**{r['verdict']}**{info} |{holm_cell} {cell(r['basis']) or '–'} | "
                   f"{cell(r.get('seed_noise', '')) or '–'} |{paper_cell} {cell(r['summary'])} |")
    out += _open_lines(df)
    out += ["## Rules", ""]
    out += [f"- `{r['claim_id']}` ({cell(r['section'])}): {r['rule']}" for _, r in df.iterrows()]
    return "\n".join(out) + "\n"
