"""What one more pilot seed would have chosen: the design stage on a finished run's pilot with one of its fresh seeds
added to one family's runs, as if the pilot had had it.

    python benchmarks/pilot_size.py [--reports reports] [--family dape_every_encoding] [--extra 300 301 302]
                                    [--budget-minutes 35] [--max-seeds 32] [--out benchmarks/results/pilot_size.csv]

The design stage (dape_core.report.design) sizes each claim's fresh seeds at its pilot's effects and noise. A pilot
of two seeds per run reads an effect with the SE of two seeds' mean, and a claim whose pilot effect falls near its
threshold is priced far above what its fresh seeds then need. This reruns the design's choice on the run's pilot
(seeds below its ``fresh_seeds_from``) and, for each ``--extra`` seed in turn, on the pilot with that fresh seed
added to every run of ``--family`` (the family whose pilot seeds would grow), priced with the run's own measured
job-seconds (its design.json). Each extra seed is one draw of a larger pilot: an anecdote per seed, not a
distribution. It is a planning figure, never a verdict: those seeds were the run's verdict seeds.

Every table is checked where it is read (its seal and columns); a damaged file stops with one line naming it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def pilot_tables(tables: dict, design: dict, family: str, extra: int | None) -> dict:
    """The run's tables cut to its pilot (seeds below ``fresh_seeds_from``), plus seed ``extra`` on the runs of
    ``family``."""
    runs = set(tables["lm_results"].loc[tables["lm_results"]["families"].astype(str).str.split(";").map(
        lambda f: family in f), "run"])
    if not runs:
        raise SystemExit(f"--family: {family!r} has no runs in this run's lm_results.csv")

    def cut(df: pd.DataFrame | None) -> pd.DataFrame | None:
        if df is None or "seed" not in df:
            return df
        seed = pd.to_numeric(df["seed"], errors="coerce")
        keep = seed < design["fresh_seeds_from"]
        if extra is not None and "run" in df:
            keep |= (seed == extra) & df["run"].isin(runs)
        return df[keep].reset_index(drop=True)

    return {name: cut(df) for name, df in tables.items()}


def choose(tables: dict, design: dict, budget: float, cap: int) -> dict:
    from dape_core.report import design as designs
    from dape_core.report.claims import evaluate_claims

    sized = evaluate_claims(tables["lm_results"], che=tables["che_results"], sink=tables["sink"],
                            windows=tables["lm_windows"], fresh=True)
    return designs.choose(sized, design["prices_cpu_s"],
                          designs.DesignSettings(budget, design["fresh_seeds_from"], cap, design["cores"]))


def main(argv=None) -> int:
    from design_ceiling import read_run

    from dape_core.report.design import seeds_text

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reports", default=str(ROOT / "reports"), help="a design-stage run's reports directory")
    p.add_argument("--family", default="dape_every_encoding")
    p.add_argument("--extra", type=int, nargs="+", required=True, help="fresh seeds of that run, each in turn")
    p.add_argument("--budget-minutes", type=float, default=35.0)
    p.add_argument("--max-seeds", type=int, default=32)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pilot_size.csv"))
    args = p.parse_args(argv)
    tables, design = read_run(Path(args.reports))
    rows = []
    for extra in [None, *args.extra]:
        if extra is not None and extra < design["fresh_seeds_from"]:
            raise SystemExit(f"--extra: {extra} is a pilot seed; allowed values: ≥ {design['fresh_seeds_from']}")
        chosen = choose(pilot_tables(tables, design, args.family, extra), design, args.budget_minutes,
                        args.max_seeds)
        pilot = "pilot" if extra is None else f"pilot + seed {extra} on {args.family}"
        for c in chosen["chosen"]:
            rows.append({"pilot": pilot, "claim_id": c["claim_id"], "kept": True, "seeds": seeds_text(c),
                         "extra_minutes": c["extra_minutes"], "why": ""})
        for c in chosen["left"] + chosen["own_run"]:
            rows.append({"pilot": pilot, "claim_id": c["claim_id"], "kept": False, "seeds": str(c.get("seeds", "")),
                         "extra_minutes": None, "why": c["why"]})
        print(f"{pilot}: {len(chosen['chosen'])} claims in {chosen['minutes']:.1f} of {args.budget_minutes:g} min: "
              + ", ".join(f"{c['claim_id']} {seeds_text(c)}" for c in chosen["chosen"]), flush=True)
    df = pd.DataFrame(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
