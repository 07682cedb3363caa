"""``python -m dape_core.config CONFIG``: validate, then print jobs per family and the estimate (per training
shape, with a calibration CSV: measured, scaled from a measured shape, or the FLOP estimate)."""

from __future__ import annotations

import argparse
import sys

from dape_core.config import build_plan, estimate, estimate_line, load_yaml
from dape_core.config.estimate import estimate_details
from dape_core.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dape_core.config", description=__doc__)
    parser.add_argument("config", nargs="+", help="configuration file(s); later ones override earlier keys")
    args = parser.parse_args(argv)
    config: dict = {}
    for path in args.config:
        config.update(load_yaml(path))
    try:
        plan = build_plan(config)
        figures = estimate(plan)
    except ConfigError as err:
        print(f"configuration error: {err}", file=sys.stderr)
        return 2
    for family, counts in plan.job_counts().items():
        spec = plan.families[family]
        role = f" ({spec['role']})" if spec.get("role") else ""
        print(f"{family + role:<34} {spec['stage']:<8} " + ", ".join(f"{n} {rule}" for rule, n in counts.items()))
    print(estimate_line(plan, figures))
    if figures["calibrated"] or figures["finetune_shapes"]:  # which figure each training shape used
        print("\n".join(estimate_details(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
