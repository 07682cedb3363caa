"""Timing in interleaved repeats (Table 7 App. H, §4.2): the methods of a cell are timed in one job, one worker
process per method, warm-up discarded, the order rotated each round; every repeat is kept in the per-repeat table;
a worker that fails names its case in one line; the plan groups timing runs into jobs and reruns exactly the jobs
whose settings changed."""

from __future__ import annotations

import argparse
import io
import json
import shlex
import sys

import pandas as pd
import pytest

from dape_core import config as grid
from dape_core import io as dape_io
from dape_core import timing
from dape_core.cli import main
from dape_core.errors import ArtefactError, ConfigError
from dape_core.report import aggregate
from dape_core.settings import from_args

REPO_CONFIG = "configs/grid.yaml"  # its forward-time and step-time cells
METHODS = {"forward-tiny-kerple-none-B1": {"encoding": "kerple", "processor": "none"},
           "forward-tiny-kerple-dape_v2-k3-w32-B1": {"encoding": "kerple", "processor": "dape_v2", "kernel_size": 3}}


# --------------------------------------------------------------------------------------------- the rounds
def test_the_order_rotates_so_that_no_method_always_goes_first():
    assert [timing.rotation(2, r) for r in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    orders = [timing.rotation(3, r) for r in range(6)]
    assert orders[:3] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]] and orders[3:] == orders[:3]
    for n in (2, 3, 7):
        firsts = {timing.rotation(n, r)[0] for r in range(n)}
        assert firsts == set(range(n))  # every method goes first once per n rounds
        assert all(sorted(timing.rotation(n, r)) == list(range(n)) for r in range(10))


@pytest.fixture(scope="module")
def timed_job(tmp_path_factory):
    """`dape time --methods` on two methods at one length: 3 interleaved repeats after 2 discarded warm-ups."""
    out = tmp_path_factory.mktemp("timing") / "forward-tiny-B1.csv"
    code = main(["time", "--size", "tiny", "--vocab-size", "64", "--seq-lens", "16", "--repeats", "3",
                 "--warmup", "2", "--threads", "1", "--methods", json.dumps(METHODS), "--out", str(out)])
    assert code == 0
    return pd.read_csv(out), pd.read_csv(timing.repeats_path(str(out))), out


def test_each_method_has_one_row_per_round_and_the_order_alternates(timed_job):
    summary, repeats, _ = timed_job
    assert list(summary["run"]) == list(METHODS) and set(summary["cell"]) == {"forward-tiny-B1-T16"}
    assert (summary["status"] == "ok").all() and (summary["repeats"] == 3).all() and (summary["warmup"] == 2).all()
    assert len(repeats) == 2 * 3  # methods × repeats: the 2 warm-up runs of each worker are not rows
    for run, rows in repeats.groupby("run"):
        assert sorted(rows["round"]) == [0, 1, 2]
    first, second = METHODS
    by_round = repeats.sort_values(["round", "position"]).groupby("round")["run"].apply(list)
    assert list(by_round) == [[first, second], [second, first], [first, second]]  # alternated
    for row in summary.itertuples():  # the summary is the repeats' median and minimum
        ms = repeats.loc[repeats["run"] == row.run, "ms"]
        assert row.median_ms == pytest.approx(ms.median()) and row.min_ms == pytest.approx(ms.min())
        assert row.peak_mem_mb > 0 and row.device == "cpu"


