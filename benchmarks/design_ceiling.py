"""What the default's miniature can decide at all: the design stage's sizing on every seed a run has measured.

    python benchmarks/design_ceiling.py [--reports reports] [--budget-minutes 35 60 1000] [--max-seeds 16 100]
                                        [--out benchmarks/results/design_ceiling.csv]

The design stage (dape_core.report.design) sizes each claim's fresh seeds at its *pilot's* effects and noise, which a
pilot of one or two seeds per run reads roughly. This reads the same arithmetic on every seed of a finished run of a
design-stage configuration — the pilot's and the fresh seeds together, the best estimate of each check's effect and
noise that run holds — and runs the design's choice on it at several budgets and seed caps, priced with the run's
own measured job-seconds (its design.json). Its answer is a planning figure, never a verdict: the fresh seeds were
chosen by the design, and the verdicts of reports/ read the fresh seeds alone. It says how many claims any design
of this configuration could expect to decide in a given time, and which claims need more seeds than a run can buy.

Every table is checked where it is read (its seal and columns); a damaged file stops with one line naming it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def read_run(reports: Path):
    """The run's per-seed tables (checked) and its design (checked); a damaged or missing file stops with one line
    naming it."""
    from dape_core import artefacts
    from dape_core.errors import ArtefactError
    from dape_core.report.design import read_design

    def table(name: str) -> pd.DataFrame:
        path = reports / name
        return artefacts.read_csv(path, artefacts.report_table(path))

    try:
        return ({name: table(f"{name}.csv") for name in ("lm_results", "lm_windows", "che_results", "sink")},
                read_design(reports / "design.json"))
    except (ArtefactError, OSError) as err:
        raise SystemExit(str(err).splitlines()[0]) from None


def ceiling(tables: dict, design: dict, budgets, caps) -> pd.DataFrame:
    """One row per (seed cap, budget, claim): whether the design's choice on every seed's estimates keeps it, the
    seeds per method and the minutes it adds (in the order chosen), or why it is left."""
    from dape_core.report import design as designs
    from dape_core.report.claims import evaluate_claims

    sized = evaluate_claims(tables["lm_results"], che=tables["che_results"], sink=tables["sink"],
                            windows=tables["lm_windows"], fresh=True)
    rows = []
    for cap in caps:
        for budget in budgets:
            settings = designs.DesignSettings(budget, design["fresh_seeds_from"], cap, design["cores"])
            chosen = designs.choose(sized, design["prices_cpu_s"], settings)
            spent = 0.0
            for c in chosen["chosen"]:
                spent += c["extra_minutes"]
                rows.append({"max_seeds": cap, "budget_minutes": budget, "claim_id": c["claim_id"], "kept": True,
                             "seeds": designs.seeds_text(c), "extra_minutes": c["extra_minutes"],
                             "cumulative_minutes": round(spent, 2), "why": ""})
            for c in chosen["left"] + chosen["own_run"]:
                rows.append({"max_seeds": cap, "budget_minutes": budget, "claim_id": c["claim_id"], "kept": False,
                             "seeds": str(c.get("seeds", "")), "extra_minutes": None, "cumulative_minutes": None,
                             "why": c["why"]})
    return pd.DataFrame(rows)


def positive(kind, allowed: str):
    """An argument type: ``kind`` of the text, above zero; otherwise argparse names the option and the allowed
    values."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r}: allowed values: {allowed}")
        return value
    return parse


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reports", default=str(ROOT / "reports"), help="a design-stage run's reports directory")
    p.add_argument("--budget-minutes", type=positive(float, "a number > 0"), nargs="+", default=[35.0, 60.0, 1000.0])
    p.add_argument("--max-seeds", type=positive(int, "a whole number ≥ 1"), nargs="+", default=[16, 100])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "design_ceiling.csv"))
    args = p.parse_args(argv)
    tables, design = read_run(Path(args.reports))
    df = ceiling(tables, design, args.budget_minutes, args.max_seeds)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    for (cap, budget), g in df.groupby(["max_seeds", "budget_minutes"], sort=False):
        kept = g[g["kept"]]
        print(f"max_seeds {cap}, budget {budget:g} min: {len(kept)} claims of seeds fit "
              f"({kept['cumulative_minutes'].max() if len(kept) else 0:.1f} min): "
              + ", ".join(f"{r.claim_id} {r.seeds} (+{r.extra_minutes:.1f})" for r in kept.itertuples()))
    last = df[(df["max_seeds"] == max(args.max_seeds)) & (df["budget_minutes"] == max(args.budget_minutes))]
    for r in last[~last["kept"]].itertuples():
        print(f"  never at max_seeds {max(args.max_seeds)}: {r.claim_id}: {r.why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
