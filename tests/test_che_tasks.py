"""CHE tasks: reference samples, hand-checked examples, independent oracles, sampling at every length 1…500."""

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from dape_core.che.tasks import TASKS, get_task
from dape_core.errors import ConfigError

REFERENCE = json.loads((Path(__file__).parent / "data" / "che-reference-samples.json").read_text())

TABLE_6_TASKS = [
    "even_pairs", "modular_arithmetic", "parity_check", "cycle_navigation", "stack_manipulation", "reverse_string",
    "modular_arithmetic_brackets", "solve_equation", "duplicate_string", "missing_duplicate", "odds_first",
    "binary_addition", "compute_sqrt", "bucket_sort",
]  # fmt: skip


def targets_of(task_name, rows):
    targets, masks = get_task(task_name).target(np.array(rows))
    return targets.tolist(), masks.tolist()


def test_registry_holds_the_15_tasks_with_levels_and_invariance():
    assert set(TASKS) == set(TABLE_6_TASKS) | {"binary_multiplication"}
    assert {name for name, task in TASKS.items() if task.permutation_invariant} == {
        "parity_check", "cycle_navigation", "bucket_sort",
    }  # fmt: skip
    levels = {name: task.level for name, task in TASKS.items()}
    assert [n for n in TABLE_6_TASKS if levels[n] == "R"] == TABLE_6_TASKS[:4]
    assert [n for n in TABLE_6_TASKS if levels[n] == "DCF"] == TABLE_6_TASKS[4:8]
    assert [n for n in TABLE_6_TASKS if levels[n] == "CS"] == TABLE_6_TASKS[8:]


def test_unknown_task_is_a_config_error_naming_field_and_choices():
    with pytest.raises(ConfigError, match=r"task: 'sorting' is not allowed; allowed values: .*bucket_sort"):
        get_task("sorting")


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_target_reproduces_every_reference_sample(name):
    task, spec = get_task(name), REFERENCE[name]
    assert (task.input_size, task.output_size) == (spec["input_size"], spec["output_size"])
    by_length = defaultdict(list)
    for sample in spec["samples"]:
        by_length[sample["N"]].append(sample)
        targets, masks = task.target(np.array([sample["input"]]))
        assert targets[0].tolist() == sample["target"], sample
        assert masks[0].tolist() == sample["mask"], sample
        assert task.output_length(sample["N"]) == len(sample["target"]), sample
    for samples in by_length.values():  # the same samples as one batch per length
        targets, masks = task.target(np.array([s["input"] for s in samples]))
        assert targets.tolist() == [s["target"] for s in samples]
        assert masks.tolist() == [s["mask"] for s in samples]
    assert set(by_length) == {*range(1, 13), 20, 40, 41, 64, 100}


def test_stack_manipulation_by_hand():
    POP, PUSH0, PUSH1 = 2, 3, 4
    # stack 0 1 (bottom to top); POP POP POP (the third on an empty stack is ignored); PUSH1
    assert targets_of("stack_manipulation", [[0, 1, POP, POP, POP, PUSH1]]) == (
        [[1, 2, 0, 0, 0, 0, 0]],
        [[True, True, False, False, False, False, False]],
    )
    # stack 1 1 0; PUSH0 PUSH1 POP -> 1 1 0 0, returned top to bottom
    assert targets_of("stack_manipulation", [[1, 1, 0, PUSH0, PUSH1, POP]]) == (
        [[0, 0, 1, 1, 2, 0, 0]],
        [[True, True, True, True, True, False, False]],
    )
    assert targets_of("stack_manipulation", [[0, POP, POP]]) == ([[2, 0, 0, 0]], [[True, False, False, False]])
    assert targets_of("stack_manipulation", [[1]]) == ([[1, 2]], [[True, True]])


def test_binary_addition_is_little_endian_with_end_token_and_mask():
    PLUS, END = 2, 2
    # 3 + 1 = 4: "11" + "1" -> "001", end, zero padding to N + 1 = 5
    assert targets_of("binary_addition", [[1, 1, PLUS, 1]]) == ([[0, 0, 1, END, 0]], [[True, True, True, True, False]])
    # 2 + 6 = 8: "01" + "011" -> "0001"
    assert targets_of("binary_addition", [[0, 1, PLUS, 0, 1, 1]]) == (
        [[0, 0, 0, 1, END, 0, 0]],
        [[True] * 5 + [False] * 2],
    )
    # N <= 2: no operator, the number itself ("0" for zero)
    assert targets_of("binary_addition", [[0, 1], [0, 0]]) == (
        [[0, 1, END], [0, END, 0]],
        [[True] * 3, [True, True, False]],
    )