def test_the_per_repeat_table_has_the_contract_columns(timed_job, tmp_path):
    summary, repeats, out = timed_job
    assert set(aggregate.REPEAT_COLUMNS) <= set(repeats.columns)
    assert list(repeats.columns) == list(timing.REPEAT_COLUMNS)
    assert (repeats["ms"] > 0).all() and set(repeats["position"]) == {0, 1} and set(repeats["seq_len"]) == {16}
    assert set(repeats["device"]) == {"cpu"} and set(repeats["threads"]) == {1}
    assert dict(zip(summary["run"], summary["method"])) == dict(zip(repeats["run"], repeats["method"]))
    plan = {"families": {"t": {"role": "forward_time"}},
            "timing_members": [{"family": "t", "run": run} for run in METHODS]}
    table = aggregate.timing_results(plan, [str(out)])
    assert list(table["run"]) == list(METHODS) and set(table["roles"]) == {"forward_time"}
    rows = aggregate.timing_repeats(plan, [timing.repeats_path(str(out))], table)
    assert list(rows.columns[:3]) == ["run", "families", "roles"] and len(rows) == 6
    assert set(rows["families"]) == {"t"} and list(rows.columns[3:3 + len(aggregate.REPEAT_COLUMNS) - 1]) == list(
        aggregate.REPEAT_COLUMNS[1:])
    damaged = tmp_path / "forward-tiny-B1.repeats.csv"
    repeats.iloc[1:].to_csv(damaged, index=False)  # one repeat lost
    dape_io.seal_file(damaged)  # sealed as it is: the row count behind the seal
    with pytest.raises(ConfigError, match=r"has 2 repeat rows in its \.repeats\.csv, expected 3; redo it with"):
        aggregate.timing_repeats(plan, [str(damaged)], table)


def test_blocks_time_each_method_in_fresh_worker_processes_and_count_rounds_across_them(tmp_path):
    """``blocks`` 2 × ``repeats`` 2: each block starts fresh workers (their process ids differ between blocks), its
    rounds follow the last block's, and the summary is over every block; the workers compute on
    ``compute_threads`` (1) of the job's 2 threads, which every row records."""
    out = tmp_path / "forward-tiny-B1.csv"
    spawned = []
    original = timing.Worker.__init__

    def spy(self, case):
        original(self, case)
        spawned.append((case["run"], self.process.pid))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timing.Worker, "__init__", spy)
        code = main(["time", "--size", "tiny", "--vocab-size", "64", "--seq-lens", "16", "--repeats", "2",
                     "--blocks", "2", "--compute-threads", "1", "--warmup", "0", "--threads", "2", "--methods",
                     json.dumps(METHODS), "--out", str(out)])
    assert code == 0
    summary, repeats = pd.read_csv(out), pd.read_csv(timing.repeats_path(str(out)))
    assert len(spawned) == 4 and len({pid for _, pid in spawned}) == 4  # 2 methods × 2 blocks, each its own process
    assert (summary["blocks"] == 2).all() and (summary["repeats"] == 2).all() and set(summary["threads"]) == {1}
    assert set(repeats["threads"]) == {1} and len(repeats) == 2 * 2 * 2
    for run, rows in repeats.groupby("run"):
        assert list(rows.sort_values("round")["block"]) == [0, 0, 1, 1] and sorted(rows["round"]) == [0, 1, 2, 3]
    for row in summary.itertuples():
        assert row.median_ms == pytest.approx(repeats.loc[repeats["run"] == row.run, "ms"].median())
    plan = {"families": {"t": {"role": "forward_time"}},
            "timing_members": [{"family": "t", "run": run} for run in METHODS]}
    table = aggregate.timing_results(plan, [str(out)])
    assert len(aggregate.timing_repeats(plan, [timing.repeats_path(str(out))], table)) == 8  # repeats × blocks
    with pytest.raises(ConfigError, match=r"compute_threads: 3 is more than the job's threads \(2\); allowed values"):
        timing.TimingSettings(compute_threads=3, threads=2)
    with pytest.raises(ConfigError, match="blocks"):
        timing.TimingSettings(blocks=0)


SIZED = {f"{method}-{size}": {**attention, "size": "tiny", **({"n_layer": 1} if size == "L1" else {})}
         for size in ("L1", "L2") for method, attention in (("kerple", METHODS["forward-tiny-kerple-none-B1"]),
                                                           ("dape", METHODS["forward-tiny-kerple-dape_v2-k3-w32-B1"]))}


@pytest.fixture(scope="module")
def replicate_job(tmp_path_factory):
    """One replicate job (``--replicate 1``) of a job of two shapes (1 and 2 layers) × two methods, as rule time_lm
    runs it: one block, 2 interleaved rounds."""
    folder = tmp_path_factory.mktemp("replicates") / "results" / "timing" / "forward-tiny-B1"
    folder.mkdir(parents=True)
    out = folder / "rep1.csv"
    code = main(["time", "--vocab-size", "64", "--seq-lens", "16", "--repeats", "2", "--warmup", "0", "--threads",
                 "1", "--replicate", "1", "--methods", json.dumps(SIZED), "--out", str(out)])
    assert code == 0
    return out


