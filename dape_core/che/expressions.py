"""Infix expressions modulo 5 of the CHE tasks modular_arithmetic_brackets and solve_equation (and the flat
sum-of-products of modular_arithmetic), vectorised over the batch: their values, and the sampling of bracketed
expressions, as the reference benchmark (Delétang et al., ICLR 2023) defines them (``che-spec``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODULUS = 5  # the modular-arithmetic, cycle-navigation and solve-equation tasks compute modulo 5


@dataclass(frozen=True)
class ExpressionSymbols:
    """Token ids of a bracketed expression language; digits are 0 … MODULUS-1, absent symbols are None."""

    plus: int
    minus: int
    open: int
    close: int
    times: int | None = None
    unknown: int | None = None  # the variable x of solve_equation


# Values of expressions in one unknown x are linear forms c + k·x (mod 5), coded as c + 5·k in 0 … 24; the
# operations are lookup tables over codes (-1 marks x·x, which has no linear form).
_ADD, _SUB, _MUL = 0, 1, 2
_CODES_C, _CODES_K = np.arange(MODULUS**2) % MODULUS, np.arange(MODULUS**2) // MODULUS  # code = c + 5·k
_C1, _C2 = _CODES_C[:, None], _CODES_C[None, :]
_K1, _K2 = _CODES_K[:, None], _CODES_K[None, :]
_OPERATION_TABLE = np.stack(
    [
        (_C1 + _C2) % MODULUS + MODULUS * ((_K1 + _K2) % MODULUS),
        (_C1 - _C2) % MODULUS + MODULUS * ((_K1 - _K2) % MODULUS),
        np.where((_K1 * _K2) % MODULUS == 0, (_C1 * _C2) % MODULUS + MODULUS * ((_C1 * _K2 + _K1 * _C2) % MODULUS), -1),
    ]
)
_NEGATION_TABLE = (-_CODES_C) % MODULUS + MODULUS * ((-_CODES_K) % MODULUS)
_UNKNOWN_CODE = MODULUS  # x = 0 + 1·x
INVERSE_MOD5 = np.array([0, 1, 3, 2, 4])  # k · INVERSE_MOD5[k] ≡ 1 (mod 5) for k ≠ 0

# Direct children ("units") of a bracket group: D digit or x, M minus, G a nested group, P + or *.
# A group holds one operand A = [M] (D | G), or A op A with op P or (binary) M.
_D, _M, _G, _P = 1, 2, 3, 4
_MAX_UNITS = 5


def _pattern_code(classes: list[int]) -> int:
    return sum(c * (_P + 1) ** rank for rank, c in enumerate(classes))


_OPERANDS = [[_D], [_G], [_M, _D], [_M, _G]]
_VALID_PATTERNS = np.array(
    [_pattern_code(a) for a in _OPERANDS]
    + [_pattern_code(a + [op] + b) for a in _OPERANDS for op in (_P, _M) for b in _OPERANDS]
)


def evaluate_bracket_expressions(tokens: np.ndarray, symbols: ExpressionSymbols) -> tuple[np.ndarray, np.ndarray]:
    """Evaluates every row of a bracketed expression modulo 5 as ``c + k·x``; returns (c, k).

    Grammar: a group ``( … )`` and the whole row hold one operand ``[-] (digit | x | group)`` or ``operand op operand``
    (the reference's ``d``, ``-d``, ``(d)``, ``(-d)``, ``(E op E)``, and a little more). Vectorised over the batch and
    the groups of one nesting level; raises ValueError on a malformed row."""
    batch, length = tokens.shape
    positions = np.arange(length)
    is_open, is_close = tokens == symbols.open, tokens == symbols.close
    depth_after = np.cumsum(is_open.astype(np.int64) - is_close, axis=1)
    bad = (depth_after < 0).any(axis=1) | (depth_after[:, -1] != 0)
    level = depth_after - is_open  # a "(" and its ")" share a level; their direct children are one level deeper

    unit_class = np.zeros((batch, length), dtype=np.int64)
    unit_class[tokens < MODULUS] = _D
    for symbol, kind in ((symbols.unknown, _D), (symbols.minus, _M), (symbols.open, _G), (symbols.plus, _P),
                         (symbols.times, _P)):
        if symbol is not None:
            unit_class[tokens == symbol] = kind
    bad |= ((unit_class == 0) & ~is_close).any(axis=1)

    # The group of a unit at level l is the nearest "(" before it at level l - 1 (-1: the whole row).
    enclosing = np.full((batch, length), -1)
    for lvl in range(int(level.max(initial=0))):
        last_open = np.maximum.accumulate(np.where(is_open & (level == lvl), positions, -1), axis=1)
        inside = level == lvl + 1
        enclosing[inside] = last_open[inside]
    unit_rows, unit_positions = np.nonzero(~is_close)
    unit_keys = unit_rows * (length + 1) + enclosing[unit_rows, unit_positions] + 1
    order = np.argsort(unit_keys, kind="stable")
    unit_rows, unit_positions, unit_keys = unit_rows[order], unit_positions[order], unit_keys[order]
    group_keys, group_first, group_sizes = np.unique(unit_keys, return_index=True, return_counts=True)
    rank = np.arange(len(unit_keys)) - np.repeat(group_first, group_sizes)
    group_of_unit = np.repeat(np.arange(len(group_keys)), group_sizes)

    open_rows, open_positions = np.nonzero(is_open)
    empty = ~np.isin(open_rows * (length + 1) + open_positions + 1, group_keys)
    bad[open_rows[empty]] = True
    classes = unit_class[unit_rows, unit_positions]
    kept = rank < _MAX_UNITS
    codes = np.zeros(len(group_keys), dtype=np.int64)
    np.add.at(codes, group_of_unit[kept], classes[kept] * (_P + 1) ** rank[kept])
    group_rows = group_keys // (length + 1)
    bad[group_rows[(group_sizes > _MAX_UNITS) | ~np.isin(codes, _VALID_PATTERNS)]] = True
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"malformed expression in row {row}: {tokens[row].tolist()}")

    n_groups = len(group_keys)
    unit_at = np.zeros((n_groups, _MAX_UNITS), dtype=np.int64)  # position of each group's unit of each rank
    unit_at[group_of_unit, rank] = unit_positions
    unit_class_at = np.zeros((n_groups, _MAX_UNITS), dtype=np.int64)
    unit_class_at[group_of_unit, rank] = classes
    every = np.arange(n_groups)
    first_negated = unit_class_at[:, 0] == _M
    op_rank = first_negated + 1
    has_op = group_sizes > op_rank
    second_negated = unit_class_at[every, op_rank + 1] == _M
    group_open = group_keys % (length + 1) - 1  # -1 for the row's top level
    group_level = np.where(group_open >= 0, level[group_rows, np.maximum(group_open, 0)], -1)
    op_token = tokens[group_rows, unit_at[every, op_rank]]
    op_index = np.select([op_token == symbols.minus, op_token == symbols.plus], [_SUB, _ADD], default=_MUL)

    leaf_code = np.where(tokens < MODULUS, tokens, _UNKNOWN_CODE)
    value = np.zeros((batch, length), dtype=np.int64)  # code of each group, stored at its "("
    result = np.zeros(batch, dtype=np.int64)

    def operand(g: np.ndarray, at_rank: np.ndarray, negated: np.ndarray) -> np.ndarray:
        rows, at = group_rows[g], unit_at[g, at_rank]
        code = np.where(is_open[rows, at], value[rows, at], leaf_code[rows, at])
        return np.where(negated, _NEGATION_TABLE[code], code)

    for lvl in range(int(group_level.max(initial=-1)), -2, -1):  # deepest groups first
        g = np.flatnonzero(group_level == lvl)
        left = operand(g, first_negated[g].astype(np.int64), first_negated[g])
        right = operand(g, op_rank[g] + 1 + second_negated[g], second_negated[g])
        combined = np.where(has_op[g], _OPERATION_TABLE[op_index[g], left, right], left)
        if (combined < 0).any():
            row = int(group_rows[g][np.argmax(combined < 0)])
            raise ValueError(f"expression is not linear in x in row {row}: {tokens[row].tolist()}")
        opens, rows = group_open[g], group_rows[g]
        value[rows[opens >= 0], opens[opens >= 0]] = combined[opens >= 0]
        result[rows[opens < 0]] = combined[opens < 0]
    return result % MODULUS, result // MODULUS


_LOG2_MOD5 = np.array([0, 0, 1, 3, 2])  # 2 generates the units mod 5: 1 = 2^0, 2 = 2^1, 4 = 2^2, 3 = 2^3
_POW2_MOD5 = np.array([1, 2, 4, 3])


def evaluate_sum_of_products(inputs: np.ndarray, plus: int, minus: int, times: int, blank: int) -> np.ndarray:
    """Values mod 5 of rows ``d op d … op d`` with ``*`` before ``+``/``-`` (a blank is 0 as a digit, + as an op);
    each product is 0 (a zero factor) or 2^(sum of discrete logs), without overflow, all rows at once."""
    batch, length = inputs.shape
    digits, ops = inputs[:, 0::2].copy(), inputs[:, 1::2].copy()
    digits[digits == blank] = 0
    ops[ops == blank] = plus
    if length % 2 == 0 or (digits >= MODULUS).any() or ~np.isin(ops, (plus, minus, times)).all():
        raise ValueError("modular_arithmetic inputs alternate digits and operators and have odd length")
    n_digits = digits.shape[1]
    starts_term = np.concatenate([np.ones((batch, 1), bool), ops != times], axis=1)
    sign = np.concatenate([np.ones((batch, 1), np.int64), np.where(ops == minus, -1, 1)], axis=1)
    term = (np.cumsum(starts_term, axis=1) - 1) + n_digits * np.arange(batch)[:, None]  # one id per (row, term)
    zeros = np.bincount(term.ravel(), weights=(digits == 0).ravel(), minlength=batch * n_digits)
    logs = np.bincount(term.ravel(), weights=_LOG2_MOD5[digits].ravel(), minlength=batch * n_digits)
    products = np.where(zeros > 0, 0, _POW2_MOD5[logs.astype(np.int64) % 4])
    signed = np.where(starts_term, sign * products[term], 0)
    return signed.sum(axis=1) % MODULUS


def sample_bracket_expressions(
    batch_size: int, length: int, rng: np.random.Generator, symbols: ExpressionSymbols, operators: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Expressions of exactly ``length`` tokens from the recursive grammar of modular arithmetic with brackets, with
    their values mod 5.

    Length 1…4: ``d``, ``-d``, ``(d)``, ``(-d)``; length L >= 5: ``(left op right)`` with len(left) ~ U{1…L-4},
    len(right) = L - 3 - len(left), op uniform over ``operators``. The tree grows a level at a time for all rows;
    values are combined from the leaves up."""
    out = np.zeros((batch_size, length), dtype=np.int64)
    operators = np.asarray(operators)
    operation = np.select([operators == symbols.minus, operators == symbols.plus], [_SUB, _ADD], default=_MUL)
    # Per tree node (ids handed out in order): a row of L tokens has s <= (L - 1) / 4 splits, so 2s + 1 <= L nodes.
    value = np.zeros(batch_size * length, dtype=np.int64)
    row, node = np.arange(batch_size), np.arange(batch_size)
    start, size = np.zeros(batch_size, dtype=np.int64), np.full(batch_size, length)
    next_node = batch_size
    splits = []  # per level: (node, left child, right child, operation)
    while len(node):
        leaf = size <= 4
        r, s, n = row[leaf], start[leaf], size[leaf]
        digit = rng.integers(0, MODULUS, size=len(r))
        bracketed, negated = n >= 3, (n == 2) | (n == 4)
        out[r, s + np.select([n == 1, n == 4], [0, 2], default=1)] = digit
        out[r[negated], (s + (n == 4))[negated]] = symbols.minus
        out[r[bracketed], s[bracketed]] = symbols.open
        out[r[bracketed], (s + n - 1)[bracketed]] = symbols.close
        value[node[leaf]] = np.where(negated, -digit % MODULUS, digit)

        split = ~leaf
        r, s, n, parent = row[split], start[split], size[split], node[split]
        left = 1 + np.floor(rng.random(len(r)) * (n - 4)).astype(np.int64)
        chosen = rng.integers(0, len(operators), size=len(r))
        out[r, s] = symbols.open
        out[r, s + 1 + left] = operators[chosen]
        out[r, s + n - 1] = symbols.close
        left_node = next_node + np.arange(len(r))
        right_node = left_node + len(r)
        next_node += 2 * len(r)
        splits.append((parent, left_node, right_node, operation[chosen]))
        row, start = np.concatenate([r, r]), np.concatenate([s + 1, s + 2 + left])
        size, node = np.concatenate([left, n - 3 - left]), np.concatenate([left_node, right_node])
    for parent, left_node, right_node, op in reversed(splits):
        value[parent] = _OPERATION_TABLE[op, value[left_node], value[right_node]]
    return out, value[:batch_size]
