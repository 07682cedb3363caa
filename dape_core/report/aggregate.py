"""Per-job outputs → tidy CSVs: one row per observation, the run's settings, its families and provenance.

``lm_results.csv`` has one row per run × evaluation length × seed; ``families`` (semicolon-joined) lists the families
that asked for that row (a run shared by families appears once) and ``roles`` the roles they declare (``central``,
``width_sweep``, …): claims and the paper comparison find rows by role, never by a family's name. A diverged run keeps
its rows, ``status`` "diverged" with NaN metrics. The plan (``results/plan.json``, from
``dape_core.config.Plan.report_spec``) supplies families, roles, memberships and every run setting; a fine-tune run
(``finetune_runs``, a Hugging Face decoder) leaves the settings it lacks (``size``, ``dropout``, …) empty.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

import dape_core
from dape_core import artefacts
from dape_core.errors import ConfigError

#: role → what the reports read a family of that role as (the roles of the configuration schema)
ROLES = {"central": "the central comparison", "every_encoding": "DAPE1x3 on every encoding",
         "kernel_sweep": "the kernel-size sweep", "width_sweep": "the hidden-width sweep",
         "equal_tokens": "the equal-token comparison", "model_size": "the model-size comparison",
         "leakage": "the leakage ablation", "attention_maps": "the attention maps", "forward_time": "forward time",
         "step_time": "training-step time", "che": "the CHE tasks",
         "hf_finetune": "Hugging Face decoders fine-tuned with and without DAPE"}
LM_SETTING_COLUMNS = ("dataset", "tag", "encoding", "processor", "kernel_size", "dape_width", "tril", "padding", "size",
                      "n_layer", "n_head", "d_model", "dropout", "tie_embeddings", "encoding_shared", "train_len",
                      "batch_size", "grad_accum", "steps", "lr", "min_lr_ratio", "warmup_ratio", "weight_decay",
                      "grad_clip", "beta1", "beta2", "precision")
SUMMARY_COLUMNS = {"status": "train_status", "steps_done": "steps_done", "final_loss": "final_loss",
                   "tokens_per_s": "tokens_per_s", "wall_s": "train_wall_s", "parameters": "parameters",
                   "non_embedding_parameters": "non_embedding_parameters", "flops_per_token": "flops_per_token",
                   "git_commit": "train_git_commit", "threads": "train_threads"}
LEADING = ["run", "seed", "families", "roles", "method", "eval_len", "status", "ppl", "ppl_ci_low", "ppl_ci_high",
           "loss", "bpb", "window", "delta_p_window", "ppl_dp", "ppl_local", "delta_p"]


def read_plan(path: str | Path) -> dict:
    """The report spec of rule write_plan, checked where it is read."""
    return artefacts.read_json(path, artefacts.PLAN)


def made_with(plan: dict, path: str | Path) -> str | None:
    """The spec digest of the job the plan (the report spec) gives a result file: a file whose seal records other
    settings is named as stale or foreign where it is read (:mod:`dape_core.config.provenance`)."""
    from dape_core.config.provenance import planned_spec

    return planned_spec(plan, path)


def run_and_seed(path: str | Path, levels_up: int = 1) -> tuple[str, int]:
    """(run, seed) of ``results/lm/{run}/seed{seed}/…`` (``levels_up`` directories between the file and seed)."""
    seed_dir = Path(path).parents[levels_up - 1]
    return seed_dir.parent.name, int(seed_dir.name.removeprefix("seed"))


def report_commit() -> str:
    """The commit of the checkout the report is built from (runs record their own in ``git_commit``)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _families_by_length(plan: dict) -> dict[tuple[str, int], list[tuple[str, set]]]:
    members: dict[tuple[str, int], list[tuple[str, set]]] = {}
    for m in plan["lm_members"]:
        members.setdefault((m["run"], int(m["seed"])), []).append((m["family"], set(m["eval_lens"])))
    return members


def _join(families) -> str:
    return ";".join(dict.fromkeys(families))


def family_roles(plan: dict) -> dict[str, str]:
    """Family name → its declared role (families without one are left out)."""
    return {name: spec["role"] for name, spec in plan["families"].items() if spec.get("role")}


def roles_of(families: str, roles: dict[str, str]) -> str:
    """The semicolon-joined roles of semicolon-joined ``families`` (each role once, in the families' order)."""
    return _join(roles[f] for f in str(families).split(";") if f in roles)


