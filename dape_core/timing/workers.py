"""The worker process protocol: one persistent process per method of a cell, which builds its case and times it
when asked (JSON lines on stdin, one reply line each on stdout), and the parent's handle on it.

A timing job times *cells*: its methods (runs differing only in attention settings and shape, every size's) at one
length, batch, mode, precision and thread count. Each method has its own worker process, so its peak memory is its
own (CPU: the resident high-water mark; CUDA: ``torch.cuda.max_memory_allocated`` over its timed runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import torch

from dape_core.timing.case import TimedCase

REPLY = "dape-timing: "  # a worker's reply lines start with it


def worker_main(commands=sys.stdin, replies=None) -> int:
    """A method's worker: JSON lines in (``{"build": case}``, ``{"time": true}``, ``{"finish": true}``), one JSON line
    out per command to the original stdout (``status`` ok / out_of_memory, ``ms``, the row; ``error`` with a one-line
    reason); anything the model code prints goes to stderr."""
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


#: how a worker starts (the package's ``__main__``, ``--worker``: commands on stdin, replies on stdout)
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
