"""Each claim on hand-made frames (three seeds, no per-window losses: intervals over seeds) where it must be
CONFIRMED, REFUTED, UNDECIDED and NOT-RUN; claims find rows by role."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dape_core.report.claims import (CLAIMS, CONFIRMED, CORE_CLAIMS, NOT_RUN, REFUTED, UNDECIDED, claims_markdown,
                                     evaluate_claims, evaluate_claims_on_paper)
from dape_core.methods import parse_method
from dape_core.report.compare import setting_correlations
from dape_core.report.intervals import NO_PAIR_SPREAD, PLAN_ONLY
from dape_core.report.paper import as_che, as_lm_results, as_timing

SEEDS = (0, 1, 2)


def runs(role, method, ppl, *, train_len=64, seeds=SEEDS, dataset="code", size="tiny", status="ok",
         dape_width=32, delta_p=None, ppl_local=None, family="fam"):
    """lm_results rows of ``role`` (listed by the family ``family``): ``ppl`` maps a multiple of the training
    length to a value (or one value per seed)."""
    p = parse_method(method)
    rows = []
    for i, seed in enumerate(seeds):
        for multiple, value in ppl.items():
            v = value[i] if isinstance(value, (list, tuple)) else value * (1 + 0.001 * i)
            rows.append({"run": f"{method}-{train_len}-{dape_width}-{size}", "families": family,
                         "roles": role, "dataset": dataset, "encoding": p["encoding"], "processor": p["processor"],
                         "kernel_size": p["kernel_size"], "dape_width": dape_width if method.startswith("DAPE")
                         else None, "tril": p["tril"], "size": size, "train_len": train_len, "seed": seed,
                         "status": status, "method": method, "eval_len": int(multiple * train_len), "ppl": v,
                         "ppl_local": ppl_local, "delta_p": delta_p})
    return pd.DataFrame(rows)


def frame(*parts):
    return pd.concat(parts, ignore_index=True)


def verdict(claim_id, lm=None, **others):
    df = evaluate_claims(lm, claim_ids=[claim_id], **others).set_index("claim_id")
    return df.loc[claim_id, "verdict"]


@pytest.fixture(scope="module")
def on_paper():
    return evaluate_claims_on_paper().set_index("claim_id")


# --------------------------------------------------------------------------- §4.1 baselines explode / bounded
B = "central"


def explode_bounded(kerple=(9.5, 10.0, 10.2), nope=(30.0, 80.0)):
    return frame(runs(B, "NoPE", {1: 10, 2: nope[0], 4: nope[1]}), runs(B, "RoPE", {1: 9, 2: 25, 4: 90}),
                 runs(B, "ALiBi", {1: 10, 2: 10.5, 4: 11}),
                 runs(B, "Kerple", dict(zip((1, 2, 4), kerple))))


def test_explode_bounded():
    assert verdict("baselines_explode_bounded", explode_bounded()) == CONFIRMED
    assert verdict("baselines_explode_bounded", explode_bounded(kerple=(9.5, 12, 16))) == UNDECIDED  # 1.68×
    assert verdict("baselines_explode_bounded", explode_bounded(kerple=(9.5, 15, 25))) == REFUTED  # 2.6×
    assert verdict("baselines_explode_bounded", explode_bounded(nope=(12.0, 17.0))) == UNDECIDED  # 1.7×
    assert verdict("baselines_explode_bounded", explode_bounded(nope=(12.0, 13.0))) == REFUTED  # 1.3×: bounded
    one_seed_flat = explode_bounded(nope=([30, 30, 12], [80, 80, 15]))
    assert verdict("baselines_explode_bounded", one_seed_flat) == UNDECIDED
    no_nope = explode_bounded()[lambda d: d["method"] != "NoPE"]
    assert verdict("baselines_explode_bounded", no_nope) == NOT_RUN
    assert verdict("baselines_explode_bounded", None) == NOT_RUN
    # NoPE alone (a design's fresh seeds sized towards REFUTED through it): refuted when bounded, never confirmed
    nope_only = lambda lm: lm[lm["method"] == "NoPE"]  # noqa: E731
    assert verdict("baselines_explode_bounded", nope_only(explode_bounded(nope=(12.0, 13.0)))) == REFUTED
    assert verdict("baselines_explode_bounded", nope_only(explode_bounded())) == NOT_RUN
    assert verdict("baselines_explode_bounded", explode_bounded()[lambda d: d["method"] != "RoPE"]) == NOT_RUN


def test_a_diverged_kerple_is_not_bounded():
    lm = explode_bounded()
    lm.loc[lm["method"] == "Kerple", "status"] = "diverged"
    assert verdict("baselines_explode_bounded", lm) == REFUTED


# --------------------------------------------------------------------------- §4.1 ordering and best within
def trio(d3_beyond=(9.5, 9.4), d3_within=9.0, dape_within=9.2):
    return frame(runs(B, "Kerple", {1: 9.5, 2: 12, 4: 14}),
                 runs(B, "DAPE-Kerple", {1: dape_within, 2: 10, 4: 10}),
                 runs(B, "DAPE1x3-Kerple", {1: d3_within, 2: d3_beyond[0], 4: d3_beyond[1]}))


def test_ordering_beyond():
    assert verdict("dape_ordering_beyond", trio()) == CONFIRMED
    assert verdict("dape_ordering_beyond", trio(d3_beyond=(9.95, 9.98))) == UNDECIDED  # 0 < gain < 1%
    assert verdict("dape_ordering_beyond", trio(d3_beyond=(10.5, 10.6))) == REFUTED  # DAPE1x3 worse
    noisy = trio(d3_beyond=([9.0, 9.0, 10.1], [9.0, 9.0, 10.1]))  # big mean gain, one seed worse
    assert verdict("dape_ordering_beyond", noisy) == UNDECIDED
    assert verdict("dape_ordering_beyond", trio()[lambda d: d["method"] != "DAPE1x3-Kerple"]) == NOT_RUN


def test_a_diverged_dape1x3_loses():
    lm = trio()
    lm.loc[lm["method"] == "DAPE1x3-Kerple", "status"] = "diverged"
    assert verdict("dape_ordering_beyond", lm) == REFUTED


def test_best_within():
    assert verdict("dape1x3_best_within", trio()) == CONFIRMED
    assert verdict("dape1x3_best_within", trio(d3_within=9.18)) == UNDECIDED  # 0 < 0.2% < 0.5%
    assert verdict("dape1x3_best_within", trio(d3_within=9.3)) == REFUTED  # worse than DAPE-Kerple
    assert verdict("dape1x3_best_within", trio()[lambda d: d["method"] == "Kerple"]) == NOT_RUN


# --------------------------------------------------------------------------- §4.4 DAPE1x3 on every encoding
E = "every_encoding"


def every(encodings, dape1x3, base=lambda enc: enc, base_ppl=(10, 20)):
    parts = []
    for enc in encodings:
        parts.append(runs(E, base(enc), {1: base_ppl[0], 2: base_ppl[1]}))
        parts.append(runs(E, f"DAPE1x3-{enc}", dict(zip((1, 2), dape1x3.get(enc, (9.5, 12))))))
    return frame(*parts)


def test_improves_nope_rope():
    cid = "dape1x3_improves_nope_rope"
    assert verdict(cid, every(["NoPE", "RoPE"], {})) == CONFIRMED
    assert verdict(cid, every(["NoPE", "RoPE"], {"RoPE": (10.2, 11)})) == REFUTED  # worse at ×1
    assert verdict(cid, every(["NoPE", "RoPE"], {})[lambda d: ~d["method"].str.startswith("DAPE")]) == NOT_RUN


def test_improves_additive():
    cid = "dape1x3_improves_additive"
    assert verdict(cid, every(["ALiBi", "Kerple", "FIRE"], {})) == CONFIRMED
    assert verdict(cid, every(["ALiBi", "Kerple", "FIRE"], {"FIRE": (9.5, 19.9)})) == UNDECIDED  # 0.5% beyond
    assert verdict(cid, every(["ALiBi", "Kerple", "FIRE"], {"FIRE": (9.5, 21)})) == REFUTED  # −5% beyond
    assert verdict(cid, every(["NoPE"], {})) == NOT_RUN


def test_beats_dape_additive():
    cid = "dape1x3_beats_dape_additive"
    lm = every(["ALiBi", "Kerple", "FIRE"], {}, base=lambda enc: f"DAPE-{enc}")
    assert verdict(cid, lm) == CONFIRMED
    worse = every(["ALiBi", "Kerple", "FIRE"], {"ALiBi": (9.5, 20.5)}, base=lambda enc: f"DAPE-{enc}")
    assert verdict(cid, worse) == REFUTED
    assert verdict(cid, every(["Kerple"], {})) == NOT_RUN  # no DAPE (k = 1) run


def test_naive_dape_degrades_rope():
    cid = "naive_dape_degrades_rope"
    base = runs(E, "RoPE", {1: 10, 2: 30})
    assert verdict(cid, frame(base, runs(E, "DAPE-RoPE", {1: 10.5, 2: 40}))) == CONFIRMED
    assert verdict(cid, frame(base, runs(E, "DAPE-RoPE", {1: 9.5, 2: 20}))) == REFUTED
    assert verdict(cid, base) == NOT_RUN


# --------------------------------------------------------------------------- §4.5 leakage
def leak(no_tril):
    return frame(runs("leakage", "DAPE1x3-Kerple", {1: 10, 2: 11}),
                 runs("leakage", "DAPE1x3-Kerple (no tril)", {1: no_tril, 2: no_tril}))


def test_leakage_collapse():
    assert verdict("leakage_collapse", leak(1.2)) == CONFIRMED
    assert verdict("leakage_collapse", leak(4.0)) == CONFIRMED  # < 0.5 × tril
    assert verdict("leakage_collapse", leak(8.0)) == UNDECIDED  # better without tril, not halved
    assert verdict("leakage_collapse", leak(12.0)) == REFUTED  # worse without tril
    assert verdict("leakage_collapse", leak([1.2, 1.2, 8.0])) == UNDECIDED
    assert verdict("leakage_collapse", runs("leakage", "DAPE1x3-Kerple", {1: 10})) == NOT_RUN


# --------------------------------------------------------------------------- §4.6 hidden width
W = "width_sweep"


def widths(d21_within=8.9):
    return frame(runs(W, "DAPE1x3-Kerple", {1: 9.0, 2: 9.5}, dape_width=10),
                 runs(W, "DAPE1x3-Kerple", {1: d21_within, 2: 9.4}, dape_width=21),
                 runs(W, "DAPE-Kerple", {1: 9.2, 2: 10.0}, dape_width=64),
                 runs(W, "DAPE-Kerple", {1: 8.0, 2: 8.0}, dape_width=32))


def test_narrow_beats_wide():
    cid = "narrow_dape1x3_beats_wide_dape"
    assert verdict(cid, widths()) == CONFIRMED  # the better D=32 DAPE does not enter the rule
    assert verdict(cid, widths(d21_within=9.3)) == REFUTED
    assert verdict(cid, widths(d21_within=9.18)) == UNDECIDED
    assert verdict(cid, widths()[lambda d: d["dape_width"] != 64]) == NOT_RUN


# --------------------------------------------------------------------------- §4.7 kernel sizes
K = "kernel_sweep"


def kernels(k7=(9.3, 9.5)):
    return frame(runs(K, "DAPE-Kerple", {1: 10, 2: 10}), runs(K, "DAPE1x3-Kerple", {1: 9.5, 2: 9.4}),
                 runs(K, "DAPE1x5-Kerple", {1: 9.4, 2: 9.45}), runs(K, "DAPE1x7-Kerple", dict(zip((1, 2), k7))))


def test_kernel_not_always_largest():
    cid = "kernel_size_not_always_largest"
    assert verdict(cid, kernels()) == CONFIRMED
    assert verdict(cid, kernels(k7=(9.3, 9.3))) == REFUTED  # the largest kernel is best in every cell
    assert verdict(cid, kernels(k7=(9.3, 9.4))) == UNDECIDED  # k=3 ties k=7 at ×2
    assert verdict(cid, kernels()[lambda d: d["method"].isin(["DAPE-Kerple", "DAPE1x3-Kerple"])]) == NOT_RUN


def test_the_kernel_rule_confirms_on_intervals_corrected_for_all_its_comparisons(monkeypatch):
    """"Some smaller kernel beats the largest" is one of m comparisons (3 smaller kernels × 2 multiples here): the
    CONFIRMED side reads each interval at the Bonferroni level over all m, which widens a t-interval by
    t_{ν,1−0.025/m} / t_{ν,0.975}; one comparison, a point or an unbounded interval stays as it is."""
    from dape_core.report import intervals, lm_checks

    seen = []
    real = lm_checks.simultaneous
    monkeypatch.setattr(lm_checks, "simultaneous", lambda iv, m: seen.append(m) or real(iv, m))
    assert verdict("kernel_size_not_always_largest", kernels()) == CONFIRMED
    assert seen and set(seen) == {6}
    noise = intervals.SeedNoise(0.02, 4.0, "grid")
    iv = intervals.Interval(0.01, 0.0, 0.03, "paired t", 3, 1, 0.02, noise)
    wide = intervals.simultaneous(iv, 6)
    scale = intervals.t_quantile(4.0, 1 - 0.025 / 6) / intervals.t_quantile(4.0)
    assert wide.low == pytest.approx(0.01 - 0.01 * scale) and wide.high == pytest.approx(0.01 + 0.02 * scale)
    assert scale > 1.5 and intervals.simultaneous(iv, 1) == iv
    assert intervals.simultaneous(replace(iv, low=-np.inf), 6).low == -np.inf
    decided_at = [intervals.seeds_to_decide(iv, side=1, confirm=0.0, refute=0.0, comparisons=m)[0] for m in (1, 6)]
    assert decided_at[0] < decided_at[1]


def test_the_kernel_rule_takes_the_seed_noise_of_the_one_length_it_compares(monkeypatch):
    """Each cell compares two kernels at one multiple, so its σ is that of the statistic at that multiple
    (("at", m, "loss")), not of the mean over the beyond range, which averages the per-length noise away."""
    from dape_core.report import lm_checks
    from dape_core.report.seed_noise import _statistic

    asked = []
    real = lm_checks.compare
    monkeypatch.setattr(lm_checks, "compare", lambda ctx, ra, rb, la, lb, key, stats: asked.append((la, stats))
                        or real(ctx, ra, rb, la, lb, key, stats))
    verdict("kernel_size_not_always_largest", kernels())
    assert {(tuple(lengths), stats) for lengths, stats in asked} == {
        ((64,), (("at", 1.0, "loss"),) * 2), ((128,), (("at", 2.0, "loss"),) * 2)}
    values = {1.0: {"loss": 2.0}, 2.0: {"loss": 2.5}, 4.0: {"loss": 3.5}}
    assert _statistic(("at", 2.0, "loss"), values) == 2.5 and np.isnan(_statistic(("at", 8.0, "loss"), values))
    assert _statistic(("mean", "beyond", "loss"), values) == 3.0


# --------------------------------------------------------------------------- §4.2 equal tokens
T = "equal_tokens"


def equal_tokens(short_at_256=5.1):
    return frame(runs(T, "DAPE1x3-Kerple", {8: short_at_256}, train_len=32),
                 runs(T, "DAPE1x3-Kerple", {4: 5.05}, train_len=64),
                 runs(T, "DAPE1x3-Kerple", {1: 5.0}, train_len=256))


def test_equal_tokens_comparable():
    cid = "equal_tokens_comparable"
    assert verdict(cid, equal_tokens()) == CONFIRMED
    assert verdict(cid, equal_tokens(short_at_256=5.5)) == REFUTED
    assert verdict(cid, equal_tokens(short_at_256=[5.1, 5.1, 5.5])) == UNDECIDED
    assert verdict(cid, runs(T, "DAPE1x3-Kerple", {1: 5.0}, train_len=256)) == NOT_RUN


def test_long_training_hurts_short():
    cid = "long_training_hurts_short"
    short = runs(T, "RoPE", {1: 6.0}, train_len=32)
    assert verdict(cid, frame(short, runs(T, "RoPE", {0.125: 6.5, 1: 5.0}, train_len=256))) == CONFIRMED
    assert verdict(cid, frame(short, runs(T, "RoPE", {0.125: 6.1, 1: 5.0}, train_len=256))) == UNDECIDED  # 1.6%
    assert verdict(cid, frame(short, runs(T, "RoPE", {0.125: 5.9, 1: 5.0}, train_len=256))) == REFUTED
    assert verdict(cid, frame(short, runs(T, "RoPE", {1: 5.0}, train_len=256))) == NOT_RUN


# --------------------------------------------------------------------------- App. A ΔP
def delta(dape_dp=0.5):
    return frame(runs(B, "RoPE", {2: 50, 4: 80}, delta_p=-40.0, ppl_local=10.0),
                 runs(B, "DAPE1x3-Kerple", {2: 9.5, 4: 9.4}, delta_p=dape_dp, ppl_local=10.0))


def test_delta_p_sign():
    assert verdict("delta_p_sign", delta()) == CONFIRMED
    assert verdict("delta_p_sign", delta(dape_dp=-0.1)) == REFUTED
    assert verdict("delta_p_sign", delta(dape_dp=0.05)) == UNDECIDED  # 0.5% of the local ppl
    assert verdict("delta_p_sign", delta()[lambda d: d["method"] != "RoPE"]) == NOT_RUN


# --------------------------------------------------------------------------- §4.9 timing
def timing(ratios=(0.5, 0.6, 0.7), mode="forward"):
    """timing.csv's per-method summary rows (medians)."""
    rows = []
    for (size, n_layer, d_model), ratio in zip([("tiny", 2, 64), ("small", 4, 128), ("base", 6, 256)], ratios):
        for method, ms in [("DAPE1x3-Kerple", 100.0), ("Kerple", 100.0 * ratio)]:
            rows.append({"method": method, "encoding": "kerple", "size": size, "n_layer": n_layer,
                         "d_model": d_model, "n_head": 4, "seq_len": 256, "batch_size": 1, "mode": mode,
                         "repeats": 10, "median_ms": ms, "per_layer_ms": ms / n_layer, "peak_mem_mb": 1.0,
                         "device": "cpu", "threads": 2})
    return pd.DataFrame(rows)