def lm_results(plan: dict, eval_paths: list[str], summary_paths: list[str]) -> pd.DataFrame:
    """One row per run × evaluation length × seed, with settings, families, roles, training summary and
    provenance. Each file is read with the settings the plan gives its job (:func:`made_with`)."""
    summaries = {run_and_seed(p): artefacts.read_json(p, artefacts.SUMMARY, spec=made_with(plan, p))
                 for p in summary_paths}
    members = _families_by_length(plan)
    roles = family_roles(plan)
    frames = []
    for path in eval_paths:
        run, seed = run_and_seed(path)
        spec = plan["lm_runs"].get(run) or plan.get("finetune_runs", {})[run]
        frame = artefacts.read_csv(path, artefacts.EVAL, rows=evaluated_lengths(spec), spec=made_with(plan, path))
        settings = spec["settings"]
        frame["run"], frame["seed"] = run, seed
        for key in LM_SETTING_COLUMNS:
            if key not in frame or frame[key].isna().all():
                frame[key] = settings.get(key)
        frame["families"] = [_join(f for f, lens in members.get((run, seed), []) if int(n) in lens)
                             for n in frame["eval_len"]]
        frame["roles"] = frame["families"].map(lambda fams: roles_of(fams, roles))
        summary = summaries.get((run, seed), {})
        for key, column in SUMMARY_COLUMNS.items():
            frame[column] = summary.get(key, np.nan)
        for key, value in summary.get("versions", {}).items():
            frame[f"{key}_version"] = value
        frame["device"] = (summary.get("hardware") or {}).get("cuda") or "cpu"
        if summary.get("status") == "diverged":
            frame["status"] = "diverged"
        frame["source_file"] = str(path)
        frames.append(frame)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=LEADING)
    df["report_git_commit"] = report_commit()
    df = df.sort_values(["run", "seed", "eval_len"], kind="stable")
    return df[[c for c in LEADING if c in df] + [c for c in df if c not in LEADING]].reset_index(drop=True)


WINDOW_LEADING = ["run", "seed", "eval_len", "document", "anchor"]


def evaluated_lengths(spec: dict) -> int | None:
    """Rows of a run's eval.csv: one per evaluation length the plan gives it (None when the plan does not say)."""
    lengths = (spec.get("eval") or {}).get("eval_lens")
    return len(set(lengths)) if lengths else None


def scored_windows(eval_path: Path) -> int | None:
    """Rows of a run's windows.csv: the windows its eval.csv says were scored (None without that eval.csv)."""
    if not eval_path.is_file():
        return None
    evaluation = artefacts.read_csv(eval_path, artefacts.EVAL)
    if "n_windows" not in evaluation:  # a diverged run scores no window; a table without counts says nothing
        return 0 if not evaluation["status"].eq("ok").any() else None
    return int(pd.to_numeric(evaluation["n_windows"], errors="coerce").fillna(0).sum())


def lm_windows(window_paths: list[str], plan: dict | None = None) -> pd.DataFrame:
    """Per-window losses of every run × seed × evaluation length (``results/lm/{run}/seed{seed}/windows.csv``), led
    by run and seed; a window (``document``, ``anchor``) is the same for every run evaluated on one split with the
    same settings. With ``plan``, each file is read with the settings the plan gives its job (:func:`made_with`)."""
    frames = []
    for path in window_paths:
        frame = artefacts.read_csv(path, artefacts.WINDOWS, rows=scored_windows(Path(path).with_name("eval.csv")),
                                   spec=made_with(plan, path) if plan is not None else None)
        frame["run"], frame["seed"] = run_and_seed(path)
        frames.append(frame)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=WINDOW_LEADING)
    df = df.sort_values(WINDOW_LEADING, kind="stable")
    return df[WINDOW_LEADING + [c for c in df if c not in WINDOW_LEADING]].reset_index(drop=True)


