"""Claim verdicts with intervals (CONFIRMED / REFUTED / UNDECIDED) on synthetic per-window losses; per-window
losses written by `dape evaluate` and collected by `dape report lm`; `--bootstrap 0`."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
import torch

from dape_core.cli import main
from dape_core.config.dispatch import row_gpu_hours
from dape_core.data import load_split
from dape_core.errors import ConfigError
from dape_core.evaluate import WINDOW_COLUMNS, choose_device, device_name, evaluate_windows
from dape_core.methods import parse_method
from dape_core.model import GPT, GPTConfig
from dape_core.report import aggregate
from dape_core.report.claims import CONFIRMED, NOT_RUN, REFUTED, UNDECIDED, claims_markdown, evaluate_claims
from dape_core.report.intervals import (NO_PAIR_SPREAD, POINT, Interval, SeedNoise, combine, decide, interval,
                                        seeds_to_decide)
from dape_core.report.seed_noise import SeedNoiseSource, table_variance

GAIN_20 = math.log(0.8)  # log ppl offset of a method 20 % better: ppl_A / ppl_B = 0.8


# Noise as measured on real runs (Kerple, d 128, 2 layers, T 64, 300 steps at batch 16, 3 seeds, evaluated at
# 64…1024 on 32 windows of 32 tokens): per-window loss sd 0.93 nats; two seeds' mean losses differ by 0.01–0.04
# nats, about one standard error (0.025) of the paired per-window difference.
SEED_SD, WINDOW_SD = 0.02, 0.1


def synthetic(offsets: dict[str, float], seeds=(0, 1), n_windows=32, lengths=(64, 128, 256), train_len=64,
              seed_sd=SEED_SD, window_sd=WINDOW_SD, rng=0, role="every_encoding", ids=None):
    """(lm_results rows, lm_windows rows) of methods whose per-window loss is the window's difficulty (shared by
    every method and seed, sd 0.9 nats) + the method's planted offset + a per-(method, seed) effect (sd
    ``seed_sd``) + a per-(method, seed, window) deviation (sd ``window_sd``, the same at every length, plus a
    quarter of it per length). ``ids`` maps a method to its own window ids."""
    gen = np.random.default_rng(rng)
    difficulty = gen.normal(4.0, 0.9, n_windows)
    lm, windows = [], []
    for method, offset in offsets.items():
        p = parse_method(method)
        for seed in seeds:
            effect, deviation = gen.normal(0.0, seed_sd), gen.normal(0.0, window_sd, n_windows)
            run = f"{method}-run"
            for n in lengths:
                loss = difficulty + offset + effect + deviation + gen.normal(0.0, window_sd / 4, n_windows)
                documents = (ids or {}).get(method, np.arange(n_windows))
                windows.append(pd.DataFrame({"run": run, "seed": seed, "eval_len": n, "document": documents,
                                             "anchor": 1000, "tokens": 32, "loss": loss, "loss_dp": loss,
                                             "loss_local": loss}))
                lm.append({"run": run, "seed": seed, "families": "fam", "roles": role, "method": method,
                           "dataset": "code", "size": "small", "encoding": p["encoding"], "processor": p["processor"],
                           "kernel_size": p["kernel_size"], "dape_width": 32, "tril": p["tril"],
                           "train_len": train_len, "eval_len": n, "status": "ok", "ppl": float(np.exp(loss.mean()))})
    return pd.DataFrame(lm), pd.concat(windows, ignore_index=True)


def check(claim_id: str, lm: pd.DataFrame, windows: pd.DataFrame | None) -> pd.Series:
    return evaluate_claims(lm, windows=windows, claim_ids=[claim_id]).set_index("claim_id").loc[claim_id]


def first_check(record: pd.Series) -> dict:
    return next(iter(record["numbers"].values()))


# ------------------------------------------------------------------------------------------ the three verdicts
# The multi-seed source of the tests below: six methods of the same setting, whose seed effects (sd 0.03 nats per
# method and seed, as measured at the default's scale) are larger than the window noise of a mean over 32 windows.
SOURCE_SD = 0.03
SOURCE = ("Kerple", "ALiBi", "FIRE", "T5", "XL", "CoPE")


def with_source(lm: pd.DataFrame, windows: pd.DataFrame, seed_sd=SOURCE_SD, methods=SOURCE, seeds=(0, 1), rng=7):
    source = synthetic({m: 0.0 for m in methods}, seeds=seeds, seed_sd=seed_sd, window_sd=0.02, rng=rng,
                       role="central")
    return pd.concat([lm, source[0]], ignore_index=True), pd.concat([windows, source[1]], ignore_index=True)


@pytest.mark.parametrize("seeds", [(0, 1), (0, 1, 2)])
def test_two_seeds_of_one_method_compared_with_each_other_are_rarely_decided(seeds):
    """"RoPE" and "DAPE-RoPE" are here one and the same method under two names, compared 40 times at the measured
    noise, each with the spread of its own pair over its seeds (not the setting's other 6 runs): a calibrated 95 %
    interval excludes 0 about 2 times in 40 (binomial: at most 6 with probability 0.99)."""
    verdicts, widths = [], []
    for rng in range(40):
        lm, windows = synthetic({"RoPE": 0.0, "DAPE-RoPE": 0.0}, seeds, rng=rng)
        record = check("naive_dape_degrades_rope", *with_source(lm, windows, seeds=seeds, rng=100 + rng))
        c = first_check(record)
        assert c["basis"] == "paired t on the seeds' own spread"
        assert c["n_seeds"] == len(seeds) and c["n_rows"] == 32 and c["seed_df"] == len(seeds) - 1
        verdicts.append(record["verdict"])
        widths.append(c["gain_high"] - c["gain_low"])
    assert len(verdicts) - verdicts.count(UNDECIDED) <= 6, verdicts
    assert 0.01 < np.median(widths) < 1.0  # finite intervals of the size of the noise (t on ν = 1 or 2): not vacuous


@pytest.mark.parametrize("rng", [0, 1, 2])
def test_a_planted_20_percent_gain_is_confirmed_and_a_planted_loss_refuted(rng):
    lm, windows = synthetic({"RoPE": GAIN_20, "DAPE-RoPE": 0.0}, seeds=(0, 1, 2, 3), rng=rng)  # RoPE 20 % better
    record = check("naive_dape_degrades_rope", *with_source(lm, windows))
    assert record["verdict"] == CONFIRMED, record["summary"]
    c = first_check(record)
    assert c["gain"] == pytest.approx(0.2, abs=0.03) and c["gain_low"] <= 0.2 <= c["gain_high"]
    assert c["gain_low"] >= c["margin"]
    lm, windows = synthetic({"RoPE": -GAIN_20, "DAPE-RoPE": 0.0}, seeds=(0, 1, 2, 3), rng=rng)  # the opposite
    record = check("naive_dape_degrades_rope", *with_source(lm, windows))
    assert record["verdict"] == REFUTED, record["summary"]
    assert first_check(record)["gain_high"] < 0


def test_a_gain_below_the_margin_is_undecided_not_refuted():
    lm, windows = synthetic({"RoPE": math.log(0.99), "DAPE-RoPE": 0.0}, window_sd=0.01, seed_sd=0.001,
                            seeds=(0, 1, 2))
    record = check("naive_dape_degrades_rope", *with_source(lm, windows, seed_sd=0.001, seeds=(0, 1, 2)))
    c = first_check(record)
    assert c["gain_low"] > 0 and c["gain_high"] < c["margin"]  # surely positive, surely below 2 %
    assert record["verdict"] == UNDECIDED


def test_one_seed_of_a_pair_is_undecided_whatever_the_gap_and_the_grid():
    """One seed per method: the pair's own spread over seeds is unknown, so even a 20 % gap far beyond the window
    noise stays UNDECIDED ("1 seed") — also beside a grid of other methods with several seeds, whose pooled σ a
    noisier pair would exceed. That σ sizes the seeds a verdict would need (a plan): without it, "unknown"."""
    lm, windows = synthetic({"RoPE": GAIN_20, "DAPE-RoPE": 0.0}, seeds=(0,))
    for tables in ((lm, windows), (lm, None), with_source(lm, windows)):
        record = check("naive_dape_degrades_rope", *tables)
        assert record["verdict"] == UNDECIDED and record["basis"].startswith(NO_PAIR_SPREAD), record["summary"]
        c = first_check(record)
        assert c["gain"] == pytest.approx(0.2, abs=0.06) and c["gain_low"] == -math.inf and c["gain_high"] == 1.0
    assert check("naive_dape_degrades_rope", lm, windows)["seeds_to_decide"].startswith("unknown")
    planned = check("naive_dape_degrades_rope", *with_source(lm, windows))["seeds_to_decide"]
    assert re.fullmatch(r"\d+ \(towards CONFIRMED\)", planned) and int(planned.split()[0]) >= 2


def test_two_seeds_without_a_grid_take_their_own_spread():
    """Two methods, three seeds, no other multi-seed run: σ from the pair's own per-seed differences (ν 2)."""
    iv = interval([np.array([[0.0, 0.1]]), np.array([[0.0, 0.12]]), np.array([[0.0, 0.08]])],
                  lambda m: m[:, 1] - m[:, 0])
    assert iv.basis == "paired t on the seeds' own spread (no per-window data)" and iv.seed_noise.df == 2
    assert iv.estimate == pytest.approx(0.1)
    assert iv.high - iv.estimate == pytest.approx(4.302653 * 0.02 / math.sqrt(3), rel=1e-5)  # t_2, 0.975


def five_percent_then_reversed():
    """RoPE 5 % better than DAPE-RoPE with seed 0 and 5 % worse with seed 1, at low window noise."""
    lm, windows = synthetic({"RoPE": 0.0, "DAPE-RoPE": 0.0}, seeds=(0, 1), seed_sd=0.0, window_sd=0.02)
    rope0 = (windows["run"] == "RoPE-run") & (windows["seed"] == 0)
    rope1 = (windows["run"] == "RoPE-run") & (windows["seed"] == 1)
    windows.loc[rope0, "loss"] += math.log(0.95)
    windows.loc[rope1, "loss"] -= math.log(0.95)
    for seed, mask in ((0, rope0), (1, rope1)):
        for n, g in windows[mask].groupby("eval_len"):
            lm.loc[(lm["method"] == "RoPE") & (lm["seed"] == seed) & (lm["eval_len"] == n), "ppl"] = math.exp(
                g["loss"].mean())
    return lm, windows


def test_a_5_percent_gap_that_another_seed_reverses_is_undecided():
    lm, windows = five_percent_then_reversed()
    one_lm, one_windows = lm[lm["seed"] == 0], windows[windows["seed"] == 0]
    # the windows alone would have decided it: the per-window differences' own t-interval is well above 2 %
    rope = one_windows[(one_windows["run"] == "RoPE-run")].groupby(["eval_len", "document"])["loss"].mean()
    dape = one_windows[(one_windows["run"] == "DAPE-RoPE-run")].groupby(["eval_len", "document"])["loss"].mean()
    d = (dape - rope).to_numpy()
    assert -math.expm1(-(d.mean() - 2 * d.std(ddof=1) / math.sqrt(len(d)))) > 0.03
    record = check("naive_dape_degrades_rope", *with_source(one_lm, one_windows))
    c = first_check(record)
    assert c["gain"] == pytest.approx(0.05, abs=0.01)
    assert record["verdict"] == UNDECIDED and record["basis"].startswith(NO_PAIR_SPREAD), record["summary"]
    assert c["gain_low"] == -math.inf
    # and with both seeds the pair's own spread shows the reversal
    both = check("naive_dape_degrades_rope", *with_source(lm, windows))
    assert both["verdict"] == UNDECIDED and both["basis"] == "paired t on the seeds' own spread"
    assert first_check(both)["gain_low"] < 0 < first_check(both)["gain_high"] and "seed noise σ" in both["summary"]


def test_a_gap_far_beyond_the_pairs_own_spread_is_decided():
    for gain, expected in ((GAIN_20, CONFIRMED), (-GAIN_20, REFUTED)):
        lm, windows = synthetic({"RoPE": gain, "DAPE-RoPE": 0.0}, seeds=(0, 1, 2))
        record = check("naive_dape_degrades_rope", *with_source(lm, windows))
        assert record["verdict"] == expected, record["summary"]
        assert record["basis"] == "paired t on the seeds' own spread" and first_check(record)["seed_df"] == 2
        assert record["seeds_to_decide"] == "" and pd.isna(record["extra_jobs"])


def _settings_lm(offsets, seeds, train_len, batch_size, steps=100, rng=0, role="every_encoding"):
    lm, windows = synthetic(offsets, seeds=seeds, train_len=train_len, rng=rng, role=role, lengths=(32, 64, 128))
    lm = lm.assign(batch_size=batch_size, steps=steps, grad_accum=1)
    runs = {r: f"{r}-T{train_len}" for r in lm["run"].unique()}
    return lm.replace({"run": runs}), windows.replace({"run": runs})


def test_a_one_seed_setting_borrows_the_largest_seed_noise_and_says_so():
    """A setting with one seed takes the grid's largest σ of the statistic, from another setting, named (for a
    run's own statistic and unpaired comparisons); a paired comparison borrows none."""
    quiet, quiet_w = _settings_lm({m: 0.0 for m in SOURCE}, (0, 1, 2), 64, 16, rng=1)
    loud, loud_w = _settings_lm({m: 0.0 for m in SOURCE}, (0, 1, 2), 32, 32, rng=2)
    loud_w = loud_w.assign(loss=loud_w["loss"] + np.random.default_rng(3).normal(0, 0.3, len(loud_w)))
    one, one_w = _settings_lm({"RoPE": GAIN_20, "DAPE-RoPE": 0.0}, (0,), 128, 8)
    source = SeedNoiseSource(pd.concat([quiet, loud]), pd.concat([quiet_w, loud_w]))
    setting = ("code", "small", "128", "100", "8", "1")
    borrowed = source.noise(("mean", "all", "loss"), True, setting)
    own_loud = source.noise(("mean", "all", "loss"), True, ("code", "small", "32", "100", "32", "1"))
    own_quiet = source.noise(("mean", "all", "loss"), True, ("code", "small", "64", "100", "16", "1"))
    assert borrowed.sd == own_loud.sd > own_quiet.sd
    assert borrowed.source.startswith("code, T 32, small, 100 steps × batch 32 (6 runs × 3 seeds), borrowed")
    record = check("naive_dape_degrades_rope", pd.concat([quiet, loud, one]), pd.concat([quiet_w, loud_w, one_w]))
    assert record["basis"].startswith(NO_PAIR_SPREAD) and record["verdict"] == UNDECIDED


def test_runs_of_different_batch_streams_are_unpaired():
    """The equal-token comparison: training lengths 32 and 64 at batch 32 and 16 draw different batches, so the
    check is unpaired (Welch), each side with its own seeds' spread (methods differ in noise) — wider than a
    paired one — on the fewer of the two sides' degrees of freedom (Hsu's conservative ν: 3 seeds a side, ν 2); with
    one seed a side borrows its setting's σ and says so."""
    a, aw = _settings_lm({"DAPE1x3-Kerple": 0.0, "RoPE": 0.0, "Kerple": 0.0}, (0, 1, 2), 32, 32, rng=4,
                         role="equal_tokens")
    b, bw = _settings_lm({"DAPE1x3-Kerple": 0.0, "RoPE": 0.0, "Kerple": 0.0}, (0, 1, 2), 64, 16, rng=5,
                         role="equal_tokens")
    lm, windows = pd.concat([a, b]), pd.concat([aw, bw])
    for claim in ("long_training_hurts_short", "equal_tokens_comparable"):
        record = check(claim, lm, windows)
        checks = list(record["numbers"].values())
        assert checks and all(c["basis"] == "unpaired t on the seeds' own spread" for c in checks)
        written = re.findall(r"\(ν ([^)]+)\)", record["seed_noise"])
        assert written and written == [f"{c['seed_df']:.3g}" for c in checks][:len(written)]
        assert all(c["seed_df"] == 2 for c in checks)  # min(3, 3) − 1, never Welch–Satterthwaite's up to 4
    source = SeedNoiseSource(lm, windows)
    within = source.noise(("mean", "within", "loss"), False, ("code", "small", "32", "100", "32", "1"))
    interaction = source.noise(("mean", "within", "loss"), True, ("code", "small", "32", "100", "32", "1"))
    assert within.sd > interaction.sd  # the seed's main effect counts unpaired


def test_an_unpaired_comparison_reads_only_the_windows_both_sides_scored():
    """A run that scored more windows at a length (``max_windows_within``: lengths up to its own training length)
    is compared with a run that did not on the windows both scored: the other windows' difficulty would otherwise
    move the difference by itself, however many seeds."""
    from dape_core.report.claim_context import Context, compare, lm_rows

    a, aw = _settings_lm({"RoPE": 0.0}, (0, 1, 2), 32, 32, rng=4, role="equal_tokens")
    b, bw = _settings_lm({"RoPE": 0.0}, (0, 1, 2), 64, 16, rng=5, role="equal_tokens")
    extra = bw[bw.eval_len == 64].assign(document=lambda f: f["document"] + 1000, loss=lambda f: f["loss"] + 1.0)
    lm = pd.concat([a, b], ignore_index=True)
    ra, rb = (lm_rows(lm, "equal_tokens").query(f"train_len == {t}") for t in (32, 64))
    plain = compare(Context(lm, windows=pd.concat([aw, bw])), ra, rb, [64], [64], "k")
    more = compare(Context(lm, windows=pd.concat([aw, bw, extra])), ra, rb, [64], [64], "k")
    assert plain.basis.startswith("unpaired") and plain.n_rows == 32
    assert (more.estimate, more.low, more.high, more.n_rows) == (plain.estimate, plain.low, plain.high, 32)
    lone = compare(Context(lm, windows=pd.concat([bw, extra])), rb, rb, [64], [64], "k")
    assert lone.n_rows == 64  # one run against itself: every window it scored


def test_one_seed_borrows_a_sigma_to_size_its_seeds_never_to_decide():
    """An unpaired side or a run's own statistic with one seed: its setting's σ is borrowed as a plan (named in the
    basis, unit_sd kept for the seeds a verdict needs) and the interval is (−∞, +∞), even for a large effect: a
    method noisier than the σ it borrows would be decided far beyond 5 % of the time."""
    from dape_core.report.claim_context import own_or_borrowed
    from dape_core.report.intervals import PLAN_ONLY, SeedNoise, difference, interval, seeds_to_decide

    borrowed = SeedNoise(0.01, 10, "code, T 32, small (7 runs × 2 seeds), borrowed")
    assert own_or_borrowed(borrowed, 3) is None  # two or more seeds: the side's own spread
    plan = own_or_borrowed(borrowed, 1)
    assert plan.plan_only and plan.sd == 0.01 and own_or_borrowed(None, 1) is None
    far = difference([np.array([[1.0]])], [np.array([[0.0]])], lambda m: m[:, 0], noise_b=plan, noise_a=plan)
    assert (far.low, far.high) == (-np.inf, np.inf) and far.basis.startswith(PLAN_ONLY)
    assert far.unit_sd == pytest.approx(0.01 * np.sqrt(2))
    needed, _ = seeds_to_decide(far, confirm=0.02, refute=0.0, side=1)
    assert isinstance(needed, int) and needed >= 2  # the plan: the seeds a verdict would need
    run = interval([np.array([[1.0]])], lambda m: m[:, 0], seed_noise=plan, kind="t")
    assert (run.low, run.high) == (-np.inf, np.inf) and run.unit_sd == 0.01 and run.basis.startswith(PLAN_ONLY)
    lm, windows = _settings_lm({"DAPE1x3-Kerple": 0.0, "RoPE": 0.0, "Kerple": 0.0}, (0, 1, 2), 32, 32, rng=4,
                               role="equal_tokens")
    one, one_w = _settings_lm({"DAPE1x3-Kerple": GAIN_20, "RoPE": 0.0, "Kerple": 0.0}, (0,), 64, 16, rng=5,
                              role="equal_tokens")
    record = check("long_training_hurts_short", pd.concat([lm, one]), pd.concat([windows, one_w]))
    assert record["verdict"] == UNDECIDED and PLAN_ONLY in record["basis"]


def test_the_seed_noise_estimate_recovers_the_planted_seed_sd():
    """Twelve methods × three seeds with a per-method-and-seed effect of sd 0.05 and no shared seed effect: the
    interaction and the within-run SD both estimate 0.05 (plus the small window part)."""
    methods = [f"DAPE1x{k}-Kerple" for k in (3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25)]
    lm, windows = synthetic({m: 0.0 for m in methods}, seeds=(0, 1, 2), seed_sd=0.05, window_sd=0.02, rng=3,
                            role="central")
    source = SeedNoiseSource(lm, windows)
    setting = ("code", "small", "64", "-", "-", "1")
    paired = source.noise(("mean", "all", "loss"), True, setting)
    alone = source.noise(("mean", "within", "loss"), False, setting)
    assert paired.df == 11 * 2 and 2 <= alone.df <= 12 * 2
    assert 0.03 < paired.sd < 0.075 and 0.03 < alone.sd < 0.075
    assert not SeedNoiseSource(lm[lm["seed"] == 0], windows)  # one seed: no source
    assert table_variance(np.array([[0.0, 1.0], [1.0, 2.0]]), paired=False)[1] == 1  # two seeds: ν 1


def test_seeds_to_decide_follows_the_power_rule():
    from scipy import stats

    def needed(ratio, df0):  # the smallest n with n ≥ ((t_ν,0.975 + t_ν,0.8) · ratio)², ν = max(df0, n − 1)
        return next(n for n in range(2, 101)
                    if n >= ((stats.t.ppf(0.975, max(df0, n - 1)) + stats.t.ppf(0.8, max(df0, n - 1))) * ratio) ** 2)

    noise = SeedNoise(0.04, 6, "grid")
    iv = Interval(0.05, -0.01, 0.11, "paired t", 1, 32, unit_sd=0.04, seed_noise=noise)
    n, text = seeds_to_decide(iv, side=1, confirm=0.02, refute=0.0)
    assert n == needed(0.04 / 0.03, 6) == 16 and text == "16 (towards CONFIRMED)"
    n, text = seeds_to_decide(Interval(-0.05, -0.1, 0.0, "x", 1, 32, unit_sd=0.04, seed_noise=noise), side=1,
                              confirm=0.02, refute=0.0)
    assert n == needed(0.04 / 0.05, 6) and "REFUTED" in text
    n, text = seeds_to_decide(Interval(0.01, -0.05, 0.07, "x", 1, 32, unit_sd=0.04), side=1, confirm=0.02,
                              refute=0.0)
    assert n is None and text.startswith("none")  # between 0 and the margin: no number of seeds decides it
    n, text = seeds_to_decide(Interval(0.0201, -0.05, 0.07, "x", 1, 32, unit_sd=0.04), side=1, confirm=0.02,
                              refute=0.0)
    assert n is None and text.startswith("> 100")
    n, _ = seeds_to_decide(Interval(1.2, 1.0, 1.4, "x", 2, 32, unit_sd=0.1), side=-1, confirm=1.5, refute=2.0)
    assert n == needed(0.1 / 0.3, 0) == 4  # far beyond, but σ from its own seeds only: t on n − 1 degrees of freedom


def test_an_open_claim_says_what_would_decide_it_and_what_it_costs():
    lm, windows = synthetic({"RoPE": math.log(0.95), "DAPE-RoPE": 0.0}, seeds=(0, 1), rng=5)
    lm = lm.assign(train_wall_s=360.0, train_threads=1, flops_per_token=1e9, steps=100, batch_size=10,
                   grad_accum=1, n_layer=2)
    record = evaluate_claims(lm, windows=windows, claim_ids=["naive_dape_degrades_rope"],
                             gpu_tflops=100, utilisation=0.5).iloc[0]
    n = int(record["seeds_to_decide"].split()[0])
    assert record["verdict"] == UNDECIDED and record["seeds_to_decide"] == f"{n} (towards CONFIRMED)" and n >= 3
    assert record["extra_jobs"] == 2 * 2 * (n - 2)  # two runs, a training and an evaluation job per extra seed
    assert record["extra_cpu_hours"] == pytest.approx(2 * (n - 2) * 0.1)
    flop_hours = 1e9 * 100 * 10 * 64 / 50e12 / 3600  # one training job's FLOP time
    per_job = {run: row_gpu_hours(rows.iloc[0].to_dict(), 100, 0.5)
               for run, rows in lm[lm["method"].isin(["RoPE", "DAPE-RoPE"])].groupby("run")}
    assert all(hours >= flop_hours for hours, _ in per_job.values())  # the larger of FLOP and dispatch time
    assert record["extra_gpu_hours"] == pytest.approx((n - 2) * sum(h for h, _ in per_job.values()), rel=1e-2)
    assert record["gpu_bound"] == "/".join(sorted({b for _, b in per_job.values()}))
    md = claims_markdown(evaluate_claims(lm, windows=windows))
    assert "## What would decide the open claims" in md and f"| `naive_dape_degrades_rope` | {n} (towards" in md


def test_without_per_window_losses_the_seeds_give_the_same_interval():
    lm, windows = with_source(*synthetic({"RoPE": GAIN_20, "DAPE-RoPE": 0.0}, seeds=(0, 1, 2, 3)))
    with_windows, seeds_only = check("naive_dape_degrades_rope", lm, windows), check("naive_dape_degrades_rope", lm, None)
    assert not with_windows["basis"].endswith("(no per-window data)")
    assert seeds_only["basis"].endswith("(no per-window data)")
    assert with_windows["verdict"] == seeds_only["verdict"] == CONFIRMED
    assert first_check(with_windows)["gain"] == pytest.approx(first_check(seeds_only)["gain"], abs=1e-9)


def test_windows_pair_by_id_only():
    """Windows of the two methods share no id: nothing to pair, so each seed counts by its mean."""
    lm, windows = synthetic({"RoPE": GAIN_20, "DAPE-RoPE": 0.0},
                            ids={"RoPE": np.arange(32), "DAPE-RoPE": np.arange(100, 132)})
    record = check("naive_dape_degrades_rope", lm, windows)
    assert record["basis"].endswith("(no per-window data)")


def test_a_claim_of_several_checks_combines_all_confirmed_any_refuted():
    cid = "dape_ordering_beyond"  # DAPE1x3-Kerple beats DAPE-Kerple, and DAPE-Kerple beats Kerple
    cases = {(GAIN_20, GAIN_20): CONFIRMED, (GAIN_20, 0.0): UNDECIDED, (GAIN_20, -GAIN_20): REFUTED,
             (0.0, -GAIN_20): REFUTED}
    for (d3_over_dape, dape_over_kerple), expected in cases.items():
        offsets = {"Kerple": 0.0, "DAPE-Kerple": dape_over_kerple, "DAPE1x3-Kerple": dape_over_kerple + d3_over_dape}
        record = check(cid, *with_source(*synthetic(offsets, role="central", seeds=(0, 1, 2, 3)), methods=SOURCE[1:]))
        verdicts = [c["verdict"] for c in record["numbers"].values()]
        assert len(verdicts) == 2 and record["verdict"] == expected, (offsets, record["summary"])
    assert combine([]) == NOT_RUN
    assert combine([CONFIRMED, CONFIRMED]) == CONFIRMED
    assert combine([CONFIRMED, UNDECIDED]) == UNDECIDED
    assert combine([UNDECIDED, REFUTED, CONFIRMED]) == REFUTED


def test_a_diverged_run_loses_whatever_the_noise():
    lm, windows = synthetic({"RoPE": 0.0, "DAPE-RoPE": 0.0})
    diverged = lm["method"] == "DAPE-RoPE"
    lm.loc[diverged, "status"] = "diverged"
    windows = windows[~windows["run"].eq("DAPE-RoPE-run")]  # a diverged run scores no window
    assert check("naive_dape_degrades_rope", lm, windows)["verdict"] == CONFIRMED
    lm.loc[diverged, "status"], lm.loc[~diverged, "status"] = "ok", "diverged"
    assert check("naive_dape_degrades_rope", lm, windows)["verdict"] == REFUTED


# ------------------------------------------------------------------------------------------ the interval rules
def test_decide_reads_the_whole_interval():
    def iv(low, high):
        return Interval((low + high) / 2, low, high, "paired t", 2, 32)

    rule = {"side": 1, "confirm": 0.02, "refute": 0.0}
    assert decide(iv(0.03, 0.2), **rule) == CONFIRMED
    assert decide(iv(0.01, 0.2), **rule) == UNDECIDED  # not wholly beyond the margin
    assert decide(iv(-0.01, 0.2), **rule) == UNDECIDED  # inside the noise
    assert decide(iv(-0.2, -0.01), **rule) == REFUTED
    bounded = {"side": -1, "confirm": 1.5, "refute": 2.0}
    assert decide(iv(1.1, 1.4), **bounded) == CONFIRMED
    assert decide(iv(1.4, 2.1), **bounded) == UNDECIDED
    assert decide(iv(2.1, 3.0), **bounded) == REFUTED
    no_margin = {"side": 1, "confirm": 0.0, "refute": 0.0}
    assert decide(iv(0.0, 0.0), **no_margin) == UNDECIDED  # a tie confirms nothing


def test_the_interval_is_deterministic_and_point_data_stay_points():
    units = [np.random.default_rng(s).normal(0.1, 0.05, (32, 1)) for s in range(3)]
    a = interval(units, lambda m: m[:, 0], "key")
    assert a == interval(units, lambda m: m[:, 0], "other key")  # no resampling: the data decide
    assert a.low < a.estimate < a.high and a.basis == "paired t on the seeds' own spread"
    p = interval([np.array([[0.1]])], lambda m: m[:, 0], "key", point=True)
    assert p.low == p.estimate == p.high == 0.1 and p.basis == POINT


# ------------------------------------------------------------------------------------------ evaluation windows
def _model(encoding: str) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(size="tiny", encoding=encoding, vocab_size=512)).eval()


