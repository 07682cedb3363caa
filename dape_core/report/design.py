"""The design stage: a pilot chooses the fresh seeds that decide the claims, it never decides them.

A configuration with a ``design`` block runs its families as written (the *pilot*); this module sizes, per claim,
the fresh seeds per method that would decide it alone at the pilot's effects and noise
(:func:`~dape_core.report.claims.evaluate_claims` with ``fresh``: 80 % power for the claim,
:func:`~dape_core.report.claim_costs.claim_power`; σ by :func:`~dape_core.report.claim_context.sizing_sd`), prices
them by their jobs' work in *reference* CPU-seconds (:func:`dape_core.config.job_cost.plan_prices`; attention-map jobs
only for a claim read on them), and keeps claims by smallest *extra* cost (given the seeds already chosen) while the
total fits ``design.budget_minutes`` reference minutes on ``design.cores``. Prices do not depend on the machine or its
load, so the same pilot results give the same design everywhere (nothing random, ties broken by the claims' order);
only the wall time varies, estimated from the pilot's measured job-seconds (:func:`wall_estimate`). The chosen runs
(LM runs or CHE cells) get seeds ``fresh_seeds_from``, ``fresh_seeds_from + 1``, … (the same on every run, so runs of
one setting pair by seed), and verdicts come from those fresh seeds only (:func:`fresh_only`): no seed both chose a
comparison and decides it, so the pilot needs no sequential correction.

The timing claim is not a claim of seeds: interleaved rounds of its own run, a pilot family, decide it (``own_run``);
the design gives it no seeds.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dape_core import artefacts
from dape_core.errors import ConfigError
from dape_core.report.intervals import CONFIRMED, NOT_RUN, REFUTED, UNDECIDED

VERSION = 4  # 2: the pilot's checks per claim (pilot_checks); 3: attention maps only where a chosen claim reads them;
#             4: priced in reference CPU-seconds of the jobs' work (dape_core.config.job_cost), the timing claim own_run
#: rules whose pilot jobs price one more seed of an LM run, and of a CHE cell
LM_JOB_RULES = ("train", "evaluate", "attention")
DESIGN = artefacts.Kind("seed design (rule design)", "design",
                        keys=("version", "fresh_seeds_from", "chosen", "left", "fresh", "pilot", "pilot_checks"))
OWN_RUN = "read on its own run's interleaved rounds (a pilot family), not a claim of seeds"


def _reads_maps() -> set[str]:
    """The claims read on the attention maps (sink.csv): only their fresh seeds are worth an attention-map job."""
    from dape_core.report.claims import CLAIMS

    return {c.claim_id for c in CLAIMS if "sink" in c.needs}


def _not_seeded() -> set[str]:
    """The claims read on the timing table: their intervals come from their own run's interleaved rounds."""
    from dape_core.report.claims import CLAIMS

    return {c.claim_id for c in CLAIMS if "timing" in c.needs}


@dataclass(frozen=True)
class DesignSettings:
    """A configuration's ``design`` block (config.schema.yaml): ``budget_minutes`` reference minutes on ``cores``."""

    budget_minutes: float
    fresh_seeds_from: int = 100
    max_seeds: int = 8
    cores: int = 2


# ------------------------------------------------------------------------------------------------ prices
def benchmark_seconds(path: str | Path) -> float | None:
    """The wall seconds Snakemake's benchmark file records for one job (column ``s``); None, with one line
    naming the file, when it is missing or damaged (the job is then counted at its kind's median)."""
    try:
        frame = pd.read_csv(path, sep="\t")
        value = float(frame["s"].iloc[0])
        if len(frame) != 1 or not math.isfinite(value) or value < 0:
            raise ValueError(f"{len(frame)} rows, s = {value}")
        return value
    except Exception as err:  # noqa: BLE001 - any damage: named, the job priced at its kind's median
        print(f"dape design: {path}: not a job's benchmark ({type(err).__name__}: {err}); counted at its kind's "
              "median", flush=True)
        return None


