"""``python -m dape_core.config CONFIG``: validate, then print each family's jobs with their training GPU-hours and the
bound deciding them (flops, dispatch or measured), the estimate (per training shape with a calibration CSV: measured,
scaled from a measured shape, or the FLOP estimate) and, with ``resources.train_lm.gpu_mem_gb``, each training shape's
micro-batch on one GPU (the memory model, which also stops a run that cannot fit). ``--resolved``: instead, every
setting of ``defaults`` as the runs get it, marked "stated" (by the configuration) or "default" (the settings' default,
the paper's value)."""

from __future__ import annotations

import argparse
import sys

from dape_core.config import build_plan, check_sizes, estimate, estimate_line, job_cost, load_yaml
from dape_core.config.estimate import estimate_details, family_hours_text
from dape_core.config.memory_plan import fit_micro_batches, micro_batch_lines
from dape_core.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dape_core.config", description=__doc__)
    parser.add_argument("config", nargs="+", help="configuration file(s); later ones override earlier keys")
    parser.add_argument("--resolved", action="store_true", help="print every setting of `defaults` as resolved, "
                        "stated by the configuration or the settings' default")
    args = parser.parse_args(argv)
    config: dict = {}
    try:
        for path in args.config:
            config.update(load_yaml(path))
        plan = build_plan(config)
        check_sizes(plan)  # memory and evaluation windows, against the tokenized corpus where it is there
        fit_micro_batches(plan)  # with resources.train_lm.gpu_mem_gb: every run's micro-batch (torch)
        figures = estimate(plan)
    except ConfigError as err:
        print(f"configuration error: {err}", file=sys.stderr)
        return 2
    if args.resolved:
        print("\n".join(resolved_lines(config, plan.config)))
        return 0
    for family, counts in plan.job_counts().items():
        spec = plan.families[family]
        role = f" ({spec['role']})" if spec.get("role") else ""
        print(f"{family + role:<34} {spec['stage']:<8} " + ", ".join(f"{n} {rule}" for rule, n in counts.items())
              + family_hours_text(figures, family))
    print(estimate_line(plan, figures))
    if job_cost.design_line(plan):
        print(job_cost.design_line(plan))
    if figures["calibrated"] or figures["finetune_shapes"]:  # which figure each training shape used
        print("\n".join(estimate_details(figures)))
    if plan.memory:
        print("\n".join(micro_batch_lines(plan)))
    return 0


def resolved_lines(stated: dict, resolved: dict) -> list[str]:
    """``defaults.<stage>.<setting>: value  (stated | default)`` for every setting of the resolved ``defaults``."""
    out = []

    def walk(values: dict, given: dict | None, prefix: str) -> None:
        for key, value in values.items():
            inner = given.get(key) if isinstance(given, dict) else None
            if isinstance(value, dict) and value and key not in ("base_config",):
                walk(value, inner if isinstance(inner, dict) else {}, f"{prefix}.{key}")
            else:
                mark = "stated" if isinstance(given, dict) and key in given else "default"
                out.append(f"{prefix}.{key}: {value!r}  ({mark})")

    walk(resolved["defaults"], stated.get("defaults", {}), "defaults")
    return out


if __name__ == "__main__":
    sys.exit(main())