def test_evaluation_windows_are_the_same_for_every_model_and_give_its_perplexity(tiny_corpus):
    split = load_split(tiny_corpus, "val")
    options = dict(train_len=32, window=16, max_windows=6, n_boot=20)
    rows_a, win_a = evaluate_windows(_model("kerple"), split, [32, 64], **options)
    rows_b, win_b = evaluate_windows(_model("alibi"), split, [32, 64], **options)
    assert list(win_a.columns) == WINDOW_COLUMNS and len(win_a) == 2 * 6
    ids = ["eval_len", "document", "anchor"]
    pd.testing.assert_frame_equal(win_a[ids], win_b[ids])  # paired window by window
    assert not np.allclose(win_a["loss"], win_b["loss"])  # two different models
    for n, g in win_a.groupby("eval_len"):  # equal tokens per window: exp(mean window loss) = ppl
        assert math.exp(g["loss"].mean()) == pytest.approx(rows_a.set_index("eval_len").loc[n, "ppl"], rel=1e-6)
    assert (win_a.loc[win_a["eval_len"] == 32, "loss_local"] == win_a.loc[win_a["eval_len"] == 32, "loss_dp"]).all()


def test_evaluate_writes_windows_and_its_device_and_aggregation_collects_them(tiny_corpus, tmp_path):
    run_dir = tmp_path / "results" / "lm" / "r1" / "seed3"
    assert main(["train", "--data-dir", str(tiny_corpus), "--out-dir", str(run_dir), "--size", "tiny",
                 "--train-len", "32", "--batch-size", "4", "--steps", "2", "--threads", "1", "--no-progress"]) == 0
    out, windows = run_dir / "eval.csv", run_dir / "windows.csv"
    assert main(["evaluate", "--checkpoint", str(run_dir / "model.pt"), "--data-dir", str(tiny_corpus),
                 "--eval-lens", "32", "64", "--window", "16", "--max-windows", "5", "--min-scored-tokens", "1",
                 "--threads", "1", "--out", str(out), "--windows-out", str(windows)]) == 0
    rows, per_window = pd.read_csv(out), pd.read_csv(windows)
    assert (rows["eval_device"] == device_name(choose_device())).all()  # "cpu" here, "cuda:<GPU>" on a GPU
    assert len(per_window) == 2 * 5 and list(per_window.columns) == WINDOW_COLUMNS
    collected = aggregate.lm_windows([str(windows)])
    assert list(collected.columns[:5]) == ["run", "seed", "eval_len", "document", "anchor"]
    assert set(collected["run"]) == {"r1"} and set(collected["seed"]) == {3}


