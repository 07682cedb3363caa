"""Aggregate results into tidy CSVs, paper-style tables, figures, claim verdicts and the paper comparison.

Sub-commands (each writes its outputs atomically):

- ``lm``, ``sink``, ``timing``, ``che``, ``leakage``: per-job files → ``reports/*.csv`` (``--plan`` is
  ``results/plan.json``, the families, their roles and the run settings of the configuration); ``lm`` also stacks
  the per-window losses into ``lm_windows.csv`` (``--windows``, ``--windows-out``);
- ``tables``: Markdown and LaTeX tables of every family into ``--out-dir``;
- ``figure ppl|sweep|timing|che|attention|sink``: one figure;
- ``claims``: the claim verdicts with their intervals (``claims.md``, ``claims.csv``; ``--windows`` is
  ``lm_windows.csv``); ``compare``: the paper-vs-run comparison;
- ``robustness``: this run's and a shifted run's verdicts side by side (``robustness.md``, ``robustness.csv``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

from dape_core import artefacts, io

LM_STAGES = ("lm", "leakage", "finetune")  # stages whose runs have perplexity tables


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="report_command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, description=help_text)

    p = command("lm", "lm_results.csv: one row per run × evaluation length × seed")
    p.add_argument("--plan", required=True)
    p.add_argument("--evals", nargs="+", required=True, help="results/lm/{run}/seed{seed}/eval.csv files")
    p.add_argument("--summaries", nargs="+", required=True, help="the matching summary.json files")
    p.add_argument("--out", required=True)
    p.add_argument("--windows", nargs="+", default=[], help="results/lm/{run}/seed{seed}/windows.csv files")
    p.add_argument("--windows-out", help="lm_windows.csv: the per-window losses of --windows, with run and seed")

    p = command("sink", "sink.csv: attention-sink mass per run × seed × length × sequence × layer")
    p.add_argument("--plan", required=True)
    p.add_argument("--sinks", nargs="+", required=True)
    p.add_argument("--out", required=True)

    p = command("timing", "timing.csv: every timing run × length, with its families (and timing_repeats.csv)")
    p.add_argument("--plan", required=True)
    p.add_argument("--timings", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", nargs="+", default=[], help="results/timing/{job}.repeats.csv files")
    p.add_argument("--repeats-out", help="timing_repeats.csv: every interleaved repeat of --repeats, with families")

    p = command("che", "che_results.csv: every CHE cell and seed, with its families")
    p.add_argument("--plan", required=True)
    p.add_argument("--cells", nargs="+", required=True)
    p.add_argument("--out", required=True)

    p = command("leakage", "leakage.csv: each run without tril next to its tril twin")
    p.add_argument("--plan", required=True)
    p.add_argument("--evals", nargs="+", required=True)
    p.add_argument("--out", required=True)

    p = command("tables", "Markdown and LaTeX tables of every family")
    _add_sources(p)
    p.add_argument("--out-dir", required=True)

    p = command("figure", "one figure")
    p.add_argument("kind", choices=("ppl", "sweep", "timing", "che", "attention", "sink"))
    p.add_argument("--plan")
    p.add_argument("--family")
    p.add_argument("--lm")
    p.add_argument("--timing")
    p.add_argument("--che")
    p.add_argument("--sink")
    p.add_argument("--maps", help="maps.npz of an attention_maps job")
    p.add_argument("--out", required=True)

    p = command("design", "the design stage: the pilot's per-job results → the fresh seeds that decide the claims "
                          "(design.json, design.md)")
    p.add_argument("--plan", required=True, help="the pilot's plan (results/plan.json)")
    p.add_argument("--evals", nargs="*", default=[])
    p.add_argument("--summaries", nargs="*", default=[])
    p.add_argument("--windows", nargs="*", default=[])
    p.add_argument("--sinks", nargs="*", default=[])
    p.add_argument("--cells", nargs="*", default=[])
    p.add_argument("--prices", type=_prices, required=True,
                   help="JSON: run or cell → job kind → reference CPU-seconds of one more seed "
                        "(dape_core.config.job_cost.plan_prices; the workflow passes them)")
    p.add_argument("--benchmarks", nargs="*", default=[], help="the pilot jobs' Snakemake benchmark files (their "
                   "measured seconds estimate the fresh seeds' wall time here, never the choice)")
    p.add_argument("--threads", nargs="*", default=[], type=_kind_threads,
                   help="KIND=N: the threads of train, evaluate, attention, che")
    p.add_argument("--budget-minutes", type=_positive_field("design.budget_minutes"), required=True)
    p.add_argument("--fresh-seeds-from", type=_positive_field("design.fresh_seeds_from", integer=True), required=True)
    p.add_argument("--max-seeds", type=_positive_field("design.max_seeds", integer=True), required=True)
    p.add_argument("--cores", type=_positive_field("design.cores", integer=True), required=True)
    p.add_argument("--out", required=True, help="design.json")
    p.add_argument("--out-md", required=True, help="design.md")
    p.add_argument("--out-protocol", required=True, help="protocol.json: the block's protocol, sealed before its "
                   "fresh seeds run (dape_core.report.protocol)")
    p.add_argument("--results", default="results", help="the results folder (fresh results already there are "
                   "recorded in the protocol)")

    p = command("claims", "claim verdicts: claims.md and claims.csv")
    _add_sources(p)
    p.add_argument("--design", help="design.json: the verdicts read the fresh seeds only, and say the design")
    p.add_argument("--protocol", help="protocol.json: the protocol sealed with the design; claims.md says whether "
                   "the verdicts were read under it (confirmatory)")
    p.add_argument("--ledger", help="ledger.csv (benchmarks/ledger.py): the looks the configuration's committed "
                   "history holds, which claims.md states")
    p.add_argument("--windows", help="lm_windows.csv: per-window losses (the intervals' windows)")
    p.add_argument("--gpu-tflops", type=_positive_field("gpu_tflops"), help="estimate.gpu_tflops: the GPU-hours of "
                   "the extra seeds that would decide an open claim (default: the schema's)")
    p.add_argument("--utilisation", type=_positive_field("utilisation", at_most=1),
                   help="estimate.utilisation (default: the schema's)")
    p.add_argument("--out-md", required=True)
    p.add_argument("--out-csv", required=True)

    p = command("robustness", "two runs' verdicts side by side: flips and agreement")
    p.add_argument("--claims", required=True, help="claims.csv of this run")
    p.add_argument("--shifted-claims", required=True, help="claims.csv of the shifted run")
    p.add_argument("--shift-summary", help="shift.json written with the shifted configuration")
    p.add_argument("--out-md", required=True)
    p.add_argument("--out-csv", required=True)

    p = command("compare", "paper vs run: orderings and relative improvements")
    p.add_argument("--lm", required=True)
    p.add_argument("--plan", help="results/plan.json: headings name the families of each role")
    p.add_argument("--out-md", required=True)
    p.add_argument("--out-csv", required=True)


def _positive_field(name: str, integer: bool = False, at_most: float | None = None):
    """A number > 0 (a whole number with ``integer``; at most ``at_most`` if given) for the setting ``name``."""
    allowed = (f"a number in (0, {at_most}]" if at_most is not None
               else f"{'a whole number' if integer else 'a number'} > 0")

    def parse(text: str) -> float | int:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            value = float("nan")
        if not (0 < value <= at_most if at_most is not None else value > 0):
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not allowed; allowed values: {allowed}")
        return value

    return parse


def _kind_threads(text: str) -> tuple[str, int]:
    """``KIND=N`` of ``dape report design --threads``: a job kind the design prices and its threads."""
    from dape_core.report.design import LM_JOB_RULES

    kinds = (*LM_JOB_RULES, "che")
    kind, _, n = text.partition("=")
    if kind not in kinds or not n.isdigit() or int(n) < 1:
        raise argparse.ArgumentTypeError(f"threads: {text!r} is not allowed; allowed values: KIND=N with KIND one of "
                                         f"{', '.join(kinds)} and N a whole number ≥ 1")
    return kind, int(n)


def _prices(text: str) -> dict[str, dict[str, float]]:
    """``--prices`` of ``dape report design``: JSON run or cell → job kind → non-negative reference CPU-seconds."""
    from dape_core.config.job_cost import KINDS

    try:
        prices = json.loads(text)
        ok = isinstance(prices, dict) and all(
            isinstance(p, dict) and all(k in KINDS and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                                        for k, v in p.items()) for p in prices.values())
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"prices: {text[:60]!r} is not allowed; allowed values: JSON mapping each "
                                         f"run or cell to {{kind: CPU-seconds}} with kind one of {', '.join(KINDS)}")
    return prices


def _add_sources(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", required=True)
    p.add_argument("--lm", help="lm_results.csv")
    p.add_argument("--timing", help="timing.csv")
    p.add_argument("--timing-repeats", "--timing_repeats", dest="timing_repeats",
                   help="timing_repeats.csv: each interleaved repeat's time (the timing claim's interval)")
    p.add_argument("--che", help="che_results.csv")
    p.add_argument("--sink", help="sink.csv")
    p.add_argument("--leakage", help="leakage.csv")


def _read(path: str | None) -> pd.DataFrame | None:
    """An aggregated table, checked where it is read (dape_core.artefacts)."""
    return artefacts.read_csv(path, artefacts.report_table(path)) if path else None


def run(args) -> int:
    from dape_core.report import aggregate

    command = args.report_command
    if command in ("lm", "sink", "timing", "che", "leakage"):
        plan = aggregate.read_plan(args.plan)
        if command == "lm":
            frame = aggregate.lm_results(plan, args.evals, args.summaries)
            if args.windows_out:
                windows = aggregate.lm_windows(args.windows, plan)
                io.write_csv(args.windows_out, windows, seal=True)
                print(f"{len(windows)} rows → {args.windows_out}")
        elif command == "sink":
            frame = aggregate.sink_results(plan, args.sinks)
        elif command == "timing":
            frame = aggregate.timing_results(plan, args.timings)
            if args.repeats_out:
                repeats = aggregate.timing_repeats(plan, args.repeats, frame)
                io.write_csv(args.repeats_out, repeats, seal=True)
                print(f"{len(repeats)} rows → {args.repeats_out}")
        elif command == "che":
            frame = aggregate.che_results(plan, args.cells)
        else:
            frame = aggregate.leakage_results(plan, args.evals)
        io.write_csv(args.out, frame, seal=True)
        print(f"{len(frame)} rows → {args.out}")
    elif command == "tables":
        for path in write_tables(aggregate.read_plan(args.plan), _read(args.lm), _read(args.timing),
                                 _read(args.che), _read(args.leakage), args.out_dir):
            print(path)
    elif command == "robustness":
        from dape_core.report.robustness import compare, read_summary, robustness_markdown

        table = compare(_read(args.claims), _read(args.shifted_claims))
        io.write_text(args.out_md, robustness_markdown(table, read_summary(args.shift_summary)))
        io.write_csv(args.out_csv, table, seal=True)
    elif command == "figure":
        draw_figure(args)
    elif command == "design":
        write_design(args)
    elif command == "claims":
        write_claims(_read(args.lm), _read(args.timing), _read(args.che), _read(args.sink), args.out_md,
                     args.out_csv, windows=_read(args.windows), gpu_tflops=args.gpu_tflops,
                     utilisation=args.utilisation, timing_repeats=_read(args.timing_repeats),
                     design=args.design, protocol_path=args.protocol, ledger_path=args.ledger)
    else:
        from dape_core.report.compare import compare_markdown, ordering

        lm = _read(args.lm)
        plan = aggregate.read_plan(args.plan) if args.plan else None
        io.write_text(args.out_md, compare_markdown(lm, plan=plan))
        io.write_csv(args.out_csv, ordering(lm), seal=True)
    return 0


def family_heading(name: str, spec: dict) -> str:
    heading = f"{name} — {spec['title']}" if spec.get("title") else name
    return heading + (f" ({spec['paper']})" if spec.get("paper") else "")


def write_tables(plan: dict, lm, timing, che, leakage, out_dir: str | Path) -> list[Path]:
    """Every table of the plan's families: {family}_ppl, _delta_p, _accuracy, _time, _leakage (.md and .tex)."""
    from dape_core.report import tables

    out_dir = Path(out_dir)
    written = []

    def emit(stem: str, heading: str, content: list) -> None:
        for ext, render in (("md", tables.to_markdown), ("tex", tables.to_latex)):
            path = out_dir / f"{stem}.{ext}"
            io.write_text(path, render(content, heading))
            written.append(path)

    for family, spec in plan["families"].items():
        heading = family_heading(family, spec)
        if spec["stage"] in LM_STAGES:
            panel_by, runs = spec.get("panel_by"), spec["runs"]
            emit(f"{family}_ppl", f"{heading}: perplexity", tables.ppl_tables(lm, family, panel_by, runs))
            if spec.get("delta_p"):
                emit(f"{family}_delta_p", f"{heading}: ΔP", tables.delta_p_tables(lm, family, panel_by, runs))
        if spec["stage"] == "leakage":
            emit(f"{family}_leakage", f"{heading}: without / with tril", tables.leakage_tables(leakage, family))
        if spec["stage"] == "che":
            emit(f"{family}_accuracy", f"{heading}: accuracy",
                 tables.che_tables(che, family, spec.get("aggregation", "max")))
        if spec["stage"] == "timing":
            emit(f"{family}_time", f"{heading}: time", tables.timing_tables(timing, family))
    return written