def test_every_block_times_both_sizes_and_both_methods_interleaved(replicate_job):
    summary, repeats = pd.read_csv(replicate_job), pd.read_csv(timing.repeats_path(str(replicate_job)))
    assert list(summary["run"]) == list(SIZED) and list(summary["n_layer"]) == [1, 1, 2, 2]
    assert set(summary["cell"]) == {"forward-tiny-B1-T16"}  # the job's folder names the cell, not the replicate
    assert set(summary["replicate"]) == set(repeats["replicate"]) == {1}
    for (block, round_index), rows in repeats.groupby(["block", "round"]):
        assert sorted(rows["run"]) == sorted(SIZED) and sorted(rows["position"]) == [0, 1, 2, 3]
    assert set(repeats.groupby("run")["block"].nunique()) == {1} and len(repeats) == 4 * 2
    orders = repeats.sort_values(["round", "position"]).groupby("round")["run"].apply(list)
    # replicate 1 continues the rotation where replicate 0's 2 rounds end: its first round starts at the third run
    assert list(orders) == [[*list(SIZED)[2:], *list(SIZED)[:2]], [*list(SIZED)[3:], *list(SIZED)[:3]]]


def _replicate(path, k, tmp):
    """A copy of a replicate job's two files as replicate ``k`` (its times shifted), sealed as a job seals them."""
    out = tmp / f"rep{k}.csv"
    for source, target in ((path, out), (timing.repeats_path(str(path)), timing.repeats_path(str(out)))):
        frame = pd.read_csv(source).assign(replicate=k)
        if "ms" in frame:
            frame["ms"] = frame["ms"] * (1 + k)
        dape_io.write_csv(target, frame, seal=True)
    return out


def test_the_merge_keeps_every_replicates_repeats_and_summarises_over_them(replicate_job, tmp_path, capsys):
    """rule merge_timing: the replicates' repeats stacked with their ``replicate``; per method × length the median
    over all of them and ``replicates``; a file that is another replicate's, or a count other than ``replicates``,
    stops the merge with one line naming it."""
    reps = [_replicate(replicate_job, k, tmp_path) for k in range(3)]
    out = tmp_path / "forward-tiny-B1.csv"
    assert main(["time", "--merge", *map(str, reps), "--replicates", "3", "--out", str(out)]) == 0
    summary, repeats = pd.read_csv(out), pd.read_csv(timing.repeats_path(str(out)))
    assert list(repeats.columns) == list(timing.REPEAT_COLUMNS) and len(repeats) == 3 * 8
    assert list(repeats["replicate"].drop_duplicates()) == [0, 1, 2]
    assert (summary["replicates"] == 3).all() and "replicate" not in summary
    for row in summary.itertuples():
        assert row.median_ms == pytest.approx(repeats.loc[repeats["run"] == row.run, "ms"].median())
    plan = {"families": {"t": {"role": "forward_time"}},
            "timing_members": [{"family": "t", "run": run} for run in SIZED]}
    table = aggregate.timing_results(plan, [str(out)])
    assert len(aggregate.timing_repeats(plan, [timing.repeats_path(str(out))], table)) == 24  # × 3 replicates
    swapped = [reps[1], reps[0], reps[2]]
    with pytest.raises(SystemExit):  # replicate 1's file where replicate 0's belongs: refused, named in one line
        main(["time", "--merge", *map(str, swapped), "--replicates", "3", "--out", str(out)])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"dape time: error: {reps[1]}: is not replicate 0's") and "--forcerun" in error
    with pytest.raises(ConfigError, match=r"^merge: 2 replicate files for replicates 3; allowed values"):
        timing.merge([str(p) for p in reps[:2]], 3)
    reps[2].write_text(reps[2].read_text().replace(",ok,", ",ok ,", 1))  # damaged after its seal
    with pytest.raises(ArtefactError, match=rf"^{reps[2]}: "):
        timing.merge([str(p) for p in reps], 3)


# --------------------------------------------------------------------------------------------- failures
def _cell(**case):
    return [{**timing.cases(timing.TimingSettings(size="tiny", vocab_size=64, seq_lens=[16], repeats=2, warmup=0,
                                                  threads=1))[0], "run": "forward-tiny-kerple-none-B1",
             "cell": "forward-tiny-B1-T16", "cell_size": 1, **case}]