def repeats(ratios=(0.5, 0.6, 0.7), mode="forward", rounds=10, noise=0.01, seed=0, blocks=2, replicates=4,
            process=0.01, job=0.0):
    """timing_repeats.csv: ``replicates`` replicate jobs (each size × method's own job effect, SD ``job``), each of
    ``blocks`` blocks of fresh worker processes (each worker's own process effect, SD ``process``) timing every size
    and method in interleaved rounds: each ms with a shared round effect and its own noise."""
    rng = np.random.default_rng(seed)
    sizes = [("tiny", 2, 64), ("small", 4, 128), ("base", 6, 256)]
    rows = []
    for replicate in range(replicates):
        jobs = rng.normal(0, job, (len(sizes), 2))
        for block in range(blocks):
            effect = rng.normal(0, process, (len(sizes), 2))
            for r in range(block * rounds, (block + 1) * rounds):
                shared = rng.normal(0, 0.05)
                for i, ((size, n_layer, d_model), ratio) in enumerate(zip(sizes, ratios)):
                    for m, (method, ms) in enumerate([("DAPE1x3-Kerple", 100.0), ("Kerple", 100.0 * ratio)]):
                        rows.append({"run": f"{size}-{method}", "method": method, "size": size, "n_layer": n_layer,
                                     "d_model": d_model, "seq_len": 256, "batch_size": 1, "mode": mode,
                                     "precision": "fp32", "device": "cpu", "threads": 2, "cell": "cell-T256",
                                     "replicate": replicate, "block": block, "round": r,
                                     "position": (2 * i + m + r) % 6,
                                     "ms": ms * np.exp(shared + jobs[i, m] + effect[i, m] + rng.normal(0, noise))})
    return pd.DataFrame(rows)


