"""The attention sink of App. K per sequence: several windows of the validation split, the same for every run of a
dataset (runs pair by sequence), one row per sequence × layer from `dape evaluate --sink-out` to reports/sink.csv."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from dape_core import attention_maps, io
from dape_core.cli import main
from dape_core.config import SCHEMA_PATH, attention_map_options, build_plan, load_yaml, train_options
from dape_core.data import load_split
from dape_core.errors import ArtefactError, ConfigError
from dape_core.evaluate import EvalSettings
from dape_core.report import aggregate, figures
from dape_core.settings import defaults

REPO = Path(__file__).resolve().parents[1]
TINY = ["--size", "tiny", "--train-len", "32", "--batch-size", "8", "--threads", "1", "--no-progress", "--steps", "20",
        "--lr", "3e-3", "--log-every", "10"]


# ------------------------------------------------------------------------------------------- the choice
class Split:
    """The part of a token split that the choice reads: document lengths and tokens."""

    def __init__(self, documents):
        self.documents = [np.asarray(d) for d in documents]
        self.document_lengths = np.array([len(d) for d in self.documents])

    def document(self, index):
        return self.documents[index]


def test_sequences_are_distinct_non_overlapping_windows_in_a_seeded_order():
    rng = np.random.default_rng(1)
    split = Split([rng.integers(0, 100, n) for n in (10, 40, 100, 25, 64)])
    chosen = attention_maps.sink_sequences(split, 32, 8)
    assert sorted(chosen) == [(1, 0), (2, 0), (2, 32), (2, 64), (4, 0), (4, 32)]  # all 6 < 8 windows there are
    assert chosen != sorted(chosen)  # in a seeded order, not the split's
    assert attention_maps.sink_sequences(split, 32, 8) == chosen  # deterministic
    assert attention_maps.sink_sequences(split, 32, 3) == chosen[:3]  # a smaller count is a prefix
    assert attention_maps.sink_sequences(split, 32, 8, seed=1) != chosen  # the evaluation seed orders them
    assert attention_maps.sink_sequences(split, 200, 8) == []  # no document long enough


def test_a_window_repeated_in_another_document_counts_once():
    header = np.arange(16)
    split = Split([header, header.copy(), np.arange(16, 32)])  # two documents are one licence header
    chosen = attention_maps.sink_sequences(split, 16, 3)
    assert len(chosen) == 2 and {d for d, _ in chosen} & {0, 1} and (2, 0) in chosen


@pytest.mark.parametrize("length, count, field", [(32, 0, "sink_sequences"), (0, 4, "heatmap_len")])
def test_bad_counts_name_the_field_and_the_allowed_values(length, count, field):
    with pytest.raises(ConfigError, match=f"^{field}: .*allowed values: a positive integer"):
        attention_maps.sink_sequences(Split([np.arange(64)]), length, count)
    if field == "sink_sequences":
        with pytest.raises(ConfigError, match="^sink_sequences: .*allowed values"):
            EvalSettings(sink_sequences=count)


# ------------------------------------------------------------------------------------------- the job
@pytest.fixture(scope="module")
def two_runs(tiny_corpus, tmp_path_factory):
    """Two runs of one dataset: Kerple and DAPE1x3-Kerple."""
    runs = {}
    for name, extra in {"kerple": [], "dape1x3": ["--processor", "dape_v2", "--kernel-size", "3"]}.items():
        out = tmp_path_factory.mktemp(name)
        assert main(["train", "--data-dir", str(tiny_corpus), "--out-dir", str(out), "--encoding", "kerple", *TINY,
                     *extra]) == 0
        runs[name] = out
    return runs


def _sink_job(checkpoint, corpus, out: Path, sequences: int, length: int = 48) -> pd.DataFrame:
    out.mkdir(parents=True, exist_ok=True)
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--data-dir", str(corpus), "--eval-lens", str(length),
                 "--min-scored-tokens", "1", "--max-windows", "1", "--batch-size", "1", "--threads", "1",
                 "--heatmap-len", str(length), "--sink-sequences", str(sequences), "--out", str(out / "eval.csv"),
                 "--sink-out", str(out / "sink.csv"), "--heatmap-out", str(out / "maps.npz")]) == 0
    return pd.read_csv(out / "sink.csv")


def test_n_sequences_give_n_times_layers_rows_paired_across_runs(two_runs, tiny_corpus, tmp_path):
    frames = {name: _sink_job(run / "model.pt", tiny_corpus, tmp_path / name, sequences=5)
              for name, run in two_runs.items()}
    n_layer = 2  # the tiny preset
    for frame in frames.values():
        assert len(frame) == 5 * n_layer
        assert sorted(frame.groupby("sequence").size().items()) == [(s, n_layer) for s in range(5)]
        assert set(attention_maps.SINK_COLUMNS) <= set(frame.columns)
        assert frame["sink_mass"].between(0, 1).all() and frame["sink_mass"].notna().all()
        per_sequence = frame.groupby("sequence")["sink_mass"].mean()
        assert per_sequence.nunique() == 5  # different sequences, different masses
    key = ["sequence", "document", "start", "layer"]
    a, b = (frames[name][key].sort_values(key).reset_index(drop=True) for name in ("kerple", "dape1x3"))
    pd.testing.assert_frame_equal(a, b)  # the same sequences for every run of the dataset: a pairing key
    split = load_split(tiny_corpus, "val")
    windows = frames["kerple"].drop_duplicates("sequence")[["document", "start"]].itertuples(index=False)
    assert [tuple(map(int, w)) for w in windows] == attention_maps.sink_sequences(split, 48, 5)
    assert not frames["kerple"]["sink_mass"].equals(frames["dape1x3"]["sink_mass"])  # the models differ


def test_sequence_zero_is_the_heatmap_sequence_and_each_mass_its_own_forward(two_runs, tiny_corpus, tmp_path):
    sink = _sink_job(two_runs["dape1x3"] / "model.pt", tiny_corpus, tmp_path, sequences=3)
    from dape_core.model_file import load_model

    model, _ = load_model(two_runs["dape1x3"] / "model.pt")
    split = load_split(tiny_corpus, "val")
    with np.load(tmp_path / "maps.npz") as maps:
        for _, row in sink.iterrows():
            doc, start = int(row["document"]), int(row["start"])
            tokens = torch.from_numpy(np.asarray(split.document(doc)[start:start + 48], dtype=np.int64))[None]
            rows = attention_maps.layer_rows(model, tokens)
            assert row["sink_mass"] == pytest.approx(rows[int(row["layer"])]["sink_mass"], rel=1e-5)
            if row["sequence"] == 0:
                np.testing.assert_allclose(maps[f"layer{int(row['layer'])}_probs"], rows[int(row["layer"])]["probs"],
                                           rtol=1e-5, atol=1e-7)


def test_a_diverged_run_writes_no_rows_and_keeps_one_diverged_row_in_the_report(two_runs, tiny_corpus, tmp_path):
    ckpt = torch.load(two_runs["kerple"] / "model.pt", weights_only=False)
    ckpt["status"] = "diverged"
    torch.save(ckpt, tmp_path / "model.pt")
    io.seal_file(tmp_path / "model.pt")
    plan = build_plan(load_yaml(REPO / "config.yaml"))
    run, seed, length = plan.attention_jobs()[0]
    job = tmp_path / f"results/lm/{run}/seed{seed}/attention/L{length}"
    sink = _sink_job(tmp_path / "model.pt", tiny_corpus, job, sequences=4)
    assert sink.empty and list(sink.columns[: len(attention_maps.SINK_COLUMNS)]) == attention_maps.SINK_COLUMNS
    report = aggregate.sink_results(plan.report_spec(), [str(job / "sink.csv")])
    assert len(report) == 1 and report["status"].iloc[0] == "diverged" and report["sink_mass"].isna().all()


# ------------------------------------------------------------------------------------------- the report
def _job_files(root: Path, run: str, seed: int, length: int, masses: np.ndarray) -> str:
    """A job's sink.csv (masses [sequence, layer]) and eval.csv, laid out as the workflow writes them."""
    job = root / f"results/lm/{run}/seed{seed}/attention/L{length}"
    job.mkdir(parents=True)
    rows = [{"method": "m", "eval_len": length, "layer": layer, "sequence": s, "document": s, "start": 0,
             "sink_mass": m, "device": "cpu"} for (s, layer), m in np.ndenumerate(masses)]
    pd.DataFrame(rows).to_csv(job / "sink.csv", index=False)
    pd.DataFrame([{"eval_len": length, "method": "m", "status": "ok", "ppl": 9.0, "loss": np.log(9.0),
                   "config_hash": "h", "data_dir": "d"}]).to_csv(job / "eval.csv", index=False)
    for name in ("sink.csv", "eval.csv"):
        io.seal_file(job / name)  # as the job seals what it writes
    return str(job / "sink.csv")


