"""The deterministic context-free tasks of CHE (Delétang et al., 2023, Table 1): a stack decides them."""

from __future__ import annotations

import numpy as np

from dape_core.che.expressions import (INVERSE_MOD5, MODULUS, ExpressionSymbols, evaluate_bracket_expressions,
                                       sample_bracket_expressions)
from dape_core.che.tasks.base import Task, register


@register
class StackManipulation(Task):
    """Stack manipulation (DCF): run POP/PUSH0/PUSH1 on a stack given bottom-to-top; output it top-to-bottom, end.
    A stack bit in the input pushes itself, so the initial stack and the actions are one program; POP on an empty
    stack is ignored. Output length N + 1, zero-padded after the end token (Table 6)."""

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
    """Solve equation (DCF): the digit hidden as x in ``expression = value`` over {+, -}, mod 5 (Table 6). Inputs
    shorter than 3 are all zeros with target 0, as in the reference benchmark."""

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
