"""Resume checkpoints of a training job: the newest two kept, each written atomically, with fallback on resume.

Plain runs (``distributed: none`` or ``ddp``): rank 0 writes ``last.pt`` (model, optimiser, step, metrics history,
config hash) and keeps the one before as ``previous.pt``. Sharded runs (``fsdp``): every process saves its shards into
``step-00000200.tmp/`` (``torch.distributed.checkpoint``), then rank 0 writes the marker ``checkpoint.json`` (step,
history, config hash) and renames it ``step-00000200/``; only a directory with its marker is complete.

On resume the newest checkpoint of the same settings is restored; an unreadable one (a truncated file, a missing
shard) is named and the previous one tried. When none can be read, :class:`CheckpointError` names the files and the
way out (delete the checkpoint directory to train from step 0).
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
import re
import shutil
import sys
from pathlib import Path

import torch
from torch import nn

from dape_core import io
from dape_core.distributed import Distributed
from dape_core.errors import ConfigError

MARKER = "checkpoint.json"
KEEP = 2  # the newest checkpoint and the one before it
_STEP_DIR = re.compile(r"^step-(\d+)$")


class CheckpointError(ConfigError):
    """No checkpoint of a job could be read; the message names the files and how to start over."""


class Restored(dict):
    """What a resume restores besides the weights: ``step`` and ``history`` (the metrics lines so far)."""


def _reason(err: BaseException) -> str:
    """One line saying why a read failed; a distributed checkpoint's error names the first failing process's."""
    failures = getattr(err, "failures", None)  # a CheckpointException of DCP: rank → (error, trace)
    if isinstance(failures, dict) and failures:
        rank, (first, _) = min(failures.items(), key=lambda item: item[0])
        return f"process {rank}: {_reason(first)}"
    text = " ".join(str(err).split()).split(". ")[0] or type(err).__name__
    return f"{type(err).__name__}: {text[:200]}"


class Checkpoints(ABC):
    """The resume checkpoints of one job in ``directory``, in the format of its ``distributed`` mode."""

    def __init__(self, directory: str | Path, dist: Distributed):
        self.directory = Path(directory)
        self.dist = dist

    # ------------------------------------------------------------------------------------------ shared logic
    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer, config_hash: str) -> Restored | None:
        """Restore the newest readable checkpoint of these settings into ``model`` and ``optimizer``; None when there
        is none (nothing saved, or only other settings')."""
        unreadable: list[tuple[Path, str]] = []
        candidates = self.candidates()
        for i, path in enumerate(candidates):
            try:
                restored = self._restore(path, model, optimizer, config_hash)
            except self.read_errors as err:  # any failure to read a checkpoint means: try the previous one
                unreadable.append((path, _reason(err)))
                then = f"falling back to {candidates[i + 1]}" if i + 1 < len(candidates) else "no earlier checkpoint"
                self._say(f"warning: checkpoint {path} is unreadable ({_reason(err)}); {then}")
                continue
            if restored is None:
                self._say(f"ignoring {path}: it belongs to other settings")
                continue
            self._say(f"resumed from {path} at step {restored['step']}")
            return restored
        if unreadable:
            listed = "; ".join(f"{path} ({why})" for path, why in unreadable)
            raise CheckpointError(
                f"checkpoint_dir: no readable checkpoint of these settings in {self.directory}: {listed}. Delete "
                f"{self.directory} (rm -r {self.directory}) to train from step 0")
        return None

    #: what a failed read raises: anything from ``torch.load`` (truncated archive, bad pickle, …) and DCP's
    #: ``CheckpointException`` (a ``BaseException``, gathered from every process)
    read_errors: tuple[type[BaseException], ...] = (Exception,)

    def _say(self, message: str) -> None:
        if self.dist.rank == 0:
            print(message, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------------------ per format
    @abstractmethod
    def candidates(self) -> list[Path]:
        """Checkpoints present, newest first."""

    @abstractmethod
    def _restore(self, path: Path, model, optimizer, config_hash: str) -> Restored | None:
        """Load ``path`` into ``model`` and ``optimizer``; None (nothing loaded) when it has other settings."""

    @abstractmethod
    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, history: list[dict],
             config_hash: str) -> None:
        """Write the checkpoint of ``step`` (every process calls it) and keep the one before it."""

    @abstractmethod
    def remove(self) -> None:
        """Delete every checkpoint of the job (a finished run keeps none; every process calls it)."""


class PlainCheckpoints(Checkpoints):
    """``last.pt`` and ``previous.pt``: ``torch.save`` of the full state, written by rank 0."""

    def __init__(self, directory: str | Path, dist: Distributed):
        super().__init__(directory, dist)
        self.last = self.directory / "last.pt"
        self.previous = self.directory / "previous.pt"
        # last.pt becomes previous.pt only when known good (written or read by this job): an unreadable one is
        # overwritten instead, so a good previous.pt survives the next save
        self._last_is_good = False

    def candidates(self) -> list[Path]:
        return [p for p in (self.last, self.previous) if p.is_file()]

    def _restore(self, path, model, optimizer, config_hash):
        state = torch.load(path, map_location=self.dist.device, weights_only=False)
        if not isinstance(state, dict) or "model" not in state:
            raise ValueError("not a training checkpoint")
        if state.get("config_hash") != config_hash:
            return None
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        self._last_is_good = path == self.last
        return Restored(step=state["step"], history=state["history"])

    def save(self, model, optimizer, step, history, config_hash):
        if self.dist.rank != 0:
            return
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "history": history,
                 "config_hash": config_hash}
        if self._last_is_good and self.last.is_file():
            os.replace(self.last, self.previous)
        io.torch_save(self.last, state)
        self._last_is_good = True

    def remove(self):
        if self.dist.rank == 0:
            for path in (self.last, self.previous):
                path.unlink(missing_ok=True)


