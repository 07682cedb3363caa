"""Every transcribed number against the paper's text, in order, plus the paper's internal cross-references."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from dape_core.report.aggregate import ROLES
from dape_core.report.paper import (PAPER_NUMBERS_DIR, as_che, as_lm_results, as_timing, load_paper_numbers,
                                    method_settings)

PAPER_TEXT = Path(__file__).parent / "data" / "dape-v2-paper.txt"  # the paper's text (arXiv 2410.04798)
PAPER_LINES = PAPER_TEXT.read_text(encoding="utf-8").splitlines()

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

# table -> regex of its header line in the text (the table runs from there to the next blank line)
HEADERS = {
    "table1": r"^Method\tRoPE\tALiBi\tKerple\tDAPE-Kerple",
    "table2": r"^Method\t1024\t2048\t4096\t8192$",
    "table3": r"^Method\t512\t1024\t2048\t4096$",
    "table4": r"^Dataset\tMethod\t128\t256",
    "table5": r"^Dataset\tMethod\t512\t1024",
    "table6": r"^Level\tTask\tRoPE",
    "table7": r"^Method\t350M Total\tRatio",
    "table9": r"^Method\t128\t256\t512",
}

SECTIONS = [("§4.1", r"^4\.1 COMPARE WITH BASELINES"), ("§4.2", r"^4\.2 PERFORMANCE WITH SAME"),
            ("§4.3", r"^4\.3 The Effect of Larger"), ("§4.4", r"^4\.4 THE EFFECT OF"),
            ("§4.5", r"with Information Leakage 471 4\.5$"), ("§4.6", r"^4\.6 COMPARE DAPE"),
            ("§4.7", r"^4\.7 THE PERFORMANCE WITH DIFFERENT KERNEL"), ("§4.8", r"^4\.8 The Performance on CHE"),
            ("§4.9", r"^4\.9 THE TIME COST"), ("end", r"^5 CONCLUSION")]


def _index(pattern: str) -> int:
    hits = [i for i, line in enumerate(PAPER_LINES) if re.search(pattern, line)]
    assert len(hits) == 1, f"{pattern!r} matches lines {hits}"
    return hits[0]


def _block(name: str) -> list[str]:
    start = _index(HEADERS[name])
    end = next(i for i in range(start, len(PAPER_LINES)) if not PAPER_LINES[i].strip())
    return PAPER_LINES[start:end]


def _cells(line: str) -> tuple[str, list[str]]:
    """(row label, numeric cells) of one tab-separated table line."""
    cells = [c.strip() for c in line.split("\t")]
    numbers = [c for c in cells if NUMBER.fullmatch(c)]
    labels = [c for c in cells if c and not NUMBER.fullmatch(c)]
    return (labels[-1] if labels else ""), numbers


def _section(name: str) -> str:
    names = [s for s, _ in SECTIONS]
    i = names.index(name)
    lo, hi = _index(SECTIONS[i][1]), _index(SECTIONS[i + 1][1])
    return re.sub(r"\s+", " ", " ".join(PAPER_LINES[lo:hi]))


@pytest.mark.parametrize("name", list(HEADERS))
def test_every_cell_in_order(name):
    data = load_paper_numbers(name)
    block = _block(name)
    printed = [n for line in block[1:] for n in _cells(line)[1]]
    assert printed == list(data["printed"])
    assert len(data) == {"table1": 65, "table2": 32, "table3": 20, "table4": 70, "table5": 50, "table6": 154,
                         "table7": 42, "table9": 28}[name]


@pytest.mark.parametrize("name", ["table2", "table3", "table4", "table5", "table6", "table7", "table9"])
def test_row_labels_follow_the_text(name):
    data = load_paper_numbers(name)
    i = 0
    for line in _block(name)[1:]:
        label, numbers = _cells(line)
        if not numbers:
            continue
        assert set(data["row_label"].iloc[i:i + len(numbers)]) == {label}, line
        i += len(numbers)
    assert i == len(data)


@pytest.mark.parametrize("name", ["table2", "table3", "table4", "table5", "table9"])
def test_evaluation_lengths_follow_the_header(name):
    data = load_paper_numbers(name)
    header = [int(n) for n in _cells(_block(name)[0])[1]]
    for _, row in data.groupby(["dataset", "row_label"], sort=False):
        assert list(row["eval_len"]) == header


def test_table1_lengths_and_metrics_follow_the_row_labels():
    data = load_paper_numbers("table1")
    lengths = [int(n) for line in _block("table1")[1:] for n in re.findall(r"_\{(\d+)\}", line)]
    per_row = data.iloc[::5]
    assert list(per_row["eval_len"]) == lengths
    assert list(per_row["metric"]) == ["ppl"] + ["ppl", "ppl_local", "delta_p"] * 4
    header = _block("table1")[0].split("\t")[1:]
    methods = list(data["method"].iloc[:5])
    assert methods[:4] == header[:4] and methods[4] == "DAPE1x3-Kerple" and "1 \\times 3" in header[4]
    assert (data["method"] == methods * 13).all()


def test_table7_columns_follow_the_header():
    data = load_paper_numbers("table7")
    header = _block("table7")[0].split("\t")[1:]
    expected = [(h.split()[0], "ms") if h.endswith("Total") else (None, "ratio") for h in header]
    expected = [(expected[i - 1][0] if s is None else s, m) for i, (s, m) in enumerate(expected)]
    for start in range(0, len(data), 6):
        assert list(zip(data["size"].iloc[start:start + 6], data["metric"].iloc[start:start + 6])) == expected


def test_quoted_numbers_appear_in_their_sections():
    text = load_paper_numbers("text")
    assert set(text["source"]) == {"§4.1", "§4.2", "§4.3", "§4.5", "§4.6", "§4.7", "§4.8", "§4.9"}
    for _, row in text.iterrows():
        quote = re.sub(r"\s+", " ", row["quote"])
        assert quote in _section(row["source"]), row["citation"]
        assert re.search(rf"(?<![\d.]){re.escape(row['printed'])}(?!\d)", quote), row["citation"]
    assert len(text) == 58


def test_value_equals_printed_unless_an_erratum():
    data = load_paper_numbers()
    differs = data[data["value"] != data["printed"].astype(float)]
    assert list(differs["citation"]) == list(differs[differs["erratum"]]["citation"])
    assert list(differs["printed"]) == ["0.9677"]


def test_errata_file_names_every_flagged_cell():
    errata = (PAPER_NUMBERS_DIR / "errata.md").read_text(encoding="utf-8")
    flagged = load_paper_numbers()[lambda d: d["erratum"]]
    assert len(flagged) == 5
    for _, row in flagged.iterrows():
        assert row["source"] in errata and row["printed"] in errata, row["citation"]
    for token in ("fire_bias", "0.9667", "8096", "Choromanski", "truncated"):
        assert token in errata


def test_quoted_numbers_match_the_tables():
    data = load_paper_numbers()
    tables, text = data[data["source"].str.startswith("Table")], data[data["source"].str.startswith("§")]
    key = ["method", "dataset", "train_len", "eval_len", "size", "dape_width", "task", "metric"]
    merged = text.merge(tables, on=key, suffixes=("", "_table"))
    assert len(merged) == 29 and merged["citation"].nunique() == 25
    assert load_paper_numbers()["citation"].is_unique
    assert (merged["value"] == merged["value_table"]).all(), merged[merged["value"] != merged["value_table"]]


def test_cells_printed_twice_agree():
    data = load_paper_numbers()
    ppl = data[data["metric"] == "ppl"]
    key = ["method", "dataset", "train_len", "eval_len", "size", "dape_width"]
    counts = ppl.groupby(key, dropna=False)["value"].agg(["nunique", "size"])
    assert (counts["nunique"] == 1).all()
    assert (counts["size"] > 1).sum() == 37  # Table 1 / 5, Table 4 / 9, and the text's repeats


def test_table1_delta_p_is_local_minus_full():
    t1 = load_paper_numbers("table1").pivot_table(index=["method", "eval_len"], columns="metric", values="value")
    t1 = t1.dropna()
    assert ((t1["ppl_local"] - t1["ppl"] - t1["delta_p"]).abs() < 0.006).all()
    assert len(t1) == 20


def test_table7_ratios_are_truncated_quotients():
    t7 = load_paper_numbers("table7").pivot_table(index=["size", "method"], columns="metric", values="value")
    for size, g in t7.groupby(level="size"):
        base = g.loc[(size, "DAPE1x3-Kerple"), "ms"]
        for (_, method), row in g.iterrows():
            assert math.floor(row["ms"] / base * 1e4 + 1e-9) / 1e4 == row["ratio"], (size, method)


def test_che_counts_quoted_in_section_4_8():
    t6 = load_paper_numbers("table6")
    variant = t6[~t6["task"].isin(["parity_check", "cycle_navigation", "bucket_sort"])]
    acc = variant.pivot_table(index="task", columns="method", values="value")
    assert len(acc) == 11
    quoted = load_paper_numbers("§4.8")
    counts = quoted[quoted["metric"] != "accuracy"].set_index("method")["value"]
    assert (acc["DAPE1x3-Kerple"] > acc["Kerple"]).sum() == counts["DAPE1x3-Kerple"] == 8
    assert (acc["DAPE1x3-FIRE"] > acc["FIRE"]).sum() == counts["DAPE1x3-FIRE"] == 6
    assert counts[""] == len(acc)


def test_best_kernel_sizes_quoted_in_section_4_7():
    quoted = load_paper_numbers("§4.7")
    kernels = pd.concat([load_paper_numbers("table4"), load_paper_numbers("table5")])
    for _, row in quoted.iterrows():
        cells = kernels[(kernels["dataset"] == row["dataset"]) & (kernels["train_len"] == row["train_len"])
                        & (kernels["eval_len"] == row["eval_len"]) & kernels["kernel_size"].notna()]
        assert cells.loc[cells["value"].idxmin(), "kernel_size"] == row["value"]


def test_loader_names_and_adapters():
    assert len(load_paper_numbers()) == 519
    assert list(load_paper_numbers("Table 4")["printed"]) == list(load_paper_numbers("table4_kernel_train128")["printed"])
    with pytest.raises(KeyError):
        load_paper_numbers("Table 8")
    lm = as_lm_results()
    assert not lm.duplicated(["method", "dataset", "train_len", "eval_len", "size", "dape_width"]).any()
    assert lm.loc[lm["source"] == "Table 1; Table 5", "ppl"].notna().all()
    assert len(as_timing()) == 21 and len(as_che()) == 154
    assert method_settings("DAPE1x3-Kerple (no tril)") == {"encoding": "kerple", "processor": "dape_v2",
                                                            "kernel_size": 3, "tril": False}
    assert method_settings("DAPE-XL")["kernel_size"] == 1 and math.isnan(method_settings("CoPE")["kernel_size"])
    with pytest.raises(ValueError):
        method_settings("DAPE1x3-Sandwich")


def test_paper_cells_carry_roles():
    lm = as_lm_results()
    roles = lm["roles"].str.split(";").explode()
    assert set(roles) <= set(ROLES) and "families" not in lm
    assert set(roles) == {"central", "every_encoding", "kernel_sweep", "width_sweep", "equal_tokens", "model_size",
                          "leakage"}
    table3 = lm[lm["source"] == "Table 3"]
    assert len(table3) and (table3["roles"] == "model_size").all()
    kernels = lm[(lm["source"] == "Table 4") & (lm["method"] == "DAPE1x5-Kerple")]
    assert len(kernels) and (kernels["roles"] == "kernel_sweep").all()  # k = 5 is outside every_encoding's grid
    assert (as_timing()["roles"] == "forward_time").all() and (as_che()["roles"] == "che").all()
