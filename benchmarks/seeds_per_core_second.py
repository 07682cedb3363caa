"""Seeds per core-second of the default's central jobs: one seed's training and evaluation job, run as the workflow
runs them (the same commands and specs, one thread), by each way of running a job, side by side.

Ways (``--ways``): ``process`` — each job its own process (a workflow without a job server); ``server`` — each job
in a fork of a warm ``dape serve`` (``dape_core.job_server``, what ``make reproduce`` runs). Rounds interleave the
methods and ways, so a drift of the machine reaches all alike. One job runs at a time on one thread, so a job's
wall seconds are its core-seconds; a training job's start-up is its wall time less its training loop's
(``summary.json`` wall_s), and its step time the loop's over the steps. With ``--snakemake`` it also measures
Snakemake's own CPU seconds (its process, not its jobs) over a dry run of ``--config`` and a real run of
``--smoke-config``.

With ``--anatomy OUT`` it also takes each method's training step apart, on one thread, in the same process: the
step's median time; under ``torch.profiler`` the FLOPs and self time of its GEMMs (``aten::mm``, ``addmm``, ``bmm``,
``baddbmm``), hence their rate against a 1024³ fp32 GEMM's on the same core; the step's GEMM floor (its GEMM FLOPs at
the better of the two rates: what no way of running the same fp32 model can go below); and the ceiling of seeds per
core-second that floor allows against ``process``: a seed whose steps took only their GEMM floor, with the server's
start-up, with (``ceiling``) and without (``ceiling_no_eval``) the server's evaluation job.

    python -m benchmarks.seeds_per_core_second --out benchmarks/results/seeds_per_core_second.csv --snakemake \
        --anatomy benchmarks/results/step_anatomy.csv
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


GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def training_step(plan, method: str, data_dir: Path, steps: int | None = None):
    """(the model, a function running its training step ``i``) of ``method``'s central run at seed 0 as `dape
    train` runs it: the spec's model, optimiser, learning rate, batches and positions, one micro-batch as the
    default trains (``steps``: the schedule's length, default the spec's)."""
    import dataclasses

    import torch

    from dape_core import config as grid
    from dape_core import train as training
    from dape_core.data import load_split
    from dape_core.model import GPT, GPTConfig
    from dape_core.positions import training_positions
    from dape_core.settings import fields
    from dape_core.settings.training import TrainSettings

    parser = argparse.ArgumentParser()
    training.add_arguments(parser)
    fields.apply_spec(parser, grid.train_spec(plan.lm_runs[CENTRAL[method]]["settings"], 0).json())
    args = parser.parse_args(["--data-dir", str(data_dir), "--out-dir", "unused", "--threads", "1"])  # as a job
    settings = fields.from_args(TrainSettings, args)
    if steps is not None:
        settings = dataclasses.replace(settings, steps=steps)
    if settings.grad_accum != 1 or settings.micro_batch_size is not None:
        raise SystemExit(f"seeds_per_core_second: {method} trains in several micro-batches; the anatomy takes one")
    split = load_split(data_dir, "train")
    config = dataclasses.replace(fields.from_args(GPTConfig, args, train_len=settings.train_len),
                                 vocab_size=int(split.meta["tokenizer"]["vocab_size"]))
    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    model = GPT(config)
    optimizer = training.optimizer_for(model, settings)
    model.train()

    def step(i: int) -> None:
        for group in optimizer.param_groups:
            group["lr"] = training.learning_rate(i, settings)
        optimizer.zero_grad(set_to_none=True)
        starts = training.batch_starts(i, 0, settings.seed, len(split.tokens), settings.train_len,
                                       settings.batch_size)
        x, y = training.get_batch(split.tokens, starts, settings.train_len)
        positions = training_positions(config, settings.seed, i, 0, settings.train_len)
        loss = model(x, y, positions=positions)[1]
        loss.backward()
        float(loss.detach())
        training.optimizer_step(model, optimizer, settings.grad_clip)

    return model, step


def gemm_peak(size: int = 1024, repeats: int = 20) -> float:
    """GFLOP/s of a size³ fp32 GEMM on the current threads (median of ``repeats``)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * size**3 / sorted(times)[len(times) // 2] / 1e9


def step_anatomy(plan, method: str, data_dir: Path, steps: int, warmup: int, peak_gflops: float) -> dict:
    """One thread: ``method``'s training step timed (median of ``steps``), then profiled over as many steps for its
    GEMMs' FLOPs and self time; their rate, the step's GEMM floor and its share of the step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    _, step = training_step(plan, method, data_dir)
    for i in range(warmup):
        step(i)
    times = []
    for i in range(warmup, warmup + steps):
        start = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        for i in range(warmup + steps, warmup + 2 * steps):
            step(i)
    events = prof.key_averages()
    gemms = [e for e in events if e.key in GEMM_OPS]
    gemm_gflop = sum(e.flops for e in gemms) / steps / 1e9
    gemm_ms = sum(e.self_cpu_time_total for e in gemms) / steps / 1e3
    step_ms = 1e3 * sorted(times)[len(times) // 2]
    rate = gemm_gflop / (gemm_ms / 1e3)
    floor_ms = 1e3 * gemm_gflop / max(rate, peak_gflops)
    return dict(method=method, steps=steps, step_ms=step_ms, operators_per_step=sum(e.count for e in events) / steps,
                gemm_gflop_per_step=gemm_gflop, gemm_ms=gemm_ms, gemm_share=gemm_ms / step_ms, gemm_gflops=rate,
                peak_gflops=peak_gflops, floor_ms=floor_ms, floor_share=floor_ms / step_ms)


def ceilings(anatomy: list[dict], jobs: pd.DataFrame, steps: int) -> pd.DataFrame:
    """Per method, seeds per core-second against ``process`` if every training step took only its GEMM floor, with
    the server's start-up, with (``ceiling``) and without (``ceiling_no_eval``) the server's evaluation job."""
    frame = pd.DataFrame(anatomy)
    table = summarise(jobs.to_dict("records")).pivot(index="method", columns="way")
    process = table["seed_wall_s"]["process"]
    floor_train = table["train_startup_s"]["server"] + steps * frame.set_index("method")["floor_ms"] / 1e3
    frame["process_seed_s"] = frame["method"].map(process)
    frame["ceiling"] = frame["method"].map(process / (floor_train + table["eval_wall_s"]["server"]))
    frame["ceiling_no_eval"] = frame["method"].map(process / floor_train)
    frame["measured"] = frame["method"].map(process / table["seed_wall_s"]["server"])
    return frame


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
    p.add_argument("--anatomy", type=Path, default=None,
                   help="also each method's training step taken apart (GEMM floor and ceilings) into this CSV")
    p.add_argument("--anatomy-steps", type=int, default=30, help="steps timed, and as many profiled, per method")
    args = p.parse_args(argv)
    if args.anatomy is not None and set(args.ways) != set(WAYS):
        raise SystemExit("seeds_per_core_second: --anatomy compares against both ways; keep --ways at its default")
    if args.anatomy_steps < 1:
        raise SystemExit(f"seeds_per_core_second: --anatomy-steps {args.anatomy_steps}: allowed values: a positive "
                         "integer")
    if not (args.data_dir / "meta.json").exists():
        raise SystemExit(f"seeds_per_core_second: --data-dir {args.data_dir}: no tokenized corpus (meta.json)")
    plan = plan_of(args.config)
    with tempfile.TemporaryDirectory(prefix="spcs-") as work:
        rows = measure_jobs(plan, args.methods, args.ways, args.rounds, args.data_dir, Path(work), args.steps,
                            args.out)
        print(summarise(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        if args.anatomy is not None:
            import torch

            torch.set_num_threads(1)
            peak = gemm_peak()
            anatomy = [step_anatomy(plan, method, args.data_dir, args.anatomy_steps, 10, peak)
                       for method in args.methods]
            steps = int(pd.DataFrame(rows)["steps"].median())
            table = ceilings(anatomy, pd.DataFrame(rows), steps)
            write_rows([{**row, **machine_info()} for row in table.to_dict("records")], args.anatomy)
            print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
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
