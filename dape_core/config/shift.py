"""The shifted configuration of the robustness check (``make robustness``): derived from another, not a copy (other
training seeds, data split and training length; the same families and code), its verdicts set beside the original's in
``reports/robustness.md``. From the ``robustness`` block:

- ``seed_shift``: added to every seed list (families' and their ``grids``' ``seeds``), so every model, map and CHE cell
  gets seeds the original never used (a design's fresh seeds start ``max(seed_shift, design.max_seeds)`` later);
- ``data_seed_shift``: added to every dataset's ``seed`` (its documents' seeded split and shuffle);
- ``train_len_scale``: multiplies every length setting of the LM and fine-tune stages (``train_len``, ``eval_lens``,
  ``window``, ``delta_p_window``, ``heatmap_lens``, ``max_position``, ``max_position_embeddings``) in ``defaults``, the
  LM, leakage and fine-tune families and ``run_overrides``, so evaluation keeps the same multiples of the training
  length; batch sizes stay (the equal-token family stays at equal tokens), and so do timing and CHE lengths. A length
  that does not stay an integer is a configuration error.

Relative paths of local corpora and ``estimate.calibration`` become absolute (the shifted run has its own directory)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from dape_core import io
from dape_core.config.families import build_plan
from dape_core.config.schema import validate_schema
from dape_core.errors import ConfigError

SCALAR_LENGTHS = ("train_len", "window", "delta_p_window", "max_position", "max_position_embeddings")
LIST_LENGTHS = ("eval_lens", "heatmap_lens")
LM_FAMILY_STAGES = ("lm", "leakage", "finetune")


def _scale(value: Any, factor: float, where: str) -> Any:
    """One length × factor, which must stay an integer (None stays None)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_scale(v, factor, f"{where}[{i}]") for i, v in enumerate(value)]
    scaled = value * factor
    if abs(scaled - round(scaled)) > 1e-9:
        raise ConfigError(f"robustness.train_len_scale: {factor:g} makes {where} {value} → {scaled:g}; allowed "
                          "values: a factor that keeps every length an integer")
    return int(round(scaled))


def _scale_lengths(node: Any, factor: float, where: str) -> Any:
    """Every length setting in a (nested) mapping × factor (module docstring)."""
    if isinstance(node, dict):
        return {key: _scale(value, factor, f"{where}.{key}") if key in (*SCALAR_LENGTHS, *LIST_LENGTHS)
                else _scale_lengths(value, factor, f"{where}.{key}") for key, value in node.items()}
    if isinstance(node, list):
        return [_scale_lengths(v, factor, f"{where}[{i}]") for i, v in enumerate(node)]
    return node


def _absolute(value: Any, base: Path) -> Any:
    """A relative path that exists under ``base`` as an absolute path; anything else as it is."""
    if isinstance(value, str) and value and not Path(value).is_absolute() and (base / value).exists():
        return str((base / value).resolve())
    return value


def shifted_config(config: dict, base: str | Path = ".") -> dict:
    """The shifted configuration of ``config`` (validated, defaults filled in; the original is not modified)."""
    out = validate_schema(copy.deepcopy(config))
    shift = out["robustness"]
    factor, seeds, data = shift["train_len_scale"], shift["seed_shift"], shift["data_seed_shift"]
    base = Path(base)
    for dataset in out["datasets"].values():
        dataset["seed"] = int(dataset.get("seed", 0)) + data
        for key in list(dataset):
            dataset[key] = _absolute(dataset[key], base)
    out["estimate"]["calibration"] = _absolute(out["estimate"].get("calibration"), base)
    for stage in ("lm", "finetune"):
        if stage in out["defaults"]:
            out["defaults"][stage] = _scale_lengths(out["defaults"][stage], factor, f"defaults.{stage}")
    for name, family in out["families"].items():
        family["seeds"] = [s + seeds for s in family["seeds"]]
        for grid in family.get("grids") or []:
            if "seeds" in grid:
                grid["seeds"] = [s + seeds for s in grid["seeds"]]
        if family.get("stage", "lm") in LM_FAMILY_STAGES:
            out["families"][name] = _scale_axes(_scale_lengths(family, factor, f"families.{name}"), factor,
                                                f"families.{name}")
    if out.get("run_overrides"):
        out["run_overrides"] = _scale_lengths(out["run_overrides"], factor, "run_overrides")
    if out.get("design"):  # the shifted run's fresh seeds: none of the original's (nor of either pilot's)
        design = out["design"]
        design["fresh_seeds_from"] += max(seeds, design["max_seeds"])
    return validate_schema(out)


def _scale_axes(family: dict, factor: float, where: str) -> dict:
    """An axis named after a length setting lists its values: scale them (``axes: {train_len: [32, 64]}``)."""
    for grid in [family, *(family.get("grids") or [])]:
        axes = grid.get("axes") or {}
        for key in SCALAR_LENGTHS:
            if isinstance(axes.get(key), list) and all(isinstance(v, (int, float)) for v in axes[key]):
                axes[key] = _scale(axes[key], factor, f"{where}.axes.{key}")
    return family


def shift_summary(config: dict, shifted: dict) -> dict:
    """What changed, for the robustness report (before → after): shift, family and dataset seeds, training lengths."""
    def lengths(cfg):
        return sorted({run["settings"]["train_len"] for run in build_plan(cfg).lm_runs.values()})

    config = validate_schema(copy.deepcopy(config))
    return {"shift": dict(config["robustness"]),
            "seeds": {name: [config["families"][name]["seeds"], shifted["families"][name]["seeds"]]
                      for name in config["families"]},
            "data_seeds": {name: [config["datasets"][name].get("seed", 0), shifted["datasets"][name]["seed"]]
                           for name in config["datasets"]},
            "train_lens": [lengths(config), lengths(shifted)]}


def write_shifted_config(path: str | Path, config: dict, summary_path: str | Path | None = None,
                         base: str | Path = ".") -> dict:
    """Atomically write the shifted config (YAML) and, with ``summary_path``, its :func:`shift_summary` (JSON)."""
    shifted = shifted_config(config, base)
    header = ("# The shifted configuration of `make robustness`, derived from the run's configuration by its "
              "`robustness` block\n# (dape_core/config/shift.py); written by the DAG, not edited by hand.\n")
    io.write_text(path, header + yaml.safe_dump(shifted, sort_keys=False, allow_unicode=True))
    if summary_path is not None:
        io.write_json(summary_path, shift_summary(config, shifted), seal=True)
    return shifted
