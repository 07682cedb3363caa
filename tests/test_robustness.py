"""The robustness check: the shifted configuration derived from a configuration, the side-by-side comparison of
two runs' verdicts, and `snakemake reports/robustness.md` on the smoke configuration."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import yaml

from dape_core.config import build_plan, load_yaml
from dape_core.config.shift import shifted_config, write_shifted_config
from dape_core.errors import ArtefactError, ConfigError
from dape_core.report.robustness import FLIP, compare, counts, read_summary, robustness_markdown

from workflow_fixture import CONFIGS, SMOKE_REPORTS, smoke_run, snakemake  # noqa: F401


def _multiples(plan) -> dict:
    """method label × family → the evaluated multiples of the training length."""
    out = {}
    for run in plan.lm_runs.values():
        s = run["settings"]
        out[(s["encoding"], s["processor"], s["kernel_size"], s["dape_width"], s["tril"], s["size"], s["dataset"],
             tuple(sorted(run["families"])))] = sorted(n / s["train_len"] for n in run["eval"]["eval_lens"])
    return out


@pytest.mark.parametrize("name", ["default", "smoke"])
def test_the_shifted_configuration_shifts_seeds_split_and_lengths_and_keeps_the_grid(name):
    config = load_yaml(CONFIGS[name])
    shifted = shifted_config(config)
    plan, other = build_plan(config), build_plan(shifted)
    shift = shifted["robustness"]
    assert len(plan.lm_jobs()) == len(other.lm_jobs()) and len(plan.che_jobs()) == len(other.che_jobs())
    assert set(plan.families) == set(other.families)
    old_seeds = {s for _, s in plan.lm_jobs()}
    assert {s for _, s in other.lm_jobs()} == {s + shift["seed_shift"] for s in old_seeds}
    assert not old_seeds & {s for _, s in other.lm_jobs()}
    for dataset, spec in other.datasets.items():
        assert spec["seed"] == plan.datasets[dataset]["seed"] + shift["data_seed_shift"]
    lengths = sorted({r["settings"]["train_len"] for r in plan.lm_runs.values()})
    assert sorted({r["settings"]["train_len"] for r in other.lm_runs.values()}) == [int(t * 1.25) for t in lengths]
    assert _multiples(plan) == _multiples(other)  # evaluated at the same multiples of the training length
    for run in other.lm_runs.values():  # the scored window grows with the training length
        assert run["eval"]["window"] == plan.config["defaults"]["lm"]["eval"]["window"] * 1.25 or name == "smoke"
    assert config == load_yaml(CONFIGS[name])  # the original is not modified


def test_equal_tokens_stay_equal_and_a_bad_factor_is_refused():
    other = build_plan(shifted_config(load_yaml(CONFIGS["default"])))
    tokens = {r["settings"]["train_len"] * r["settings"]["batch_size"] for r in other.lm_runs.values()
              if "equal_tokens" in r["families"]}
    assert tokens == {40 * 32}
    config = load_yaml(CONFIGS["default"])
    config["robustness"] = {"train_len_scale": 1.3}
    with pytest.raises(ConfigError, match=r"robustness.train_len_scale: 1.3 makes defaults\.lm\.\w+ \d+ → [\d.]+; "
                                          r"allowed values: a factor that keeps every length an integer"):
        shifted_config(config)
    config["robustness"] = {"seed_shift": 0}
    with pytest.raises(ConfigError, match=r"robustness.seed_shift: .*allowed values: ≥ 1"):
        shifted_config(config)


def test_the_written_configuration_is_complete_and_valid(tmp_path):
    shifted = write_shifted_config(tmp_path / "config.yaml", load_yaml(CONFIGS["smoke"]), tmp_path / "shift.json")
    text = (tmp_path / "config.yaml").read_text()
    assert text.startswith("# The shifted configuration") and yaml.safe_load(text) == shifted
    assert build_plan(yaml.safe_load(text)).lm_jobs()
    summary = read_summary(tmp_path / "shift.json")
    assert summary["seeds"]["baselines"] == [[0, 1], [5, 6]]  # sealed when written, verified when read


def test_a_damaged_shift_summary_is_named_not_reported(tmp_path):
    write_shifted_config(tmp_path / "config.yaml", load_yaml(CONFIGS["smoke"]), tmp_path / "shift.json")
    data = (tmp_path / "shift.json").read_bytes()
    (tmp_path / "shift.json").write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtefactError, match=r"shift.json: its content does not match the sha256 .*rule "
                                            r"robustness_config"):
        read_summary(tmp_path / "shift.json")


def _claims(verdicts: dict) -> pd.DataFrame:
    return pd.DataFrame([{"claim_id": c, "section": "§1", "verdict": v, "basis": "seeds × windows",
                          "seed_noise": ""} for c, v in verdicts.items()])


def test_the_comparison_names_flips_agreement_and_moves_to_or_from_undecided():
    main = _claims({"a": "CONFIRMED", "b": "REFUTED", "c": "CONFIRMED", "d": "UNDECIDED", "e": "NOT-RUN",
                    "f": "UNDECIDED"})
    shifted = _claims({"a": "CONFIRMED", "b": "CONFIRMED", "c": "UNDECIDED", "d": "REFUTED", "e": "CONFIRMED",
                       "f": "UNDECIDED"})
    table = compare(main, shifted).set_index("claim_id")
    assert table["change"].to_dict() == {"a": "agree", "b": FLIP, "c": "to UNDECIDED", "d": "from UNDECIDED",
                                         "e": "NOT-RUN", "f": "agree"}
    n = counts(table.reset_index())
    assert n == {"compared": 5, "agree": 2, "flip": 1, "decided_in_both": 2, "to_undecided": 1, "from_undecided": 1}
    md = robustness_markdown(table.reset_index())
    assert "**2 agree** and **1 flip**" in md and "| `b` | §1 | REFUTED | CONFIRMED | **flip** |" in md
    missing = compare(main, shifted[shifted["claim_id"] != "a"]).set_index("claim_id")
    assert missing.loc["a", "shifted_verdict"] == "NOT-RUN" and missing.loc["a", "change"] == "NOT-RUN"


@pytest.mark.slow
def test_make_robustness_on_the_smoke_configuration(smoke_run, tmp_path):
    """`snakemake reports/robustness.md` after the smoke run: only the shifted grid and the comparison run; the
    smoke run's own outputs are left as they were."""
    assert smoke_run.returncode == 0, smoke_run.log_tail
    workdir = tmp_path / "smoke"
    shutil.copytree(smoke_run.workdir, workdir, symlinks=True)
    before = (workdir / SMOKE_REPORTS / "claims.csv").read_bytes()
    result = snakemake(workdir, CONFIGS["smoke"], "--cores", "2", f"{SMOKE_REPORTS}/robustness.md")
    out = result.stdout + result.stderr
    log = workdir / "logs/robustness/run.log"
    assert result.returncode == 0, out[-3000:] + (log.read_text()[-3000:] if log.exists() else "")
    assert (workdir / SMOKE_REPORTS / "claims.csv").read_bytes() == before
    shifted = yaml.safe_load((workdir / "robustness/config.yaml").read_text())
    assert shifted["families"]["baselines"]["seeds"] == [5, 6] and shifted["defaults"]["lm"]["train_len"] == 40
    assert (workdir / "robustness/results/lm").is_dir() and (workdir / "robustness/reports/claims.md").exists()
    md = (workdir / SMOKE_REPORTS / "robustness.md").read_text()
    assert md.startswith("# Robustness") and "training lengths [32] → [40]" in md
    table = pd.read_csv(workdir / SMOKE_REPORTS / "robustness.csv")
    assert len(table) == 18 and set(table["change"]) <= {"agree", "flip", "to UNDECIDED", "from UNDECIDED",
                                                        "NOT-RUN"}

    # the nested run killed with SIGKILL: its lock stays behind in robustness/; the next run clears it and goes on
    locks = workdir / "robustness/.snakemake/locks"
    locks.mkdir(parents=True, exist_ok=True)
    (locks / "0.output.lock").write_text("reports/claims.csv\nreports/claims.md\n")
    (workdir / "robustness/reports/claims.csv").unlink()
    (workdir / SMOKE_REPORTS / "robustness.md").unlink()  # the comparison is remade, so its missing input is too
    again = snakemake(workdir, CONFIGS["smoke"], "--cores", "2", f"{SMOKE_REPORTS}/robustness.md")
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:] + log.read_text()[-3000:]
    assert "cleared a stale Snakemake lock" in log.read_text() and not list(locks.glob("*.lock"))
    assert "rule train_lm:" not in log.read_text()  # only the claims were remade: the shifted grid's results were kept