def test_a_worker_that_exits_gives_one_line_naming_the_case(monkeypatch):
    script = "import sys; sys.stderr.write('Traceback …\\nMemoryError: boom\\n'); sys.exit(3)"
    monkeypatch.setattr(timing.workers, "WORKER_COMMAND", (sys.executable, "-c", script))
    with pytest.raises(timing.TimingWorkerError) as info:
        timing.time_cell(_cell())
    message = str(info.value)
    assert "\n" not in message
    assert message == ("timing worker for run forward-tiny-kerple-none-B1 (cell forward-tiny-B1-T16: forward, size "
                       "tiny, T=16, B=1) exited with code 3: MemoryError: boom")


def test_a_worker_error_is_one_line_and_dape_time_exits_with_it(monkeypatch, tmp_path, capsys):
    reply = timing.REPLY + json.dumps({"error": "RuntimeError: shapes do not match"})
    script = f"import sys; print('a library says hello'); sys.stdin.readline(); print({reply!r}, flush=True)"
    monkeypatch.setattr(timing.workers, "WORKER_COMMAND", (sys.executable, "-c", script))
    out = tmp_path / "job.csv"
    assert main(["time", "--size", "tiny", "--vocab-size", "64", "--seq-lens", "16", "--threads", "1",
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["dape time: error: timing worker for run Kerple (cell job-T16: forward, size tiny, T=16, B=1) "
                   "failed: RuntimeError: shapes do not match"]
    assert not out.exists() and not (tmp_path / "job.repeats.csv").exists()


def test_the_worker_replies_an_error_in_one_line_in_process():
    commands = io.StringIO(json.dumps({"build": {**_cell()[0], "size": "huge"}}) + "\n")
    replies = io.StringIO()
    assert timing.worker_main(commands, replies) == 1
    (line,) = replies.getvalue().splitlines()
    assert json.loads(line.removeprefix(timing.REPLY))["error"].startswith("ConfigError: size: 'huge' is not allowed; allowed values:")


def test_bad_methods_name_the_field():
    settings = timing.TimingSettings(size="tiny")
    with pytest.raises(ConfigError, match=r"^methods\.a\.colour: unknown setting; allowed values: encoding, "):
        timing.parse_methods(json.dumps({"a": {"colour": "red"}}), settings)
    with pytest.raises(ConfigError, match=r"^methods\.a\.processor: 'dape_v9' is not allowed; allowed values: none, "):
        timing.parse_methods(json.dumps({"a": {"processor": "dape_v9"}}), settings)
    with pytest.raises(ConfigError, match=r"^methods: not valid JSON"):
        timing.parse_methods("{", settings)


# --------------------------------------------------------------------------------------------- the plan
def test_timing_runs_are_grouped_into_jobs_of_the_methods_a_cell_compares():
    plan = grid.build_plan(grid.load_yaml(REPO_CONFIG))
    assert plan.config["defaults"]["timing"]["repeats"] >= 10 and plan.config["defaults"]["timing"]["warmup"] >= 1
    jobs = plan.timing_jobs
    # both sizes of the forward-time family in one job: every block times each method of each size
    assert sorted(jobs) == ["forward-small-medium-B1", "train_step-small-N4096"]
    assert sorted(run for job in jobs.values() for run in job["runs"]) == sorted(plan.timing_runs)  # each once
    assert len(jobs["forward-small-medium-B1"]["runs"]) == 14 and len(jobs["train_step-small-N4096"]["runs"]) == 2
    assert {plan.timing_runs[run]["size"] for run in jobs["forward-small-medium-B1"]["runs"]} == {"small", "medium"}
    for job in jobs.values():
        settings = [plan.timing_runs[run] for run in job["runs"]]
        assert "size" not in job["settings"] and "n_layer" not in job["settings"]
        for key in ("seq_lens", "batch_size", "equal_tokens", "mode", "precision", "repeats", "blocks", "replicates"):
            assert {json.dumps(s[key]) for s in settings} == {json.dumps(job["settings"][key])}, key
    forward = jobs["forward-small-medium-B1"]["settings"]["replicates"]
    assert forward == 4 and jobs["train_step-small-N4096"]["settings"]["replicates"] == 2
    assert plan.job_counts()["forward_time"] == {"time_lm": forward}
    assert plan.job_counts()["step_time"] == {"time_lm": 2}


def test_a_job_passes_its_runs_attention_settings_and_parses_back():
    plan = grid.build_plan(grid.load_yaml(REPO_CONFIG))
    job = plan.timing_jobs["train_step-small-N4096"]
    options = grid.timing_job_options(job, plan.timing_runs)
    argv = shlex.split(f"{options['timing']} --methods {options['methods']} --out o.csv")
    parser = argparse.ArgumentParser()
    timing.add_arguments(parser)
    args = parser.parse_args(argv)
    methods = timing.parse_methods(args.methods, from_args(timing.TimingSettings, args))
    assert list(methods) == job["runs"]
    assert args.replicate == 0 and "replicates" not in str(options["timing"])  # the merge's setting, not a job's
    for run, settings in methods.items():
        for key, value in plan.timing_runs[run].items():
            if hasattr(settings, key) and key != "batch_size":
                assert getattr(settings, key) == value, (run, key)
    cells = timing.cells(methods, "train_step-small-N4096")
    assert [c[0]["cell"] for c in cells] == [f"train_step-small-N4096-T{n}" for n in (64, 128, 256, 512)]
    assert all(len(c) == 2 and c[0]["batch_size"] * c[0]["seq_len"] == 4096 for c in cells)


def _params(plan, job):
    """A job's params as Snakemake's rerun trigger compares them (their repr)."""
    return {k: repr(v) for k, v in grid.timing_job_options(plan.timing_jobs[job], plan.timing_runs).items()}


def _changed(before, config) -> set[str]:
    after = grid.build_plan(config)
    assert list(after.timing_jobs) == list(before.timing_jobs)  # the job names stay
    return {job for job in before.timing_jobs if _params(before, job) != _params(after, job)}


def test_a_changed_setting_reruns_exactly_its_jobs():
    before = grid.build_plan(grid.load_yaml(REPO_CONFIG))
    config = grid.load_yaml(REPO_CONFIG)
    config["families"]["step_time"]["set"]["warmup"] = 3  # a protocol setting of one family
    assert _changed(before, config) == {"train_step-small-N4096"}
    config = grid.load_yaml(REPO_CONFIG)
    config["families"]["forward_time"]["axes"]["method"][-1] = "DAPE1x5-Kerple"  # one method of both sizes
    assert _changed(before, config) == {"forward-small-medium-B1"}
    config = grid.load_yaml(REPO_CONFIG)
    config["families"]["forward_time"]["set"]["replicates"] = 6  # more replicate jobs: the merge only
    after = grid.build_plan(config)
    job = "forward-small-medium-B1"
    assert _params(before, job)["timing"] == _params(after, job)["timing"]
    assert _params(before, job)["methods"] == _params(after, job)["methods"]
    assert _params(before, job)["replicates"] != _params(after, job)["replicates"]
    assert grid.timing_spec(after.timing_jobs[job], after.timing_runs, 3).json() == grid.timing_spec(
        before.timing_jobs[job], before.timing_runs, 3).json()
    # the merge checks each replicate's file against the settings its own job was handed
    merged = grid.timing_spec(after.timing_jobs[job], after.timing_runs).json()
    assert timing.replicate_spec(merged, 3) == grid.planned_spec(after, f"results/timing/{job}/rep3.csv")
    config = grid.load_yaml(REPO_CONFIG)
    config["resources"]["time_lm"]["threads"] = 1  # the job's resources, not a setting of its runs: no rerun
    assert _changed(before, config) == set()


def test_groups_that_share_a_name_but_not_their_protocol_are_numbered():
    from test_config import base_config

    plan = grid.build_plan(base_config(
        a={"stage": "timing", "axes": {"method": ["Kerple", "RoPE"]}},
        b={"stage": "timing", "set": {"warmup": 5}, "axes": {"method": ["ALiBi"]}}))
    assert {name: job["runs"] for name, job in plan.timing_jobs.items()} == {
        "forward-small-B1": ["forward-small-kerple-none-B1", "forward-small-rope-none-B1"],
        "forward-small-B1-2": ["forward-small-alibi-none-B1"]}