def test_bootstrap_zero_means_no_interval_and_a_negative_count_is_refused(tiny_corpus, tmp_path, capsys):
    split = load_split(tiny_corpus, "val")
    rows, _ = evaluate_windows(_model("kerple"), split, [32], train_len=32, window=16, max_windows=4, n_boot=0)
    assert rows["ppl_ci_low"].isna().all() and rows["ppl_ci_high"].isna().all() and rows["ppl"].notna().all()
    assert main(["train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path), "--size", "tiny",
                 "--train-len", "32", "--batch-size", "4", "--steps", "2", "--threads", "1", "--no-progress"]) == 0
    base = ["evaluate", "--checkpoint", str(tmp_path / "model.pt"), "--data-dir", str(tiny_corpus), "--eval-lens",
            "32", "--window", "16", "--max-windows", "4", "--min-scored-tokens", "1", "--threads", "1", "--out",
            str(tmp_path / "eval.csv")]
    assert main([*base, "--bootstrap", "0"]) == 0
    rows = pd.read_csv(tmp_path / "eval.csv")
    assert rows["ppl_ci_low"].isna().all() and rows["ppl"].notna().all()
    with pytest.raises(SystemExit) as exit_info:
        main([*base, "--bootstrap", "-1"])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "error: bootstrap: -1 is not allowed; allowed values: an integer ≥ 0 (0: no interval)" in message
    with pytest.raises(ConfigError, match="bootstrap"):
        evaluate_windows(_model("kerple"), split, [32], train_len=32, window=16, max_windows=4, n_boot=-5)


