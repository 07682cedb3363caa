"""The dispatch bound of a training job's GPU-hours: operator calls per step × the host cost of one call.

Models this small are bound by dispatch, on a GPU as on a CPU: a step's hundreds to thousands of operator calls each
cost the host the same whatever the model's size. A job's GPU-hours are the larger of its FLOP time (FLOPs /
(``gpu_tflops`` × ``utilisation``)) and this dispatch time, unless a calibration CSV measured its shape
(:mod:`dape_core.config.calibration`). Pure Python: no torch at plan time.

**Calls per step** (:func:`step_calls`) of ``dape_core.train.fit`` on the ``materialized`` path (auto and ``compiled``
are counted as it: an upper bound for the compiled path's fewer kernel launches)::

    calls = grad_accum × pieces × (micro_constant + micro_per_layer × n_layer)
            + optimizer_constant + optimizer_per_layer × n_layer

``pieces``: the equal pieces a micro-batch runs in (``micro_batch_size``; 1 without). A method's (:data:`STEP_KEY`)
coefficients are fitted to the top-level aten calls that ``benchmarks/op_counts.py --training-step`` counted with
``torch.profiler`` at n_layer 1 and 2 (:data:`STEP_COUNTS`); its n_layer 3 rows are a held-out depth the fit must
reproduce. Counts do not depend on width, batch or length while one query chunk (1 GiB) holds a layer's rows. A method
the CSV lacks takes another kernel size of its processor (a 1×k convolution is one call whatever k), else the FLOP bound
stands, with the reason named.

**Host cost of one call** (:func:`per_call_cost`): the calibration's least step time per counted call on its device (the
nearest to pure dispatch), else ``benchmarks/dispatch_cost.py``'s median host time per counted call of a tiny-tensor
training step on a named CPU (:data:`DISPATCH_COST` row ``tiny_step``: Python, modules, nested aten calls and autograd
around each call; ``ops_mix``, a bare call, is the floor), a host's figure, not a GPU measurement.

A missing or damaged CSV is a one-line :class:`~dape_core.errors.ConfigError` naming the file and the command that
rewrites it, never a silent fall-back to the FLOP bound."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from dape_core.errors import ConfigError

MEASURED = Path(__file__).resolve().parent / "measured"  # package data: the tables the estimate reads
STEP_COUNTS = MEASURED / "step_op_counts.csv"
DISPATCH_COST = MEASURED / "dispatch_cost.csv"
STEP_COUNTS_COMMAND = "python benchmarks/op_counts.py --training-step"
DISPATCH_COST_COMMAND = "python benchmarks/dispatch_cost.py"
COST_CASE = "tiny_step"  # the dispatch_cost.csv row read (benchmarks/dispatch_cost.py ESTIMATE_CASE)
#: what a step's calls depend on besides n_layer (benchmarks/op_counts.py STEP_METHOD, the path and recomputation)
STEP_KEY = ("encoding", "processor", "kernel_size", "tril", "padding", "encoding_shared", "precision",
            "attention_impl", "recompute_scores")
STEP_COUNT_COLUMNS = (*STEP_KEY, "n_layer", "micro_batch_calls", "optimizer_calls")
DISPATCH_COST_COLUMNS = ("cpu", "cores", "torch", "case", "median_us_per_call")
FIT_TOLERANCE = 0.02  # relative error allowed at the held-out depth
#: the bound that decides a job's GPU-hours
FLOPS, DISPATCH, MEASURED = "flops", "dispatch", "measured"


@dataclass(frozen=True)
class StepCalls:
    """Fitted operator calls of one method: per micro-batch piece and per optimiser step, constant + per layer."""

    micro_constant: int
    micro_per_layer: int
    optimizer_constant: int
    optimizer_per_layer: int

    def calls(self, n_layer: int, micro_batches: int = 1) -> int:
        """Calls of one training step: ``micro_batches`` forward/backward passes and one optimiser step."""
        return (micro_batches * (self.micro_constant + self.micro_per_layer * n_layer)
                + self.optimizer_constant + self.optimizer_per_layer * n_layer)


@dataclass(frozen=True)
class PerCallCost:
    """Seconds per operator call and where the figure comes from (a sentence naming the machine or device)."""

    seconds: float
    source: str


def _norm(value) -> str:
    """A setting as the CSVs write it: None/empty/NaN → ``default``, booleans lower-case, integral floats as ints."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "default"
    text = str(value).strip()
    if text in ("", "None", "nan", "default"):
        return "default"
    if text.lower() in ("true", "false"):
        return text.lower()
    try:
        number = float(text)
    except ValueError:
        return text.lower()
    return str(int(number)) if number.is_integer() else text