def _job_of(path: Path) -> tuple[str, str, str] | None:
    """(kind, unit, seed) of ``logs/lm/{run}/seed{seed}/{train|evaluate|attention-L…}.benchmark.tsv`` or
    ``logs/che/{cell}/seed{seed}.benchmark.tsv``."""
    stem = path.name.removesuffix(".benchmark.tsv")
    if path.parent.name.startswith("seed") and path.parent.parent.parent.name == "lm":
        kind = "attention" if stem.startswith("attention-L") else stem
        return (kind, path.parent.parent.name, path.parent.name) if kind in LM_JOB_RULES else None
    if path.parent.parent.name == "che" and stem.startswith("seed"):
        return "che", path.parent.name, stem
    return None


def measured_prices(benchmarks: list[str], threads: dict[str, int]) -> dict[str, dict[str, float]]:
    """This machine's CPU-seconds of one more seed of each LM run or CHE cell per job kind (``train``, ``evaluate``,
    ``attention``, ``che``): per job the median over the pilot's seeds of its wall seconds × the rule's ``threads``
    (a damaged benchmark counts at its kind's median). It estimates the wall time (:func:`wall_estimate`), never the
    choice."""
    seconds: dict[tuple[str, str], dict[str, list[float]]] = {}
    by_kind: dict[str, list[float]] = {}
    missing = []
    for path in sorted(benchmarks):
        job = _job_of(Path(path))
        if job is None:
            continue
        kind, unit, seed = job
        value = benchmark_seconds(path)
        key = (kind, unit)
        if value is None:
            missing.append((key, path))
            continue
        cpu = value * threads.get(kind, 1)
        seconds.setdefault(key, {}).setdefault(path, []).append(cpu)
        by_kind.setdefault(kind, []).append(cpu)
    for (kind, unit), path in missing:
        if by_kind.get(kind):
            seconds.setdefault((kind, unit), {})[path] = [float(np.median(by_kind[kind]))]
    prices: dict[str, dict[str, float]] = {}
    for (kind, unit), jobs in sorted(seconds.items()):
        # one job per (seed, length): the median over seeds of each length's job, summed over lengths
        per_length: dict[str, list[float]] = {}
        for path, values in jobs.items():
            per_length.setdefault(Path(path).name, []).extend(values)
        prices.setdefault(unit, {})[kind] = sum(float(np.median(v)) for v in per_length.values())
    return prices


def seed_price(prices: dict[str, dict[str, float]], unit: str, maps: bool) -> float:
    """CPU-seconds of one more seed of ``unit``: its jobs, with its attention maps only when ``maps``."""
    return sum(v for kind, v in prices[unit].items() if maps or kind != "attention")


def wall_estimate(design: dict, measured: dict[str, dict[str, float]], machine: str) -> dict | None:
    """This machine's speed against the reference prices — its pilot's measured CPU-seconds over their prices,
    summed over every (run, kind) both hold — and the chosen fresh seeds' wall minutes on ``design.cores`` at it;
    None without a measured pilot job."""
    prices = design["prices_cpu_s"]
    pairs = [(measured[u][k], prices[u][k]) for u in measured if u in prices for k in measured[u] if k in prices[u]]
    if not pairs or sum(p for _, p in pairs) <= 0:
        return None
    speed = sum(m for m, _ in pairs) / sum(p for _, p in pairs)
    return {"machine": machine, "speed": round(speed, 3), "wall_minutes": round(design["minutes"] * speed, 1)}


