"""``python -m dape_core.config CONFIG``: validate, then print jobs per family and the estimate."""

from __future__ import annotations

import argparse
import sys

from dape_core.config import build_plan, estimate_line, load_yaml
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
    except ConfigError as err:
        print(f"configuration error: {err}", file=sys.stderr)
        return 2
    for family, counts in plan.job_counts().items():
        spec = plan.families[family]
        role = f" ({spec['role']})" if spec.get("role") else ""
        print(f"{family + role:<34} {spec['stage']:<8} " + ", ".join(f"{n} {rule}" for rule, n in counts.items()))
    print(estimate_line(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
