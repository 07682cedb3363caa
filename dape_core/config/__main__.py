"""``python -m dape_core.config CONFIG``: validate, then print jobs per family with their training GPU-hours and
the bound that decides them (flops, dispatch or measured), and the estimate (per training shape, with a calibration
CSV: measured, scaled from a measured shape, or the FLOP estimate)."""

from __future__ import annotations

import argparse
import sys

from dape_core.config import build_plan, estimate, estimate_line, load_yaml
from dape_core.config.estimate import estimate_details, family_hours_text
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
        print(f"{family + role:<34} {spec['stage']:<8} " + ", ".join(f"{n} {rule}" for rule, n in counts.items())
              + family_hours_text(figures, family))
    print(estimate_line(plan, figures))
    if figures["calibrated"] or figures["finetune_shapes"]:  # which figure each training shape used
        print("\n".join(estimate_details(figures)))
    if plan.memory:
        print("\n".join(micro_batch_lines(plan)))
    return 0


def micro_batch_lines(plan) -> list[str]:
    """One line per training shape: the micro-batch the memory model chose on one GPU and its modelled peak."""
    lines, seen = [], {}
    for name, memory in plan.memory.items():
        s = plan.lm_runs[name]["settings"]
        job = plan.resources("train_lm", s["size"])
        processes = max(1, job["gpu"])
        key = (job["gpu_mem_gb"], s["size"], s["encoding"], s["processor"], s["kernel_size"], s["train_len"],
               s["batch_size"] // processes, s["precision"], memory.describe())
        seen.setdefault(key, []).append(name)
    for (gpu_mem_gb, size, encoding, processor, kernel, length, share, precision, described), runs in seen.items():
        method = f"{encoding}/{processor}" + (f" k{kernel}" if processor == "dape_v2" else "")
        lines.append(f"  micro-batch on one GPU ({gpu_mem_gb:g} GB): {size} {method} T{length} {precision}, "
                     f"{share} sequences per GPU → {described} — {len(runs)} run(s)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
