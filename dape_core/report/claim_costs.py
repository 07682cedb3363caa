"""What would decide an UNDECIDED claim, and what it costs: the seeds per method at the observed effects
(:func:`dape_core.report.intervals.seeds_to_decide` per check), the extra jobs, their training CPU-hours as the run
measured them and their GPU-hours (the larger of FLOP and dispatch time, :mod:`dape_core.config.dispatch`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dape_core.report.intervals import CONFIRMED, POWER, REFUTED, UNDECIDED


def _towards(check: dict) -> str | None:
    """The verdict more seeds would reach at a check's observed effect (None: none)."""
    text = check.get("seeds_needed_text") or ""
    return CONFIRMED if f"towards {CONFIRMED}" in text else REFUTED if f"towards {REFUTED}" in text else None


def run_costs(lm: pd.DataFrame | None, gpu_tflops: float, utilisation: float) -> dict[str, dict]:
    """Per LM run: its seeds and, as medians over them, one more seed's training CPU-hours (``train_wall_s`` ×
    ``train_threads``) and GPU-hours, the larger of FLOP and dispatch time
    (:func:`dape_core.config.dispatch.row_gpu_hours`), with the bound that decides."""
    from dape_core.config.dispatch import row_gpu_hours

    if lm is None or lm.empty or "run" not in lm:
        return {}
    out = {}
    for run, g in lm.drop_duplicates(["run", "seed"]).groupby("run"):
        def col(name):
            values = pd.to_numeric(g[name], errors="coerce") if name in g else pd.Series(np.nan, index=g.index)
            return values.astype(float)

        cpu = float(np.nanmedian((col("train_wall_s") * col("train_threads").fillna(1)).to_numpy())) / 3600 \
            if col("train_wall_s").notna().any() else math.nan
        priced = [row_gpu_hours(row, gpu_tflops, utilisation) for row in g.to_dict("records")]
        hours = [h for h, _ in priced if np.isfinite(h)]
        bounds = sorted({b for h, b in priced if np.isfinite(h)})
        out[str(run)] = {"seeds": int(g["seed"].nunique()), "cpu_hours": cpu,
                         "gpu_hours": float(np.median(hours)) if hours else math.nan, "gpu_bound": "/".join(bounds)}
    return out


def claim_power(checks: list[dict]) -> list[dict]:
    """``checks``, all heading to CONFIRMED, each sized at power 0.8^(1/k), so that the claim of k checks, CONFIRMED
    only when all are, has 80 % power (each at 80 % gives 0.8^k); a check without ``_size`` keeps its size."""
    power = POWER ** (1 / max(1, len(checks)))
    out = []
    for c in checks:
        if len(checks) > 1 and c.get("_size") is not None:
            needed, why = c["_size"](power)
            c = {**c, "seeds_needed": needed, "seeds_needed_text": why}
        out.append(c)
    return out


def decide_route(checks: list[dict], every: bool = False) -> tuple[int | None, str, dict[str, int]]:
    """For an UNDECIDED claim: the seeds per method that decide it at the observed effects (REFUTED through its
    cheapest check heading there, or CONFIRMED when every open check heads there: the largest n), the text, and the
    runs to retrain with each one's seeds: a check's runs get that check's n (a run of several checks the largest),
    so one hard check does not size the others' runs. ``every``: every check is open (the design stage's fresh seeds,
    :mod:`dape_core.report.design`), and a claim heading to CONFIRMED is sized for 80 % power as a claim
    (:func:`claim_power`)."""
    open_checks = [c for c in checks if every or c["verdict"] == UNDECIDED]
    refute = [c for c in open_checks if _towards(c) == REFUTED and c.get("seeds_needed")]
    heading = open_checks and all(_towards(c) == CONFIRMED and c.get("seeds_needed") for c in open_checks)
    if heading and every:
        open_checks = claim_power(open_checks)
        heading = all(c.get("seeds_needed") for c in open_checks)
    confirm = max(open_checks, key=lambda c: c["seeds_needed"]) if heading else None
    options = []
    if refute:
        best = min(refute, key=lambda c: c["seeds_needed"])
        options.append((best["seeds_needed"], best["seeds_needed_text"],
                        {r: best["seeds_needed"] for r in best.get("runs", [])}))
    if confirm is not None:
        run_seeds: dict[str, int] = {}
        for c in open_checks:
            for r in c.get("runs", []):
                run_seeds[r] = max(run_seeds.get(r, 0), int(c["seeds_needed"]))
        options.append((confirm["seeds_needed"], confirm["seeds_needed_text"], dict(sorted(run_seeds.items()))))
    if options:
        return min(options, key=lambda o: o[0])
    reasons = sorted({c.get("seeds_needed_text") or "unknown" for c in open_checks if not c.get("seeds_needed")})
    return None, "; ".join(reasons) or "unknown", {}


def what_decides(checks: list[dict], costs: dict[str, dict]) -> dict:
    """seeds_to_decide and the cost of the extra seeds: per run max(0, n − its seeds) more seeds (n: the seeds its
    checks need, :func:`decide_route`), each a training and an evaluation job (a CHE cell's: one job; no CPU- or
    GPU-hours are recorded for CHE)."""
    if any(c.get("basis", "").startswith("point (medians") for c in checks if c["verdict"] == UNDECIDED):
        return {"seeds_to_decide": "– (a point rule on timing medians: repeat the timing, not the seeds)"}
    n, text, runs = decide_route(checks)
    if n is None:
        return {"seeds_to_decide": text}
    jobs, cpu, gpu, lm_runs, bounds = 0, 0.0, 0.0, 0, set()
    for run, needed in runs.items():
        if run in costs:
            extra = max(0, needed - costs[run]["seeds"])
            jobs += 2 * extra
            cpu += extra * costs[run]["cpu_hours"]
            gpu += extra * costs[run]["gpu_hours"]
            bounds.update(b for b in costs[run]["gpu_bound"].split("/") if b and extra)
            lm_runs += 1
        else:  # a CHE cell (one seed each in the grids of this project)
            jobs += max(0, needed - 1)
    return {"seeds_to_decide": text, "extra_jobs": jobs,
            "extra_cpu_hours": round(cpu, 3) if lm_runs and np.isfinite(cpu) else None,
            "extra_gpu_hours": float(f"{gpu:.3g}") if lm_runs and np.isfinite(gpu) else None,
            "gpu_bound": "/".join(sorted(bounds))}