def test_timing_overhead_shrinks():
    cid = "timing_overhead_shrinks"
    assert verdict(cid, timing=timing(), timing_repeats=repeats()) == CONFIRMED
    assert verdict(cid, timing=timing(), timing_repeats=repeats(ratios=(0.5, 0.51, 0.7))) == UNDECIDED  # < 0.02
    assert verdict(cid, timing=timing(), timing_repeats=repeats(ratios=(0.7, 0.6, 0.5))) == REFUTED
    noisy = repeats(ratios=(0.5, 0.52, 0.54), noise=0.2)  # a rise inside the repeats' noise
    assert verdict(cid, timing=timing(), timing_repeats=noisy) == UNDECIDED
    assert verdict(cid, timing=timing(), timing_repeats=repeats(mode="train_step")) == NOT_RUN
    old = evaluate_claims(None, timing=timing(), claim_ids=[cid]).iloc[0]  # medians only: no interval
    assert old["verdict"] == UNDECIDED and old["basis"].startswith("no per-repeat times")
    record = evaluate_claims(None, timing=timing(), timing_repeats=repeats(), claim_ids=[cid]).iloc[0]
    assert "on cpu" in record["basis"] and "the paper timed GPUs" in record["basis"]
    assert "t over 4+ replicate jobs (ν = 3)" in record["basis"]
    assert verdict(cid) == NOT_RUN


