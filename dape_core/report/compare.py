"""Paper vs run, side by side: the ordering of the methods and the relative improvements.

Evaluation lengths are compared as multiples of the training length, so a run trained on short sequences lines up
with the paper's 128 / 512 / 1024. The run's corpora stand in for the paper's: "code" for arXiv, "prose" for Books3.
Run values are means over seeds; a diverged run counts as perplexity +∞ (the worst rank). Rows are found by role,
never by a family's name. Each run setting (dataset × training length × size of one role) is set against the paper
setting of the same role and dataset sharing the most methods with it, then the nearest training length, then the
paper's 125M model; ``size_map`` pins a run size to a paper size.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dape_core.methods import method_label, parse_method
from dape_core.report.aggregate import ROLES, family_roles, in_role
from dape_core.report.paper import as_lm_results

DATASET_STAND_IN = {"code": "arxiv", "prose": "books3"}
DATASET_NAMES = {"arxiv": "arXiv", "books3": "Books3"}
#: the roles compared with the paper's perplexities, in the order of the report
COMPARED_ROLES = ("central", "every_encoding", "kernel_sweep", "width_sweep", "equal_tokens", "model_size",
                  "leakage")
SETTING = ["dataset", "train_len", "size"]
#: a compared cell: a role's run setting, the paper setting set against it, and the multiple of the training length
CELL = ["role", "dataset", "paper_dataset", "train_len", "paper_train_len", "size", "paper_size", "multiple"]


def variant_label(df: pd.DataFrame, role: str) -> pd.Series:
    """The method label, with the hidden width appended in the width sweep ("DAPE1x3-Kerple (D=10)")."""
    label = df["method"].astype(str)
    if role != "width_sweep":
        return label
    width = pd.to_numeric(df["dape_width"], errors="coerce")
    dape = label.str.startswith("DAPE") & width.notna()
    return label.where(~dape, label + " (D=" + width.fillna(0).astype(int).astype(str) + ")")


def role_means(lm: pd.DataFrame, role: str) -> pd.DataFrame:
    """The rows of ``role``: mean perplexity over seeds per setting × method × multiple of the training length."""
    df = in_role(lm, role).copy()
    if df.empty:
        return pd.DataFrame(columns=SETTING + ["method", "multiple", "ppl", "n_seeds", "source"])
    df["method"] = variant_label(df, role)
    df["size"] = df["size"].fillna("-").astype(str)
    df = df[df["train_len"].notna() & df["eval_len"].notna()]
    df["train_len"] = df["train_len"].astype(int)
    df["multiple"] = (df["eval_len"].astype(float) / df["train_len"]).round(4)
    ok = df["status"].eq("ok") if "status" in df else True
    df["ppl"] = df["ppl"].astype(float).where(ok, np.inf)
    df = df[df["ppl"].notna()]
    if "source" not in df:
        df["source"] = ""
    grouped = df.groupby(SETTING + ["method", "multiple"], sort=True)
    out = grouped.agg(ppl=("ppl", "mean"), n_seeds=("seed", "nunique"),
                      source=("source", lambda s: "; ".join(dict.fromkeys(str(x) for x in s))))
    return out.reset_index()


def _paper_setting(run: pd.DataFrame, paper: pd.DataFrame, dataset: str, train_len: int,
                   paper_size: str | None) -> tuple | None:
    """The paper (train_len, size) for one run setting: most shared methods, then nearest length, then 125M."""
    cands = paper[paper["dataset"] == dataset]
    if paper_size is not None:
        cands = cands[cands["size"] == paper_size]
    scores = {(t, s): (shared, -abs(math.log2(t / train_len)), s == "125M")
              for (t, s), g in cands.groupby(["train_len", "size"])
              if (shared := len(set(g["method"]) & set(run["method"])))}
    return max(scores, key=scores.get) if scores else None


def _pairs(run: pd.DataFrame, paper: pd.DataFrame | None, size_map: dict | None):
    """Yield (run setting key, run rows, paper rows or None, paper key or None)."""
    size_map = size_map or {}
    for (dataset, train_len, size), g in run.groupby(SETTING, sort=True):
        paper_dataset = DATASET_STAND_IN.get(dataset, dataset)
        paper_size = size_map.get(size, size if paper is not None and size in set(paper["size"]) else None)
        chosen = None if paper is None else _paper_setting(g, paper, paper_dataset, train_len, paper_size)
        if chosen is None:
            yield (dataset, train_len, size), g, None, (paper_dataset, np.nan, None)
        else:
            p = paper[(paper["dataset"] == paper_dataset) & (paper["train_len"] == chosen[0])
                      & (paper["size"] == chosen[1])]
            yield (dataset, train_len, size), g, p, (paper_dataset, chosen[0], chosen[1])


def ordering(lm: pd.DataFrame, paper: pd.DataFrame | None = None,
             size_map: dict[str, str] | None = None) -> pd.DataFrame:
    """Per role, setting and multiple: each method's mean run perplexity and rank (``run_rank``, over all the run's
    methods) next to the paper's (``paper_rank``, over the methods both have); rank 1 = lowest perplexity."""
    paper = as_lm_results() if paper is None else paper
    rows = []
    for role in COMPARED_ROLES:
        run, ref = role_means(lm, role), role_means(paper, role)
        for (dataset, train_len, size), g, p, (pd_name, pt, ps) in _pairs(run, ref if len(ref) else None,
                                                                          size_map):
            for multiple, gm in g.groupby("multiple"):
                gm = gm.assign(run_rank=gm["ppl"].rank(method="average"))
                pm = p[p["multiple"] == multiple] if p is not None else pd.DataFrame(columns=["method"])
                shared = pm[pm["method"].isin(gm["method"])]
                paper_ppl = shared.set_index("method")["ppl"] if len(shared) else pd.Series(dtype=float)
                paper_rank = paper_ppl.rank(method="average")
                paper_src = shared.set_index("method")["source"] if len(shared) else pd.Series(dtype=str)
                for _, r in gm.iterrows():
                    rows.append({"role": role, "dataset": dataset, "paper_dataset": pd_name,
                                 "train_len": train_len, "paper_train_len": pt, "size": size, "paper_size": ps,
                                 "multiple": multiple, "method": r["method"], "run_ppl": r["ppl"],
                                 "n_seeds": r["n_seeds"], "run_rank": r["run_rank"],
                                 "paper_ppl": paper_ppl.get(r["method"], np.nan),
                                 "paper_rank": paper_rank.get(r["method"], np.nan),
                                 "paper_source": paper_src.get(r["method"], "")})
    return pd.DataFrame(rows, columns=CELL + ["method", "run_ppl", "n_seeds", "run_rank", "paper_ppl", "paper_rank",
                                              "paper_source"])


