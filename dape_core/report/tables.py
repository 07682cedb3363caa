"""Paper-style tables in Markdown and LaTeX: methods as columns, evaluation lengths as rows (Tables 1–5, 9).

A cell is the mean ± SD of the perplexity over seeds (one number with one seed); the lowest of each row is bold. A
diverged run is never dropped: a cell whose seeds all diverged reads "diverged", one where some did "4.21 (1/2
diverged)". Panels split by ``panel_by`` (dataset, training length and size where they vary, unless the family names
them); a column label adds the settings that tell runs of one method apart ("DAPE1x3-Kerple D=10"). As in the paper,
CHE (Table 6) has tasks as rows, timing (Table 7) methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dape_core.report.aggregate import in_family

PANEL_DEFAULT = ("dataset", "train_len", "size")
# settings that may tell two runs of one method apart in a panel, with their short label
LABEL_SETTINGS = {"tag": "{}", "train_len": "T={}", "size": "{}", "dape_width": "D={}", "padding": "pad={}",
                  "batch_size": "B={}", "steps": "steps={}", "lr": "lr={}", "dropout": "dropout={}", "dataset": "{}"}
PANEL_NAMES = {"dataset": "data", "train_len": "train", "size": "size"}
DIVERGED = "diverged"


@dataclass
class Table:
    """One panel: a title, row labels, column labels, cell texts and which cells are the best of their row."""

    title: str
    index_name: str
    rows: list
    columns: list[str]
    cells: list[list[str]]
    best: list[list[bool]] = field(default_factory=list)
    note: str = ""


def panel_keys(df: pd.DataFrame, panel_by: list[str] | None) -> list[str]:
    """The family's panel settings: given, or those of dataset / train_len / size that vary in its rows."""
    if panel_by is not None:
        return list(panel_by)
    return [key for key in PANEL_DEFAULT if key in df and df[key].nunique(dropna=False) > 1]


def variant_labels(df: pd.DataFrame, panel: list[str]) -> pd.Series:
    """The method label plus each setting that still tells runs of that method apart within a panel
    ("DAPE-Kerple D=64"); methods with one run per panel keep their plain label."""
    label = df["method"].astype(str)
    keys = [*panel, "method"]
    for setting, pattern in LABEL_SETTINGS.items():
        if setting in panel or setting not in df or df.empty:
            continue
        varies = df.groupby(keys, dropna=False)[setting].transform(lambda v: v.nunique(dropna=False)) > 1
        if varies.any():
            suffix = df[setting].map(lambda v: f" {pattern.format(_plain(v))}" if _plain(v) else "")
            label = label.where(~varies, label + suffix)
            keys.append(setting)
    return label


def _plain(value) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def with_labels(df: pd.DataFrame, panel_by: list[str] | None, runs: list[str] | None = None
                ) -> tuple[pd.DataFrame, list[str]]:
    """Rows with a ``label`` column, in the order of ``runs`` (the family's grid order), and the panel keys."""
    keys = panel_keys(df, panel_by)
    df = df.copy()
    if runs is not None and "run" in df:
        rank = {name: i for i, name in enumerate(runs)}
        df = df.iloc[np.argsort(df["run"].map(rank).fillna(len(rank)).to_numpy(), kind="stable")]
    df["label"] = variant_labels(df, keys) if len(df) else pd.Series(dtype=str)
    return df, keys


