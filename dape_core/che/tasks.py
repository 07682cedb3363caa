"""The 15 tasks of the Chomsky Hierarchy Evaluation (CHE) benchmark behind Table 6 (appendix G).

Definitions follow Delétang et al. (ICLR 2023) as run by Ruoss et al. (ACL 2023): for the same input a task's
``target`` gives the same target and accuracy mask as the reference benchmark, including its conventions at small
lengths. Every task works on token ids (int64 arrays), samples whole batches from a ``numpy.random.Generator`` and
computes the target of *any* input batch of its language, not only of sampled ones.
"""

from __future__ import annotations

import abc
import math
from typing import ClassVar

import numpy as np

from dape_core.errors import ConfigError, require_choice

from dape_core.che.expressions import (INVERSE_MOD5, MODULUS, ExpressionSymbols, evaluate_bracket_expressions,
                                       evaluate_sum_of_products, sample_bracket_expressions)


# ---------------------------------------------------------------------------------------------------------------
# Base class and registry
# ---------------------------------------------------------------------------------------------------------------


class Task(abc.ABC):
    """One CHE task: vocabularies, output length, batch sampling and the target of any input batch.

    A task defines ``_targets`` and either ``_sample_inputs`` (targets then come from ``_targets``) or ``_sample``
    (inputs with targets known from the sampler's own draws, e.g. the hidden digit of solve_equation).
    """

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
        raise NotImplementedError(f"{self.name} defines neither _sample_inputs nor _sample")

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
    """With randomised positions (Ruoss et al., 2023) a CHESettings' ``max_position`` covers the input plus query
    tokens at its longest length; a ConfigError names ``max_position`` and the allowed values."""
    task = get_task(settings.task)
    longest = max(n + task.output_length(n) for n in (settings.train_max_len, settings.eval_max_len))
    if settings.randomized_positions and longest > settings.max_position:
        raise ConfigError(f"max_position: {settings.max_position} is not allowed; allowed values: ≥ {longest} "
                          "(input plus query tokens at the longest length)")


# ---------------------------------------------------------------------------------------------------------------
# Helpers: binary numbers, vectorised over the batch (infix expressions: dape_core.che.expressions)
# ---------------------------------------------------------------------------------------------------------------