def test_binary_multiplication_and_compute_sqrt_by_hand():
    # 3 * 3 = 9 = "1001" little-endian, then end; output length N = 5
    assert targets_of("binary_multiplication", [[1, 1, 2, 1, 1]]) == ([[1, 0, 0, 1, 2]], [[True] * 5])
    # 37 = 100101 (big-endian) -> isqrt 6 = 110 in ceil(6 / 2) = 3 bits
    assert targets_of("compute_sqrt", [[1, 0, 0, 1, 0, 1]]) == ([[1, 1, 0]], [[True] * 3])


def test_odds_first_missing_duplicate_and_sorting_by_hand():
    assert targets_of("odds_first", [[1, 0, 0, 1, 1]]) == ([[0, 1, 1, 0, 1]], [[True] * 5])
    assert targets_of("odds_first", [[0, 1, 1, 1, 0, 0]]) == ([[1, 1, 0, 0, 1, 0]], [[True] * 6])
    # w = 011, w·w with its 4th symbol hidden, then the pad of an odd length
    assert targets_of("missing_duplicate", [[0, 1, 1, 2, 1, 1, 3]])[0] == [[0]]
    assert targets_of("bucket_sort", [[4, 0, 3, 0, 1]])[0] == [[0, 0, 1, 3, 4]]
    assert targets_of("cycle_navigation", [[2, 2, 2, 0, 1]])[0] == [[2]]
    assert targets_of("even_pairs", [[0, 1, 1, 0], [0, 1, 1, 1]])[0] == [[0], [1]]


def test_modular_arithmetic_multiplies_before_adding_and_subtracting():
    PLUS, MINUS, TIMES, BLANK = 5, 6, 7, 8
    cases = {
        (1, PLUS, 2, TIMES, 3): 2,  # 1 + 6 = 7
        (4, MINUS, 2, TIMES, 2): 0,  # 4 - 4
        (3, TIMES, 3, MINUS, 1): 3,  # 9 - 1 = 8
        (2, MINUS, 3, MINUS, 4): 0,  # (2 - 3) - 4 = -5, left to right
        (1, MINUS, 2, TIMES, 3, PLUS, 4): 4,  # 1 - 6 + 4 = -1
        (4, TIMES, 4, TIMES, 4, TIMES, 0): 0,
        (1, BLANK, 2): 3,  # a blank operator is +
        (BLANK, TIMES, 3): 0,  # a blank operand is 0
    }
    for expression, value in cases.items():
        assert targets_of("modular_arithmetic", [list(expression)])[0] == [[value]], expression


def test_solve_equation_by_hand():
    PLUS, MINUS, OPEN, CLOSE, X, EQUALS = 5, 6, 7, 8, 9, 10
    cases = {
        (OPEN, X, PLUS, 2, CLOSE, EQUALS, 1): 4,  # x + 2 = 1
        (OPEN, 3, MINUS, X, CLOSE, EQUALS, 4): 4,  # 3 - x = 4
        (MINUS, X, EQUALS, 2): 3,  # -x = 2
        (OPEN, OPEN, 1, MINUS, X, CLOSE, PLUS, OPEN, MINUS, 2, CLOSE, CLOSE, EQUALS, 0): 4,  # 1 - x - 2 = 0
        (OPEN, 2, MINUS, OPEN, MINUS, X, CLOSE, CLOSE, EQUALS, 0): 3,  # 2 + x = 0
        (0, 0): 0,  # shorter than 3: the reference's all-zero input
    }
    for equation, solution in cases.items():
        assert targets_of("solve_equation", [list(equation)])[0] == [[solution]], equation


@pytest.mark.parametrize(
    "name, row",
    [
        ("modular_arithmetic_brackets", [8, 1, 5, 2]),  # unclosed bracket
        ("modular_arithmetic_brackets", [8, 1, 5, 9]),  # missing operand
        ("modular_arithmetic_brackets", [1, 2]),  # two operands, no operator
        ("modular_arithmetic_brackets", [8, 9, 1]),  # empty brackets
        ("solve_equation", [7, 1, 5, 2, 8, 10, 3]),  # no unknown
        ("solve_equation", [7, 9, 5, 2, 8, 6, 3]),  # no "="
        ("modular_arithmetic", [1, 5]),  # even length
        ("modular_arithmetic", [1, 2, 3]),  # digit where an operator belongs
        ("missing_duplicate", [0, 1, 0, 1]),  # nothing hidden
        ("binary_addition", [1, 2, 1, 2, 1]),  # two operators
        ("reverse_string", [0, 2]),  # out of the vocabulary
    ],
)
def test_malformed_inputs_are_rejected(name, row):
    with pytest.raises(ValueError):
        get_task(name).target(np.array([row]))


def _as_python(row, symbols):
    return "".join(symbols.get(tok, str(tok)) for tok in row)