def panels(df: pd.DataFrame, keys: list[str]):
    """(title, rows) for each panel, in sorted order."""
    if not keys:
        yield "", df
        return
    for values, group in df.groupby(keys, sort=True, dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        yield ", ".join(f"{PANEL_NAMES.get(k, k)} {_plain(v)}" for k, v in zip(keys, values)), group


def summarise(values: pd.Series, statuses: pd.Series, digits: int = 2) -> tuple[str, float]:
    """Cell text and its sortable value (the mean over the seeds that did not diverge; +∞ if all diverged)."""
    ok = statuses.eq("ok") & values.notna()
    n, n_bad = len(values), int((~statuses.eq("ok")).sum())
    if not ok.any():
        return (DIVERGED if n_bad else "n/a"), np.inf
    good = values[ok].astype(float)
    text = f"{good.mean():.{digits}f}"
    if len(good) > 1:
        text += f" ± {good.std(ddof=1):.{digits}f}"
    if n_bad:
        text += f" ({n_bad}/{n} {DIVERGED})"
    return text, float(good.mean())


def method_order(labels: pd.Series) -> list[str]:
    """Columns in order of first appearance (the order of the family's axes)."""
    return list(dict.fromkeys(labels))


def ppl_tables(lm: pd.DataFrame, family: str, panel_by: list[str] | None = None, runs: list[str] | None = None,
               value: str = "ppl") -> list[Table]:
    """Evaluation lengths × methods, one table per panel; columns in the order of ``runs``."""
    df, keys = with_labels(in_family(lm, family), panel_by, runs)
    out = []
    for title, group in panels(df, keys):
        columns = method_order(group["label"])
        lengths = sorted(group["eval_len"].unique())
        cells, best = [], []
        for n in lengths:
            row = [summarise(g[value], g["status"]) if len(g := group[(group["eval_len"] == n) & (group["label"] == c)])
                   else ("–", np.inf) for c in columns]
            low = min(v for _, v in row)
            cells.append([t for t, _ in row])
            best.append([np.isfinite(v) and v == low for _, v in row])
        seeds = sorted(group["seed"].unique())
        note = f"seeds {', '.join(map(str, seeds))}; perplexity of the last {_windows(group)} tokens"
        out.append(Table(title, "eval_len", [int(n) for n in lengths], columns, cells, best, note))
    return out


def _windows(group: pd.DataFrame) -> str:
    windows = sorted(int(w) for w in group["window"].dropna().unique()) if "window" in group else []
    return "/".join(map(str, windows)) or "?"


def delta_p_tables(lm: pd.DataFrame, family: str, panel_by: list[str] | None = None,
                   runs: list[str] | None = None) -> list[Table]:
    """Table 1's layout: per evaluation length, P(M(x[−w:]), w), P(M(x), w) and ΔP = their difference."""
    df, keys = with_labels(in_family(lm, family), panel_by, runs)
    quantities = (("ppl_local", "P(M(x[-w:]), w)"), ("ppl_dp", "P(M(x), w)"), ("delta_p", "ΔP"))
    out = []
    for title, group in panels(df, keys):
        columns = method_order(group["label"])
        rows, cells, best = [], [], []
        for n in sorted(group["eval_len"].unique()):
            at = group[group["eval_len"] == n]
            w = int(at["delta_p_window"].dropna().iloc[0]) if at["delta_p_window"].notna().any() else n
            for column, name in quantities:
                row = [summarise(g[column], g["status"], digits=3) if len(g := at[at["label"] == c]) else ("–", np.inf)
                       for c in columns]
                rows.append(f"{int(n)}: {name.replace('w', str(w))}")
                cells.append([t for t, _ in row])
                values = [v for _, v in row]
                target = max(values) if column == "delta_p" else min(values)
                best.append([np.isfinite(v) and v == target for v in values])
        out.append(Table(title, "eval_len: quantity", rows, columns, cells, best,
                         "w = delta_p_window (the training length unless set); ΔP > 0: the context beyond w helps"))
    return out


def che_tables(che: pd.DataFrame, family: str, aggregation: str = "max") -> list[Table]:
    """Table 6: tasks × methods, OOD accuracy (%) aggregated over seeds × learning rates."""
    from dape_core.che.runner import aggregate_cells
    from dape_core.che.tasks import TASKS

    df = in_family(che, family)
    cells_df = aggregate_cells(df, aggregation) if len(df) else pd.DataFrame(columns=["task", "method", "accuracy"])
    columns = method_order(df["method"]) if len(df) else []
    tasks = [t for t in TASKS if t in set(cells_df["task"])]
    cells, best = [], []
    for task in tasks:
        at = cells_df[cells_df["task"] == task].set_index("method")["accuracy"]
        values = [100 * float(at[c]) if c in at.index and pd.notna(at[c]) else np.nan for c in columns]
        cells.append([f"{v:.2f}" if np.isfinite(v) else "n/a" for v in values])
        top = np.nanmax(values) if np.isfinite(values).any() else np.nan
        best.append([np.isfinite(v) and v == top for v in values])
    rows = [f"{TASKS[t].level} {t}" for t in tasks]
    note = f"accuracy (%) averaged over the test lengths, {aggregation} over seeds × learning rates"
    return [Table("", "task", rows, columns, cells, best, note)]


PATH_SETTINGS = ("attention_impl", "dape_dtype", "precision")  # what a timed path is, besides the method


def timing_path(row) -> str:
    """The path a timing row ran, as its panel title ("attention_impl plain, dape_dtype float32, precision fp16 — the
    paper's materialised form", "attention_impl auto (materialized), … — the default path"; empty if not recorded)."""
    from dape_core.settings import AttentionSettings

    parts = [f"{key} {row[key]}" for key in PATH_SETTINGS if key in row and pd.notna(row[key])]
    resolved = row.get("attention_path")
    if parts and isinstance(resolved, str) and resolved != row.get("attention_impl"):
        parts[0] += f" ({resolved})"  # what auto ran on the timing device
    which = {"plain": " — the paper's materialised form",
             AttentionSettings.attention_impl: " — the default path"}.get(row.get("attention_impl"), "")
    return ", ".join(parts) + which


def timing_tables(timing: pd.DataFrame, family: str, reference: str = "DAPE1x3-Kerple") -> list[Table]:
    """Table 7: one panel per path (attention_impl, dape_dtype, precision), methods as rows; per size × batch the
    median ms at each length, their Total over several lengths (as Table 7 reports), and the ratio of the total (or
    the one length) to ``reference`` on the same path."""
    df = in_family(timing, family)
    if df.empty:
        return [Table("", "method", [], [], [], [], "no timing rows")]
    df = df.assign(_path=[timing_path(r) for r in df.to_dict("records")],
                   _label=_base_methods(df))
    device = ", ".join(sorted(df["device"].astype(str).unique())) if "device" in df else "?"
    threads = ", ".join(sorted(df["threads"].astype(str).unique())) if "threads" in df else "?"
    out = []
    for path, group in df.groupby("_path", sort=False):
        methods = method_order(group["_label"])
        columns, values, is_ms, lengths_summed = [], {m: [] for m in methods}, [], set()

        def add(column: str, ms: bool, value_of) -> None:
            columns.append(column)
            is_ms.append(ms)
            for m in methods:
                values[m].append(value_of(m))

        for (mode, size, batch), shape in group.groupby(["mode", "size", "batch_size"], sort=False):
            times = shape.groupby(["_label", "seq_len"])["median_ms"].median()
            lengths = sorted(shape["seq_len"].unique())
            for n in lengths:
                add(f"{size} T={n} B={batch} ms", True, lambda m: times.get((m, n), np.nan))
            total = {m: sum(times.get((m, n), np.nan) for n in lengths) for m in methods}  # NaN if one is missing
            if len(lengths) > 1:
                lengths_summed |= set(lengths)
                add(f"{size} Total B={batch} ms", True, total.get)
            name = f"{size} T={lengths[0]} B={batch} ratio" if len(lengths) == 1 else f"{size} Total B={batch} ratio"
            add(name, False, lambda m: total[m] / total.get(reference, np.nan))
        cells = [[("n/a" if not np.isfinite(v) else f"{v:.2f}" if ms else f"{v:.4f}")
                  for v, ms in zip(values[m], is_ms)] for m in methods]
        best = [[ms and np.isfinite(v) and v == np.nanmin([values[k][i] for k in methods])
                 for i, (v, ms) in enumerate(zip(values[m], is_ms))] for m in methods]
        total_note = (f"; Total = sum over T = {', '.join(map(str, sorted(lengths_summed)))}" if lengths_summed
                      else "")
        note = (f"median of the repeats{total_note}; ratio = ms / ms of {reference} on the same path; "
                f"device {device}, threads {threads}")
        out.append(Table(path, "method", methods, columns, cells, best, note))
    return out


def _base_methods(df: pd.DataFrame) -> list[str]:
    """Row labels within a path's panel: the paper's method label without the path qualifiers of ``dape time``."""
    from dape_core.methods import method_label

    if not {"encoding", "processor", "kernel_size"} <= set(df.columns):
        return list(df["method"])
    return [method_label(e, p, int(k)) if pd.notna(e) else m
            for e, p, k, m in zip(df["encoding"], df["processor"], df["kernel_size"].fillna(1), df["method"])]


def leakage_tables(leakage: pd.DataFrame, family: str) -> list[Table]:
    """Fig. 6 as numbers: per encoding, ppl without tril / ppl with tril at each evaluation length (mean over seeds)."""
    df = leakage[leakage["family"] == family]
    lengths = sorted(df["eval_len"].unique())
    methods = method_order(df["method"])

    def cell(m, n) -> str:
        g = df[(df["method"] == m) & (df["eval_len"] == n)]
        return summarise(g["ratio"], g["status"], digits=3)[0]

    cells = [[cell(m, n) for n in lengths] for m in methods]
    best = [[False] * len(lengths) for _ in methods]
    return [Table("", "method (tril twin)", methods, [str(int(n)) for n in lengths], cells, best,
                  "ppl without tril / ppl with tril; ≪ 1 means the model reads future tokens")]


# ------------------------------------------------------------------------------------------------ rendering
def to_markdown(tables: list[Table], heading: str) -> str:
    out = [f"# {heading}", ""]
    for t in tables:
        if t.title:
            out += [f"## {t.title}", ""]
        if not t.columns:
            out += ["No rows.", ""]
            continue
        out.append("| " + " | ".join([t.index_name, *map(_md, t.columns)]) + " |")
        out.append("|" + "---|" * (len(t.columns) + 1))
        for label, row, best in zip(t.rows, t.cells, t.best or [[False] * len(t.columns)] * len(t.rows)):
            cells = [f"**{_md(c)}**" if b else _md(c) for c, b in zip(row, best)]
            out.append("| " + " | ".join([_md(label), *cells]) + " |")
        out += ["", f"_{t.note}_" if t.note else "", ""]
    return "\n".join(out).rstrip() + "\n"


def to_latex(tables: list[Table], heading: str) -> str:
    out = [f"% {heading}"]
    for t in tables:
        if not t.columns:
            continue
        caption = heading + (f" ({t.title})" if t.title else "") + (f". {t.note}" if t.note else "")
        out += [r"\begin{table}[t]", r"\centering", r"\small",
                r"\caption{" + _tex(caption) + "}",
                r"\begin{tabular}{l" + "r" * len(t.columns) + "}", r"\toprule",
                " & ".join([_tex(t.index_name), *map(_tex, t.columns)]) + r" \\", r"\midrule"]
        for label, row, best in zip(t.rows, t.cells, t.best or [[False] * len(t.columns)] * len(t.rows)):
            cells = [r"\textbf{" + _tex(c) + "}" if b else _tex(c) for c, b in zip(row, best)]
            out.append(" & ".join([_tex(label), *cells]) + r" \\")
        out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(out) + "\n"


def _md(text) -> str:
    return str(text).replace("|", "\\|")


def _tex(text) -> str:
    text = str(text)
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                 ("±", r"$\pm$"), ("ΔP", r"$\Delta P$"), ("×", r"$\times$"), ("≪", r"$\ll$"), ("–", "--")):
        text = text.replace(a, b)
    return text