@lru_cache(maxsize=None)
def _step_defaults() -> dict:
    """The defaults of the :data:`STEP_KEY` settings, as their dataclasses declare them."""
    from dape_core.settings import AttentionSettings
    from dape_core.settings.fields import defaults
    from dape_core.settings.training import TrainSettings

    return {**defaults(AttentionSettings), "precision": defaults(TrainSettings)["precision"]}


def step_key(settings: Mapping) -> tuple[str, ...]:
    """A run's :data:`STEP_KEY`, an absent setting at its declared default; ``attention_impl`` auto (or absent, as in
    lm_results.csv) and ``compiled`` count as ``materialized`` (an upper bound, module docstring)."""
    defaults = _step_defaults()
    values = {name: settings.get(name, defaults.get(name)) for name in STEP_KEY}
    if _norm(values["attention_impl"]) in ("auto", "compiled"):
        values["attention_impl"] = "materialized"
    return tuple(_norm(values[name]) for name in STEP_KEY)


def _read_csv(path: Path, columns: tuple[str, ...], command: str) -> list[dict]:
    """The rows of a benchmark CSV that has ``columns``; a one-line ConfigError naming it otherwise."""
    try:
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ConfigError(f"{path}: cannot be read ({type(err).__name__}); rewrite it with `{command}`") from None
    missing = [c for c in columns if not rows or c not in rows[0]]
    if missing:
        raise ConfigError(f"{path}: damaged (no rows, or no column {', '.join(missing)}); rewrite it with "
                          f"`{command}`")
    return rows


def _integer(row: dict, name: str, path: Path, command: str) -> int:
    try:
        value = float(row[name])
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0 or not value.is_integer():
        raise ConfigError(f"{path}: damaged ({name} {row[name]!r} is not a count); rewrite it with `{command}`")
    return int(value)


@lru_cache(maxsize=None)
def load_step_counts(path: Path) -> dict[tuple[str, ...], StepCalls]:
    """Method (:data:`STEP_KEY`) → fitted :class:`StepCalls` from the counts at n_layer 1 and 2; the rows at other
    depths must agree within :data:`FIT_TOLERANCE` (the CSV is damaged, or the model wrong, otherwise)."""
    path = Path(path)
    by: dict[tuple[str, ...], dict[int, tuple[int, int]]] = {}
    for row in _read_csv(path, STEP_COUNT_COLUMNS, STEP_COUNTS_COMMAND):
        depth = _integer(row, "n_layer", path, STEP_COUNTS_COMMAND)
        counts = tuple(_integer(row, name, path, STEP_COUNTS_COMMAND) for name in ("micro_batch_calls",
                                                                                  "optimizer_calls"))
        by.setdefault(step_key(row), {})[depth] = counts
    fitted = {}
    for key, depths in by.items():
        if 1 not in depths or 2 not in depths:
            raise ConfigError(f"{path}: damaged ({'/'.join(key)} lacks n_layer 1 or 2); rewrite it with "
                              f"`{STEP_COUNTS_COMMAND}`")
        (m1, o1), (m2, o2) = depths[1], depths[2]
        calls = StepCalls(m1 - (m2 - m1), m2 - m1, o1 - (o2 - o1), o2 - o1)
        for depth, (micro, optimizer) in depths.items():
            expected = calls.calls(depth)
            if abs(expected - (micro + optimizer)) > FIT_TOLERANCE * (micro + optimizer):
                raise ConfigError(f"{path}: {'/'.join(key)} at n_layer {depth} counts {micro + optimizer} calls, the "
                                  f"fit from n_layer 1 and 2 gives {expected}; rewrite it with "
                                  f"`{STEP_COUNTS_COMMAND}`")
        fitted[key] = calls
    return fitted


def method_calls(settings: Mapping, path: Path | None = None) -> StepCalls | None:
    """The fitted calls of a run's method, or of the same method with another kernel size (module docstring);
    None where the CSV (default :data:`STEP_COUNTS`) has neither."""
    table = load_step_counts(Path(path or STEP_COUNTS))
    key = step_key(settings)
    if key in table:
        return table[key]
    kernel = STEP_KEY.index("kernel_size")
    for other, calls in table.items():
        if other[:kernel] + other[kernel + 1:] == key[:kernel] + key[kernel + 1:]:
            return calls
    return None


def step_calls(settings: Mapping, *, pieces: int = 1, path: Path | None = None) -> int | None:
    """Operator calls of one training step of a run: ``grad_accum`` × ``pieces`` micro-batch passes over
    ``n_layer`` layers and one optimiser step (None: its method was not counted)."""
    calls = method_calls(settings, path)
    if calls is None:
        return None
    micro_batches = int(float(settings.get("grad_accum") or 1)) * pieces
    return calls.calls(int(float(settings["n_layer"])), micro_batches)


def measured_per_call_cost(path: Path | None = None) -> PerCallCost:
    """The host time of one counted call: row ``tiny_step`` of ``path`` (default :data:`DISPATCH_COST`)."""
    return _measured_per_call_cost(Path(path or DISPATCH_COST))