def spearman(a: pd.Series, b: pd.Series) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN below two points or for a constant side."""
    both = pd.concat([a, b], axis=1).dropna()
    if len(both) < 2:
        return float("nan")
    ra, rb = both.iloc[:, 0].rank(method="average"), both.iloc[:, 1].rank(method="average")
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return round(float(np.corrcoef(ra, rb)[0, 1]), 12)


def _order(values: pd.Series) -> str:
    values = values.dropna().sort_values(kind="stable")
    return " < ".join(f"{m} {v:.2f}" for m, v in values.items())


def rank_correlation(order: pd.DataFrame) -> pd.DataFrame:
    """Per role, setting and multiple: Spearman's ρ between run and paper over the methods both have."""
    rows = []
    for k, g in order.groupby(CELL, dropna=False, sort=False):
        g = g.set_index("method")
        shared = g[g["paper_ppl"].notna()]
        rows.append({**dict(zip(CELL, k)), "n_methods": len(g), "n_shared": len(shared),
                     "spearman": spearman(shared["run_ppl"], shared["paper_ppl"]),
                     "run_order": _order(g["run_ppl"]), "paper_order": _order(shared["paper_ppl"])})
    return pd.DataFrame(rows, columns=CELL + ["n_methods", "n_shared", "spearman", "run_order", "paper_order"])