def draw_figure(args) -> None:
    from dape_core.report import aggregate, figures

    if args.kind == "attention":
        figures.attention_figure(args.maps, args.out)
        return
    if args.kind == "sink":
        figures.sink_figure(_read(args.sink), args.out)
        return
    spec = aggregate.read_plan(args.plan)["families"][args.family]
    title = family_heading(args.family, spec)
    if args.kind == "ppl":
        figures.ppl_figure(_read(args.lm), args.family, spec.get("panel_by"), title, args.out, spec["runs"])
    elif args.kind == "sweep":
        figures.sweep_figure(_read(args.lm), args.family, spec["sweep"], title, args.out)
    elif args.kind == "timing":
        figures.timing_figure(_read(args.timing), args.family, title, args.out)
    else:
        figures.che_figure(_read(args.che), args.family, spec.get("aggregation", "max"), title, args.out)


def write_design(args) -> dict:
    """The design stage (:mod:`dape_core.report.design`): the pilot's per-job files aggregated, its claims sized for
    fresh seeds and priced in reference CPU-seconds (``--prices``), the design written and printed with its wall time
    here (from the pilot jobs' measured seconds)."""
    from dape_core.report import aggregate, design, protocol
    from dape_core.machine import cpu_model
    from dape_core.report.claims import evaluate_claims

    plan = aggregate.read_plan(args.plan)
    lm = aggregate.lm_results(plan, args.evals, args.summaries) if args.evals else None
    windows = aggregate.lm_windows(args.windows, plan) if args.windows else None
    sink = aggregate.sink_results(plan, args.sinks) if args.sinks else None
    che = aggregate.che_results(plan, args.cells) if args.cells else None
    pilot = evaluate_claims(lm, che=che, sink=sink, windows=windows, fresh=True)
    settings = design.DesignSettings(args.budget_minutes, args.fresh_seeds_from, args.max_seeds, args.cores)
    chosen = design.choose(pilot, args.prices, settings)
    measured = design.measured_prices(args.benchmarks, dict(args.threads))
    chosen["measured_cpu_s"] = {u: {k: round(v, 2) for k, v in sorted(p.items())} for u, p in sorted(measured.items())}
    chosen["wall"] = design.wall_estimate(chosen, measured, cpu_model())
    lines = design.design_lines(chosen)
    io.write_json(args.out_protocol, protocol.protocol(chosen, args.results), seal=True)
    io.write_json(args.out, chosen, seal=True)
    io.write_text(args.out_md, "# Design\n\n" + "\n".join(lines) + "\n")
    print("\n".join(f"dape design: {line}" for line in lines), flush=True)
    return chosen