def test_report_lm_collects_windows_and_report_claims_reads_them(tmp_path):
    """`dape report lm --windows … --windows-out` then `dape report claims --windows`: the DAG's two steps."""
    import json

    from dape_core.seal import seal_unsealed

    lm, windows = synthetic({"Kerple": 0.0, "DAPE-Kerple": GAIN_20, "DAPE1x3-Kerple": 2 * GAIN_20},
                            role="central", seeds=(0, 1, 2))
    plan = {"families": {"base": {"stage": "lm", "role": "central", "runs": sorted(set(lm["run"]))}},
            "lm_runs": {}, "lm_members": [], "leakage_pairs": {}, "timing_members": [], "che_members": []}
    evals, summaries, window_files = [], [], []
    for (run, seed), rows in lm.groupby(["run", "seed"]):
        directory = tmp_path / "results" / "lm" / run / f"seed{seed}"
        directory.mkdir(parents=True)
        rows.drop(columns=["run", "seed", "families", "roles"]).to_csv(directory / "eval.csv", index=False)
        per_window = windows[(windows["run"] == run) & (windows["seed"] == seed)]
        per_window.drop(columns=["run", "seed"]).to_csv(directory / "windows.csv", index=False)
        (directory / "summary.json").write_text(json.dumps({"status": "ok"}))
        settings = {key: rows[key].iloc[0] if key in rows else None for key in aggregate.LM_SETTING_COLUMNS}
        plan["lm_runs"][run] = {"settings": {k: (v.item() if hasattr(v, "item") else v) for k, v in settings.items()}}
        plan["lm_members"].append({"family": "base", "run": run, "seed": int(seed), "eval_lens": [64, 128, 256]})
        evals.append(str(directory / "eval.csv"))
        summaries.append(str(directory / "summary.json"))
        window_files.append(str(directory / "windows.csv"))
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    seal_unsealed(tmp_path)  # as the jobs seal what they write
    reports = tmp_path / "reports"
    assert main(["report", "lm", "--plan", str(tmp_path / "plan.json"), "--evals", *evals, "--summaries", *summaries,
                 "--out", str(reports / "lm_results.csv"), "--windows", *window_files,
                 "--windows-out", str(reports / "lm_windows.csv")]) == 0
    collected = pd.read_csv(reports / "lm_windows.csv")
    assert len(collected) == len(windows) and set(collected["run"]) == set(lm["run"])
    assert main(["report", "claims", "--plan", str(tmp_path / "plan.json"), "--lm", str(reports / "lm_results.csv"),
                 "--windows", str(reports / "lm_windows.csv"), "--out-md", str(reports / "claims.md"),
                 "--out-csv", str(reports / "claims.csv")]) == 0
    table = pd.read_csv(reports / "claims.csv").set_index("claim_id")
    assert table.loc["dape_ordering_beyond", "verdict"] == CONFIRMED
    assert table.loc["dape_ordering_beyond", "basis"] == "paired t on the seeds' own spread"
    md = (reports / "claims.md").read_text()
    assert "**CONFIRMED**" in md and "| central | code, train 64, small |" in md  # ρ against Table 2 etc.


