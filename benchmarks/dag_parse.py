"""How long `snakemake -n` takes to parse the workflow and build its DAG, before and after a change, side by side.

    python benchmarks/dag_parse.py [--before COMMIT] [--repeats 5] [--out benchmarks/results/dag_parse.csv]

Cases, run round-robin so that the machine's load falls on all of them alike: a one-rule Snakefile (what Snakemake
itself costs), then ``configs/grid.yaml`` and ``configs/paper.yaml`` on this checkout and, with ``--before``, on a
``git worktree`` of that commit (its own ``dape_core`` first on the path), and for each configuration a Snakefile of
as many trivial jobs as its DAG has (one wildcard rule and ``all``): what Snakemake alone spends on that many jobs
(building, checking and printing each), so that ``own_s`` — a configuration's median less its floor's — is what
parsing this workflow and expanding its plan cost. Each run is a fresh process in an empty
directory: ``python -m snakemake -n --cores 2 --configfile CONFIG``, every job printed as a dry run prints it. One
more run per case under ``python -X importtime`` records whether parsing imported torch. Printed and written: the
median seconds per case, its ratio to the one-rule Snakefile's, and the after / before ratio, with the executor
plugins installed beside the interpreter (Snakemake imports each at start-up: run it with the interpreter of the
environment to measure, e.g. that of ``make install``, which has none, or of ``make install-test``, which has slurm).
"""

from __future__ import annotations

import argparse
import os
import pkgutil
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("configs/grid.yaml", "configs/paper.yaml")  # the recorded rows: the CPU grid (then config.yaml) and the paper
ONE_RULE = 'rule one:\n    output: "x"\n    shell: "touch x"\n'


def trivial_jobs(count: int) -> str:
    """A Snakefile of ``count`` jobs that do nothing of their own (``count - 1`` of one wildcard rule, and all)."""
    return (f'rule all:\n    input: expand("x/{{i}}", i=range({count - 1}))\n'
            'rule one:\n    output: "x/{i}"\n    shell: "touch {output}"\n')


def total_jobs(stdout: str) -> int:
    """The job count of a dry run's ``Job stats`` table (its ``total`` row)."""
    for line in stdout.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "total" and words[1].isdigit():
            return int(words[1])
    raise SystemExit("snakemake -n printed no job total")


def snakemake_command(tree: Path, config: str | None, workdir: Path, *, importtime: bool = False) -> list[str]:
    python = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "snakemake"]
    if config is None or config.startswith("rule "):
        return [*python, "--snakefile", str(workdir / "Snakefile"), "--directory", str(workdir), "-n", "--cores", "2"]
    return [*python, "--snakefile", str(tree / "Snakefile"), "--directory", str(workdir), "-n", "--cores", "2",
            "--configfile", str(tree / config)]


def run_once(tree: Path, config: str | None, *, importtime: bool = False) -> tuple[float, str, str]:
    """Seconds of one `snakemake -n` in a fresh directory, its stdout and stderr; a failed parse stops the benchmark.
    ``config``: a configuration file, None (the one-rule Snakefile) or a Snakefile's text."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if config is None or config.startswith("rule "):
            (workdir / "Snakefile").write_text(config or ONE_RULE)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
        start = time.perf_counter()
        result = subprocess.run(snakemake_command(tree, config, workdir, importtime=importtime), cwd=tree, env=env,
                                capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"snakemake -n failed for {config or 'the one-rule Snakefile'} in {tree}:\n"
                         f"{(result.stdout + result.stderr)[-3000:]}")
    return seconds, result.stdout, result.stderr


def imports_torch(tree: Path, config: str | None) -> bool:
    _, _, stderr = run_once(tree, config, importtime=True)
    return any(line.startswith("import time:") and line.split("|")[-1].strip() == "torch"
               for line in stderr.splitlines())


def executor_plugins() -> list[str]:
    """The Snakemake executor plugins installed beside this interpreter: Snakemake imports every one of them at
    start-up (the slurm plugin brings pandas with it), so they are part of what a parse costs here."""
    return sorted(m.name.removeprefix("snakemake_executor_plugin_") for m in pkgutil.iter_modules()
                  if m.ispkg and m.name.startswith("snakemake_executor_plugin_"))


def worktree(commit: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="dag-parse-before-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(path), commit], check=True,
                   capture_output=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=None, help="a commit to compare with (a temporary git worktree)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dag_parse.csv"))
    args = parser.parse_args(argv)
    trees = {"after": ROOT}
    if args.before:
        trees["before"] = worktree(args.before)
    cases = [("snakemake (one rule)", "-", None)] + [(config, version, config) for config in CONFIGS
                                                     for version in trees]
    jobs = {config: total_jobs(run_once(ROOT, config)[1]) for config in CONFIGS}
    floors = {config: f"snakemake ({jobs[config]} trivial jobs)" for config in CONFIGS}
    cases += [(floors[config], "-", trivial_jobs(jobs[config])) for config in CONFIGS]
    case_jobs = jobs | {floors[config]: jobs[config] for config in CONFIGS}
    times: dict[tuple[str, str], list[float]] = {(name, version): [] for name, version, _ in cases}
    try:
        for _ in range(args.repeats):
            for name, version, config in cases:
                times[(name, version)].append(run_once(trees.get(version, ROOT), config)[0])
        torch = {(name, version): imports_torch(trees.get(version, ROOT), config) for name, version, config in cases}
    finally:
        if "before" in trees:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["before"])],
                           capture_output=True)
    baseline = statistics.median(times[("snakemake (one rule)", "-")])
    rows = []
    for name, version, _ in cases:
        median = statistics.median(times[(name, version)])
        floor = statistics.median(times[(floors[name], "-")]) if name in floors else None
        rows.append({"case": name, "version": version, "jobs": case_jobs.get(name, 1),
                     "median_s": round(median, 3), "min_s": round(min(times[(name, version)]), 3),
                     "repeats": args.repeats, "x_one_rule": round(median / baseline, 2),
                     "own_s": round(median - floor, 3) if floor is not None else None,
                     "imports_torch": torch[(name, version)]})
    frame = pd.DataFrame(rows)
    if args.before:
        medians = frame.set_index(["case", "version"])["median_s"]
        frame["after_over_before"] = [round(medians[(c, "after")] / medians[(c, "before")], 3)
                                      if v == "after" and (c, "before") in medians else None
                                      for c, v in zip(frame["case"], frame["version"])]
    frame["commit_before"] = args.before or ""
    frame["executor_plugins"] = " ".join(executor_plugins()) or "none"
    frame["machine"] = f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"
    frame["date"] = time.strftime("%Y-%m-%d")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    print(frame.drop(columns=["machine", "date"]).to_string(index=False))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
