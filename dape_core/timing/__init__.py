"""Forward time, training-step time and peak memory, methods timed together in interleaved repeats (Table 7 App. H,
§4.2 step times).

Modules, each stating its part of the protocol: :mod:`~dape_core.timing.workers` (a cell's worker processes),
:mod:`~dape_core.timing.interleave` (blocks, rotated rounds, replicates, merge), :mod:`~dape_core.timing.case` (one
timed run: threads, device, parking, precision, rows), :mod:`~dape_core.timing.device` (the device and a pass's
autocast and path) and :mod:`~dape_core.timing.cli` (``dape time``); the machine's record is :mod:`dape_core.machine`'s.
"""

from dape_core.settings.timing import PRECISIONS, TimingSettings
from dape_core.timing import case, cli, device, interleave, workers
from dape_core.timing.case import measure, timed_method
from dape_core.timing.cli import add_arguments, cases, cells, parse_methods, run
from dape_core.timing.device import AUTOCAST_DTYPES, device_name, pass_path, synchronize, timing_device
from dape_core.timing.interleave import REPEAT_COLUMNS, merge, repeats_path, replicate_spec, rotation, time_cell
from dape_core.timing.workers import REPLY, TimingWorkerError, Worker, worker_main


def _description(title: str | None, *modules) -> str | None:
    """``dape time --help`` (and ``help(dape_core.timing)``): this package's first paragraph, then each module's
    docstring after its first paragraph, in a job's order; None where docstrings are stripped (``python -OO``)."""
    if title is None or any(module.__doc__ is None for module in modules):
        return None
    parts = [title.split("\n\n", 1)[0], *(module.__doc__.split("\n\n", 1)[1] for module in modules)]
    return "\n\n".join(part.strip() for part in parts) + "\n"


__doc__ = _description(__doc__, workers, interleave, case, cli)

__all__ = [
    "AUTOCAST_DTYPES", "PRECISIONS", "REPEAT_COLUMNS", "REPLY", "TimingSettings", "TimingWorkerError", "Worker",
    "add_arguments", "case", "cases", "cells", "cli", "device", "device_name", "interleave", "measure", "merge",
    "parse_methods", "pass_path", "repeats_path", "replicate_spec", "rotation", "run", "synchronize", "time_cell",
    "timed_method", "timing_device", "worker_main", "workers",
]