def test_the_report_keeps_one_row_per_sequence_and_layer_and_the_figure_averages_them(tmp_path):
    plan = build_plan(load_yaml(REPO / "config.yaml"))
    jobs = plan.attention_jobs()[:2]
    rng = np.random.default_rng(0)
    paths = [_job_files(tmp_path, run, seed, length, rng.uniform(0.05, 0.9, size=(3, 2))) for run, seed, length in jobs]
    report = aggregate.sink_results(plan.report_spec(), paths)
    assert len(report) == 2 * 3 * 2
    assert list(report.columns[:10]) == ["run", "seed", "families", "roles", "method", "heatmap_len", "sequence",
                                         "layer", "sink_mass", "status"]
    assert (report["roles"] == "attention_maps").all() and (report["status"] == "ok").all()
    figures.sink_figure(report, tmp_path / "sink.png")
    assert (tmp_path / "sink.png").stat().st_size > 0


def test_a_sink_file_without_sequences_is_named_with_the_command_that_redoes_it(tmp_path):
    plan = build_plan(load_yaml(REPO / "config.yaml"))
    run, seed, length = plan.attention_jobs()[0]
    path = _job_files(tmp_path, run, seed, length, np.full((1, 2), 0.3))
    pd.read_csv(path).drop(columns=["sequence"]).to_csv(path, index=False)
    io.seal_file(path)  # sealed as it is: the column check behind the seal
    with pytest.raises(ArtefactError, match="sink.csv: no column sequence; expected the attention-sink table.*forcerun .*sink.csv "
                                            r"\(rule attention_maps"):
        aggregate.sink_results(plan.report_spec(), [path])