def setting_correlations(lm: pd.DataFrame, paper: pd.DataFrame | None = None,
                         size_map: dict[str, str] | None = None) -> pd.DataFrame:
    """Per role and run setting: Spearman's ρ against the paper at each multiple (from :func:`rank_correlation`)
    and their mean over the multiples where ρ is defined (at least two shared methods, neither side constant)."""
    corr = rank_correlation(ordering(lm, paper, size_map))
    keys = ["role", "dataset", "train_len", "size", "paper_dataset", "paper_train_len", "paper_size"]
    rows = []
    for k, g in corr.groupby(keys, dropna=False, sort=False):
        defined = g[g["spearman"].notna()]
        by_multiple = ", ".join(f"×{m:g} {r:.2f} (n={n})" for m, r, n in
                                zip(defined["multiple"], defined["spearman"], defined["n_shared"]))
        rows.append({**dict(zip(keys, k)), "n_multiples": len(defined),
                     "mean_spearman": float(defined["spearman"].mean()) if len(defined) else float("nan"),
                     "spearman_by_multiple": by_multiple})
    return pd.DataFrame(rows, columns=keys + ["n_multiples", "mean_spearman", "spearman_by_multiple"])


def _baselines_of(method: str, present: set[str], role: str) -> list[str]:
    """The methods a DAPE variant is measured against: its encoding alone, DAPE (k = 1) for k > 1, the widest
    DAPE (k = 1) in the width sweep (§4.6), and the tril model for a no-tril one (§4.5)."""
    label, _, width = method.partition(" (D=")
    suffix = f" (D={width}" if width else ""
    m = parse_method(label)
    encoding, processor = m["encoding"], m["processor"]
    if not m["tril"]:
        out = [method_label(encoding, processor, m["kernel_size"]) + suffix]
    elif processor == "none":
        return []
    else:
        out = [method_label(encoding)]
        if processor == "dape_v2":
            dape = method_label(encoding, "dape_v1")
            out.append(dape + suffix)
            if role == "width_sweep":
                wide = [p for p in present if p.startswith(f"{dape} (D=")]
                if wide:
                    out.append(max(wide, key=lambda p: int(p.rsplit("=", 1)[1].rstrip(")"))))
    return [b for b in dict.fromkeys(out) if b in present and b != method]


def _rel(base: float, value: float) -> float:
    if not np.isfinite(base) or not np.isfinite(value) or base == 0:
        return float("nan")
    return (base - value) / base


def relative_improvements(lm: pd.DataFrame, paper: pd.DataFrame | None = None,
                          size_map: dict[str, str] | None = None) -> pd.DataFrame:
    """(base − method) / base for each DAPE variant against its baselines, run next to paper."""
    order = ordering(lm, paper, size_map)
    paper = as_lm_results() if paper is None else paper
    rows = []
    for k, g in order.groupby(CELL, dropna=False, sort=False):
        g = g.set_index("method")
        present = set(g.index)
        role = k[0]
        ref = role_means(paper, role)
        ref = ref[(ref["dataset"] == k[2]) & (ref["train_len"] == k[4]) & (ref["size"] == k[6])
                  & (ref["multiple"] == k[7])].set_index("method")["ppl"]
        for method in g.index:
            for base in _baselines_of(method, present, role):
                pm, pb = ref.get(method, np.nan), ref.get(base, np.nan)
                rows.append({**dict(zip(CELL, k)), "method": method, "baseline": base,
                             "run_method_ppl": g.at[method, "run_ppl"], "run_baseline_ppl": g.at[base, "run_ppl"],
                             "run_rel": _rel(g.at[base, "run_ppl"], g.at[method, "run_ppl"]),
                             "paper_method_ppl": pm, "paper_baseline_ppl": pb, "paper_rel": _rel(pb, pm)})
    return pd.DataFrame(rows, columns=CELL + ["method", "baseline", "run_method_ppl", "run_baseline_ppl",
                                              "run_rel", "paper_method_ppl", "paper_baseline_ppl", "paper_rel"])