def _bits_to_ints(bits: np.ndarray) -> list[int]:
    """Little-endian bit rows [B, n] -> Python integers (exact for any n)."""
    if bits.shape[1] == 0:
        return [0] * bits.shape[0]
    packed = np.packbits(bits.astype(np.uint8), axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def _ints_to_bits(values: list[int], width: int) -> np.ndarray:
    """Python integers (< 2**width) -> little-endian bit rows [B, width]."""
    n_bytes = max(1, (width + 7) // 8)
    raw = np.frombuffer(b"".join(v.to_bytes(n_bytes, "little") for v in values), dtype=np.uint8)
    return np.unpackbits(raw.reshape(len(values), n_bytes), axis=1, bitorder="little")[:, :width].astype(np.int64)


def _nonzero_bit_rows(rng: np.random.Generator, widths: np.ndarray, total: int) -> np.ndarray:
    """Rows [B, total] of uniform bits, zero at column >= widths[b], each row a number in [1, 2**width - 1]."""
    inside = np.arange(total)[None, :] < widths[:, None]
    bits = rng.integers(0, 2, size=(len(widths), total)) * inside
    redraw = ~bits.any(axis=1)
    while redraw.any():  # rejection sampling keeps the law uniform on the non-zero numbers
        bits[redraw] = rng.integers(0, 2, size=(int(redraw.sum()), total)) * inside[redraw]
        redraw = ~bits.any(axis=1)
    return bits


def _binary_result(values: list[int], end_token: int, width: int) -> np.ndarray:
    """Little-endian digits of each value ("0" for zero), then the end token, zero-padded to ``width``."""
    n_digits = np.array([max(v.bit_length(), 1) for v in values])
    digits = _ints_to_bits(values, width)
    columns = np.arange(width)[None, :]
    out = np.where(columns < n_digits[:, None], digits, 0)
    out[np.arange(len(values)), n_digits] = end_token
    return out


def _split_operands(inputs: np.ndarray, separator: int) -> tuple[list[int], list[int], np.ndarray]:
    """Reads ``a sep b`` (little-endian operands) per row; rows without a separator give (number, 0, False)."""
    n_sep = (inputs == separator).sum(axis=1)
    if (n_sep > 1).any():
        raise ValueError("binary operations take at most one operator token per input")
    has_sep = n_sep == 1
    length = inputs.shape[1]
    sep_at = np.where(has_sep, np.argmax(inputs == separator, axis=1), length)
    columns = np.arange(length)[None, :]
    left_bits = np.where(columns < sep_at[:, None], inputs, 0)
    right_index = np.clip(columns + sep_at[:, None] + 1, 0, length - 1)
    right_bits = np.where(columns < (length - 1 - sep_at)[:, None], np.take_along_axis(inputs, right_index, 1), 0)
    return _bits_to_ints(left_bits), _bits_to_ints(right_bits), has_sep


# ---------------------------------------------------------------------------------------------------------------
# Regular tasks
# ---------------------------------------------------------------------------------------------------------------


@register
class EvenPairs(Task):
    """Even pairs (R): is the number of unequal adjacent pairs odd (= first bit != last bit)? (Table 6)"""

    name, level, input_size, output_size = "even_pairs", "R", 2, 2

    def _sample_inputs(self, batch_size, length, rng):
        return rng.integers(0, 2, size=(batch_size, length))

    def _targets(self, inputs):
        return ((inputs[:, 1:] != inputs[:, :-1]).sum(axis=1) % 2)[:, None]


@register
class ModularArithmetic(Task):
    """Modular arithmetic, simple (R): value mod 5 of ``d op d op … d``, ``*`` before ``+``/``-`` (Table 6)."""

    name, level, input_size, output_size = "modular_arithmetic", "R", 9, MODULUS
    PLUS, MINUS, TIMES, BLANK = 5, 6, 7, 8  # BLANK is in the vocabulary but never sampled: + between, 0 in place

    def _sample_inputs(self, batch_size, length, rng):
        length = length if length % 2 == 1 else length - 1  # an even length N becomes N - 1
        inputs = rng.integers(0, MODULUS, size=(batch_size, length))
        operators = np.array([self.PLUS, self.TIMES, self.MINUS])
        inputs[:, 1::2] = operators[rng.integers(0, 3, size=(batch_size, length // 2))]
        return inputs

    def _targets(self, inputs):
        return evaluate_sum_of_products(inputs, self.PLUS, self.MINUS, self.TIMES, self.BLANK)[:, None]


@register
class ParityCheck(Task):
    """Parity check (R, †††): number of ones mod 2 (Table 6)."""

    name, level, input_size, output_size = "parity_check", "R", 2, 2
    permutation_invariant = True

    def _sample_inputs(self, batch_size, length, rng):
        return rng.integers(0, 2, size=(batch_size, length))

    def _targets(self, inputs):
        return (inputs.sum(axis=1) % 2)[:, None]


@register
class CycleNavigation(Task):
    """Cycle navigation (R, †††): position on a 5-cycle from 0 after steps 0→-1, 1→stay, 2→+1 (Table 6)."""

    name, level, input_size, output_size = "cycle_navigation", "R", 3, MODULUS
    permutation_invariant = True

    def _sample_inputs(self, batch_size, length, rng):
        return rng.integers(0, 3, size=(batch_size, length))

    def _targets(self, inputs):
        return ((inputs - 1).sum(axis=1) % MODULUS)[:, None]


# ---------------------------------------------------------------------------------------------------------------
# Deterministic context-free tasks
# ---------------------------------------------------------------------------------------------------------------


@register
class StackManipulation(Task):
    """Stack manipulation (DCF): run POP/PUSH0/PUSH1 on a stack given bottom-to-top; output it top-to-bottom, end.

    A stack bit in the input pushes itself, so the initial stack and the actions are one program; POP on an empty
    stack is ignored. Output length N + 1, zero-padded after the end token (Table 6).
    """

    name, level, input_size, output_size = "stack_manipulation", "DCF", 5, 3
    POP, PUSH0, PUSH1 = 2, 3, 4
    end_token = 2

    def output_length(self, length):
        return length + 1

    def _sample_inputs(self, batch_size, length, rng):
        if length == 1:
            return rng.integers(0, 2, size=(batch_size, 1))  # one stack bit, no action
        stack_length = rng.integers(1, length, size=batch_size)
        bits = rng.integers(0, 2, size=(batch_size, length))
        actions = rng.integers(self.POP, self.PUSH1 + 1, size=(batch_size, length))
        return np.where(np.arange(length)[None, :] < stack_length[:, None], bits, actions)

    def _targets(self, inputs):
        batch, length = inputs.shape
        push = inputs != self.POP
        pushed_bit = np.where(inputs >= self.PUSH0, inputs - self.PUSH0, inputs)
        walk = np.cumsum(np.where(push, 1, -1), axis=1)
        height = walk - np.minimum(np.minimum.accumulate(walk, axis=1), 0)  # POP on an empty stack is ignored
        # The element at height h of the final stack is the one of the last push that reached h.
        last_push = np.full((batch, length + 1), -1)
        push_rows, push_times = np.nonzero(push)
        np.maximum.at(last_push, (push_rows, height[push_rows, push_times]), push_times)
        size = height[:, -1]
        from_top = np.clip(size[:, None] - np.arange(length)[None, :], 0, length)  # heights top to bottom
        times = np.take_along_axis(last_push, from_top, axis=1).clip(0)
        out = np.zeros((batch, length + 1), dtype=np.int64)
        out[:, :length] = np.where(from_top > 0, np.take_along_axis(pushed_bit, times, axis=1), 0)
        out[np.arange(batch), size] = self.end_token
        return out


@register
class ReverseString(Task):
    """Reverse string (DCF): the input bits reversed (Table 6)."""

    name, level, input_size, output_size = "reverse_string", "DCF", 2, 2

    def output_length(self, length):
        return length

    def _sample_inputs(self, batch_size, length, rng):
        return rng.integers(0, 2, size=(batch_size, length))

    def _targets(self, inputs):
        return inputs[:, ::-1].copy()


@register
class ModularArithmeticBrackets(Task):
    """Modular arithmetic with brackets (DCF): value mod 5 of a bracketed expression over {+, -, *} (Table 6)."""

    name, level, input_size, output_size = "modular_arithmetic_brackets", "DCF", 11, MODULUS
    SYMBOLS = ExpressionSymbols(plus=5, minus=6, times=7, open=8, close=9)  # id 10 (x) is in the vocabulary, unused

    def _sample(self, batch_size, length, rng):
        ops = (self.SYMBOLS.plus, self.SYMBOLS.minus, self.SYMBOLS.times)
        inputs, value = sample_bracket_expressions(batch_size, length, rng, self.SYMBOLS, ops)
        return inputs, value[:, None]

    def _targets(self, inputs):
        value, _ = evaluate_bracket_expressions(inputs, self.SYMBOLS)
        return value[:, None]


@register
class SolveEquation(Task):
    """Solve equation (DCF): the digit hidden as x in ``expression = value`` over {+, -}, mod 5 (Table 6).

    Inputs shorter than 3 are all zeros with target 0, as in the reference benchmark.
    """

    name, level, input_size, output_size = "solve_equation", "DCF", 11, MODULUS
    EQUALS = 10
    SYMBOLS = ExpressionSymbols(plus=5, minus=6, open=7, close=8, unknown=9)

    def _sample(self, batch_size, length, rng):
        if length < 3:
            return np.zeros((batch_size, length), dtype=np.int64), np.zeros((batch_size, 1), dtype=np.int64)
        ops = (self.SYMBOLS.plus, self.SYMBOLS.minus)
        expression, value = sample_bracket_expressions(batch_size, length - 2, rng, self.SYMBOLS, ops)
        width = length - 2
        start = rng.integers(0, width, size=batch_size)
        order = (start[:, None] + np.arange(width)[None, :]) % width  # cyclic scan from the drawn position
        is_digit = np.take_along_axis(expression, order, axis=1) < MODULUS
        hidden_at = order[np.arange(batch_size), np.argmax(is_digit, axis=1)]
        solution = expression[np.arange(batch_size), hidden_at].copy()
        expression[np.arange(batch_size), hidden_at] = self.SYMBOLS.unknown
        equals = np.full((batch_size, 1), self.EQUALS)
        return np.concatenate([expression, equals, value[:, None]], axis=1), solution[:, None]

    def _targets(self, inputs):
        batch, length = inputs.shape
        if length < 3:
            return np.zeros((batch, 1), dtype=np.int64)
        value = inputs[:, -1]
        if (inputs[:, -2] != self.EQUALS).any() or (value >= MODULUS).any():
            raise ValueError("solve_equation inputs end with '=' and one digit")
        const, coef = evaluate_bracket_expressions(inputs[:, :-2], self.SYMBOLS)
        if (coef == 0).any():
            raise ValueError("solve_equation inputs need an x with a unique solution")
        return ((value - const) * INVERSE_MOD5[coef] % MODULUS)[:, None]


# ---------------------------------------------------------------------------------------------------------------
# Context-sensitive tasks
# ---------------------------------------------------------------------------------------------------------------


@register
class DuplicateString(Task):
    """Duplicate string (CS): the input bits written twice (Table 6)."""

    name, level, input_size, output_size = "duplicate_string", "CS", 2, 2

    def output_length(self, length):
        return 2 * length

    def _sample_inputs(self, batch_size, length, rng):
        return rng.integers(0, 2, size=(batch_size, length))

    def _targets(self, inputs):
        return np.concatenate([inputs, inputs], axis=1)


@register
class MissingDuplicate(Task):
    """Missing duplicate (CS): the bit hidden by ``missing`` in w·w (odd N ends with ``pad``); N = 1 gives 1."""

    name, level, input_size, output_size = "missing_duplicate", "CS", 4, 2
    MISSING, PAD = 2, 3

    def _sample(self, batch_size, length, rng):
        if length == 1:
            return np.ones((batch_size, 1), dtype=np.int64), np.ones((batch_size, 1), dtype=np.int64)
        half = length // 2
        word = rng.integers(0, 2, size=(batch_size, half))
        doubled = np.concatenate([word, word], axis=1)
        hidden_at = rng.integers(0, 2 * half, size=batch_size)
        hidden = doubled[np.arange(batch_size), hidden_at].copy()
        doubled[np.arange(batch_size), hidden_at] = self.MISSING
        padding = np.full((batch_size, length % 2), self.PAD)
        return np.concatenate([doubled, padding], axis=1), hidden[:, None]

    def _targets(self, inputs):
        batch, length = inputs.shape
        if length == 1:
            return np.ones((batch, 1), dtype=np.int64)
        half = length // 2
        doubled = inputs[:, : 2 * half]
        if ((doubled == self.MISSING).sum(axis=1) != 1).any():
            raise ValueError("missing_duplicate inputs hide exactly one bit")
        hidden_at = np.argmax(doubled == self.MISSING, axis=1)
        partner = np.where(hidden_at < half, hidden_at + half, hidden_at - half)
        return doubled[np.arange(batch), partner][:, None]


@register
class OddsFirst(Task):
    """Odds first (CS): the tokens at 0-based odd indices, then those at even indices (Table 6)."""

    name, level, input_size, output_size = "odds_first", "CS", 2, 2

    def output_length(self, length):
        return length

    def _sample_inputs(self, batch_size, length, rng):
        return rng.integers(0, 2, size=(batch_size, length))

    def _targets(self, inputs):
        return np.concatenate([inputs[:, 1::2], inputs[:, 0::2]], axis=1)


class _BinaryOperation(Task):
    """Shared sampling of ``a + b`` / ``a * b`` in little-endian binary; subclasses define the result."""

    level, input_size, output_size = "CS", 3, 3
    OPERATOR = 2
    end_token = 2

    def _sample(self, batch_size, length, rng):
        if length <= 2:  # no operator: one number uniform in [0, 2**N - 1)
            numbers = rng.integers(0, 2**length - 1, size=batch_size)
            inputs = _ints_to_bits([int(n) for n in numbers], length)
            return inputs, self._result([int(n) for n in numbers], [0] * batch_size, False, length)
        left_length = rng.integers(1, length - 1, size=batch_size)
        right_length = length - 1 - left_length
        left_bits = _nonzero_bit_rows(rng, left_length, length)
        right_bits = _nonzero_bit_rows(rng, right_length, length)
        columns = np.arange(length)[None, :]
        right_index = np.clip(columns - left_length[:, None] - 1, 0, length - 1)
        inputs = np.where(columns < left_length[:, None], left_bits, np.take_along_axis(right_bits, right_index, 1))
        inputs[np.arange(batch_size), left_length] = self.OPERATOR
        return inputs, self._result(_bits_to_ints(left_bits), _bits_to_ints(right_bits), True, length)

    def _targets(self, inputs):
        left, right, has_operator = _split_operands(inputs, self.OPERATOR)
        length = inputs.shape[1]
        out = np.zeros((len(left), self.output_length(length)), dtype=np.int64)
        for flag in (True, False):
            rows = np.flatnonzero(has_operator == flag)
            if len(rows):
                out[rows] = self._result([left[i] for i in rows], [right[i] for i in rows], flag, length)
        return out

    def _result(self, left: list[int], right: list[int], has_operator: bool, length: int) -> np.ndarray:
        raise NotImplementedError


@register
class BinaryAddition(_BinaryOperation):
    """Binary addition (CS): little-endian sum of ``a + b``, then end, zero-padded to N + 1; no ``+``: the number."""

    name = "binary_addition"

    def output_length(self, length):
        return length + 1

    def _result(self, left, right, has_operator, length):
        return _binary_result([a + b for a, b in zip(left, right)], self.end_token, length + 1)


@register
class BinaryMultiplication(_BinaryOperation):
    """Binary multiplication (CS): little-endian product of ``a * b``, then end, zero-padded to N (Table 6's absent
    15th task); without an operator the reference writes N - 1 zeros, then end."""

    name = "binary_multiplication"

    def output_length(self, length):
        return length

    def _result(self, left, right, has_operator, length):
        if not has_operator:
            out = np.zeros((len(left), length), dtype=np.int64)
            out[:, length - 1] = self.end_token
            return out
        return _binary_result([a * b for a, b in zip(left, right)], self.end_token, length)


@register
class ComputeSqrt(Task):
    """Compute sqrt (CS): floor square root of a big-endian number in [1, 2**N - 1], big-endian, ⌈N/2⌉ bits."""

    name, level, input_size, output_size = "compute_sqrt", "CS", 2, 2

    def output_length(self, length):
        return math.ceil(length / 2)

    def _sample_inputs(self, batch_size, length, rng):
        return _nonzero_bit_rows(rng, np.full(batch_size, length), length)

    def _targets(self, inputs):
        length = inputs.shape[1]
        roots = [math.isqrt(n) for n in _bits_to_ints(inputs[:, ::-1])]
        return _ints_to_bits(roots, self.output_length(length))[:, ::-1].copy()


@register
class BucketSort(Task):
    """Bucket sort (CS, †††): the tokens 0-4 sorted ascending (Table 6)."""

    name, level, input_size, output_size = "bucket_sort", "CS", 5, 5
    permutation_invariant = True

    def output_length(self, length):
        return length

    def _sample_inputs(self, batch_size, length, rng):
        return rng.integers(0, 5, size=(batch_size, length))

    def _targets(self, inputs):
        return np.sort(inputs, axis=1)