def test_report_claims_refuses_a_bad_estimate_rate(tmp_path, capsys):
    for option, value, allowed in (("--utilisation", "2", "a number in (0, 1]"), ("--gpu-tflops", "0", "a number > 0")):
        with pytest.raises(SystemExit) as exit_info:
            main(["report", "claims", "--plan", str(tmp_path / "plan.json"), option, value, "--out-md",
                  str(tmp_path / "c.md"), "--out-csv", str(tmp_path / "c.csv")])
        assert exit_info.value.code == 2
        assert f"allowed values: {allowed}" in capsys.readouterr().err


def test_leaky_runs_keep_their_seed_noise_to_themselves():
    """Runs without tril (the leakage ablation) share a setting with the causal runs but not their noise: a causal
    run's σ comes from the causal runs only (all their seeds, not the fewer the leaky runs have), a leaky run's
    from the leaky runs, the pool of both together is its own; the paired checks read their own pair's spread."""
    causal, causal_w = synthetic({m: 0.0 for m in ("Kerple", "ALiBi", "DAPE1x3-ALiBi", "DAPE1x3-Kerple")},
                                 seeds=(0, 1, 2, 3),
                                 seed_sd=0.02, window_sd=0.02, rng=11)
    leaky, leaky_w = synthetic({m: -1.5 for m in ("DAPE1x3-Kerple (no tril)", "DAPE1x3-ALiBi (no tril)")},
                               seeds=(0, 1, 2), seed_sd=0.4, window_sd=0.02, rng=12, role="leakage")
    leaky = leaky.assign(tril=False)
    twins = causal["method"].isin(["DAPE1x3-Kerple", "DAPE1x3-ALiBi"])
    causal.loc[twins, "roles"] = "every_encoding;leakage"
    assert set(causal["tril"].astype(bool)) == {True}
    setting = ("code", "small", "64", "-", "-", "1")
    alone = SeedNoiseSource(causal, causal_w).noise(("mean", "within", "loss"), True, setting)
    lm, windows = pd.concat([causal, leaky], ignore_index=True), pd.concat([causal_w, leaky_w], ignore_index=True)
    source = SeedNoiseSource(lm, windows)
    together = source.noise(("mean", "within", "loss"), True, setting)
    assert (together.sd, together.df) == (alone.sd, alone.df) == (together.sd, 3 * 3)
    assert together.source == "code, T 64, small, tril on (4 runs × 4 seeds)"
    leak = source.noise(("mean", "within", "loss"), True, setting, "no tril")
    mixed = source.noise(("mean", "within", "loss"), True, setting, "mixed")
    assert leak.sd > 5 * alone.sd and leak.df == 1 * 2 and "tril off (2 runs × 3 seeds)" in leak.source
    assert mixed.df == 5 * 2 and "tril on and off (6 runs × 3 seeds)" in mixed.source
    with pytest.raises(ValueError, match="regime 'leaky'; allowed values: tril, no tril, mixed"):
        source.noise(("mean", "within", "loss"), True, setting, "leaky")
    # the paired claims read neither pool: DAPE1x3-Kerple against Kerple (4 seeds), the leakage check (3 shared)
    record = first_check(check("dape1x3_improves_additive", lm, windows))
    assert record["basis"] == "paired t on the seeds' own spread" and record["seed_df"] == 3
    record = first_check(check("leakage_collapse", lm, windows))
    assert record["basis"] == "paired t on the seeds' own spread" and record["seed_df"] == 2


