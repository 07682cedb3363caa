"""``python -m dape_core.config CONFIG``: validate, then print jobs per family with their training GPU-hours and
the bound that decides them (flops, dispatch or measured), the estimate (per training shape, with a calibration
CSV: measured, scaled from a measured shape, or the FLOP estimate) and, with ``resources.train_lm.gpu_mem_gb``,
the micro-batch each training shape runs in on one GPU (the memory model, which also stops a run that cannot fit)."""

from __future__ import annotations

import argparse
import sys

from dape_core.config import build_plan, estimate, estimate_line, load_yaml
from dape_core.config.estimate import estimate_details, family_hours_text
from dape_core.config.memory_plan import fit_micro_batches, micro_batch_lines
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
        fit_micro_batches(plan)  # with resources.train_lm.gpu_mem_gb: every run's micro-batch (torch)
        figures = estimate(plan)
    except ConfigError as err:
        print(f"configuration error: {err}", file=sys.stderr)
        return 2
    for family, counts in plan.job_counts().items():
        spec = plan.families[family]
        role = f" ({spec['role']})" if spec.get("role") else ""
        print(f"{family + role:<34} {spec['stage']:<8} " + ", ".join(f"{n} {rule}" for rule, n in counts.items())
              + family_hours_text(figures, family))
    print(estimate_line(plan, figures))
    if figures["calibrated"] or figures["finetune_shapes"]:  # which figure each training shape used
        print("\n".join(estimate_details(figures)))
    if plan.memory:
        print("\n".join(micro_batch_lines(plan)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
