"""Fit the design's committed job prices (dape_core/config/measured/job_cost.json) on one machine's measured pilot.

    python benchmarks/job_cost_fit.py [--design reports/design.json] [--config config.yaml]
                                      [--out dape_core/config/measured/job_cost.json]

The design stage prices a seed by the work its jobs do (dape_core.config.job_cost: a start per job kind, operator
calls and FLOPs), so that the same pilot chooses the same claims and seeds on every machine. This fits those prices
on the measured CPU-seconds per seed of a finished run's pilot jobs (its design.json: ``measured_cpu_s``, or
``prices_cpu_s`` for a design priced in measured seconds) and the work its configuration counts, and writes the
table with the machine it describes and each kind's fit error. Run it on the machine whose minutes the budget is
stated in (the one that made reports/); a damaged design is one line naming it.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    from dape_core import artefacts
    from dape_core.config import build_plan, job_cost, load_yaml
    from dape_core.errors import ArtefactError, ConfigError
    from dape_core.report.design import DESIGN

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--design", type=Path, default=ROOT / "reports" / "design.json")
    p.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    p.add_argument("--out", type=Path, default=ROOT / "dape_core" / "config" / job_cost.TABLE)
    p.add_argument("--machine", help="the machine that ran the pilot (default: the design's record of it)")
    args = p.parse_args(argv)
    try:
        design = artefacts.read_json(args.design, DESIGN)
        measured = design.get("measured_cpu_s") or design["prices_cpu_s"]
        work = job_cost.seed_work(build_plan(load_yaml(args.config)))
    except (ArtefactError, ConfigError, OSError, KeyError) as err:
        raise SystemExit(f"job_cost_fit: {str(err).splitlines()[0]}") from None
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h", "--", str(args.design)],
                            capture_output=True, text=True).stdout.strip()
    source = (f"{args.design.name} of {args.config.name}" + (f" at {commit}" if commit else "")
              + f": the pilot's median CPU-s per seed on {args.machine or design.get('machine') or platform.processor()}")
    table = job_cost.fit_table(work, measured, source)
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    for kind, fit in table["fit"].items():
        print(f"{kind}: {fit['jobs']} seeds' jobs, |relative error| median {fit['median_abs_rel_error']:.1%}, "
              f"largest {fit['max_abs_rel_error']:.1%}")
    print(f"starts {table['start_s']} s, {table['s_per_call'] * 1e6:.2f} µs per call, "
          f"{table['s_per_tflop']:.2f} s per TFLOP → {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
