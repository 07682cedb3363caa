"""The paper's published numbers (Tables 1–7 and 9, and the numbers quoted in §4.1–4.9) as DataFrames.

Every CSV under ``paper_numbers/`` is tidy: one row per table cell or quoted number, in the paper's reading order,
with ``source`` ("Table 4", "§4.2"), ``citation`` (a short locator), ``method`` (the project's labels, parsed by
:mod:`dape_core.methods`: "Kerple", "DAPE1x3-Kerple", …, " (no tril)" for the leakage ablation), ``dataset``
("arxiv" / "books3"), ``train_len``, ``eval_len``, ``metric`` ("ppl", "ppl_local", "delta_p", "accuracy", "ms",
"ratio", …), ``value`` (the number the data uses), ``printed`` (the token as the paper prints it), ``erratum`` (the
paper contradicts itself here: ``paper_numbers/errata.md``) and the other axes (``size``, ``kernel_size``,
``dape_width``, ``batch_size``, ``task``, ``level``); ``text_sections.csv`` adds ``quote``, the words around the number.

Three adapters put the numbers into the layouts of ``lm_results.csv``, ``timing.csv`` and ``che_results.csv``, each
cell with the ``roles`` it speaks to, so the paper comparison and the claim checks apply to the paper's own numbers.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from dape_core.methods import parse_method

PAPER_NUMBERS_DIR = Path(__file__).with_name("paper_numbers")

#: short name -> CSV file stem
FILES: dict[str, str] = {
    "table1": "table1_delta_p",
    "table2": "table2_arxiv_train1024",
    "table3": "table3_books3_2p7b",
    "table4": "table4_kernel_train128",
    "table5": "table5_kernel_train512",
    "table6": "table6_che",
    "table7": "table7_time",
    "table9": "table9_data_adaptive",
    "text": "text_sections",
}

_INT_COLUMNS = ("train_len", "eval_len", "kernel_size", "dape_width", "batch_size")
_TEXT_COLUMNS = ("source", "citation", "method", "row_label", "dataset", "size", "task", "level", "metric",
                 "printed", "note", "quote")


def _read(stem: str) -> pd.DataFrame:
    return _read_cached(stem).copy()


@lru_cache(maxsize=None)
def _read_cached(stem: str) -> pd.DataFrame:
    df = pd.read_csv(PAPER_NUMBERS_DIR / f"{stem}.csv", dtype={c: str for c in _TEXT_COLUMNS},
                     keep_default_na=False, na_values={c: [""] for c in _INT_COLUMNS + ("value",)})
    for col in _INT_COLUMNS:
        df[col] = df[col].astype("Int64")
    df["value"] = df["value"].astype(float)
    df["erratum"] = df["erratum"].astype(str).str.lower().eq("true")
    df.insert(0, "table", stem)
    return df


def load_paper_numbers(name: str | None = None) -> pd.DataFrame:
    """All transcribed numbers, or one file's ("table4" or its stem) or one source's rows ("Table 4", "§4.2")."""
    if name is None:
        return pd.concat([_read(stem) for stem in FILES.values()], ignore_index=True)
    if name in FILES:
        return _read(FILES[name])
    if name in FILES.values():
        return _read(name)
    every = load_paper_numbers()
    rows = every[every["source"] == name]
    if rows.empty:
        raise KeyError(f"no paper numbers named {name!r}; names: {', '.join(FILES)} or a source such as "
                       f"'Table 4' or '§4.2'")
    return rows.reset_index(drop=True)


def method_settings(label: str) -> dict:
    """A paper label's encoding, processor, kernel_size and tril (kernel_size NaN without a processor: none given)."""
    parsed = parse_method(label)
    return parsed | {"kernel_size": parsed["kernel_size"] if parsed["processor"] != "none" else np.nan}


_KERPLE_TRIO = {"Kerple", "DAPE-Kerple", "DAPE1x3-Kerple"}
_EVERY_ENCODING = {"nope", "rope", "alibi", "kerple", "fire"}


def _roles(source: str, method: str) -> list[str]:
    """The roles (the experiments a configuration's families declare) a paper cell speaks to."""
    parsed = parse_method(method)
    kernel_tables = source in ("Table 4", "Table 5")
    roles = []
    if source in ("Table 1", "Table 2", "Table 9", "§4.1") or (kernel_tables and method in _KERPLE_TRIO):
        roles.append("central")
    if (source in ("Table 1", "Table 2") or kernel_tables) and parsed["encoding"] in _EVERY_ENCODING \
            and parsed["kernel_size"] <= 3:  # the experiment's grid: no processor, k = 1, k = 3
        roles.append("every_encoding")
    if kernel_tables:
        roles.append("kernel_sweep")
    if source == "§4.6" or (kernel_tables and method in ("DAPE-Kerple", "DAPE1x3-Kerple")):
        roles.append("width_sweep")
    if source == "§4.2":
        roles.append("equal_tokens")
    if source in ("Table 3", "§4.3") or (kernel_tables and method in _KERPLE_TRIO):
        roles.append("model_size")
    if source == "§4.5":
        roles.append("leakage")
    return roles


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return str(int(x)) if isinstance(x, (int, float, np.integer, np.floating)) else str(x)


