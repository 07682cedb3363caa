"""Where a finished run's time went: the job-seconds of every rule, and of each LM family's training, from the
Snakemake benchmark files of a working directory (``logs/**/*.benchmark.tsv``, written by every job rule).

    python benchmarks/run_breakdown.py [--workdir .] [--config config.yaml] [--out benchmarks/results/run_breakdown.csv]

Job-seconds are the sum over jobs of each job's wall time (Snakemake's ``s`` column); with several jobs at once
the run's wall time is smaller. A training job is attributed to every family that lists its run (a shared run is
counted once in the rule total and once per family in ``family`` rows).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RULES = {  # benchmark path pattern → rule
    r"^logs/lm/(?P<run>[^/]+)/seed(?P<seed>\d+)/train\.benchmark\.tsv$": "train_lm",
    r"^logs/lm/(?P<run>[^/]+)/seed(?P<seed>\d+)/evaluate\.benchmark\.tsv$": "evaluate_lm",
    r"^logs/lm/(?P<run>[^/]+)/seed(?P<seed>\d+)/attention-L\d+\.benchmark\.tsv$": "attention_maps",
    r"^logs/lm/(?P<run>[^/]+)/seed(?P<seed>\d+)/finetune\.benchmark\.tsv$": "finetune",
    r"^logs/timing/(?P<run>[^/]+)\.benchmark\.tsv$": "time_lm",
    r"^logs/che/(?P<run>[^/]+)/seed(?P<seed>\d+)\.benchmark\.tsv$": "che",
}


def jobs(workdir: Path) -> pd.DataFrame:
    """One row per benchmarked job: rule, run, seed, seconds."""
    rows = []
    for path in sorted(workdir.glob("logs/**/*.benchmark.tsv")):
        rel = path.relative_to(workdir).as_posix()
        for pattern, rule in RULES.items():
            match = re.match(pattern, rel)
            if match:
                try:
                    seconds = float(pd.read_csv(path, sep="\t")["s"].iloc[-1])
                except (OSError, KeyError, IndexError, ValueError, pd.errors.ParserError) as exc:
                    raise SystemExit(f"{rel}: not a Snakemake benchmark file ({exc})")
                rows.append({"rule": rule, "run": match.group("run"), "seed": match.groupdict().get("seed"),
                             "seconds": seconds})
                break
    return pd.DataFrame(rows, columns=["rule", "run", "seed", "seconds"])


def breakdown(workdir: Path, config: Path) -> pd.DataFrame:
    from dape_core.config import build_plan, load_yaml

    df = jobs(workdir)
    total = df["seconds"].sum()
    out = [{"kind": "rule", "name": rule, "jobs": len(g), "job_seconds": g["seconds"].sum(),
            "share": g["seconds"].sum() / total} for rule, g in df.groupby("rule")]
    plan = build_plan(load_yaml(config))
    train = df[df["rule"] == "train_lm"]
    families: dict[str, set] = {}
    for m in plan.lm_members:
        families.setdefault(m["family"], set()).add((m["run"], str(m["seed"])))
    for family, keys in families.items():
        rows = train[[(r, s) in keys for r, s in zip(train["run"], train["seed"])]]
        out.append({"kind": "train_lm of family", "name": family, "jobs": len(rows),
                    "job_seconds": rows["seconds"].sum(), "share": rows["seconds"].sum() / total})
    out.append({"kind": "all", "name": "every benchmarked job", "jobs": len(df), "job_seconds": total, "share": 1.0})
    return pd.DataFrame(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default=".")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "run_breakdown.csv"))
    args = p.parse_args(argv)
    df = breakdown(Path(args.workdir), Path(args.config))
    df.to_csv(args.out, index=False, float_format="%.1f")
    print(df.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