def sink_results(plan: dict, sink_paths: list[str]) -> pd.DataFrame:
    """Attention-sink mass (App. K) per run × seed × length × sequence × layer; a diverged run keeps one row with
    status diverged. ``sequence`` (with its ``document`` and ``start``) is the same window for every run of a
    dataset at one length, so runs pair by (``heatmap_len``, ``sequence``)."""
    families: dict[tuple[str, int], list[str]] = {}
    attention_families = {f for f, spec in plan["families"].items() if spec.get("attention_maps")}
    roles = family_roles(plan)
    for m in plan["lm_members"]:
        if m["family"] in attention_families:
            families.setdefault((m["run"], int(m["seed"])), []).append(m["family"])
    frames = []
    for path in sink_paths:
        run, seed = run_and_seed(path, levels_up=3)
        length = int(Path(path).parent.name.removeprefix("L"))
        frame = artefacts.read_csv(path, artefacts.SINK, spec=made_with(plan, path))
        layers = frame.groupby("sequence")["layer"].count() if len(frame) else pd.Series(dtype=int)
        if len(layers) and (layers != layers.max()).any():  # every sequence has a row per layer
            short = layers[layers != layers.max()]
            raise artefacts.fail(path, f"sequence {short.index[0]:g} has {short.iloc[0]} layer rows where the others "
                                       f"have {layers.max()} (a cut file)", "attention_maps")
        side = artefacts.read_csv(Path(path).with_name("eval.csv"), artefacts.EVAL, rule="attention_maps",
                                  spec=made_with(plan, Path(path).with_name("eval.csv")))
        status = str(side["status"].iloc[0]) if len(side) else "diverged"
        if frame.empty:
            frame = pd.DataFrame([{"method": side["method"].iloc[0] if "method" in side and len(side) else "",
                                   "eval_len": length, "layer": np.nan, "sequence": np.nan, "sink_mass": np.nan}])
        frame["run"], frame["seed"], frame["heatmap_len"], frame["status"] = run, seed, length, status
        for key in ("encoding", "processor", "kernel_size", "dape_width", "train_len", "dataset", "size"):
            frame[key] = plan["lm_runs"][run]["settings"][key]
        joined = _join(families.get((run, seed), []))
        frame["families"], frame["roles"] = joined, roles_of(joined, roles)
        frame["source_file"] = str(path)
        frames.append(frame)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run", "seed", "sink_mass"])
    df["dape_core_version"], df["report_git_commit"] = dape_core.__version__, report_commit()
    lead = ["run", "seed", "families", "roles", "method", "heatmap_len", "sequence", "layer", "sink_mass", "status"]
    return df[[c for c in lead if c in df] + [c for c in df if c not in lead]]


def _labelled(paths: list[str], label, families: dict, name: str, roles: dict[str, str],
              plan: dict | None = None) -> pd.DataFrame:
    """Every CSV of ``paths`` stacked, led by its ``name`` (``label(path)`` → (families key, name)), families and
    roles; with ``plan``, each read with the settings the plan gives its job (:func:`made_with`)."""
    frames = []
    for path in paths:
        frame = artefacts.read_csv(path, artefacts.CHE, spec=made_with(plan, path) if plan is not None else None)
        key, value = label(Path(path))
        joined = _join(families.get(key, []))
        frame.insert(0, name, value)
        frame.insert(1, "families", joined)
        frame.insert(2, "roles", roles_of(joined, roles))
        frame["source_file"] = str(path)
        frames.append(frame)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[name, "families", "roles"])
    df["dape_core_version"], df["report_git_commit"] = dape_core.__version__, report_commit()
    return df


def timing_results(plan: dict, timing_paths: list[str]) -> pd.DataFrame:
    """The timing CSVs (one row per method × length; a job's file names each row's ``run``, a file without that
    column is one run's) with their run name, families and roles."""
    return _by_run(plan, timing_paths, artefacts.TIMING)


def _by_run(plan: dict, paths: list[str], kind: artefacts.Kind) -> pd.DataFrame:
    families: dict[str, list[str]] = {}
    for m in plan["timing_members"]:
        families.setdefault(m["run"], []).append(m["family"])
    roles, frames = family_roles(plan), []
    for path in paths:
        frame = artefacts.read_csv(path, kind, spec=made_with(plan, path))
        if "run" not in frame:
            frame.insert(0, "run", Path(path).stem)
        joined = frame["run"].map(lambda run: _join(families.get(run, [])))
        frame = frame[["run"] + [c for c in frame if c != "run"]]
        frame.insert(1, "families", joined)
        frame.insert(2, "roles", joined.map(lambda fams: roles_of(fams, roles)))
        frame["source_file"] = str(path)
        frames.append(frame)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run", "families", "roles"])
    df["dape_core_version"], df["report_git_commit"] = dape_core.__version__, report_commit()
    return df


#: the per-repeat table's columns (``dape time --repeats-out``), each row one timed run of a method in its cell
REPEAT_COLUMNS = artefacts.REPEATS.columns