# ------------------------------------------------------------------------------------------------ the design
def choose(pilot: pd.DataFrame, prices: dict[str, dict[str, float]], settings: DesignSettings) -> dict:
    """The design from the pilot's claims (``pilot``: :func:`evaluate_claims` with ``fresh``) and the reference price
    of one more seed of each run or cell per job kind (:func:`dape_core.config.job_cost.plan_prices`): the claims kept
    cheapest first while the budget holds, each run's or cell's fresh seeds (``fresh``) and those that also get
    attention maps (``fresh_maps``: for the claims read on the maps, the sink claim's), and for every claim left out
    why (no affordable or finite seed count, over the budget, no price) with what it would need."""
    budget = settings.budget_minutes * 60 * settings.cores  # CPU-seconds
    seeds: dict[str, int] = {}
    map_seeds: dict[str, int] = {}
    candidates, left, own_run, not_seeded, reads_maps = [], [], [], _not_seeded(), _reads_maps()
    for order, r in enumerate(pilot.to_dict("records")):
        claim, n, runs = r["claim_id"], r.get("fresh_seeds"), list(r.get("fresh_runs") or [])
        per_run = r.get("fresh_run_seeds") if isinstance(r.get("fresh_run_seeds"), dict) else {}
        base = {"claim_id": claim, "pilot_verdict": r["verdict"], "fresh_text": r.get("fresh_text") or ""}
        if claim in not_seeded:
            own_run.append({**base, "why": OWN_RUN})
        elif r["verdict"] == NOT_RUN:
            left.append({**base, "why": "the pilot has no rows for it"})
        elif n is None or (isinstance(n, float) and not math.isfinite(n)):
            left.append({**base, "why": f"no number of fresh seeds decides it at the pilot's effects: "
                                        f"{r.get('fresh_text') or 'unknown'}"})
        elif int(n) > settings.max_seeds:
            left.append({**base, "seeds": int(n), "why": f"needs {int(n)} fresh seeds per method, more than "
                                                        f"design.max_seeds = {settings.max_seeds}"})
        elif not runs or any(u not in prices for u in runs):
            unpriced = sorted(u for u in runs if u not in prices) or ["its runs"]
            left.append({**base, "seeds": int(n), "why": f"no price for {', '.join(unpriced)} (its method has no "
                                                        "operator count: benchmarks/op_counts.py)"})
        else:
            run_seeds = {u: int(per_run.get(u, n)) for u in sorted(runs)}
            candidates.append((order, {**base, "seeds": int(n), "runs": sorted(runs), "run_seeds": run_seeds,
                                       "maps": claim in reads_maps}))

    def extra(c: dict) -> float:
        need = c["run_seeds"]
        jobs = sum(max(0, need[u] - seeds.get(u, 0)) * seed_price(prices, u, False) for u in c["runs"])
        maps = sum(max(0, need[u] - map_seeds.get(u, 0)) * prices[u].get("attention", 0.0) for u in c["runs"])
        return jobs + (maps if c["maps"] else 0.0)

    chosen, spent = [], 0.0
    while candidates:
        order, best = min(candidates, key=lambda oc: (extra(oc[1]), oc[0]))
        cost = extra(best)
        if spent + cost > budget:
            break
        candidates.remove((order, best))
        for u in best["runs"]:
            seeds[u] = max(seeds.get(u, 0), best["run_seeds"][u])
            if best["maps"]:
                map_seeds[u] = max(map_seeds.get(u, 0), best["run_seeds"][u])
        spent += cost
        chosen.append({**best, "extra_minutes": round(cost / settings.cores / 60, 2)})
    for _, c in sorted(candidates, key=lambda oc: oc[0]):
        alone = sum(c["run_seeds"][u] * seed_price(prices, u, c["maps"]) for u in c["runs"])
        left.append({**c, "minutes": round(alone / settings.cores / 60, 1),
                     "why": f"over the budget: would need {seeds_text(c)} fresh seeds per method ≈ "
                            f"{extra(c) / settings.cores / 60:.1f} min more"})
    start = settings.fresh_seeds_from
    fresh = {u: list(range(start, start + n)) for u, n in sorted(seeds.items())}
    fresh_maps = {u: list(range(start, start + n)) for u, n in sorted(map_seeds.items())}
    return {"version": VERSION, "budget_minutes": settings.budget_minutes, "cores": settings.cores,
            "max_seeds": settings.max_seeds, "fresh_seeds_from": start,
            "minutes": round(spent / settings.cores / 60, 2), "chosen": chosen,
            "left": sorted(left, key=lambda c: list(pilot["claim_id"]).index(c["claim_id"])), "own_run": own_run,
            "fresh": fresh, "fresh_maps": fresh_maps,
            "prices_cpu_s": {u: {kind: round(v, 2) for kind, v in sorted(p.items())}
                             for u, p in sorted(prices.items())},
            "pilot": {r["claim_id"]: r["verdict"] for r in pilot.to_dict("records")},
            "pilot_checks": {r["claim_id"]: check_descriptions(r.get("numbers")) for r in pilot.to_dict("records")},
            "pilot_intervals": {r["claim_id"]: int(r.get("judged_intervals") or 0) for r in pilot.to_dict("records")}}