def test_a_leakage_comparison_never_borrows_the_seed_noise_of_tril_only_runs():
    """A setting whose tril and no-tril twins have one seed each gets no σ from another setting's tril-only grid
    (whose σ is of another kind): with one seed the leakage check is UNDECIDED and says why; a mixed pool, where
    some setting trains twins with and without tril on several seeds, is lent to mixed pools only, named so."""
    grid, grid_w = synthetic({m: 0.0 for m in ("Kerple", "ALiBi", "RoPE", "NoPE")}, seeds=(0, 1, 2), seed_sd=0.02,
                             window_sd=0.02, rng=21, train_len=32, lengths=(32, 64))
    twin, twin_w = synthetic({"DAPE1x3-Kerple": 0.0}, seeds=(5,), seed_sd=0.02, window_sd=0.02, rng=22,
                             role="leakage")
    leaky, leaky_w = synthetic({"DAPE1x3-Kerple (no tril)": -0.1}, seeds=(5,), seed_sd=0.02, window_sd=0.02, rng=23,
                               role="leakage")
    lm = pd.concat([grid, twin, leaky.assign(tril=False)], ignore_index=True)
    windows = pd.concat([grid_w, twin_w, leaky_w], ignore_index=True)
    source = SeedNoiseSource(lm, windows)
    setting = ("code", "small", "64", "-", "-", "1")
    assert source.noise(("mean", "within", "loss"), True, setting, "mixed") is None
    assert source.noise(("mean", "within", "loss"), True, setting, "tril") is not None  # borrowed, same kind
    record = first_check(check("leakage_collapse", lm, windows))
    assert record["verdict"] == UNDECIDED and record["basis"].startswith(NO_PAIR_SPREAD)
    # a setting with tril and no-tril twins on three seeds: its mixed pool serves, named as borrowed
    more, more_w = synthetic({"DAPE1x3-ALiBi": 0.0, "DAPE1x3-ALiBi (no tril)": -1.0}, seeds=(0, 1, 2),
                             seed_sd=0.3, window_sd=0.02, rng=24, train_len=16, lengths=(16, 32), role="leakage")
    more.loc[more["method"].str.contains("no tril"), "tril"] = False
    lm, windows = pd.concat([lm, more], ignore_index=True), pd.concat([windows, more_w], ignore_index=True)
    mixed = SeedNoiseSource(lm, windows).noise(("mean", "within", "loss"), True, setting, "mixed")
    assert "tril on and off (2 runs × 3 seeds), borrowed" in mixed.source and mixed.sd > 0.1