def test_expression_targets_agree_with_python_arithmetic():
    rng = np.random.default_rng(1)
    brackets = {5: "+", 6: "-", 7: "*", 8: "(", 9: ")"}
    simple = {5: "+", 6: "-", 7: "*"}
    for length in (1, 2, 3, 4, 5, 9, 17, 40, 101):
        for name, symbols in (("modular_arithmetic_brackets", brackets), ("modular_arithmetic", simple)):
            inputs, targets, _ = get_task(name).sample(64, length, rng)
            # the rows hold only digits, operators and brackets: Python's own arithmetic is the oracle
            expected = [eval(_as_python(row, symbols)) % 5 for row in inputs.tolist()]  # noqa: S307
            assert targets[:, 0].tolist() == expected, (name, length)
    equation = {5: "+", 6: "-", 7: "(", 8: ")", 9: "x"}
    for length in (3, 4, 8, 30, 77):
        inputs, targets, _ = get_task("solve_equation").sample(64, length, rng)
        for row, solution in zip(inputs.tolist(), targets[:, 0].tolist()):
            assert eval(_as_python(row[:-2], equation), {"x": solution}) % 5 == row[-1]  # noqa: S307


def test_binary_targets_agree_with_python_integers():
    rng = np.random.default_rng(2)
    for length in (3, 10, 64, 200):
        for name, op in (("binary_addition", int.__add__), ("binary_multiplication", int.__mul__)):
            inputs, targets, masks = get_task(name).sample(16, length, rng)
            for row, target, mask in zip(inputs.tolist(), targets.tolist(), masks.tolist()):
                sep = row.index(2)
                a, b = (int("".join(map(str, bits[::-1])), 2) for bits in (row[:sep], row[sep + 1 :]))
                digits = target[: target.index(2)]
                assert int("".join(map(str, digits[::-1])), 2) == op(a, b) and (digits[-1] == 1)
                assert sum(mask) == len(digits) + 1
        inputs, targets, _ = get_task("compute_sqrt").sample(16, length, rng)
        for row, target in zip(inputs.tolist(), targets.tolist()):
            n, root = int("".join(map(str, row)), 2), int("".join(map(str, target)), 2)
            assert n >= 1 and root * root <= n < (root + 1) ** 2


@pytest.mark.parametrize("name", sorted(TASKS))
def test_sampling_at_every_length_up_to_500(name):
    task = get_task(name)
    rng = np.random.default_rng(3)
    for length in range(1, 501):
        inputs, targets, masks = task.sample(4, length, rng)
        expected_length = length - 1 if name == "modular_arithmetic" and length % 2 == 0 else length
        assert inputs.shape == (4, expected_length) and inputs.dtype == np.int64
        assert 0 <= inputs.min() and inputs.max() < task.input_size
        assert targets.shape == masks.shape == (4, task.output_length(length)) and masks.dtype == bool
        assert 0 <= targets.min() and targets.max() < task.output_size
        assert masks[:, 0].all()
        expected_targets, expected_masks = task.target(inputs)
        np.testing.assert_array_equal(targets, expected_targets)
        np.testing.assert_array_equal(masks, expected_masks)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_sampling_is_deterministic_for_a_generator_state(name):
    task = get_task(name)
    for length in (1, 7, 40):
        first = task.sample(8, length, np.random.default_rng(11))
        second = task.sample(8, length, np.random.default_rng(11))
        for a, b in zip(first, second):
            np.testing.assert_array_equal(a, b)
    a, b = task.sample(64, 40, np.random.default_rng(11))[0], task.sample(64, 40, np.random.default_rng(12))[0]
    assert not np.array_equal(a, b)


def test_the_settings_name_exactly_the_registered_tasks():
    """dape_core.settings.che lists the task names itself (the settings layer imports nothing above it)."""
    from dape_core.che.tasks import TASKS
    from dape_core.settings.che import TASK_NAMES

    assert TASK_NAMES == tuple(TASKS)


def test_the_settings_layer_imports_no_module_above_it():
    """dape_core.settings imports only itself, dape_core.errors, dape_core.encoding_facts and dape_core.measured (a
    leaf reading package data; no data, che, model or config module)."""
    import ast
    from pathlib import Path

    allowed = ("dape_core.settings", "dape_core.errors", "dape_core.encoding_facts", "dape_core.measured")
    for path in (Path(__file__).resolve().parents[1] / "dape_core" / "settings").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dape_core"):
                assert node.module.startswith(allowed) or node.module == "dape_core" and all(
                    a.name in ("settings", "errors", "measured") for a in node.names), (path.name, node.module)
    leaf = Path(__file__).resolve().parents[1] / "dape_core" / "measured.py"  # a leaf: the package's errors only
    assert {node.module for node in ast.walk(ast.parse(leaf.read_text())) if isinstance(node, ast.ImportFrom)
            and node.module and node.module.startswith("dape_core")} == {"dape_core.errors"}