@lru_cache(maxsize=None)
def _measured_per_call_cost(path: Path) -> PerCallCost:
    rows = [row for row in _read_csv(path, DISPATCH_COST_COLUMNS, DISPATCH_COST_COMMAND) if row["case"] == COST_CASE]
    try:
        microseconds = float(rows[0]["median_us_per_call"]) if rows else math.nan
    except ValueError:
        microseconds = math.nan
    if not (math.isfinite(microseconds) and microseconds > 0):
        raise ConfigError(f"{path}: damaged (no positive median_us_per_call in a row {COST_CASE}); rewrite it with "
                          f"`{DISPATCH_COST_COMMAND}`")
    row = rows[0]
    return PerCallCost(microseconds * 1e-6, f"{microseconds:.3g} µs per call measured on {row['cpu']} "
                                            f"({row['cores']} cores, torch {row['torch']}, {path.name})")


def calibration_step_seconds(row: Mapping) -> float:
    """Seconds of one training step of a calibration row: ``median_step_ms``, else its tokens / tokens_per_s."""
    if _finite(row.get("median_step_ms")):
        return float(row["median_step_ms"]) / 1000
    tokens = float(row.get("grad_accum") or 1) * float(row["micro_batch"]) * float(row["train_len"])
    return tokens / float(row["tokens_per_s"])


def per_call_cost(calibration_rows: list[dict] | None = None, *, device: str | None = None,
                  path: Path | None = None, counts: Path | None = None) -> PerCallCost:
    """Seconds per call: the least step time per counted call among ``calibration_rows`` (one device's usable rows, as
    :func:`~dape_core.config.calibration.load_calibration` returns them), else :func:`measured_per_call_cost`."""
    best = None
    for row in calibration_rows or []:
        calls = step_calls(row, path=counts)
        if calls and (_finite(row.get("median_step_ms")) or _finite(row.get("tokens_per_s"))):
            seconds = calibration_step_seconds(row) / calls
            if best is None or seconds < best[0]:
                best = (seconds, row)
    if best is not None:
        seconds, row = best
        name = device or row.get("device", "the calibration's device")
        return PerCallCost(seconds, f"{seconds * 1e6:.3g} µs per call from the calibration on {name} (its "
                                    f"{row['size']} {row['encoding']}/{row['processor']} T={row['train_len']} step)")
    return measured_per_call_cost(path)


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def job_gpu_hours(settings: Mapping, *, flops_per_token: float, gpu_tflops: float, utilisation: float,
                  cost: PerCallCost | None = None, tokens_per_s: float | None = None, pieces: int = 1,
                  gpus: int = 1) -> tuple[float, str]:
    """GPU-hours of one training job and the bound deciding them (``flops``, ``dispatch`` or ``measured``).

    ``settings``: the run's, from the plan or a ``reports/lm_results.csv`` row (attention_impl and recompute_scores
    default to auto and on). A measured ``tokens_per_s`` decides alone; else the larger of the FLOP time (a scaled
    calibration passes its FLOP/s as ``gpu_tflops``, utilisation 1) and the dispatch time (:func:`step_calls` × ``cost``
    × steps on each of ``gpus`` processes; ``cost`` defaults to :func:`measured_per_call_cost`). A method without
    counted calls keeps the FLOP bound."""
    steps = float(settings["steps"])
    tokens = steps * float(settings["batch_size"]) * float(settings.get("grad_accum") or 1) * float(
        settings["train_len"])
    if tokens_per_s is not None:
        return tokens / tokens_per_s / 3600, MEASURED
    flop_seconds = float(flops_per_token) * tokens / (gpu_tflops * 1e12 * utilisation)
    calls = step_calls(settings, pieces=pieces)
    if calls is None:
        return flop_seconds / 3600, FLOPS
    cost = cost or measured_per_call_cost()
    dispatch_seconds = steps * calls * cost.seconds * gpus
    if dispatch_seconds > flop_seconds:
        return dispatch_seconds / 3600, DISPATCH
    return flop_seconds / 3600, FLOPS


def row_gpu_hours(row: Mapping, gpu_tflops: float, utilisation: float,
                  cost: PerCallCost | None = None) -> tuple[float, str]:
    """:func:`job_gpu_hours` of one row of ``reports/lm_results.csv`` (its ``flops_per_token`` column); NaN and
    ``flops`` where the row lacks what the count needs."""
    needed = ("steps", "batch_size", "train_len", "flops_per_token", "n_layer", "encoding", "processor")
    if any(not _present(row.get(name)) for name in needed):
        return math.nan, FLOPS
    return job_gpu_hours(row, flops_per_token=float(row["flops_per_token"]), gpu_tflops=gpu_tflops,
                         utilisation=utilisation, cost=cost)


def _present(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and str(value) != ""