def test_the_leakage_claim_reads_each_of_its_two_routes_at_the_bonferroni_level(monkeypatch):
    """CONFIRMED by the ratio or by the absolute no-tril perplexity: each interval is widened to 1 − 0.05/2 before
    it is read, so an interval that confirms at 95 % but not at 97.5 % leaves the check UNDECIDED."""
    from dape_core.report import lm_checks
    from dape_core.report.intervals import simultaneous as widen

    levels = []

    def spy(iv, comparisons):
        levels.append(comparisons)
        return widen(iv, comparisons)
    monkeypatch.setattr(lm_checks, "simultaneous", spy)
    twin, twin_w = synthetic({"DAPE1x3-Kerple": 0.0, "DAPE1x3-Kerple (no tril)": -1.4}, seeds=(0, 1, 2),
                             seed_sd=0.05, window_sd=0.02, rng=31, role="leakage")
    twin.loc[twin["method"].str.contains("no tril"), "tril"] = False
    record = first_check(check("leakage_collapse", twin, twin_w))
    assert levels and set(levels) == {2} and record["verdict"] == CONFIRMED  # ratio e^−1.4 ≈ 0.25, at 97.5 %
    monkeypatch.setattr(lm_checks, "simultaneous", lambda iv, comparisons: lm_checks.Interval(
        iv.estimate, -math.inf, math.inf, iv.basis, iv.n_seeds, iv.n_rows))
    record = first_check(check("leakage_collapse", twin, twin_w))  # routes that cannot confirm at their level
    assert record["verdict"] == UNDECIDED and record["ratio_high"] < 0.5  # though the 95 % ratio lies under 0.5


