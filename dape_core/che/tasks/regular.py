"""The regular tasks of CHE (Delétang et al., 2023, Table 1): a finite-state automaton decides them."""

from __future__ import annotations

import numpy as np

from dape_core.che.expressions import MODULUS, evaluate_sum_of_products
from dape_core.che.tasks.base import Task, register


@register
class EvenPairs(Task):
    """Even pairs (R): is the number of unequal adjacent pairs odd (= first bit != last bit)? (Table 6)"""

    name, level, input_size, output_size = "even_pairs", "R", 2, 2

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

    def _targets(self, inputs):
        return (inputs.sum(axis=1) % 2)[:, None]


@register
class CycleNavigation(Task):
    """Cycle navigation (R, †††): position on a 5-cycle from 0 after steps 0→-1, 1→stay, 2→+1 (Table 6)."""

    name, level, input_size, output_size = "cycle_navigation", "R", 3, MODULUS
    permutation_invariant = True

    def _targets(self, inputs):
        return ((inputs - 1).sum(axis=1) % MODULUS)[:, None]
