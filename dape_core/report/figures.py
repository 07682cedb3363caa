"""Seaborn figures: perplexity vs evaluation length per family (Figs. 1–6), sweeps of a setting (kernel size,
width), the CHE heat-map (Table 6), timing bars (Table 7) and the appendix-K maps of one query row.

Diverged runs are drawn, never dropped: a red ✕ at the top of the panel at each length where a run diverged,
and "(diverged)" in its legend entry.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from dape_core import artefacts, io  # noqa: E402
from dape_core.report.aggregate import in_family  # noqa: E402
from dape_core.report.tables import panels, with_labels  # noqa: E402

DIVERGED_MARK = dict(marker="X", color="red", s=70, zorder=5, clip_on=False)


def save(fig, path: str | Path) -> None:
    """PNG, atomically."""
    with io.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def _grid(n: int, width: float = 5.0, height: float = 3.8):
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _mark_diverged(ax, group: pd.DataFrame, x: str) -> list[str]:
    """✕ at the top of the axes for every diverged (label, x); returns the labels that diverged somewhere."""
    bad = group[~group["status"].eq("ok")]
    if bad.empty:
        return []
    top = ax.get_ylim()[1]
    ax.scatter(bad[x].astype(float), np.full(len(bad), top), **DIVERGED_MARK)
    return sorted(bad["label"].unique())


def ppl_figure(lm: pd.DataFrame, family: str, panel_by: list[str] | None, title: str, out: str | Path,
               runs: list[str] | None = None) -> None:
    """Perplexity vs evaluation length (log2), one line per method (in the order of ``runs``), one panel per
    setting; mean ± std over seeds."""
    df, keys = with_labels(in_family(lm, family), panel_by, runs)
    groups = list(panels(df, keys)) or [("", df)]
    fig, axes = _grid(len(groups))
    for ax, (panel, group) in zip(axes, groups):
        ok = group[group["status"].eq("ok") & group["ppl"].notna()]
        if len(ok):
            order = list(dict.fromkeys(ok["label"]))
            sns.lineplot(data=ok, x="eval_len", y="ppl", hue="label", hue_order=order, style="label",
                         style_order=order, markers=True, dashes=False, errorbar="sd", ax=ax)
            _log_if_wide(ax, ok["ppl"])
        lengths = sorted(group["eval_len"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(int(n)) for n in lengths])
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        for train_len in sorted(group["train_len"].unique()):
            ax.axvline(train_len, color="grey", lw=0.8, ls="--")
        _legend(ax, _mark_diverged(ax, group, "eval_len"))
        ax.set_title(panel)
        ax.set_xlabel("evaluation length")
        ax.set_ylabel("perplexity")
    fig.suptitle(title or family)
    save(fig, out)


def _log_if_wide(ax, values: pd.Series) -> None:
    """A logarithmic y axis when the values span more than a factor of 3 (exploding perplexities)."""
    values = values[values > 0]
    if len(values) and values.max() / values.min() > 3:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def _legend(ax, diverged: list[str]) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for label in diverged:
        if label not in labels:
            handles.append(plt.Line2D([], [], marker="X", color="red", ls=""))
            labels.append(label)
    labels = [f"{label} (diverged)" if label in diverged else label for label in labels]
    if handles:
        ax.legend(handles, labels, fontsize=7)


def sweep_figure(lm: pd.DataFrame, family: str, sweep: str, title: str, out: str | Path) -> None:
    """Perplexity vs the swept setting (kernel size, width, …), one line per evaluation length and variant."""
    df = in_family(lm, family)
    df = df[df["processor"] != "none"].copy() if "processor" in df else df.copy()
    others: list[str] = []  # settings that still tell runs apart once the swept value is known
    for c in ("processor", "kernel_size", "dape_width", "train_len", "size", "dataset"):
        if c != sweep and c in df and len(df) and df.groupby([sweep, *others])[c].nunique().max() > 1:
            others.append(c)
    df["variant"] = df[others].astype(str).agg(" ".join, axis=1) if others else df["method"].astype(str)
    df["label"] = df["variant"]
    variants = list(dict.fromkeys(df["variant"]))
    fig, axes = _grid(max(len(variants), 1))
    for ax, variant in zip(axes, variants or [""]):
        group = df[df["variant"] == variant]
        ok = group[group["status"].eq("ok") & group["ppl"].notna()].copy()
        ok["eval length"] = ok["eval_len"].astype(int).astype(str)
        if len(ok):
            sns.lineplot(data=ok, x=sweep, y="ppl", hue="eval length", marker="o", errorbar="sd", ax=ax)
            _log_if_wide(ax, ok["ppl"])
        _legend(ax, _mark_diverged(ax, group, sweep))
        ax.set_title(", ".join(f"{k}={v}" for k, v in zip(others, variant.split(" "))) if others else variant)
        ax.set_xlabel(sweep)
        ax.set_ylabel("perplexity")
        ax.set_xticks(sorted(group[sweep].dropna().unique()))
    fig.suptitle(title or family)
    save(fig, out)


def timing_figure(timing: pd.DataFrame, family: str, title: str, out: str | Path) -> None:
    """Median time and peak memory per method; bars grouped by size × length × batch."""
    df = in_family(timing, family).copy()
    df["shape"] = df["size"].astype(str) + " T=" + df["seq_len"].astype(str) + " B=" + df["batch_size"].astype(str)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    order = list(dict.fromkeys(df["method"]))
    for ax, column, label in ((axes[0], "median_ms", "ms"), (axes[1], "peak_mem_mb", "peak memory (MB)")):
        sns.barplot(data=df, x="method", y=column, hue="shape", order=order, ax=ax)
        ax.set_ylabel(label)
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=45)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
        ax.legend(fontsize=7)
    mode = ", ".join(sorted(df["mode"].astype(str).unique()))
    fig.suptitle(f"{title or family} ({mode})")
    save(fig, out)


def che_figure(che: pd.DataFrame, family: str, aggregation: str, title: str, out: str | Path) -> None:
    """Heat-map of OOD accuracy (%): tasks × methods, aggregated over seeds × learning rates."""
    from dape_core.che.runner import aggregate_cells
    from dape_core.che.tasks import TASKS

    df = in_family(che, family)
    cells = aggregate_cells(df, aggregation)
    table = cells.pivot_table(index="task", columns="method", values="accuracy", aggfunc="first") * 100
    table = table.reindex(index=[t for t in TASKS if t in table.index],
                          columns=[m for m in dict.fromkeys(df["method"]) if m in table.columns])
    fig, ax = plt.subplots(figsize=(1.6 * max(len(table.columns), 2) + 3, 0.5 * max(len(table), 2) + 1.5))
    sns.heatmap(table, annot=True, fmt=".1f", cmap="viridis", vmin=0, vmax=100, cbar_kws={"label": "accuracy (%)"},
                ax=ax)
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.set_title(f"{title or family} ({aggregation} over seeds × learning rates)")
    save(fig, out)


def attention_figure(maps_path: str | Path, out: str | Path) -> None:
    """Appendix K: per layer, heads × keys of A = q·kᵀ/√d, the bias B, the DAPE term and the attention
    probabilities, for the last query row of one sequence."""
    data = artefacts.load_npz(maps_path, ("method",))
    method = str(data["method"]) if "method" in data else ""
    layers = sorted({int(k.split("_")[0].removeprefix("layer")) for k in data if k.startswith("layer")})
    names = [("A", "A = q·kᵀ/√d"), ("B", "B (bias)"), ("dape", "DAPE term"), ("probs", "probabilities")]
    fig, axes = plt.subplots(max(len(layers), 1), len(names), figsize=(4.2 * len(names), 2.4 * max(len(layers), 1)),
                             squeeze=False, layout="constrained")
    for row, layer in enumerate(layers):
        for col, (key, label) in enumerate(names):
            ax = axes[row][col]
            array = data.get(f"layer{layer}_{key}")
            if array is None or np.size(array) == 0:
                ax.set_axis_off()
                ax.set_title(f"layer {layer}: {label} (none)", fontsize=8)
                continue
            array = np.atleast_2d(np.asarray(array, dtype=float))
            sns.heatmap(array, cmap="magma" if key == "probs" else "coolwarm", center=None if key == "probs" else 0,
                        ax=ax, cbar=True, xticklabels=False, yticklabels=False)
            ax.set_title(f"layer {layer}: {label}", fontsize=8)
            ax.set_xlabel("key position")
            ax.set_ylabel("head")
    if not layers:
        axes[0][0].text(0.5, 0.5, "no maps (diverged run)", ha="center", va="center")
    fig.suptitle(f"{method}: one query row ({Path(maps_path).parent.name})")
    save(fig, out)


def sink_figure(sink: pd.DataFrame, out: str | Path) -> None:
    """Attention-sink mass (App. K) per layer and method, one panel per heat-map length: each run × seed's mean over
    its sequences, then the mean over seeds with their SD as the error bar."""
    df = sink.copy()
    if "sequence" in df:  # one value per run × seed × length × layer: the mean over the sequences
        keys = [c for c in ("run", "seed", "method", "heatmap_len", "layer", "status") if c in df]
        df = df.groupby(keys, dropna=False, sort=False)["sink_mass"].mean().reset_index()
    lengths = sorted(df["heatmap_len"].dropna().unique())
    fig, axes = _grid(max(len(lengths), 1))
    for ax, length in zip(axes, lengths or [None]):
        group = df[df["heatmap_len"] == length] if length is not None else df
        ok = group[group["status"].eq("ok") & group["sink_mass"].notna()]
        if len(ok):
            sns.barplot(data=ok, x="layer", y="sink_mass", hue="method", errorbar="sd", ax=ax)
        bad = sorted(group.loc[~group["status"].eq("ok"), "method"].astype(str).unique())
        if bad:
            ax.text(0.02, 0.95, "diverged: " + ", ".join(bad), transform=ax.transAxes, color="red", va="top",
                    fontsize=8)
        ax.set_title(f"length {int(length)}" if length is not None else "")
        ax.set_ylabel("attention on the first key")
    fig.suptitle("attention sink")
    save(fig, out)