def as_lm_results(paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper's perplexities in the ``lm_results.csv`` layout: one pseudo-run per (method, dataset, train_len,
    size, dape_width), seed 0, with the ``roles`` each cell speaks to and the ``source`` tables it comes from; a cell
    printed in two places (e.g. Table 4 and Table 9) appears once."""
    if paper is None:
        return _paper_lm_results().copy()
    return _as_lm_results(paper)


@lru_cache(maxsize=1)
def _paper_lm_results() -> pd.DataFrame:
    return _as_lm_results(load_paper_numbers())


def _as_lm_results(paper: pd.DataFrame) -> pd.DataFrame:
    cells = paper[paper["metric"].isin(["ppl", "ppl_local", "delta_p"]) & paper["eval_len"].notna()].copy()
    cells["roles"] = [_roles(s, m) for s, m in zip(cells["source"], cells["method"])]
    key = ["method", "dataset", "train_len", "eval_len", "size", "dape_width"]
    for col in key:
        cells[col] = cells[col].astype(object).where(cells[col].notna(), None)
    rows = []
    for k, g in cells.groupby(key, dropna=False, sort=False):
        rec = dict(zip(key, k))
        for metric in ("ppl", "ppl_local", "delta_p"):
            vals = g.loc[g["metric"] == metric, "value"]
            rec[metric] = float(vals.iloc[0]) if len(vals) else np.nan
        rec["roles"] = ";".join(sorted({r for rs in g["roles"] for r in rs}))
        rec["source"] = "; ".join(dict.fromkeys(g["source"]))
        rows.append(rec)
    out = pd.DataFrame(rows)
    out = pd.concat([out, pd.DataFrame([method_settings(m) for m in out["method"]])], axis=1)
    out["run"] = ["paper:" + ":".join(_fmt(r[c]) for c in ("method", "dataset", "train_len", "size", "dape_width"))
                  for _, r in out.iterrows()]
    out["seed"] = 0
    out["status"] = "ok"
    for col in ("train_len", "eval_len", "dape_width"):
        out[col] = pd.to_numeric(out[col]).astype("Int64")
    cols = ["run", "roles", "dataset", "encoding", "processor", "kernel_size", "dape_width", "tril", "size",
            "train_len", "seed", "status", "method", "eval_len", "ppl", "ppl_local", "delta_p", "source"]
    return out[cols]


#: model shapes behind Table 7's sizes: 350M from Appendix I (Table 8); 2.7B and 6.7B are GPT-3's shapes
PAPER_SHAPES = {"350M": (24, 1024, 16), "2.7B": (32, 2560, 32), "6.7B": (32, 4096, 32)}


def as_timing(paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 7's forward times in the ``timing.csv`` layout (mode forward, batch 1, D_DAPE 32, role forward_time)."""
    paper = load_paper_numbers("table7") if paper is None else paper
    ms = paper[(paper["source"] == "Table 7") & (paper["metric"] == "ms")]
    rows = []
    for _, r in ms.iterrows():
        n_layer, d_model, n_head = PAPER_SHAPES[r["size"]]
        p = method_settings(r["method"])
        rows.append({"roles": "forward_time", "method": r["method"], "encoding": p["encoding"],
                     "processor": p["processor"], "kernel_size": p["kernel_size"], "dape_width": r["dape_width"],
                     "size": r["size"], "n_layer": n_layer, "d_model": d_model, "n_head": n_head, "seq_len": np.nan,
                     "batch_size": 1, "mode": "forward", "repeats": np.nan, "median_ms": r["value"],
                     "per_layer_ms": r["value"] / n_layer, "peak_mem_mb": np.nan, "device": "paper (8 GPUs)",
                     "threads": np.nan})
    return pd.DataFrame(rows)


def as_che(paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 6 in the ``che_results.csv`` layout: a summary row per task × method (accuracy a fraction, role che)."""
    paper = load_paper_numbers("table6") if paper is None else paper
    acc = paper[(paper["source"] == "Table 6") & (paper["metric"] == "accuracy")]
    rows = []
    for _, r in acc.iterrows():
        p = method_settings(r["method"])
        rows.append({"roles": "che", "task": r["task"], "encoding": p["encoding"], "processor": p["processor"],
                     "kernel_size": p["kernel_size"], "dape_width": r["dape_width"], "method": r["method"],
                     "seed": 0, "lr": np.nan, "steps": 200_000, "length": np.nan, "accuracy": r["value"] / 100,
                     "n_samples": np.nan, "row_type": "summary"})
    return pd.DataFrame(rows)
