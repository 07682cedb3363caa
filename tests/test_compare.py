"""Paper-vs-run orderings, Spearman's ρ and relative improvements; rows are found by role."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dape_core.report.compare import (compare_markdown, ordering, rank_correlation, relative_improvements,
                                      setting_correlations, spearman)
from dape_core.methods import parse_method
from dape_core.report.paper import as_lm_results

# Table 2 (arXiv, training length 1024) at ×1 and ×2
TABLE2 = {"NoPE": (4.16, 42.27), "RoPE": (4.07, 86.20), "Kerple": (4.06, 4.09), "DAPE-Kerple": (3.98, 3.91),
          "DAPE1x3-Kerple": (3.93, 3.86)}


def run_frame(ppl: dict, role="central", dataset="code", train_len=64, size="tiny", seeds=(0, 1),
              status=None, family="fam"):
    rows = []
    for method, values in ppl.items():
        p = parse_method(method)
        for seed in seeds:
            for multiple, v in zip((1, 2), values):
                rows.append({"run": method, "families": family, "roles": role, "dataset": dataset,
                             "method": method,
                             "encoding": p["encoding"], "processor": p["processor"],
                             "kernel_size": p["kernel_size"], "dape_width": 32 if method.startswith("DAPE") else None,
                             "tril": p["tril"], "size": size, "train_len": train_len, "seed": seed,
                             "status": (status or {}).get(method, "ok"), "eval_len": multiple * train_len,
                             "ppl": v + 0.01 * seed})
    return pd.DataFrame(rows)


def test_spearman():
    a = pd.Series([1.0, 2.0, 3.0, 4.0], index=list("abcd"))
    assert spearman(a, a * 10) == pytest.approx(1.0)
    assert spearman(a, -a) == pytest.approx(-1.0)
    assert spearman(a, pd.Series([1.0, 3.0, 2.0, 4.0], index=list("abcd"))) == pytest.approx(0.8)
    assert spearman(a, pd.Series([1.0, 1.0, 2.0, 3.0], index=list("abcd"))) == pytest.approx(0.9486833)  # ties
    assert math.isnan(spearman(a.iloc[:1], a.iloc[:1]))
    assert math.isnan(spearman(a, pd.Series(5.0, index=a.index)))


def test_run_set_against_the_paper_by_multiple():
    """A run at length 64 on "code" is set against Table 2 (arXiv, 1024): the setting sharing most methods."""
    run = run_frame({m: (v[0] + 1, v[1] + 1) for m, v in TABLE2.items()})
    order = ordering(run)
    base = order[order["role"] == "central"]
    assert set(base["paper_dataset"]) == {"arxiv"} and set(base["paper_train_len"]) == {1024}
    at1 = base[base["multiple"] == 1].set_index("method")
    assert at1.loc["DAPE1x3-Kerple", "paper_ppl"] == 3.93 and at1.loc["NoPE", "paper_ppl"] == 4.16
    assert at1.loc["DAPE1x3-Kerple", "run_ppl"] == pytest.approx(4.935)  # mean over the two seeds
    assert at1["run_rank"].tolist() == at1["paper_rank"].tolist()
    corr = rank_correlation(order)
    assert (corr.loc[corr["role"] == "central", "spearman"] == 1.0).all()


def test_a_reversed_run_has_negative_rho_and_a_diverged_run_ranks_last():
    reversed_ppl = {m: (10 - v[0], 100 - v[1]) for m, v in TABLE2.items()}
    corr = rank_correlation(ordering(run_frame(reversed_ppl)))
    assert (corr.loc[corr["role"] == "central", "spearman"] == -1.0).all()
    diverged = run_frame({m: v for m, v in TABLE2.items()}, status={"DAPE1x3-Kerple": "diverged"})
    order = ordering(diverged)
    at1 = order[(order["role"] == "central") & (order["multiple"] == 1)].set_index("method")
    assert np.isinf(at1.loc["DAPE1x3-Kerple", "run_ppl"]) and at1.loc["DAPE1x3-Kerple", "run_rank"] == 5
    assert rank_correlation(order).query("role == 'central' and multiple == 1")["spearman"].iloc[0] < 1


def test_setting_correlations_give_rho_per_multiple_and_its_mean():
    """One row per role and run setting (the claims report's summary), from rank_correlation's ρ per multiple."""
    swapped = {**TABLE2, "NoPE": (4.0, 42.27)}  # NoPE best at ×1: ρ < 1 there, 1 at ×2
    rho = setting_correlations(run_frame(swapped))
    central = rho[rho["role"] == "central"].iloc[0]
    corr = rank_correlation(ordering(run_frame(swapped))).query("role == 'central'").set_index("multiple")
    assert central["n_multiples"] == 2 and corr.loc[2.0, "spearman"] == 1.0 and corr.loc[1.0, "spearman"] < 1
    assert central["mean_spearman"] == pytest.approx(corr["spearman"].mean())
    assert central["spearman_by_multiple"] == (f"×1 {corr.loc[1.0, 'spearman']:.2f} (n=5), ×2 1.00 (n=5)")
    assert (central["paper_dataset"], central["paper_train_len"]) == ("arxiv", 1024)
    assert set(rho["role"]) == set(rank_correlation(ordering(run_frame(swapped)))["role"])


def test_relative_improvements_run_and_paper():
    run = run_frame({"Kerple": (10.0, 20.0), "DAPE-Kerple": (9.0, 12.0), "DAPE1x3-Kerple": (8.0, 10.0)},
                    seeds=(0,))
    rel = relative_improvements(run)
    rel = rel[rel["role"] == "central"].set_index(["multiple", "method", "baseline"])
    row = rel.loc[(1.0, "DAPE1x3-Kerple", "Kerple")]
    assert row["run_rel"] == pytest.approx(0.2)
    # Tables 2, 4 and 5 all have the three methods on arXiv: the nearest training length (Table 4's 128) wins
    assert row["paper_train_len"] == 128 and row["paper_rel"] == pytest.approx((8.30 - 8.15) / 8.30)
    assert rel.loc[(2.0, "DAPE1x3-Kerple", "DAPE-Kerple"), "run_rel"] == pytest.approx(1 / 6)
    assert ("DAPE-Kerple", "Kerple") in {(m, b) for _, m, b in rel.index}
    assert not any(b == m for _, m, b in rel.index)


@pytest.mark.parametrize("train_len, paper_train_len", [(100, 128), (300, 512)])
def test_nearest_training_length_and_prose_stand_in(train_len, paper_train_len):
    """Books3 has Kerple, DAPE and DAPE1x3 at 128 (Tables 4, 9) and 512 (Tables 1, 5): the nearer length wins."""
    run = run_frame({"Kerple": (10.0, 20.0), "DAPE-Kerple": (9.0, 12.0), "DAPE1x3-Kerple": (8.0, 10.0)},
                    dataset="prose", train_len=train_len)
    base = ordering(run).query("role == 'central'")
    assert set(base["paper_dataset"]) == {"books3"}
    assert set(base["paper_train_len"]) == {paper_train_len}


def test_more_shared_methods_beat_a_nearer_length():
    run = run_frame({"Kerple": (10.0, 20.0), "RoPE": (10.0, 90.0), "ALiBi": (10.0, 11.0)}, dataset="prose",
                    train_len=128)
    assert set(ordering(run).query("role == 'central'")["paper_train_len"]) == {512}  # Table 1 has all three


def test_width_sweep_variants_and_roles_without_paper_numbers():
    rows = []
    for width, kernel, v in [(10, "DAPE1x3-Kerple", 8.0), (64, "DAPE-Kerple", 8.5), (32, "DAPE-Kerple", 8.4)]:
        f = run_frame({kernel: (v, v)}, role="width_sweep", family="x_widths")
        rows.append(f.assign(dape_width=width))
    order = ordering(pd.concat(rows, ignore_index=True))
    labels = set(order["method"])
    assert labels == {"DAPE1x3-Kerple (D=10)", "DAPE-Kerple (D=64)", "DAPE-Kerple (D=32)"}
    at1 = order[order["multiple"] == 1].set_index("method")
    assert at1.loc["DAPE1x3-Kerple (D=10)", "paper_ppl"] == 8.16 and at1.loc["DAPE-Kerple (D=64)", "paper_ppl"] == 8.21
    rel = relative_improvements(pd.concat(rows, ignore_index=True)).query("multiple == 1")
    assert ("DAPE1x3-Kerple (D=10)", "DAPE-Kerple (D=64)") in set(zip(rel["method"], rel["baseline"]))
    leak = run_frame({"DAPE1x3-Kerple": (9.0, 9.5), "DAPE1x3-Kerple (no tril)": (1.1, 1.1)}, role="leakage")
    assert ordering(leak)["paper_ppl"].isna().all()


def test_the_paper_against_itself():
    corr = rank_correlation(ordering(as_lm_results()))
    assert len(corr) > 50
    assert (corr.loc[corr["n_shared"] >= 2, "spearman"].dropna() == 1.0).all()


def test_markdown_states_the_stand_ins():
    md = compare_markdown(run_frame({m: v for m, v in TABLE2.items()}, seeds=(0,)))
    assert '"code" for arXiv and "prose" for Books3' in md
    assert "### code (arXiv), train 64, size tiny — paper: arXiv, train 1024, 125M" in md
    order = "DAPE1x3-Kerple 3.93 < DAPE-Kerple 3.98 < Kerple 4.06 < RoPE 4.07 < NoPE 4.16"
    assert f"| 1 | {order} | {order} | 1.00 | 5 |" in md
    assert "## Relative improvements" in md and "DAPE1x3-Kerple vs Kerple" in md


def test_rows_are_found_by_role_whatever_the_family_is_called():
    ppl = {m: (v[0] + 1, v[1] + 1) for m, v in TABLE2.items()}
    order = ordering(run_frame(ppl, family="baselines"))
    renamed = ordering(run_frame(ppl, family="x_any_name"))
    pd.testing.assert_frame_equal(order, renamed)
    assert set(order["role"]) == {"central"}
    assert ordering(run_frame(ppl, role="", family="baselines")).empty
    widths = run_frame({"DAPE1x3-Kerple": (8.0, 8.0)}, role="central;width_sweep").assign(dape_width=10)
    assert set(ordering(widths).groupby("role")["method"].first()) == {"DAPE1x3-Kerple", "DAPE1x3-Kerple (D=10)"}


def test_markdown_headings_say_the_role_and_its_families():
    run = run_frame({m: v for m, v in TABLE2.items()}, seeds=(0,), family="x_central")
    plan = {"families": {"x_central": {"role": "central"}, "x_more": {"role": "central"},
                         "x_widths": {"role": "width_sweep"}, "x_plain": {"role": None}}}
    md = compare_markdown(run, plan=plan)
    assert "## central — the central comparison (families: x_central, x_more)" in md
    assert "## width_sweep — the hidden-width sweep (families: x_widths)" in md
    assert "## every_encoding — DAPE1x3 on every encoding (no family has this role)" in md
    assert "## central — the central comparison\n" in compare_markdown(run)
    assert "| central | code | 64 | 1 | DAPE1x3-Kerple vs Kerple |" in md
