"""Seeds per core-second of the default's central jobs: one seed's training and evaluation job, run as the workflow
runs them (the same commands and specs, one thread), by each way of running a job, side by side.

Ways (``--ways``): ``process`` — each job its own process (a workflow without a job server); ``server`` — each job
in a fork of a warm ``dape serve`` (``dape_core.job_server``, what ``make reproduce`` runs). Rounds interleave the
methods and ways, so a drift of the machine reaches all alike. One job runs at a time on one thread, so a job's
wall seconds are its core-seconds; a training job's start-up is its wall time less its training loop's
(``summary.json`` wall_s), and its step time the loop's over the steps. With ``--snakemake`` it also measures
Snakemake's own CPU seconds (its process, not its jobs) over a dry run of ``--config`` and a real run of
``--smoke-config``.

    python -m benchmarks.seeds_per_core_second --out benchmarks/results/seeds_per_core_second.csv --snakemake
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: the repository root on the path, as `python -m benchmarks.X`
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks.harness import machine_info, write_rows
from dape_core import job_server

REPO = Path(__file__).resolve().parents[1]
#: the central jobs: a method's run in the default's central family
CENTRAL = {"NoPE": "code-T32-nope-none", "Kerple": "code-T32-kerple-none",
           "DAPE-Kerple": "code-T32-kerple-dape_v1-k1-w32", "DAPE1x3-Kerple": "code-T32-kerple-dape_v2-k3-w32"}
WAYS = ("process", "server")


def plan_of(config: Path):
    from dape_core import config as grid

    return grid.build_plan(grid.load_yaml(config))


def job_commands(plan, run: str, seed: int, data_dir: Path, out: Path) -> tuple[list[str], list[str]]:
    """The workflow's `dape train` and `dape evaluate` commands of ``run``'s seed ``seed`` (workflow/rules/lm.smk)."""
    from dape_core import config as grid

    lm = plan.lm_runs[run]
    train = ["train", "--threads", "1", "--spec", grid.train_spec(lm["settings"], seed).json(), "--data-dir",
             str(data_dir), "--out-dir", str(out), "--checkpoint-dir", str(out / "checkpoints"), "--mem-mb", "2000",
             "--no-progress"]
    evaluate = ["evaluate", "--spec", grid.eval_spec(lm["eval"]).json(), "--checkpoint", str(out / "model.pt"),
                "--data-dir", str(data_dir), "--threads", "1", "--out", str(out / "eval.csv"), "--windows-out",
                str(out / "windows.csv")]
    return train, evaluate


def timed(command: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds of its own process and children) of ``dape command``."""
    before = os.times()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dape_core.command", *command], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"seeds_per_core_second: dape {command[0]} failed:\n{done.stderr[-3000:]}")
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def measure_jobs(plan, methods: list[str], ways: list[str], rounds: int, data_dir: Path, work: Path, steps: int | None,
                 out: Path | None) -> list[dict]:
    rows: list[dict] = []
    socket = work / "jobs.sock"
    server = None
    if "server" in ways:
        server = subprocess.Popen([sys.executable, "-m", "dape_core.command", "serve", "--socket", str(socket),
                                   "--idle-exit", "3600"], cwd=REPO)
        deadline = time.monotonic() + 120
        while not socket.exists() and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.1)
        if not socket.exists():
            raise SystemExit("seeds_per_core_second: the job server did not start")
    try:
        for round_ in range(rounds):
            for method in methods:
                for way in ways:
                    run = CENTRAL[method]
                    target = work / f"{way}-{run}"
                    shutil.rmtree(target, ignore_errors=True)
                    train, evaluate = job_commands(plan, run, 0, data_dir, target)
                    if steps is not None:
                        spec = json.loads(train[train.index("--spec") + 1])
                        spec.update(steps=steps, checkpoint_every=max(1, steps // 3))
                        train[train.index("--spec") + 1] = json.dumps(spec)
                    env = {**os.environ, job_server.ENV: str(socket) if way == "server" else ""}
                    train_wall, train_cpu = timed(train, env)
                    eval_wall, eval_cpu = timed(evaluate, env)
                    summary = json.loads((target / "summary.json").read_text())
                    rows.append(dict(method=method, way=way, round=round_, steps=summary["steps_done"],
                                     train_wall_s=train_wall, train_loop_s=summary["wall_s"],
                                     train_startup_s=train_wall - summary["wall_s"],
                                     step_ms=1e3 * summary["wall_s"] / summary["steps_done"], eval_wall_s=eval_wall,
                                     seed_wall_s=train_wall + eval_wall,
                                     command_cpu_s=train_cpu + eval_cpu, **machine_info()))
                    print(f"round {round_} {method:15s} {way:8s} train {train_wall:6.2f} s (start-up "
                          f"{rows[-1]['train_startup_s']:5.2f}) evaluate {eval_wall:5.2f} s", flush=True)
                    if out is not None:
                        write_rows(rows, out)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    return rows


def summarise(rows: list[dict]) -> pd.DataFrame:
    """Per method: each way's medians and the seeds per core-second against ``process``'s."""
    frame = pd.DataFrame(rows)
    table = frame.groupby(["method", "way"])[["train_wall_s", "train_startup_s", "step_ms", "eval_wall_s",
                                              "seed_wall_s"]].median().reset_index()
    base = table[table.way == "process"].set_index("method")["seed_wall_s"]
    table["seeds_per_core_s"] = 1.0 / table["seed_wall_s"]
    table["vs_process"] = table["method"].map(base) / table["seed_wall_s"]
    return table


def snakemake_cpu(config: Path, workdir: Path, *args: str) -> float:
    """CPU seconds of the Snakemake process itself (not its jobs) over ``snakemake --configfile config args``:
    its /proc counters, read until it exits."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
               str(workdir), "--configfile", str(config), *args]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ticks, last = os.sysconf("SC_CLK_TCK"), 0.0
    while process.poll() is None:
        with contextlib.suppress(OSError, IndexError):  # it ended between poll and read: the last reading stands
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            last = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        time.sleep(0.1)
    if process.returncode != 0:
        raise SystemExit(f"seeds_per_core_second: {' '.join(command)} failed ({process.returncode})")
    return last


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="seeds_per_core_second", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=REPO / "config.yaml")
    p.add_argument("--data-dir", type=Path, default=REPO / "results" / "data" / "code",
                   help="the configuration's tokenized corpus (`snakemake results/data/code/meta.json` makes it)")
    p.add_argument("--methods", nargs="+", default=list(CENTRAL), choices=list(CENTRAL))
    p.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the configuration's)")
    p.add_argument("--snakemake", action="store_true", help="also Snakemake's own CPU over a dry and a real run")
    p.add_argument("--smoke-config", type=Path, default=REPO / "configs" / "smoke.yaml")
    p.add_argument("--out", type=Path, default=None, help="the rows as CSV (replaced after every job)")
    args = p.parse_args(argv)
    if not (args.data_dir / "meta.json").exists():
        raise SystemExit(f"seeds_per_core_second: --data-dir {args.data_dir}: no tokenized corpus (meta.json)")
    plan = plan_of(args.config)
    with tempfile.TemporaryDirectory(prefix="spcs-") as work:
        rows = measure_jobs(plan, args.methods, args.ways, args.rounds, args.data_dir, Path(work), args.steps,
                            args.out)
        print(summarise(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        if args.snakemake:
            dry = snakemake_cpu(args.config, Path(work) / "dry", "-n", "--cores", "2")
            real = Path(work) / "smoke"
            start = time.perf_counter()
            cpu = snakemake_cpu(args.smoke_config, real, "--cores", "2")
            wall = time.perf_counter() - start
            print(f"snakemake's own CPU: dry run of {args.config.name} {dry:.1f} s; real run of "
                  f"{args.smoke_config.name} {cpu:.1f} s over {wall:.0f} s of wall time "
                  f"({100 * cpu / (2 * wall):.1f} % of 2 cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