def test_the_timing_interval_reads_replicate_jobs_not_blocks():
    """What changes between jobs is shared by all of a job's blocks: with job effects larger than the blocks'
    noise, a rise that many quiet blocks would seem to settle stays UNDECIDED on few jobs and is decided without
    job effects (the interval's units are jobs, ν = jobs − 1); one job, a file of the design before replicate jobs
    (no ``replicate``: each size in a job of its own) or sizes timed in separate cells read no interval and say
    why."""
    from dape_core.report.timing_check import (MIN_JOBS, NO_REPLICATES, SEPARATE_CELLS, block_ratios, job_ratios,
                                               job_rises, rise_interval)

    cid = "timing_overhead_shrinks"
    wobbly = dict(ratios=(0.5, 0.55, 0.6), blocks=8, rounds=10, noise=0.005, process=0.005, job=0.08)
    assert verdict(cid, timing=timing(), timing_repeats=repeats(replicates=3, seed=1, **wobbly)) == UNDECIDED
    assert verdict(cid, timing=timing(), timing_repeats=repeats(replicates=3, seed=1, **{**wobbly, "job": 0.0})) \
        == CONFIRMED
    assert verdict(cid, timing=timing(), timing_repeats=repeats(replicates=MIN_JOBS, noise=0.001)) == CONFIRMED
    one = evaluate_claims(None, timing=timing(), timing_repeats=repeats(replicates=MIN_JOBS - 1), claim_ids=[cid])
    assert one.iloc[0]["verdict"] == UNDECIDED and f"fewer than {MIN_JOBS}, no interval" in one.iloc[0]["basis"]
    before = evaluate_claims(None, timing=timing(), timing_repeats=repeats().drop(columns="replicate"),
                             claim_ids=[cid]).iloc[0]
    assert before["verdict"] == UNDECIDED and before["basis"] == NO_REPLICATES
    assert "seq_len=256: Kerple / DAPE1x3-Kerple ms by size 0.500 → 0.600 → 0.700 → UNDECIDED" in before["summary"]
    apart = repeats()
    apart["cell"] = apart["size"].map(lambda size: f"forward-{size}-B1-T256")  # each size in a job of its own
    split = evaluate_claims(None, timing=timing(), timing_repeats=apart, claim_ids=[cid]).iloc[0]
    assert split["verdict"] == UNDECIDED and split["basis"] == SEPARATE_CELLS

    table = repeats(replicates=3, blocks=2, noise=0.05)
    per_size = {size: job_ratios(table[table["size"] == size]) for size in ("tiny", "small")}
    for size, ratios in per_size.items():  # a job's ratio: the mean of its blocks' ratios of medians
        g = table[(table["size"] == size) & (table["replicate"] == 1)]
        expected = np.mean([np.median(b.loc[b.method == "Kerple", "ms"])
                            / np.median(b.loc[b.method == "DAPE1x3-Kerple", "ms"]) for _, b in g.groupby("block")])
        assert ratios[1] == pytest.approx(expected) and block_ratios(g) == pytest.approx(
            [np.median(b.loc[b.method == "Kerple", "ms"]) / np.median(b.loc[b.method == "DAPE1x3-Kerple", "ms"])
             for _, b in g.groupby("block")])
    rises = job_rises(per_size["tiny"], per_size["small"])
    assert rises == pytest.approx([per_size["small"][k] - per_size["tiny"][k] for k in range(3)])
    iv = rise_interval(rises, "t")
    half = stats.t.ppf(0.975, 2) * np.std(rises, ddof=1) / np.sqrt(3)  # Student's t over 3 jobs, ν = 2
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((rises.mean(), rises.mean() - half, rises.mean() + half))


# --------------------------------------------------------------------------- §4.8 CHE
def che(wins=3):
    rows = []
    tasks = ["even_pairs", "reverse_string", "stack_manipulation", "odds_first", "parity_check"]
    for t, task in enumerate(tasks):
        for seed in (0, 1):
            for lr, bump in ((1e-4, 0.0), (3e-4, 0.05)):
                kerple = 0.6 + bump
                dape = kerple + (0.1 if t < wins or task == "parity_check" else -0.05)
                for method, acc in (("Kerple", kerple), ("DAPE1x3-Kerple", dape)):
                    rows.append({"task": task, "method": method, "seed": seed, "lr": lr, "accuracy": acc,
                                 "length": None, "row_type": "summary"})
                rows.append({"task": task, "method": "Kerple", "seed": seed, "lr": lr, "accuracy": 0.99,
                             "length": 41, "row_type": "length"})
    return pd.DataFrame(rows)