def write_claims(lm, timing, che, sink, out_md: str | Path, out_csv: str | Path, windows=None,
                 gpu_tflops: float | None = None, utilisation: float | None = None,
                 timing_repeats=None, design: str | Path | None = None,
                 protocol_path: str | Path | None = None, ledger_path: str | Path | None = None) -> pd.DataFrame:
    """The claim verdicts on this run beside the same rules on the paper's numbers, and Spearman's ρ of each setting's
    method ordering against the paper's; ``gpu_tflops`` and ``utilisation`` price the seeds that would decide open
    claims. With ``design`` (design.json) the verdicts read the fresh seeds only and claims.md shows the design,
    whether it was read under the protocol sealed with it (``protocol_path``; none: exploratory) and, with
    ``ledger_path``, how many looks its history holds."""
    from dape_core.report import design as designs
    from dape_core.report import protocol
    from dape_core.report.claims import claims_markdown, evaluate_claims, evaluate_claims_on_paper
    from dape_core.report.compare import setting_correlations
    from dape_core.report.holm import holm_verdicts

    chosen = designs.read_design(design) if design else None
    at_least = designs.pilot_intervals(chosen) if chosen is not None else None  # REFUTED at the pilot's level
    if chosen is not None:
        lm, che, sink, windows = (designs.fresh_only(frame, chosen) for frame in (lm, che, sink, windows))
    verdicts = evaluate_claims(lm, timing=timing, che=che, sink=sink, windows=windows, gpu_tflops=gpu_tflops,
                               utilisation=utilisation, timing_repeats=timing_repeats, min_comparisons=at_least)
    if chosen is not None:
        verdicts = designs.annotate(verdicts, chosen)
    holm = holm_verdicts(verdicts, lambda ids: evaluate_claims(
        lm, timing=timing, che=che, sink=sink, windows=windows, timing_repeats=timing_repeats, claim_ids=ids,
        min_comparisons=at_least))
    verdicts["holm_verdict"] = holm.reindex(verdicts["claim_id"]).to_numpy()
    block = None
    if chosen is not None:
        sealed = protocol.read_protocol(protocol_path) if protocol_path else None
        state, reasons = protocol.status(sealed, chosen)
        verdicts["protocol"] = state
        block = protocol.status_line(state, reasons, sealed and sealed["analysis_digest"])
        if ledger_path:
            block += "\n\n" + protocol.looks_line(protocol.read_ledger(ledger_path))
    rho = setting_correlations(lm) if lm is not None and len(lm) else None
    io.write_text(out_md, claims_markdown(verdicts, paper=evaluate_claims_on_paper(), rho=rho,
                                          design=[block, "", *designs.design_lines(chosen)] if chosen else None))
    table = verdicts.assign(numbers=verdicts["numbers"].map(lambda n: json.dumps(n, default=str, sort_keys=True)))
    io.write_csv(out_csv, table, seal=True)
    return verdicts