# ------------------------------------------------------------------------------------------- the setting
def test_one_default_in_the_dataclass_the_schema_and_config_yaml():
    """The default is the dataclass field's: the schema file writes only its constraint, the completed schema and
    config.yaml's resolved value (it states only what differs from the defaults) agree with the field."""
    from dape_core.config.schema import full_schema

    raw = load_yaml(SCHEMA_PATH)
    assert raw["$defs"]["attention_settings"]["properties"]["sink_sequences"] == {"minimum": 1}
    schema = full_schema(raw)["$defs"]["attention_settings"]["properties"]["sink_sequences"]
    config = build_plan(load_yaml(REPO / "config.yaml")).config["defaults"]["lm"]["attention"]["sink_sequences"]
    assert defaults(EvalSettings)["sink_sequences"] == schema["default"] == config >= 8


def test_sink_sequences_reach_the_job_but_not_the_run_name_or_training():
    config = load_yaml(REPO / "config.yaml")
    plan = build_plan(config)
    changed = copy.deepcopy(config)
    changed["defaults"]["lm"]["attention"]["sink_sequences"] = 3
    other = build_plan(changed)
    assert sorted(plan.lm_runs) == sorted(other.lm_runs)  # no run renamed
    for name, run in plan.lm_runs.items():
        assert train_options(run["settings"]) == train_options(other.lm_runs[name]["settings"])  # no retraining
    run, _, length = plan.attention_jobs()[0]
    before = attention_map_options(plan.lm_runs[run]["eval"], plan.lm_runs[run]["attention_settings"], length)
    after = attention_map_options(other.lm_runs[run]["eval"], other.lm_runs[run]["attention_settings"], length)
    assert before["sink_sequences"] == plan.config["defaults"]["lm"]["attention"]["sink_sequences"]
    assert after["sink_sequences"] == 3 and "--sink-sequences 3" in str(after)  # the job reruns