def test_che_most_tasks():
    cid = "che_dape1x3_beats_kerple"
    assert verdict(cid, che=che(wins=3)) == CONFIRMED
    assert verdict(cid, che=che(wins=2)) == REFUTED  # 2 of 4 lost: most cannot be won; parity_check does not count
    assert verdict(cid, che=che()[lambda d: d["task"] == "parity_check"]) == NOT_RUN
    assert verdict(cid) == NOT_RUN


# --------------------------------------------------------------------------- App. K sink
def sink(d3=0.4, sequences=4, seeds=True):
    """sink.csv rows: two runs per method (seeds 0 and 1 when ``seeds``), per-sequence masses around ``d3`` and
    0.2."""
    rows = []
    for method, run, seed, mass in [("DAPE1x3-Kerple", "a", 0, d3), ("DAPE1x3-Kerple", "b", 1, d3 * 1.02),
                                    ("DAPE-Kerple", "c", 0, 0.2), ("DAPE-Kerple", "d", 1, 0.19)]:
        for sequence in range(sequences):
            for layer in (0, 1):
                rows.append({"run": run, "method": method, "eval_len": 128, "layer": layer, "sequence": sequence,
                             "sink_mass": mass * (1 + 0.01 * sequence), **({"seed": seed} if seeds else {})})
    return pd.DataFrame(rows)


def test_sink_stronger():
    cid = "sink_stronger_with_dape1x3"
    for seeds in (True, False):  # paired by seed, or runs without seeds (unpaired)
        assert verdict(cid, sink=sink(seeds=seeds)) == CONFIRMED
        assert verdict(cid, sink=sink(d3=0.205, seeds=seeds)) == UNDECIDED
        assert verdict(cid, sink=sink(d3=0.1, seeds=seeds)) == REFUTED
    assert verdict(cid, sink=sink()[lambda d: d["method"] == "DAPE-Kerple"]) == NOT_RUN
    record = evaluate_claims(None, sink=sink(), claim_ids=[cid]).iloc[0]
    check = next(iter(record["numbers"].values()))
    assert check["n_seeds"] == 2 and check["n_rows"] == 4  # two seeds × four sequences


# --------------------------------------------------------------------------- §4.3 model size, App. J
def test_larger_models():
    cid = "dape1x3_beats_dape_larger_models"
    parts = [runs("model_size", m, {1: v, 2: v + 0.5}, size=s)
             for s in ("small", "base") for m, v in (("DAPE-Kerple", 9.0), ("DAPE1x3-Kerple", 8.8))]
    assert verdict(cid, frame(*parts)) == CONFIRMED
    parts[-1] = runs("model_size", "DAPE1x3-Kerple", {1: 9.1, 2: 9.6}, size="base")
    assert verdict(cid, frame(*parts)) == REFUTED
    assert verdict(cid, runs("model_size", "DAPE-Kerple", {1: 9.0})) == NOT_RUN


def test_beats_data_adaptive():
    cid = "dape1x3_beats_data_adaptive"
    d3 = runs(B, "DAPE1x3-Kerple", {1: 9.0, 2: 9.5})
    assert verdict(cid, frame(d3, runs(B, "CoPE", {1: 9.3, 2: 12}), runs(B, "XL", {1: 9.4, 2: 11}))) == CONFIRMED
    assert verdict(cid, frame(d3, runs(B, "CoPE", {1: 9.3, 2: 9.6}))) == UNDECIDED  # +1% beyond: below 2%
    assert verdict(cid, frame(d3, runs(B, "CoPE", {1: 8.5, 2: 9.6}))) == REFUTED
    assert verdict(cid, d3) == NOT_RUN


# --------------------------------------------------------------------------- rows found by role
def test_a_role_finds_its_rows_whatever_the_family_is_called():
    assert verdict("dape_ordering_beyond", trio()) == CONFIRMED
    assert verdict("dape_ordering_beyond", trio().assign(families="x_anything")) == CONFIRMED
    shared = trio().assign(families="x_a;x_b", roles="kernel_sweep;central")
    assert verdict("dape_ordering_beyond", shared) == CONFIRMED
    kerple = trio()["method"] == "Kerple"
    split = trio().assign(families=np.where(kerple, "x_one", "x_two"))  # two families of one role, read together
    assert verdict("dape_ordering_beyond", split) == CONFIRMED
    assert verdict("dape_ordering_beyond", split[~kerple]) == NOT_RUN


def test_a_family_name_alone_finds_nothing():
    named = trio().assign(families="baselines")
    assert verdict("dape_ordering_beyond", named.assign(roles="")) == NOT_RUN
    assert verdict("dape_ordering_beyond", named.assign(roles="kernel_sweep")) == NOT_RUN
    assert verdict("dape_ordering_beyond", named.drop(columns="roles")) == NOT_RUN


def test_timing_che_and_sink_read_their_roles():
    cid = "timing_overhead_shrinks"
    assert verdict(cid, timing=timing(), timing_repeats=repeats().assign(roles="x;forward_time")) == CONFIRMED
    assert verdict(cid, timing=timing().assign(roles="step_time"),
                   timing_repeats=repeats().assign(roles="step_time")) == NOT_RUN
    mixed = frame(repeats().assign(roles="forward_time"),
                  repeats(ratios=(0.7, 0.6, 0.5)).assign(roles="step_time", cell="other"))  # REFUTED if read
    assert verdict(cid, timing=timing(), timing_repeats=mixed) == CONFIRMED
    assert verdict("che_dape1x3_beats_kerple", che=che().assign(roles="che")) == CONFIRMED
    assert verdict("che_dape1x3_beats_kerple", che=che().assign(roles="central")) == NOT_RUN
    assert verdict("sink_stronger_with_dape1x3", sink=sink().assign(roles="attention_maps")) == CONFIRMED
    assert verdict("sink_stronger_with_dape1x3", sink=sink().assign(roles="")) == NOT_RUN


def test_rules_name_roles_not_families():
    for c in CLAIMS:
        assert "role " in c.rule, c.claim_id
        assert not any(name in c.rule for name in ("Family", "baselines", "hidden_width", "kernel_sizes",
                                                   "dape_every_encoding")), c.claim_id


