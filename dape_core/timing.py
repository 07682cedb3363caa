"""Forward time, training-step time and peak memory, methods timed together in interleaved repeats (Table 7 App. H,
§4.2 step times).

A timing job times *cells*: the methods (runs that differ only in their attention settings and shape: every method
of every size) at one length, batch, mode, precision and thread count. Each method of a cell has its own persistent
worker process, so
its peak memory is its own (CPU: the process's resident high-water mark; CUDA: ``torch.cuda.max_memory_allocated``
over its timed runs). A worker builds its model and runs ``warmup`` untimed runs (discarded); then the parent runs
``repeats`` rounds, asking every worker in turn for one timed run, the order rotated by one method each round so
that no method always goes first; one worker computes at a time. That is one *block*; ``blocks`` blocks run one
after another, each with fresh worker processes (the order in which they build rotated too): a process's own
speed — where its threads run, how its memory lies — is shared by all its rounds, and on a 2-core CPU it moves a
method's median between processes by more than its rounds scatter (benchmarks/results/README.md), so an interval
reads blocks, not rounds. What changes between jobs — another moment, another placement of the job on the
machine — moves it too, so the workflow repeats a timing job as ``replicates`` separate jobs (``--replicate`` k,
recorded in every row) and merges them (``--merge``): every size and method of a replicate shares its blocks, and
the timing claim reads one value per replicate. Every repeat's time is kept (``--repeats-out``: one row per method ×
block × round) beside the summary (``--out``: one row per method × length, median and min over every block's
repeats; merged, over every replicate's). A worker computes
on ``compute_threads`` torch threads (default: the job's ``threads``): fewer than the job holds leaves the rest to
the parent, the workflow and the operating system. The process runs on CUDA when a GPU is present and on the
CPU otherwise (:func:`timing_device`); on CUDA every timed region is bracketed by ``torch.cuda.synchronize``, and
in a cell of several methods a worker frees its model between its turns (the cell's models need not fit the GPU
together), builds it again on the GPU (same seed) and runs it once untimed before each timed run. Each row names its
device (and the CPU model) and the path ``attention_impl`` resolved to there (``attention_path``). ``precision`` runs the
model under autocast in bf16 or fp16 (the paper timed fp16, appendix I Table 8) or in fp32; a training step in
fp16 scales its loss (``torch.amp.GradScaler``). A method that does not fit the GPU's memory gives a summary row
with status ``out_of_memory``, no time and no repeat rows. Paper widths that do not fit a machine can be timed at
reduced depth (``--n-layer``): rows carry the depth and a per-layer time. ``--equal-tokens N`` sets the batch to
N / T for every length, as §4.2 compares lengths at equal tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import pandas as pd
import torch

from dape_core import io, settings as fields
from dape_core.errors import ConfigError
from dape_core.implementations import resolve_attention_impl
from dape_core.methods import method_label
from dape_core.model import GPT, GPTConfig
from dape_core.settings import AttentionSettings
from dape_core.settings.model import layer_sizes
from dape_core.settings.timing import (MODES, PRECISIONS, TIMED_SHAPE,  # noqa: F401 (importable from here)
                                       TimingSettings)

AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # precision → autocast dtype


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def timing_device() -> torch.device:
    """The device of a timing process: CUDA when a GPU is present, the CPU otherwise (chosen once per process)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(device: torch.device) -> str:
    """What a row records as its device: the GPU's name, or ``cpu``."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; the CPU has nothing to wait for)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_method(cfg: AttentionSettings, precision: str = TimingSettings.precision) -> str:
    """The paper's label, qualified when the case runs another path or precision than the default (so tables keep
    them apart): "DAPE1x3-Kerple (plain, fp16)"."""
    label = method_label(cfg.encoding, cfg.processor, cfg.kernel_size)
    qualifiers = [getattr(cfg, key) for key in ("attention_impl", "dape_dtype")
                  if getattr(cfg, key) != getattr(AttentionSettings, key)]  # the one default
    if precision != TimingSettings.precision:
        qualifiers.append(precision)
    return f"{label} ({', '.join(qualifiers)})" if qualifiers else label


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``): CPU times depend on it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # no /proc/cpuinfo (not Linux): the platform's own name below
        return platform.processor() or platform.machine()
    return platform.processor() or platform.machine()


# ----------------------------------------------------------------------------------------------- one method
class TimedCase:
    """One method × length in this process: its model built and warmed up (``warmup`` untimed runs), then one
    timed run per :meth:`time_once` (ms, bracketed by device synchronisations). With ``park`` (CUDA, a cell of
    several methods) the model is freed between turns, so the cell's models need not fit the GPU (nor the host)
    together, and is built again on the GPU (same seed) and run once untimed before each timed run."""

    def __init__(self, case: dict, park: bool | None = None):
        threads = case.get("compute_threads") or case["threads"]
        torch.set_num_threads(threads)
        self.case, self.device = case, timing_device()
        self.park = park if park is not None else self.device.type == "cuda" and case.get("cell_size", 1) > 1
        precision = case.get("precision", TimingSettings.precision)
        self.dtype = AUTOCAST_DTYPES[precision]
        self.baseline = self._memory_mb()
        attention = {name: case[name] for name in fields.field_names(AttentionSettings) if name in case}
        cfg = self.cfg = GPTConfig(vocab_size=case["vocab_size"], size=case["size"], n_layer=case.get("n_layer"),
                                   train_len=case["seq_len"], query_chunk_size=case.get("query_chunk_size"),
                                   **attention)
        self.row = {
            "method": timed_method(cfg, precision), "encoding": cfg.encoding, "processor": cfg.processor,
            "kernel_size": cfg.kernel_size, "dape_width": cfg.dape_width, "size": case["size"], "n_layer": cfg.n_layer,
            "d_model": cfg.d_model, "n_head": cfg.n_head, "vocab_size": cfg.vocab_size, "seq_len": case["seq_len"],
            "batch_size": case["batch_size"], "mode": case["mode"], "repeats": case["repeats"],
            "warmup": case["warmup"], "device": device_name(self.device), "device_type": self.device.type,
            "cpu_model": cpu_model(), "threads": threads, "blocks": case.get("blocks", 1),
            "attention_impl": cfg.attention_impl,
            "attention_path": pass_path(cfg, self.device, case["mode"], self.dtype), "dape_dtype": cfg.dape_dtype,
            "precision": precision,
        }
        self.peak = 0.0
        self._build()
        for _ in range(case["warmup"]):
            self._once()
        synchronize(self.device)
        if self.park:
            self._free()

    def _memory_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device) / 2**20
        return _rss_mb()

    def _build(self) -> None:
        """The model (seed 0, initialised on the timing device), its input and, for a training step, AdamW."""
        torch.manual_seed(0)
        with self.device:
            self.model = GPT(self.cfg).to(self.device)
        self.x = torch.randint(0, self.cfg.vocab_size, (self.case["batch_size"], self.case["seq_len"]),
                               device=self.device)
        train_step = self.case["mode"] == "train_step"
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4) if train_step else None
        self.scaler = (torch.amp.GradScaler(self.device.type) if train_step and self.dtype == torch.float16
                       else None)
        self.model.train(train_step)

    def _free(self) -> None:
        """Release the model, its optimizer and input, and the allocator's cache (a parked worker holds nothing)."""
        self.model = self.x = self.optimizer = self.scaler = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _once(self) -> None:
        autocast = pass_autocast(self.device, self.dtype)
        if self.optimizer is None:
            with torch.no_grad(), autocast:
                self.model(self.x)
            return
        self.optimizer.zero_grad(set_to_none=True)
        with autocast:
            _, loss = self.model(self.x, self.x)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

    def time_once(self) -> float:
        """One timed run (ms); the peak memory of the timed runs so far is updated."""
        device = self.device
        if self.park:
            self._build()
            self._once()  # untimed: the allocator's cache (and AdamW's state) refilled after parking
        synchronize(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        self._once()
        synchronize(device)
        ms = (time.perf_counter() - start) * 1000
        peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else _rss_mb()
        self.peak = max(self.peak, peak)
        if self.park:
            self._free()
        return ms


def summary_row(row: dict, times: list[float], peak: float, baseline: float) -> dict:
    """A method's row: median and min over its repeats, per layer, tokens/s, peak memory (and over the baseline)."""
    median = statistics.median(times)
    return {**row, "status": "ok", "median_ms": median, "min_ms": min(times), "per_layer_ms": median / row["n_layer"],
            "tokens_per_s": row["batch_size"] * row["seq_len"] / (median / 1000), "peak_mem_mb": peak,
            "peak_mem_over_baseline_mb": peak - baseline}


def out_of_memory_row(row: dict) -> dict:
    """A method that does not fit the GPU: status ``out_of_memory``, no time."""
    nan = float("nan")
    return {**row, "status": "out_of_memory", **dict.fromkeys(
        ("median_ms", "min_ms", "per_layer_ms", "tokens_per_s", "peak_mem_mb", "peak_mem_over_baseline_mb"), nan)}


def measure(case: dict) -> dict:
    """Time one method × length alone in this process (``warmup`` then ``repeats`` runs): its summary row."""
    try:
        timed = TimedCase(case, park=False)
        times = [timed.time_once() for _ in range(case["repeats"])]
    except torch.cuda.OutOfMemoryError:
        return out_of_memory_row(_failed_row(case))
    return summary_row(timed.row, times, timed.peak, timed.baseline)


def _failed_row(case: dict) -> dict:
    """The settings part of a row for a case whose model could not be built or run."""
    keys = ("size", "n_layer", "seq_len", "batch_size", "mode", "repeats", "warmup", "threads", "precision",
            *fields.field_names(AttentionSettings))
    device = timing_device()
    cfg = GPTConfig(vocab_size=case["vocab_size"], size=case["size"], n_layer=case.get("n_layer"),
                    **{k: case[k] for k in fields.field_names(AttentionSettings) if k in case})
    return {**{k: case.get(k) for k in keys}, "method": timed_method(cfg, case.get("precision", "fp32")),
            "n_layer": cfg.n_layer, "d_model": cfg.d_model, "n_head": cfg.n_head, "vocab_size": cfg.vocab_size,
            "device": device_name(device), "device_type": device.type, "cpu_model": cpu_model(),
            "attention_path": pass_path(cfg, device, case["mode"], AUTOCAST_DTYPES[case.get("precision", "fp32")])}


def pass_autocast(device: torch.device, dtype: torch.dtype | None):
    """The autocast a timed pass runs under (``dtype`` None: none)."""
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


def pass_path(cfg: GPTConfig, device: torch.device, mode: str, dtype: torch.dtype | None) -> str:
    """The path a timed pass of ``mode`` runs on (``auto`` resolved under the pass's own gradient mode and
    autocast, as the model resolves it when it runs)."""
    with torch.set_grad_enabled(mode == "train_step"), pass_autocast(device, dtype):
        return resolve_attention_impl(cfg.attention_impl, device, layer_sizes(cfg))


# ----------------------------------------------------------------------------------------------- the worker
REPLY = "dape-timing: "  # a worker's reply lines start with it
def worker_main(commands=sys.stdin, replies=None) -> int:
    """A method's worker: JSON lines in (``{"build": case}``, ``{"time": true}``, ``{"finish": true}``), one JSON
    line out per command (``status`` ok / out_of_memory, ``ms``, the row; ``error`` with a one-line reason). The
    replies go to the original stdout; anything the model code prints goes to stderr."""
    if replies is None:
        replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    timed = None

    def reply(message: dict) -> None:
        replies.write(REPLY + json.dumps(message) + "\n")
        replies.flush()

    for line in commands:
        command = json.loads(line)
        try:
            if "build" in command:
                timed = TimedCase(command["build"])
                reply({"status": "ok"})
            elif "time" in command:
                reply({"status": "ok", "ms": timed.time_once()})
            elif "finish" in command:
                reply({"status": "ok", "row": timed.row, "peak_mem_mb": timed.peak, "baseline_mb": timed.baseline})
                return 0
        except torch.cuda.OutOfMemoryError:
            timed = None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            reply({"status": "out_of_memory"})
        except Exception as err:  # the parent names the case; the reason fits on its line
            reply({"error": f"{type(err).__name__}: {' '.join(str(err).split())}"})
            return 1
    return 0


class TimingWorkerError(RuntimeError):
    """A worker that failed or exited: one line naming the case and the reason."""


#: how a worker starts (this module, ``--worker``: commands on stdin, replies on stdout)
WORKER_COMMAND = (sys.executable, "-m", "dape_core.timing", "--worker")


def describe(case: dict) -> str:
    """A case in one phrase: ``run forward-small-kerple-none-B1 (cell forward-small-B1-T512: forward, size small,
    T=512, B=1)``."""
    return (f"run {case['run']} (cell {case['cell']}: {case['mode']}, size {case['size']}, T={case['seq_len']}, "
            f"B={case['batch_size']})")


class Worker:
    """The parent's handle on one method's worker process."""

    def __init__(self, case: dict):
        self.case, self.status = case, "ok"
        self.log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
        self.process = subprocess.Popen(WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log, text=True, encoding="utf-8")

    def ask(self, command: dict) -> dict:
        """Send one command and wait for its reply; a worker that errs or exits raises a one-line error."""
        try:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
            while line and not line.startswith(REPLY):  # anything else a library printed before the replies
                line = self.process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            code = self.process.wait()
            raise TimingWorkerError(f"timing worker for {describe(self.case)} exited with code {code}: "
                                    f"{self._last_error()}")
        reply = json.loads(line.removeprefix(REPLY))
        if "error" in reply:
            raise TimingWorkerError(f"timing worker for {describe(self.case)} failed: {reply['error']}")
        if reply["status"] == "out_of_memory":
            self.status = "out_of_memory"
        return reply

    def _last_error(self) -> str:
        self.log.seek(0)
        lines = [line.strip() for line in self.log.read().splitlines() if line.strip()]
        return lines[-1] if lines else "no output"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def rotation(methods: int, round_index: int) -> list[int]:
    """The order of the methods in one round: rotated by one each round (0 1 2, 1 2 0, 2 0 1, …)."""
    start = round_index % methods if methods else 0
    return [*range(start, methods), *range(start)]


def time_cell(cell: list[dict], replicate: int = 0) -> tuple[list[dict], list[dict]]:
    """Time the methods of one cell in ``blocks`` blocks of interleaved rounds, each block with fresh worker
    processes (one per method, each warmed up first): their summary rows (over every block) and one repeat row per
    method × block × round (``block``, ``round`` counted across the blocks, ``position`` in the round, ``ms``). The
    orders continue across replicate jobs (replicate k starts where k blocks of rounds before it would end), so
    that no method goes first more often over the replicates than the rotation gives."""
    repeats, done, failed = [], {}, set()
    rounds, blocks = cell[0]["repeats"], cell[0].get("blocks", 1)
    for block in range(blocks):
        workers: list[Worker] = []
        try:
            for case in cell:  # the processes start together (importing torch computes nothing that is timed) …
                workers.append(Worker(case))
            # … and build one after another: one worker computes at a time
            for i in rotation(len(workers), replicate * blocks + block):
                workers[i].ask({"build": workers[i].case})
            for round_index in range(block * rounds, (block + 1) * rounds):
                live = [w for w in workers if w.status == "ok"]
                for position, i in enumerate(rotation(len(live), replicate * blocks * rounds + round_index)):
                    reply = live[i].ask({"time": True})
                    if reply["status"] == "ok":
                        repeats.append({"run": live[i].case["run"], "block": block, "round": round_index,
                                        "position": position, "ms": reply["ms"]})
            for worker in workers:
                run = worker.case["run"]
                if worker.status != "ok":
                    failed.add(run)
                elif run not in failed:
                    finish = worker.ask({"finish": True})
                    first = done.setdefault(run, finish)
                    first["peak_mem_mb"] = max(first["peak_mem_mb"], finish["peak_mem_mb"])
        finally:
            for worker in workers:
                worker.close()
    rows, repeat_rows = [], []
    for case in cell:
        run = case["run"]
        if run in done and run not in failed:
            row = {"run": run, "cell": case["cell"], **done[run]["row"]}
            times = [r["ms"] for r in repeats if r["run"] == run]
            rows.append(summary_row(row, times, done[run]["peak_mem_mb"], done[run]["baseline_mb"]))
            repeat_rows += [{**{k: row[k] for k in REPEAT_SETTINGS}, **r} for r in repeats if r["run"] == run]
        else:
            rows.append(out_of_memory_row({"run": run, "cell": case["cell"], **_failed_row(case)}))
    repeat_rows.sort(key=lambda r: (r["round"], r["position"]))
    return rows, repeat_rows


#: per-repeat rows (``--repeats-out``, one per method × length × block × round): these settings of the method's
#: summary row, then ``replicate`` (the replicate job), ``block`` (its worker processes), ``round`` (counted across
#: the replicate's blocks), ``position`` (its place in the round's order) and ``ms``
REPEAT_SETTINGS = ("run", "method", "encoding", "processor", "kernel_size", "dape_width", "size", "n_layer",
                   "d_model", "seq_len", "batch_size", "mode", "precision", "attention_impl", "attention_path",
                   "dape_dtype", "device", "device_type", "cpu_model", "threads", "warmup", "cell")
REPEAT_COLUMNS = (*REPEAT_SETTINGS, "replicate", "block", "round", "position", "ms")


# ----------------------------------------------------------------------------------------------- a job
def cases(settings: TimingSettings) -> list[dict]:
    """One case per length: the attention settings, the shape, the batch (or equal_tokens / length), the protocol."""
    GPTConfig(size=settings.size, n_layer=settings.n_layer, **dataclasses.asdict(settings.attention_settings()))
    out = []
    for n in settings.seq_lens:
        batch = settings.batch_size if settings.equal_tokens is None else settings.equal_tokens // n
        if batch < 1:
            raise ConfigError(f"equal_tokens: {settings.equal_tokens} is smaller than seq_len {n}; allowed values: "
                              "≥ the longest seq_len")
        case = {k: v for k, v in dataclasses.asdict(settings).items() if k not in ("seq_lens", "equal_tokens")}
        out.append({**case, "seq_len": n, "batch_size": batch})
    return out


def parse_methods(text: str | dict | None, settings: TimingSettings) -> dict[str, TimingSettings]:
    """``--methods``: run name → its attention settings and shape (``size``, ``n_layer``; JSON text, or the object a
    job's spec holds; over the options); without it, the one method of the options, named by its label."""
    if text is None:
        return {timed_method(settings, settings.precision): settings}
    try:
        methods = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as err:
        raise ConfigError(f"methods: not valid JSON ({err}); allowed values: a JSON object run name → attention "
                          "settings") from None
    if not isinstance(methods, dict) or not methods or not all(isinstance(v, dict) for v in methods.values()):
        raise ConfigError("methods: allowed values: a non-empty JSON object run name → attention settings")
    allowed = (*fields.field_names(AttentionSettings), *TIMED_SHAPE)
    out = {}
    for run, attention in methods.items():
        for key in attention:
            if key not in allowed:
                raise ConfigError(f"methods.{run}.{key}: unknown setting; allowed values: {', '.join(allowed)}")
        try:
            out[run] = dataclasses.replace(settings, **attention)
        except ConfigError as err:
            raise ConfigError(f"methods.{run}.{err}") from None
    return out


def cells(methods: dict[str, TimingSettings], job: str) -> list[list[dict]]:
    """One cell per length: every method's case, every size's among them (its ``run``, the ``cell`` id
    ``{job}-T{length}``, the cell size)."""
    per_method = {run: cases(settings) for run, settings in methods.items()}
    lengths = next(iter(per_method.values()))
    return [[{**per_method[run][i], "run": run, "cell": f"{job}-T{case['seq_len']}", "cell_size": len(methods)}
             for run in methods] for i, case in enumerate(lengths)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    fields.add_arguments(p, TimingSettings)
    p.add_argument("--methods", help="JSON: run name → attention settings of each method timed in the same cells "
                                     "(interleaved; over the attention options); default: the options' one method")
    p.add_argument("--replicate", type=int, default=0, help="which replicate job of the timing job this is (0, 1, …; "
                                                            "recorded in every row)")
    p.add_argument("--merge", nargs="+", metavar="CSV", help="merge the summaries of the `replicates` replicate jobs "
                   "(their .repeats.csv beside them) into --out and --repeats-out instead of timing")
    p.add_argument("--out", required=True, help="summary CSV: one row per method × length")
    p.add_argument("--repeats-out", help="per-repeat CSV: one row per method × length × round (default: the "
                                         "summary's name with .repeats.csv)")


def repeats_path(out: str) -> str:
    """The per-repeat CSV beside a summary CSV: ``x.csv`` → ``x.repeats.csv``."""
    return str(out)[:-4] + ".repeats.csv" if str(out).endswith(".csv") else f"{out}.repeats.csv"


def run(args) -> int:
    settings = fields.from_args(TimingSettings, args)
    if args.merge:
        summary, repeat_rows = merge(args.merge, settings.replicates, args.spec)
        io.write_csv(args.repeats_out or repeats_path(args.out), repeat_rows, seal=True)
        io.write_csv(args.out, summary, seal=True)
        print(f"dape time: merged {len(args.merge)} replicate jobs: {len(summary)} rows, {len(repeat_rows)} repeats",
              file=sys.stderr)
        return 0
    if args.replicate < 0:
        raise ConfigError(f"replicate: {args.replicate}; allowed values: 0, 1, …")
    job = os.path.basename(args.out).removesuffix(".csv")
    if job.startswith("rep") and job[3:].isdigit():  # results/timing/{job}/rep{k}.csv: the cells are the job's
        job = os.path.basename(os.path.dirname(os.path.abspath(args.out)))
    cell_list = cells(parse_methods(args.methods, settings), job)
    rows, repeat_rows = [], []
    try:
        for cell in cell_list:
            summary, repeats = time_cell(cell, args.replicate)
            rows += summary
            repeat_rows += repeats
    except TimingWorkerError as err:
        print(f"dape time: error: {err}", file=sys.stderr)
        return 1
    rows = [{**row, "replicate": args.replicate} for row in rows]
    repeat_rows = [{**row, "replicate": args.replicate} for row in repeat_rows]
    io.write_csv(args.repeats_out or repeats_path(args.out), pd.DataFrame(repeat_rows, columns=list(REPEAT_COLUMNS)),
                 seal=True)
    io.write_csv(args.out, pd.DataFrame(rows), seal=True)
    for row in rows:
        print(f"{row['run']}: {row['method']} {row['mode']} T={row['seq_len']} B={row['batch_size']} on "
              f"{row['device']}: " + (f"{row['median_ms']:.1f} ms (median of {row['blocks']} × {row['repeats']} "
                                      "interleaved), "
                                      f"{row['peak_mem_mb']:.0f} MB" if row["status"] == "ok" else row["status"]),
              file=sys.stderr)
    return 0


def replicate_spec(spec_text: str | None, replicate: int) -> str | None:
    """The spec digest of replicate ``replicate`` of the timing job whose merge has the spec ``spec_text``: the
    same settings and methods, ``replicate`` in place of ``replicates`` (:func:`dape_core.config.timing_spec`); None
    without a spec (a merge run by hand checks the files' seals, not their settings)."""
    if spec_text is None:
        return None
    spec = {k: v for k, v in json.loads(spec_text).items() if k != "replicates"}
    return io.spec_digest({**spec, "replicate": replicate})


def merge(paths: list[str], replicates: int, spec_text: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The summaries of a timing job's replicate jobs (``paths``, replicate k the k-th, each with its .repeats.csv)
    merged: every repeat, each with its ``replicate``, and per method × length the median and min over every
    replicate's repeats, the largest peak memory, ``replicates`` in place of ``replicate``. Each file is checked
    where it is read (its seal, its settings, its columns, the replicate it names): a damaged or foreign one stops
    the merge with one line naming it."""
    from dape_core import artefacts

    if len(paths) != replicates:
        raise ConfigError(f"merge: {len(paths)} replicate files for replicates {replicates}; allowed values: one "
                          f"summary CSV per replicate job, rep0 … rep{replicates - 1}")
    summaries, repeats = [], []
    for k, path in enumerate(paths):
        digest = replicate_spec(spec_text, k)
        for kind, file, frames in ((artefacts.TIMING, path, summaries),
                                   (artefacts.REPEATS, repeats_path(path), repeats)):
            frame = artefacts.read_csv(file, kind, spec=digest)
            if "replicate" not in frame or set(frame["replicate"].dropna().astype(int)) - {k}:
                raise artefacts.fail(file, f"is not replicate {k}'s (its replicate column: "
                                     f"{sorted(set(frame.get('replicate', pd.Series(['none'])).astype(str)))}); "
                                     f"expected the {kind.name} of replicate {k}", kind.rule)
            frames.append(frame)
    all_repeats = pd.concat(repeats, ignore_index=True).sort_values(["replicate", "round", "position"],
                                                                      kind="stable")
    stacked = pd.concat(summaries, ignore_index=True)
    rows = []
    for (run, cell), group in stacked.groupby(["run", "cell"], sort=False):
        first = group.iloc[0].to_dict()
        base = {k: v for k, v in first.items() if k not in SUMMARY_STATS and k != "replicate"}
        if not (group["status"] == "ok").all() or len(group) != replicates:
            rows.append({**out_of_memory_row(base), "replicates": replicates})
            continue
        peak_row = group.loc[group["peak_mem_mb"].idxmax()]
        times = all_repeats.loc[(all_repeats["run"] == run) & (all_repeats["cell"] == cell), "ms"].tolist()
        baseline = float(peak_row["peak_mem_mb"] - peak_row["peak_mem_over_baseline_mb"])
        rows.append({**summary_row(base, times, float(peak_row["peak_mem_mb"]), baseline),
                     "replicates": replicates})
    return pd.DataFrame(rows), all_repeats[list(REPEAT_COLUMNS)].reset_index(drop=True)


#: the statistics of a summary row (:func:`summary_row`), recomputed by a merge
SUMMARY_STATS = ("status", "median_ms", "min_ms", "per_layer_ms", "tokens_per_s", "peak_mem_mb",
                 "peak_mem_over_baseline_mb")


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(worker_main())
    sys.exit("usage: python -m dape_core.timing --worker (commands on stdin; use `dape time` for measurements)")