def _cell(text) -> str:
    return str(text).replace("|", "\\|")


def _pct(x: float) -> str:
    return "–" if pd.isna(x) else f"{100 * x:+.1f}%"


def role_heading(role: str, plan: dict | None = None) -> str:
    """A role's heading, "central — the central comparison (families: baselines)" (families named given a plan)."""
    heading = f"{role} — {ROLES.get(role, role)}"
    if plan is None:
        return heading
    families = [name for name, r in family_roles(plan).items() if r == role]
    return heading + (f" (families: {', '.join(families)})" if families else " (no family has this role)")


def compare_markdown(lm: pd.DataFrame, paper: pd.DataFrame | None = None,
                     size_map: dict[str, str] | None = None, plan: dict | None = None) -> str:
    """Markdown: per role and setting, the run's and the paper's orderings with ρ, then the relative
    improvements. With ``plan`` (results/plan.json) each role's heading names the families declaring it."""
    order = ordering(lm, paper, size_map)
    corr = rank_correlation(order)
    rel = relative_improvements(lm, paper, size_map)
    out = ["# Paper vs run", "",
           'The run\'s corpora stand in for the paper\'s: "code" for arXiv and "prose" for Books3. Lengths are '
           "multiples of the training length (×1 = the training length). Run perplexities are means over seeds "
           "(a diverged run counts as +∞). ρ is Spearman's rank correlation between the run's and the paper's "
           "ordering of the methods both have; n counts them. Rows are grouped by the role their families "
           "declare. A dash means the paper prints no number for that setting (several experiments appear in the "
           "paper only as figures).", ""]
    for role in COMPARED_ROLES:
        of_role = corr[corr["role"] == role]
        out += [f"## {role_heading(role, plan)}", ""]
        if of_role.empty:
            out += ["No run rows for this role.", ""]
            continue
        for (dataset, train_len, size, pd_name, pt, ps), g in of_role.groupby(
                ["dataset", "train_len", "size", "paper_dataset", "paper_train_len", "paper_size"],
                dropna=False, sort=False):
            paper_name = DATASET_NAMES.get(pd_name, pd_name)
            ref = (f"paper: {paper_name}, train {int(pt)}, {ps}" if pd.notna(pt)
                   else "paper: no printed numbers for these methods")
            out += [f"### {dataset} ({paper_name}), train {train_len}, size {size} — {ref}", "",
                    "| × | run ordering (ppl) | paper ordering (ppl) | ρ | n |", "|---|---|---|---|---|"]
            for _, r in g.iterrows():
                rho = "–" if pd.isna(r["spearman"]) else f"{r['spearman']:.2f}"
                out.append(f"| {r['multiple']:g} | {_cell(r['run_order'])} | {_cell(r['paper_order'] or '–')} "
                           f"| {rho} | {r['n_shared']} |")
            out.append("")
    out += ["## Relative improvements", "", "(base − method) / base; positive means the method is better.", ""]
    if rel.empty:
        out += ["No DAPE variant with a baseline in the run.", ""]
    else:
        out += ["| role | data | train | × | method vs baseline | run | paper |", "|---|---|---|---|---|---|---|"]
        for _, r in rel.iterrows():
            out.append(f"| {r['role']} | {r['dataset']} | {r['train_len']} | {r['multiple']:g} | "
                       f"{_cell(r['method'])} vs {_cell(r['baseline'])} | {_pct(r['run_rel'])} | "
                       f"{_pct(r['paper_rel'])} |")
        out.append("")
    return "\n".join(out)