def pilot_intervals(design: dict) -> dict[str, int]:
    """claim_id → the intervals the pilot judged it on (the Bonferroni m of its REFUTED): the fresh seeds' reading
    uses at least as many (:func:`~dape_core.report.claims.evaluate_claims`'s ``min_comparisons``); empty for a
    design written before it was recorded."""
    return {claim: int(m) for claim, m in (design.get("pilot_intervals") or {}).items()}


def _checks(numbers) -> dict:
    """A claim record's ``numbers``: the dict, or its JSON as claims.csv holds it."""
    import json

    if isinstance(numbers, str):
        numbers = json.loads(numbers) if numbers.strip() else {}
    return numbers if isinstance(numbers, dict) else {}


def check_descriptions(numbers) -> list[str]:
    """What each check of a claim's record compares (``numbers`` as :func:`_checks` reads them, keyed
    ``"<i>: <setting>"``): the setting, and its two sides and where it reads when the check names them
    (``"dataset=code, …, size=tiny: DAPE1x3-Kerple vs DAPE-Kerple (within)"``); sorted, one entry per check."""
    out = []
    for key, check in _checks(numbers).items():
        text = str(key).split(": ", 1)[-1]
        if isinstance(check, dict) and check.get("a") and check.get("b"):
            text += f": {check['a']} vs {check['b']}" + (f" ({check['where']})" if check.get("where") else "")
        out.append(text)
    return sorted(out)


def seeds_text(choice: dict) -> str:
    """A chosen claim's seeds per method: one number, or the range over its runs where its checks need different
    numbers (each check's runs get that check's n; a design written before ``run_seeds`` gives one)."""
    counts = sorted(set((choice.get("run_seeds") or {}).values())) or [choice["seeds"]]
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def design_lines(design: dict) -> list[str]:
    """The design in a few lines (the console, design.md and claims.md)."""
    chosen = design["chosen"]
    out = [f"Design: {len(chosen)} claims get fresh seeds (from {design['fresh_seeds_from']}) in ≈ "
           f"{design['minutes']:.1f} of {design['budget_minutes']:g} reference minutes on {design['cores']} cores, "
           "priced by their jobs' work (the same on every machine); the pilot chose them and decides no claim of "
           "seeds (their verdicts come from the fresh seeds only)."]
    wall = design.get("wall")
    if wall:
        out.append(f"On this machine ({wall['machine']}) the pilot's jobs took ×{wall['speed']:.2f} their reference "
                   f"prices: the fresh seeds ≈ {wall['wall_minutes']:.1f} wall minutes on {design['cores']} cores.")
    for c in chosen:
        out.append(f"- seeds chosen: `{c['claim_id']}` {seeds_text(c)} per method on {len(c['runs'])} runs "
                   f"(+{c['extra_minutes']:.1f} min; pilot {c['pilot_verdict']}; {c['fresh_text']})")
    for c in design["left"]:
        out.append(f"- left undecided: `{c['claim_id']}`: {c['why']} (pilot {c['pilot_verdict']})")
    for c in design.get("own_run", []):
        out.append(f"- decided on its own run: `{c['claim_id']}`: {c['why']}")
    return out


def read_design(path: str | Path) -> dict:
    """A design.json, verified (its seal, its version, its keys). An older design reads as it ran: version 2
    (before ``fresh_maps``) with attention maps at every fresh seed of a run that has them; versions 2 and 3
    (priced in measured seconds) with the claims not of seeds moved from ``left`` to ``own_run``."""
    design = artefacts.read_json(path, DESIGN)
    if design.get("version") == 2:
        design = {**design, "fresh_maps": dict(design["fresh"]), "version": 3}
    if design.get("version") == 3 and "fresh_maps" in design:
        not_seeded = _not_seeded()
        design = {**design, "version": VERSION, "own_run": [{**c, "why": OWN_RUN} for c in design["left"]
                                                             if c["claim_id"] in not_seeded],
                  "left": [c for c in design["left"] if c["claim_id"] not in not_seeded]}
    if design.get("version") != VERSION:
        raise ConfigError(f"{path}: design version {design.get('version')!r}; allowed values: {VERSION} (rerun the "
                          "design rule)")
    if "fresh_maps" not in design or "own_run" not in design:
        raise artefacts.fail(path, f"a version-{VERSION} design without fresh_maps or own_run", DESIGN.rule)
    return design