# --------------------------------------------------------------------------- the whole table
def test_every_claim_is_tested_and_cites_a_section():
    tested = {"baselines_explode_bounded", "dape_ordering_beyond", "dape1x3_best_within",
              "dape1x3_improves_nope_rope", "dape1x3_improves_additive", "dape1x3_beats_dape_additive",
              "naive_dape_degrades_rope", "leakage_collapse", "narrow_dape1x3_beats_wide_dape",
              "kernel_size_not_always_largest", "equal_tokens_comparable", "long_training_hurts_short",
              "delta_p_sign", "timing_overhead_shrinks", "che_dape1x3_beats_kerple", "sink_stronger_with_dape1x3",
              "dape1x3_beats_dape_larger_models", "dape1x3_beats_data_adaptive"}
    assert {c.claim_id for c in CLAIMS} == tested
    assert set(CORE_CLAIMS) == {"baselines_explode_bounded", "dape_ordering_beyond", "dape1x3_improves_nope_rope",
                                "leakage_collapse", "narrow_dape1x3_beats_wide_dape", "timing_overhead_shrinks"}
    for c in CLAIMS:
        assert c.section.startswith(("§", "App.")) and c.rule and c.statement.endswith(".")


def test_records_and_markdown(on_paper):
    df = evaluate_claims(trio(), timing=timing())
    assert list(df.columns) == ["claim_id", "section", "statement", "rule", "core", "informational", "verdict",
                                "basis", "seed_noise", "summary", "seeds_to_decide", "extra_jobs",
                                "extra_cpu_hours", "extra_gpu_hours", "gpu_bound", "numbers", "judged_intervals"]
    row = df.set_index("claim_id").loc["dape_ordering_beyond"]
    first = next(iter(row["numbers"].values()))
    assert first["verdict"] == CONFIRMED and first["gain_low"] > 0.01 and first["n_seeds"] == 3
    assert row["basis"] == "paired t on the seeds' own spread (no per-window data)"
    rho = setting_correlations(trio())
    md = claims_markdown(df, paper=on_paper.reset_index(), rho=rho)
    assert "| `dape_ordering_beyond` ★ | §4.1 |" in md and "## Rules" in md and "on the paper's numbers" in md
    assert md.count("\n- `") == len(CLAIMS)
    counts = df["verdict"].value_counts()
    assert md.startswith(f"# Claims\n\n{counts.get(CONFIRMED, 0)} CONFIRMED, {counts.get(REFUTED, 0)} REFUTED, ")
    assert "never a refutation" in md and "Student's t on per-seed statistics" in md and "t_ν · σ / √n" in md
    assert "## Method orderings against the paper" in md and "| central | code, train 64, tiny |" in md
    assert (on_paper["basis"].str.startswith("point") | on_paper["verdict"].eq(NOT_RUN)).all()


@pytest.mark.parametrize("claim_id, expected", [
    ("baselines_explode_bounded", CONFIRMED), ("dape_ordering_beyond", CONFIRMED),
    ("dape1x3_best_within", CONFIRMED), ("dape1x3_improves_additive", CONFIRMED),
    ("dape1x3_beats_dape_additive", CONFIRMED), ("narrow_dape1x3_beats_wide_dape", CONFIRMED),
    ("kernel_size_not_always_largest", CONFIRMED), ("delta_p_sign", CONFIRMED),
    ("timing_overhead_shrinks", CONFIRMED), ("che_dape1x3_beats_kerple", CONFIRMED),
    ("dape1x3_beats_dape_larger_models", CONFIRMED), ("dape1x3_beats_data_adaptive", CONFIRMED),
    ("dape1x3_improves_nope_rope", NOT_RUN), ("naive_dape_degrades_rope", NOT_RUN), ("leakage_collapse", NOT_RUN),
    ("equal_tokens_comparable", NOT_RUN), ("long_training_hurts_short", NOT_RUN),
    ("sink_stronger_with_dape1x3", NOT_RUN)])
def test_the_rules_accept_the_papers_own_numbers(on_paper, claim_id, expected):
    """Rules the paper's printed numbers fail would be miscalibrated; figure-only claims are NOT-RUN."""
    assert on_paper.loc[claim_id, "verdict"] == expected


# --------------------------------------------------------------------------- one seed: seed noise or UNDECIDED
def test_one_seed_of_che_or_sink_is_undecided_and_a_pooled_sigma_only_sizes_it():
    """A CHE task or a sink pair with one seed has no spread of its own: UNDECIDED, however clear the gap; the σ
    pooled over the cells or pairs with several seeds sizes the seeds it needs, named in the basis as a plan."""
    one = che(wins=4)[lambda d: d["seed"] == 0]
    record = evaluate_claims(None, che=one, claim_ids=["che_dape1x3_beats_kerple"]).iloc[0]
    assert record["verdict"] == UNDECIDED and record["basis"].startswith(NO_PAIR_SPREAD)
    single = sink()[lambda d: d["run"].isin(["a", "c"])]
    assert verdict("sink_stronger_with_dape1x3", sink=single) == UNDECIDED
    others = [sink(d3=0.4 * (1 + 0.03 * k)).assign(method=lambda d, k=k: d["method"].str.replace("Kerple", f"E{k}"),
                                                   run=lambda d, k=k: d["run"] + str(k)) for k in range(3)]
    record = evaluate_claims(None, sink=frame(single, *others), claim_ids=["sink_stronger_with_dape1x3"])
    first = record.iloc[0]
    kerple = [c for key, c in first["numbers"].items() if key.split(": ", 1)[1].startswith("DAPE1x3-Kerple")][0]
    assert kerple["basis"].startswith(PLAN_ONLY) and "sink pairs with several seeds" in kerple["basis"]
    assert kerple["verdict"] == UNDECIDED and kerple["seeds_needed"] is not None
    assert verdict("che_dape1x3_beats_kerple", che=che(wins=4)) == CONFIRMED  # the same gaps over two seeds


def _che_spread(noisy: float):
    """Summary rows of two CHE tasks, 3 seeds a method: on even_pairs DAPE1x3-Kerple − Kerple is 0.06 ± ``noisy``
    across the seeds, on reverse_string 0.06 ± 0.002 (a quiet task)."""
    rows = []
    for task, spread in (("even_pairs", noisy), ("reverse_string", 0.002)):
        for seed, offset in enumerate((-1.0, 0.0, 1.0)):
            for method, acc in (("Kerple", 0.6), ("DAPE1x3-Kerple", 0.66 + offset * spread)):
                rows.append({"task": task, "method": method, "seed": seed, "lr": 1e-3, "accuracy": acc,
                             "length": None, "row_type": "summary", "n_samples": np.nan})
    return pd.DataFrame(rows)


