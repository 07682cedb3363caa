"""A CHE task's interface (vocabularies, output length, batch sampling, the target of any input batch) and the
registry of tasks by name."""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np

from dape_core.errors import ConfigError, require_choice


class Task(abc.ABC):
    """One CHE task: vocabularies, output length, batch sampling and the target of any input batch. It defines
    ``_targets`` and may override ``_sample_inputs`` (default: tokens uniform over the input vocabulary; targets from
    ``_targets``) or ``_sample`` (inputs with targets known from the sampler's own draws, e.g. solve_equation's hidden
    digit)."""

    name: ClassVar[str]
    level: ClassVar[str]  # Chomsky level: "R" (regular), "DCF" (deterministic context-free), "CS" (context-sensitive)
    input_size: ClassVar[int]
    output_size: ClassVar[int]
    permutation_invariant: ClassVar[bool] = False  # the paper's ††† tasks
    end_token: ClassVar[int | None] = None  # termination token: the accuracy mask stops after its first occurrence

    def output_length(self, length: int) -> int:
        """Number of output (query) positions for an input of ``length`` tokens."""
        return 1

    def sample(
        self, batch_size: int, length: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draws a batch at one length: inputs [B, N'] (N' = N except where a task says), targets and masks."""
        if length < 1 or batch_size < 1:
            raise ValueError(f"length and batch_size must be positive, got length={length}, batch_size={batch_size}")
        inputs, targets = self._sample(batch_size, length, rng)
        return inputs.astype(np.int64), targets.astype(np.int64), self._mask(targets)

    def target(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Target tokens [B, output_length] and accuracy mask (bool, same shape) of an input batch [B, N]."""
        inputs = np.asarray(inputs)
        if inputs.ndim != 2 or inputs.shape[1] < 1 or not np.issubdtype(inputs.dtype, np.integer):
            raise ValueError(f"{self.name}: inputs must be a 2-D integer array [batch, length >= 1]")
        inputs = inputs.astype(np.int64)
        if inputs.size and (inputs.min() < 0 or inputs.max() >= self.input_size):
            raise ValueError(f"{self.name}: input ids must lie in [0, {self.input_size})")
        targets = self._targets(inputs).astype(np.int64)
        return targets, self._mask(targets)

    def _sample(self, batch_size: int, length: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        inputs = self._sample_inputs(batch_size, length, rng)
        return inputs, self._targets(inputs)

    def _sample_inputs(self, batch_size: int, length: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, self.input_size, size=(batch_size, length))

    @abc.abstractmethod
    def _targets(self, inputs: np.ndarray) -> np.ndarray:
        """Target tokens [B, output_length] of a validated input batch."""

    def _mask(self, targets: np.ndarray) -> np.ndarray:
        if self.end_token is None:
            return np.ones(targets.shape, dtype=bool)
        is_end = targets == self.end_token
        return (np.cumsum(is_end, axis=1) - is_end) == 0  # up to and including the first end token


TASKS: dict[str, Task] = {}


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: adds one instance of the task to ``TASKS`` under its name."""
    TASKS[cls.name] = cls()
    return cls


def get_task(name: str) -> Task:
    """The registered task called ``name``; a ConfigError names the field ``task`` and the allowed values."""
    require_choice("task", name, TASKS)
    return TASKS[name]


def check_positions(settings) -> None:
    """With randomised positions (Ruoss et al., 2023) ``max_position`` must cover the input plus query tokens at the
    longest length; else a ConfigError names ``max_position`` and the allowed values."""
    task = get_task(settings.task)
    longest = max(n + task.output_length(n) for n in (settings.train_max_len, settings.eval_max_len))
    if settings.randomized_positions and longest > settings.max_position:
        raise ConfigError(f"max_position: {settings.max_position} is not allowed; allowed values: ≥ {longest} "
                          "(input plus query tokens at the longest length)")
