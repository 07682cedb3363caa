"""The context-sensitive tasks of CHE (Delétang et al., 2023, Table 1): they need a tape."""

from __future__ import annotations

import math

import numpy as np

from dape_core.che.tasks.base import Task, register
from dape_core.che.tasks.binary import binary_result, bits_to_ints, ints_to_bits, nonzero_bit_rows, split_operands


@register
class DuplicateString(Task):
    """Duplicate string (CS): the input bits written twice (Table 6)."""

    name, level, input_size, output_size = "duplicate_string", "CS", 2, 2

    def output_length(self, length):
        return 2 * length

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

    def _targets(self, inputs):
        return np.concatenate([inputs[:, 1::2], inputs[:, 0::2]], axis=1)


class _BinaryOperation(Task):
    """Shared sampling of ``a + b`` / ``a * b`` in little-endian binary; subclasses define the result."""

    level, input_size, output_size = "CS", 3, 3
    OPERATOR = 2
    end_token = 2

    def _sample(self, batch_size, length, rng):
        if length <= 2:  # no operator: one number uniform in [0, 2**N - 1)
            numbers = [int(n) for n in rng.integers(0, 2**length - 1, size=batch_size)]
            return ints_to_bits(numbers, length), self._result(numbers, [0] * batch_size, False, length)
        left_length = rng.integers(1, length - 1, size=batch_size)
        right_length = length - 1 - left_length
        left_bits = nonzero_bit_rows(rng, left_length, length)
        right_bits = nonzero_bit_rows(rng, right_length, length)
        columns = np.arange(length)[None, :]
        right_index = np.clip(columns - left_length[:, None] - 1, 0, length - 1)
        inputs = np.where(columns < left_length[:, None], left_bits, np.take_along_axis(right_bits, right_index, 1))
        inputs[np.arange(batch_size), left_length] = self.OPERATOR
        return inputs, self._result(bits_to_ints(left_bits), bits_to_ints(right_bits), True, length)

    def _targets(self, inputs):
        left, right, has_operator = split_operands(inputs, self.OPERATOR)
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
        return binary_result([a + b for a, b in zip(left, right)], self.end_token, length + 1)


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
        return binary_result([a * b for a, b in zip(left, right)], self.end_token, length)


@register
class ComputeSqrt(Task):
    """Compute sqrt (CS): floor square root of a big-endian number in [1, 2**N - 1], big-endian, ⌈N/2⌉ bits."""

    name, level, input_size, output_size = "compute_sqrt", "CS", 2, 2

    def output_length(self, length):
        return math.ceil(length / 2)

    def _sample_inputs(self, batch_size, length, rng):
        return nonzero_bit_rows(rng, np.full(batch_size, length), length)

    def _targets(self, inputs):
        length = inputs.shape[1]
        roots = [math.isqrt(n) for n in bits_to_ints(inputs[:, ::-1])]
        return ints_to_bits(roots, self.output_length(length))[:, ::-1].copy()


@register
class BucketSort(Task):
    """Bucket sort (CS, †††): the tokens 0-4 sorted ascending (Table 6)."""

    name, level, input_size, output_size = "bucket_sort", "CS", 5, 5
    permutation_invariant = True

    def output_length(self, length):
        return length

    def _targets(self, inputs):
        return np.sort(inputs, axis=1)