class ShardedCheckpoints(Checkpoints):
    """``step-NNNNNNNN/`` directories of ``torch.distributed.checkpoint``: each process writes its own shards."""

    def __init__(self, directory: str | Path, dist: Distributed):
        super().__init__(directory, dist)
        from torch.distributed.checkpoint.api import CheckpointException

        self.read_errors = (Exception, CheckpointException)

    def _complete(self) -> list[tuple[int, Path]]:
        """(step, directory) of the complete checkpoints (renamed, with their marker), newest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = _STEP_DIR.match(path.name)
            if match and path.is_dir() and (path / MARKER).is_file():
                found.append((int(match.group(1)), path))
        return sorted(found, reverse=True)

    def candidates(self) -> list[Path]:
        return [path for _, path in self._complete()]

    def _restore(self, path, model, optimizer, config_hash):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        marker = json.loads((path / MARKER).read_text())
        if marker.get("config_hash") != config_hash:
            return None
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=path)  # raises on every process when any process fails to read
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        return Restored(step=marker["step"], history=marker["history"])

    def save(self, model, optimizer, step, history, config_hash):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        final = self.directory / f"step-{step:08d}"
        tmp = final.with_name(final.name + ".tmp")
        if self.dist.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # left by a job killed while saving
            tmp.mkdir(parents=True)
        self.dist.barrier()
        model_state, optimizer_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=tmp)
        if self.dist.rank == 0:
            io.write_json(tmp / MARKER, {"step": step, "history": history, "config_hash": config_hash,
                                         "world_size": self.dist.world})
            if final.exists():  # an unreadable checkpoint of this step, from before a fallback
                shutil.rmtree(final)
            os.replace(tmp, final)
            self._prune(keep=final)
        self.dist.barrier()

    def _prune(self, keep: Path) -> None:
        """Keep ``keep`` and the newest complete checkpoint before it; remove older ones, later ones (an abandoned
        run's) and unfinished ``.tmp`` directories."""
        older = [path for step, path in self._complete() if path != keep and path.name < keep.name]
        kept = {keep, *older[: KEEP - 1]}
        for path in self.directory.iterdir():
            if path.is_dir() and path not in kept and (_STEP_DIR.match(path.name) or path.name.endswith(".tmp")):
                shutil.rmtree(path, ignore_errors=True)

    def remove(self):
        self.dist.barrier()
        if self.dist.rank == 0 and self.directory.is_dir():
            for path in self.directory.iterdir():
                if path.is_dir() and (_STEP_DIR.match(path.name) or path.name.endswith(".tmp")):
                    shutil.rmtree(path, ignore_errors=True)


def checkpoints_for(directory: str | Path, dist: Distributed) -> Checkpoints:
    """The checkpoint format of the job's mode: sharded directories under ``fsdp``, ``last.pt`` otherwise."""
    return ShardedCheckpoints(directory, dist) if dist.sharded else PlainCheckpoints(directory, dist)


def read_step(path: str | Path) -> int:
    """The step a checkpoint (``last.pt``, ``previous.pt`` or a sharded directory) was written at."""
    path = Path(path)
    if path.is_dir():
        return int(json.loads((path / MARKER).read_text())["step"])
    return int(torch.load(path, map_location="cpu", weights_only=False)["step"])