def test_each_che_task_reads_its_own_seeds_spread():
    """A task whose per-seed differences scatter (±0.05 around +0.06) is not won on the σ a quiet task lends the
    pool: its own spread (ν 2) leaves it open, while the quiet task is won."""
    record = evaluate_claims(None, che=_che_spread(0.05), claim_ids=["che_dape1x3_beats_kerple"]).iloc[0]
    won = " ".join(next(iter(record["numbers"].values()))["wins"])
    assert "reverse_string" in won and "even_pairs" not in won
    assert record["basis"] == "paired t on the seeds' own spread (no per-length data)"
    quiet = evaluate_claims(None, che=_che_spread(0.002), claim_ids=["che_dape1x3_beats_kerple"]).iloc[0]
    assert quiet["verdict"] == CONFIRMED  # the same mean gap, quiet seeds: both tasks won


def test_each_sink_pair_reads_its_own_seeds_spread():
    """Three encodings' sink pairs on 3 seeds: the Kerple pair's log-ratio scatters (0.5 ± 0.45 across the seeds),
    the others' barely; pooled over the encodings its σ would be about √(1/3) of its own and it would be CONFIRMED
    at a ratio of 1.3; on its own spread it is UNDECIDED, the quiet pairs CONFIRMED."""
    rows = []
    for encoding, spread in (("Kerple", 0.45), ("ALiBi", 0.01), ("FIRE", 0.01)):
        for seed, offset in enumerate((-1.0, 0.0, 1.0)):
            for method, log_mass in ((f"DAPE1x3-{encoding}", -1.0 + 0.5 + offset * spread), (f"DAPE-{encoding}", -1.0)):
                for sequence in range(4):
                    for layer in (0, 1):
                        rows.append({"run": f"{method}-{seed}", "method": method, "seed": seed, "eval_len": 128,
                                     "layer": layer, "sequence": sequence,
                                     "sink_mass": np.exp(log_mass + 0.01 * sequence)})
    record = evaluate_claims(None, sink=pd.DataFrame(rows), claim_ids=["sink_stronger_with_dape1x3"]).iloc[0]
    by_pair = {c["basis"] + " " + key: c for key, c in record["numbers"].items()}
    verdicts = {key.split(": ", 1)[1].split(" ")[0]: c["verdict"] for key, c in record["numbers"].items()}
    assert verdicts == {"DAPE1x3-ALiBi": CONFIRMED, "DAPE1x3-FIRE": CONFIRMED, "DAPE1x3-Kerple": UNDECIDED}, verdicts
    assert all(c["basis"] == "paired t on the seeds' own spread" and c["seed_df"] == 2 for c in by_pair.values())


def test_a_paired_comparison_of_one_seed_runs_borrows_no_seed_noise():
    """Two central methods over three seeds that disagree by ±5 % lend no σ to a pair of one-seed runs of the same
    setting (whose own noise they need not share): a 60 % gap is UNDECIDED on one seed and CONFIRMED on three seeds
    of its own; a 1 % gap stays UNDECIDED on three."""
    source = frame(runs(B, "Kerple", {1: [9.5, 10.0, 9.0], 2: [12.0, 12.6, 11.4]}),
                   runs(B, "ALiBi", {1: [10.0, 9.5, 10.5], 2: [11.0, 10.4, 11.6]}))
    rope = runs(E, "RoPE", {1: 10, 2: 30}, seeds=(0,))
    far = runs(E, "DAPE1x3-RoPE", {1: 4.0, 2: 12.0}, seeds=(0,))
    record = evaluate_claims(frame(source, rope, far), claim_ids=["dape1x3_improves_nope_rope"]).iloc[0]
    assert record["verdict"] == UNDECIDED
    assert record["basis"].startswith("1 seed (a paired comparison reads its own pair's spread")
    rope = runs(E, "RoPE", {1: [10.0, 10.3, 9.8], 2: [30.0, 31.0, 29.4]})
    far = runs(E, "DAPE1x3-RoPE", {1: [4.0, 4.1, 3.9], 2: [12.0, 12.5, 11.7]})
    close = runs(E, "DAPE1x3-RoPE", {1: [9.9, 10.4, 9.6], 2: [29.7, 31.2, 29.0]})
    record = evaluate_claims(frame(source, rope, far), claim_ids=["dape1x3_improves_nope_rope"]).iloc[0]
    assert record["verdict"] == CONFIRMED and record["basis"].startswith("paired t on the seeds' own spread")
    assert verdict("dape1x3_improves_nope_rope", frame(source, rope, close)) == UNDECIDED


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.claim_id)
def test_each_claim_decides_against_the_thresholds_it_declares(claim):
    """A claim is a declaration: its check reads the thresholds declared beside it and no other. Raised to an
    unreachable value (a 1000 % margin, a 10⁹ explosion, a ratio of 0), a claim CONFIRMED on the paper's own
    numbers is no longer CONFIRMED."""
    tables = dict(timing=as_timing(), che=as_che(), point=True)
    before = evaluate_claims(as_lm_results(), claim_ids={claim.claim_id}, **tables)["verdict"].iloc[0]
    if before != CONFIRMED:
        pytest.skip(f"{before} on the paper's numbers")
    unreachable = {"explodes": 1e9, "bounded": 0.0, "ratio": 0.0 if claim.claim_id == "leakage_collapse" else 1e9,
                   "absolute": 0.0, "tolerance": -1.0}
    thresholds = {k: (v if isinstance(v, tuple) else unreachable.get(k, 10.0)) for k, v in claim.thresholds.items()}
    assert thresholds, claim.claim_id
    after = evaluate_claims(as_lm_results(), claim_ids={claim.claim_id}, claims=(replace(claim, thresholds=thresholds),),
                            **tables)["verdict"].iloc[0]
    assert after != CONFIRMED, (claim.claim_id, thresholds)


# --------------------------------------------------------------------------- a claim's checks read together
def _judged(estimate, comparisons_note="x"):
    """One check's record on a paired t-interval of a log-ratio (σ 0.02 of one seed on ν 4, 3 seeds), deciding
    "A beats B" at a zero margin on the gain."""
    from dape_core.report.claim_context import gain_of, record
    from dape_core.report.intervals import Interval, SeedNoise, _t_interval, decide

    noise = SeedNoise(0.02, 4.0, "grid")
    iv = Interval(estimate, *_t_interval(estimate, 0.02 / np.sqrt(3), 4.0), "paired t", 3, 1, 0.02, noise)
    gain, rule = iv.map(gain_of), dict(side=1, confirm=0.0, refute=0.0)
    return record(decide(gain, **rule), f"{comparisons_note}: gain", gain, rule, ["run-a", "run-b"])