def test_a_run_setting_is_keyed_as_the_whole_table_keys_it():
    """setting_of reads the rows' distinct raw values in Python (the checks ask it thousands of times); its key is
    the one setting_frame gives the table, for the forms a CSV gives a setting: numbers as int, float or text,
    missing values and missing columns; rows of two settings have none."""
    from dape_core.report.seed_noise import SETTING, setting_frame, setting_of

    def by_frame(rows):
        keys = {tuple(str(v) for v in key) for key in setting_frame(rows)[SETTING].itertuples(index=False)}
        return next(iter(keys)) if len(keys) == 1 else None

    forms = {"dataset": ["code", None], "size": ["small", math.nan, None], "train_len": [32, 32.0, "32", math.nan],
             "steps": [600, "600", 600.0, None], "batch_size": [16, 16.0, "x"], "grad_accum": [1, 1.0, math.nan, 2]}
    rng = np.random.default_rng(0)
    for _ in range(300):
        columns = [c for c in SETTING if rng.random() < 0.8]
        rows = pd.DataFrame([{c: forms[c][int(rng.integers(0, len(forms[c])))] for c in columns}
                             for _ in range(int(rng.integers(1, 4)))])
        assert setting_of(rows) == by_frame(rows), rows
    assert setting_of(pd.DataFrame({"dataset": ["code", "prose"], "train_len": [32, 32]})) is None
    assert setting_of(pd.DataFrame({"train_len": [32, "32", 32.0]})) == ("-", "-", "32", "-", "-", "1")