def timing_repeats(plan: dict, repeat_paths: list[str], timing: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every interleaved repeat (one row per method × length × round: Table 7 App. H, §4.2) with its run's families
    and roles, checked where read: the columns of :data:`REPEAT_COLUMNS` and, against ``timing`` (timing.csv's rows),
    ``repeats`` × ``blocks`` × ``replicates`` rows for every method × length timed ``ok``."""
    df = _by_run(plan, repeat_paths, artefacts.REPEATS)
    missing = [c for c in REPEAT_COLUMNS if c not in df]
    if len(df) and missing:
        raise ConfigError(f"{df['source_file'].iloc[0]}: no column {', '.join(missing)}; allowed values: a repeats "
                          "CSV of `dape time --repeats-out`; redo it with `snakemake --forcerun time_lm`")
    if timing is not None and len(timing) and "cell" in timing:
        counts = df.groupby(["run", "cell"]).size() if len(df) else pd.Series(dtype=int)
        for row in timing[timing["status"] == "ok"].itertuples():
            found = int(counts.get((row.run, row.cell), 0))
            blocks, replicates = getattr(row, "blocks", 1), getattr(row, "replicates", 1)
            expected = (int(row.repeats) * (1 if pd.isna(blocks) else int(blocks))
                        * (1 if pd.isna(replicates) else int(replicates)))
            if found != expected:
                raise ConfigError(f"{row.source_file}: run {row.run} in cell {row.cell} has {found} repeat rows in "
                                  f"its .repeats.csv, expected {expected}; redo it with `snakemake --forcerun "
                                  f"{row.source_file}`")
    lead = ["run", "families", "roles", *REPEAT_COLUMNS[1:]]
    return df[[c for c in lead if c in df] + [c for c in df if c not in lead]].reset_index(drop=True)


def che_results(plan: dict, cell_paths: list[str]) -> pd.DataFrame:
    """The CHE CSVs (length and summary rows) with their cell name, families and roles."""
    families: dict[tuple[str, int], list[str]] = {}
    for m in plan["che_members"]:
        families.setdefault((m["cell"], int(m["seed"])), []).append(m["family"])

    def label(path: Path):
        cell = path.parent.name
        return (cell, int(path.stem.removeprefix("seed"))), cell

    return _labelled(cell_paths, label, families, "cell", family_roles(plan), plan)


def leakage_results(plan: dict, eval_paths: list[str]) -> pd.DataFrame:
    """Each no-tril run next to its tril twin: both ppl and their ratio per evaluation length and seed, family, role."""
    evals = {run_and_seed(p): artefacts.read_csv(p, artefacts.EVAL).set_index("eval_len") for p in eval_paths}
    roles = family_roles(plan)
    rows = []
    for family, pairs in plan["leakage_pairs"].items():
        for pair in pairs:
            run, twin = pair["run"], pair["twin"]
            settings = plan["lm_runs"][run]["settings"]
            for (name, seed), frame in sorted(evals.items()):
                if name != run or (twin, seed) not in evals:
                    continue
                twin_frame = evals[(twin, seed)]
                for eval_len in frame.index.intersection(twin_frame.index):
                    a, b = frame.loc[eval_len], twin_frame.loc[eval_len]
                    ok = a["status"] == "ok" and b["status"] == "ok"
                    rows.append({
                        "family": family, "role": roles.get(family, ""), "run": run, "twin": twin, "seed": seed,
                        "method": b.get("method", ""), "encoding": settings["encoding"],
                        "kernel_size": settings["kernel_size"],
                        "padding": settings["padding"], "dataset": settings["dataset"],
                        "train_len": settings["train_len"], "eval_len": int(eval_len),
                        "ppl_no_tril": a["ppl"], "ppl_tril": b["ppl"],
                        "ratio": a["ppl"] / b["ppl"] if ok else np.nan,
                        "status": "ok" if ok else "diverged",
                    })
    df = pd.DataFrame(rows, columns=["family", "role", "run", "twin", "seed", "method", "encoding", "kernel_size",
                                     "padding", "dataset", "train_len", "eval_len", "ppl_no_tril", "ppl_tril", "ratio",
                                     "status"])
    df["dape_core_version"], df["report_git_commit"] = dape_core.__version__, report_commit()
    return df


def _listing(df: pd.DataFrame, column: str, name: str) -> pd.DataFrame:
    """Rows whose semicolon-joined ``column`` lists ``name`` (none when the frame has no such column)."""
    if column not in df:
        return df.iloc[0:0]
    member = df[column].fillna("").astype(str).str.split(";").apply(lambda names: name in names)
    return df[member]


def in_family(df: pd.DataFrame, family: str) -> pd.DataFrame:
    """Rows whose semicolon-joined ``families`` include ``family``."""
    return _listing(df, "families", family)


def in_role(df: pd.DataFrame, role: str) -> pd.DataFrame:
    """Rows whose semicolon-joined ``roles`` include ``role`` (rows of every family declaring that role)."""
    return _listing(df, "roles", role)