def test_a_claim_refutes_only_on_intervals_corrected_for_all_its_checks():
    """A claim is REFUTED when any of its checks is: of six, a check REFUTED at 95 % alone (gain −4 % [−7.4, −0.6])
    is read again at the Bonferroni level over the six and becomes UNDECIDED, saying so, with the seeds that would
    refute it at that level; a check far beyond stays REFUTED; one check alone, a CONFIRMED check and a fact (a
    divergence) keep their verdicts."""
    from dape_core.report.claim_context import jointly, public, record
    from dape_core.report.intervals import Interval, seeds_to_decide

    barely, far, confirmed = _judged(-0.04, "barely"), _judged(-0.2, "far"), _judged(0.2, "good")
    assert (barely["verdict"], far["verdict"], confirmed["verdict"]) == (REFUTED, REFUTED, CONFIRMED)
    others = [_judged(0.0, f"open {i}") for i in range(4)]
    checks = jointly([barely, confirmed, *others])
    assert [c["verdict"] for c in checks] == [UNDECIDED, CONFIRMED] + [UNDECIDED] * 4
    assert "REFUTED at 95 % alone, not at 1 − 0.05/6 over the claim's 6 intervals" in checks[0]["text"]
    iv, rule = barely["_judged"][0]
    assert checks[0]["seeds_needed"] == seeds_to_decide(iv, **rule, comparisons=6)[0] > \
        seeds_to_decide(iv, **rule)[0]
    assert checks[0]["runs"] == ["run-a", "run-b"]
    kept = jointly([far, confirmed, *others])[0]
    assert kept["verdict"] == REFUTED and "(also at 1 − 0.05/6" in kept["text"]
    assert jointly([barely]) == [barely]
    fact = record(REFUTED, "diverged", Interval(np.inf, np.inf, np.inf, "t", 1, 1), dict(side=-1, confirm=1.5,
                  refute=2.0), fact=True)
    assert jointly([fact, *others])[0]["verdict"] == REFUTED
    assert not any(key.startswith("_") for c in checks for key in public(c))


def test_a_mapped_or_bootstrap_interval_widens_on_its_own_scale():
    """:func:`simultaneous` of a mapped interval widens the t-interval the noise was estimated on and maps it again;
    a bootstrap interval reads its draws at 1 − 0.05 / m; ``level_for`` reads j of n at n / j comparisons."""
    from dape_core.report import intervals
    from dape_core.report.claim_context import gain_of

    noise = intervals.SeedNoise(0.02, 4.0, "grid")
    raw = intervals.Interval(-0.04, -0.07, -0.01, "paired t", 3, 1, 0.02, noise)
    wide = intervals.simultaneous(raw.map(gain_of), 6)
    expected = intervals.simultaneous(raw, 6).map(gain_of)
    assert (wide.low, wide.high) == pytest.approx((expected.low, expected.high))
    assert wide.low < raw.map(gain_of).low and wide.high > raw.map(gain_of).high
    draws = np.random.default_rng(0).normal(0.0, 1.0, 4000)
    iv = intervals.percentile(0.0, draws, "timing", 10)
    assert iv.low == pytest.approx(np.quantile(draws, 0.025, method="lower"))
    assert intervals.simultaneous(iv, 4).low == pytest.approx(np.quantile(draws, 0.025 / 4, method="lower"))
    assert intervals.level_for(1, 6) == 6 and intervals.level_for(2, 2) == 1 and intervals.level_for(7, 12) == 12 / 7


def _che_pair(gap_a):
    """Summary rows of two CHE tasks, 3 seeds a method, each task's per-seed differences 0.02 apart (its own σ 0.02
    on ν 2): DAPE1x3-Kerple − Kerple is ``gap_a`` on even_pairs and 0 on reverse_string."""
    rows = []
    for task, gap in (("even_pairs", gap_a), ("reverse_string", 0.0)):
        for seed, offset in enumerate((-0.02, 0.0, 0.02)):
            for method, acc in (("Kerple", 0.6), ("DAPE1x3-Kerple", 0.6 + offset + gap)):
                rows.append({"task": task, "method": method, "seed": seed, "lr": 1e-3, "accuracy": acc,
                             "length": None, "row_type": "summary", "n_samples": np.nan})
    return pd.DataFrame(rows)


def test_the_che_majority_reads_each_task_at_the_level_its_count_needs():
    """Of two tasks, one lost refutes ("at least half lost"), so a loss is read at 1 − 0.05/2: a task lost at 95 %
    alone (−6 points, 95 % interval just below 0 on the task's own spread) leaves the claim UNDECIDED; a clear loss
    refutes it."""
    cid = "che_dape1x3_beats_kerple"
    from dape_core.report.intervals import t_quantile

    se = 0.02 / np.sqrt(3)
    assert -0.06 + t_quantile(2) * se < 0 < -0.06 + t_quantile(2, 1 - 0.025 / 2) * se  # lost at 95 % only
    assert verdict(cid, che=_che_pair(-0.06)) == UNDECIDED
    assert verdict(cid, che=_che_pair(-0.1)) == REFUTED


def test_every_rule_text_states_the_thresholds_its_check_decides_against():
    """claims.md prints each claim's rule text; the check reads ``thresholds``. Every threshold (each number of a
    range) appears in the text in one of the forms the texts use, and the texts name the rules they run: the
    leakage claim's two routes at 1 − 0.05/2 and its σ's kind, the CHE claim's t-interval (not a bootstrap)."""
    from dape_core.report import lm_checks
    from dape_core.report.claims import CLAIMS

    def forms(value: float) -> set:
        return {f"{value:g}", f"{value:.0%}", f"{value:.1%}", f"{100 * value:g}", f"{value:.3g}"}

    for claim in CLAIMS:
        for name, value in claim.thresholds.items():
            for number in (value if isinstance(value, (tuple, list)) else (value,)):
                assert any(form in claim.rule for form in forms(number)), (claim.claim_id, name, number)
    by_id = {claim.claim_id: claim for claim in CLAIMS}
    assert f"1 − 0.05/{lm_checks.LEAK_ROUTES}" in by_id["leakage_collapse"].rule
    assert "never from tril-only runs" in by_id["leakage_collapse"].rule
    assert "t-interval" in by_id["che_dape1x3_beats_kerple"].rule
    assert "bootstrap" not in by_id["che_dape1x3_beats_kerple"].rule


def test_claims_md_says_how_many_false_decisions_the_claims_allow_together():
    import pandas as pd

    from dape_core.report.claims_markdown import family_line

    df = pd.DataFrame({"verdict": ["CONFIRMED"] * 2 + ["REFUTED"] + ["UNDECIDED"] * 15 + ["NOT-RUN"] * 2})
    line = family_line(df)
    assert "each of the 18 evaluated claims" in line and "up to 0.9 false decisions" in line
    assert "up to 60% were they independent" in line and "3 are decided here" in line