def _refuted_at(numbers, m: int) -> bool:
    """Whether every REFUTED check of a claim's record was read over at least ``m`` intervals (its
    ``joint_comparisons``): a REFUTED kept on some of a pilot's checks must stand at the pilot's level."""
    refuted = [c for c in _checks(numbers).values() if isinstance(c, dict) and c.get("verdict") == REFUTED]
    return bool(refuted) and all(int(c.get("joint_comparisons") or 1) >= m for c in refuted)


def fresh_only(frame: pd.DataFrame | None, design: dict) -> pd.DataFrame | None:
    """The rows of the fresh seeds alone (seed ≥ ``fresh_seeds_from``): what the verdicts read."""
    if frame is None or "seed" not in frame:
        return frame
    return frame[pd.to_numeric(frame["seed"], errors="coerce") >= design["fresh_seeds_from"]].reset_index(drop=True)


def annotate(verdicts: pd.DataFrame, design: dict) -> pd.DataFrame:
    """Claims on the fresh seeds, with the design's word: a claim the design left out that no fresh seed reaches is
    UNDECIDED (no verdict comes from the pilot), saying why; so is one CONFIRMED on only some of the checks the pilot
    evaluated it on (CONFIRMED needs every check). A claim REFUTED on the checks reached stays REFUTED when they were
    read at the pilot's Bonferroni level (``verdicts`` from :func:`~dape_core.report.claims.evaluate_claims` with
    ``min_comparisons`` = :func:`pilot_intervals`): each interval at 1 − 0.05/m refutes two identical methods at most
    5 % of the time over all the pilot's m, reached or not."""
    judged_at = pilot_intervals(design)
    left = {c["claim_id"]: c for c in design["left"]}
    out = verdicts.copy()
    own_run = {c["claim_id"] for c in design.get("own_run", [])}
    out["design"] = [("fresh seeds chosen" if cid in {c["claim_id"] for c in design["chosen"]}
                      else f"left undecided: {left[cid]['why']}" if cid in left
                      else f"decided on its own run: {OWN_RUN}" if cid in own_run else "")
                     for cid in out["claim_id"]]
    lost = out["claim_id"].isin(left) & (out["verdict"] == NOT_RUN) & out["claim_id"].map(
        lambda c: design["pilot"].get(c, NOT_RUN) != NOT_RUN)
    out.loc[lost, "verdict"] = UNDECIDED
    out.loc[lost, "summary"] = "the pilot ran it; " + out.loc[lost, "design"]
    # a claim is decided on every setting the pilot evaluated it on, or it would speak for settings it did not see
    for i, row in out.iterrows():
        pilot_checks = Counter(design["pilot_checks"].get(row["claim_id"], []))
        missing = pilot_checks - Counter(check_descriptions(row.get("numbers")))
        if row["verdict"] in (CONFIRMED, REFUTED) and missing:
            reached = sum(pilot_checks.values()) - sum(missing.values())
            m = judged_at.get(row["claim_id"], 0)
            if row["verdict"] == REFUTED and m > 1 and _refuted_at(row.get("numbers"), m):
                out.at[i, "summary"] = (f"REFUTED on {reached} of the pilot's {sum(pilot_checks.values())} checks "
                                        f"(none at {'; '.join(sorted(missing))}), each interval read at 1 − 0.05/{m} "
                                        f"over the pilot's {m} intervals: {row['summary']}")
                continue
            out.at[i, "summary"] = (f"UNDECIDED: the fresh seeds reach {reached} of the pilot's "
                                    f"{sum(pilot_checks.values())} checks (none at {'; '.join(sorted(missing))}), "
                                    f"and a claim is decided on all of them; on those reached it would be "
                                    f"{row['verdict']}: {row['summary']}")
            out.at[i, "verdict"] = UNDECIDED
    return out
