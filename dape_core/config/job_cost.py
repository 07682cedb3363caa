"""A job's price in reference CPU-seconds, counted from its settings alone: the same on every machine.

The design stage (:mod:`dape_core.report.design`) prices a fresh seed by what its jobs *do*, not by how long they took
here, so that it chooses the same claims and seeds on any machine under any load: price = start[kind] + operator calls ×
seconds_per_call + FLOPs × seconds_per_flop, from the committed :data:`TABLE` that ``benchmarks/job_cost_fit.py`` fits
on one named machine's measured pilot. ``start`` is a process start, imports, data and the final write; calls are the
method's fitted operator calls (:func:`dape_core.config.dispatch.step_calls`); FLOPs those of
:mod:`dape_core.model_arithmetic` (a forward pass a third of a training step's 6·N). Counted:

- ``train``: ``steps`` training steps of ``batch_size`` × ``grad_accum`` sequences at ``train_len``;
- ``evaluate``: per evaluation length the windows its settings allow (``max_windows_within`` up to the training length
  where set, ``max_windows`` beyond), forward passes in batches of ``batch_size``;
- ``attention``: per heat-map length (a job each) ``max_windows`` + ``sink_sequences`` forward passes;
- ``che``: ``steps`` steps of ``batch_size`` at the mean training length (1 … ``train_max_len`` uniform), then
  ``eval_samples`` at every evaluation length in the batches the score budget allows (input tokens counted).

A run whose method has no operator count has no price (None): the design leaves its claims out and says so."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from types import SimpleNamespace

from dape_core.config import dispatch
from dape_core.config.flops import run_shape, run_vocab
from dape_core.encoding_facts import facts
from dape_core.errors import ConfigError
from dape_core.model_arithmetic import decoder_flops_per_token, gpt_flops_per_token, stack_parameters

KINDS = ("train", "evaluate", "attention", "che")
TABLE = "measured/job_cost.json"
FIT_COMMAND = "python benchmarks/job_cost_fit.py"
#: the kinds that share one fitted start: LM jobs are one ``dape`` process each; a CHE cell's start is its own
START_GROUP = {"train": "lm", "evaluate": "lm", "attention": "lm", "che": "che"}


@dataclass(frozen=True)
class Work:
    """What jobs do: how many jobs (each pays a start), their top-level operator calls and FLOPs."""

    jobs: int
    calls: float
    flops: float

    def __add__(self, other: "Work") -> "Work":
        return Work(self.jobs + other.jobs, self.calls + other.calls, self.flops + other.flops)


@dataclass(frozen=True)
class CostTable:
    """The committed prices: CPU-seconds of a job's start per kind, of one operator call and of one TFLOP."""

    start_s: dict
    s_per_call: float
    s_per_tflop: float
    source: str

    def price(self, kind: str, work: Work) -> float:
        """Reference CPU-seconds: jobs × their kind's start + calls × s/call + FLOPs × s/FLOP."""
        return work.jobs * self.start_s[kind] + work.calls * self.s_per_call + work.flops / 1e12 * self.s_per_tflop


@lru_cache(maxsize=None)
def cost_table(text: str | None = None) -> CostTable:
    """The committed :data:`TABLE` (or the JSON ``text``), checked: a damaged table is one line naming it."""
    where = f"dape_core/config/{TABLE}"
    try:
        data = json.loads(text if text is not None
                          else resources.files("dape_core.config").joinpath(TABLE).read_text())
        table = CostTable({k: float(data["start_s"][k]) for k in KINDS}, float(data["s_per_call"]),
                          float(data["s_per_tflop"]), str(data["source"]))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{where}: damaged ({type(err).__name__}: {err}); rewrite it with `{FIT_COMMAND}`") from None
    numbers = [*table.start_s.values(), table.s_per_call, table.s_per_tflop]
    if not all(math.isfinite(v) and v >= 0 for v in numbers):
        raise ConfigError(f"{where}: damaged (a negative or non-finite price); rewrite it with `{FIT_COMMAND}`")
    return table


def _pass_calls(calls: dispatch.StepCalls, n_layer: int) -> int:
    """Calls of one forward/backward pass of ``n_layer`` layers (a step's calls less the optimiser's)."""
    return calls.calls(n_layer, 1) - calls.calls(n_layer, 0)


def lm_work(settings: dict, evaluation: dict, attention: dict, vocab_size: int) -> dict[str, Work] | None:
    """The work of one seed of an LM run per job kind (``attention``: its heat-map jobs, only where ``attention``
    names lengths); None when its method has no operator count."""
    cfg = run_shape(settings, vocab_size)
    calls = dispatch.method_calls(settings)
    if calls is None:
        return None
    micro = _pass_calls(calls, cfg.n_layer)
    accum = int(settings.get("grad_accum") or 1)
    step_calls = calls.calls(cfg.n_layer, accum)
    train_len = settings["train_len"]
    sequences = settings["steps"] * settings["batch_size"] * accum
    work = {"train": Work(1, settings["steps"] * step_calls,
                          gpt_flops_per_token(cfg, train_len) * sequences * train_len)}

    def forward(length: int, count: int, batch: int) -> Work:
        """``count`` sequences of ``length`` in batches of ``batch``: a forward pass is a third of a step's FLOPs."""
        return Work(0, math.ceil(count / batch) * micro / 3, count * length * gpt_flops_per_token(cfg, length) / 3)

    evaluate = Work(1, 0.0, 0.0)
    for length in evaluation["eval_lens"]:
        within = evaluation.get("max_windows_within") and length <= train_len
        count = evaluation["max_windows_within"] if within else evaluation["max_windows"]
        evaluate += forward(length, count or 1, evaluation["batch_size"])
    work["evaluate"] = evaluate
    lengths = attention.get("heatmap_lens") or []
    if lengths:  # one job per heat-map length
        count = attention["max_windows"] + attention["sink_sequences"]
        work["attention"] = sum((forward(n, count, 1) for n in lengths), Work(len(lengths), 0.0, 0.0))
    return work


def che_work(settings: dict) -> Work | None:
    """The work of one seed of a CHE cell (training, and evaluation at every length); None without an operator count."""
    cfg = SimpleNamespace(**{k: settings[k] for k in ("n_layer", "n_head", "d_model", "d_ff", "encoding",
                                                      "encoding_shared", "processor", "kernel_size", "dape_width")})
    calls = dispatch.method_calls(settings)
    if calls is None:
        return None
    micro, step = _pass_calls(calls, cfg.n_layer), calls.calls(cfg.n_layer, 1)
    non_embedding = stack_parameters(cfg, causal=False)

    def per_token(length: int) -> float:
        return decoder_flops_per_token(
            non_embedding=non_embedding, vocab_size=0, d_model=cfg.d_model, n_layer=cfg.n_layer, n_head=cfg.n_head,
            attention_width=cfg.d_model, seq_len=length, processor=cfg.processor,
            bias_channels=facts(cfg.encoding).has_bias, kernel_size=cfg.kernel_size, dape_width=cfg.dape_width)

    longest = settings["train_max_len"]
    mean_step = sum(per_token(n) * n for n in range(1, longest + 1)) / longest
    work = Work(1, settings["steps"] * step, settings["steps"] * settings["batch_size"] * mean_step)
    lengths = sorted({*range(1, longest + 1), *range(settings["eval_min_len"], settings["eval_max_len"] + 1)})
    for n in lengths:
        batch = max(1, min(settings["eval_batch_size"], settings["eval_score_budget"] // n ** 2))
        work += Work(0, math.ceil(settings["eval_samples"] / batch) * micro / 3,
                     settings["eval_samples"] * n * per_token(n) / 3)
    return work


def seed_work(plan) -> dict[str, dict[str, Work]]:
    """The work of one more seed of each LM run and CHE cell of ``plan`` per job kind (absent: no operator count)."""
    out: dict[str, dict[str, Work]] = {}
    for name, run in sorted(plan.lm_runs.items()):
        maps = run["attention_settings"] if run["attention_seeds"] else {}
        work = lm_work(run["settings"], run["eval"], maps, run_vocab(plan, run["settings"]))
        if work is not None:
            out[name] = work
    for name, cell in sorted(plan.che_cells.items()):
        work = che_work(cell["settings"])
        if work is not None:
            out[name] = {"che": work}
    return out


def plan_prices(plan, table: CostTable | None = None) -> dict[str, dict[str, float]]:
    """Reference CPU-seconds of one more seed of every LM run and CHE cell of ``plan`` per job kind
    (:func:`seed_work` priced by the committed table): what the design stage spends its budget on."""
    table = table or cost_table()
    return {unit: {kind: round(table.price(kind, w), 3) for kind, w in kinds.items()}
            for unit, kinds in seed_work(plan).items()}


def fit_table(work: dict[str, dict[str, Work]], measured: dict[str, dict[str, float]], source: str) -> dict:
    """Fit the table to one machine's measured CPU-seconds of the same seeds' jobs (``measured``: unit → kind → CPU-s,
    as a design records them): non-negative least squares on relative errors (a job counts by its share, not size), one
    start for LM jobs (one ``dape`` process), one for CHE cells; with each kind's median and largest relative error."""
    import numpy as np
    from scipy.optimize import nnls

    keys = [(u, k) for u in sorted(work) for k in KINDS if k in work[u] and k in measured.get(u, {})]
    groups = sorted({START_GROUP[k] for _, k in keys})
    if len(keys) < len(groups) + 4:
        raise ConfigError(f"{source}: {len(keys)} priced jobs, too few to fit {len(groups) + 2} prices")
    x = np.array([[work[u][k].jobs * (START_GROUP[k] == g) for g in groups]
                  + [work[u][k].calls, work[u][k].flops / 1e12] for u, k in keys], dtype=float)
    y = np.array([measured[u][k] for u, k in keys], dtype=float)
    coef, _ = nnls(x / y[:, None], np.ones_like(y))
    error = abs(x @ coef / y - 1)
    start = dict(zip(groups, coef[:len(groups)]))
    fallback = float(np.median(list(start.values())))  # a group the pilot did not run

    def fit(kind: str) -> dict:
        rows = np.array([k == kind for _, k in keys])
        return {"jobs": int(rows.sum()), "median_abs_rel_error": round(float(np.median(error[rows])), 4),
                "max_abs_rel_error": round(float(error[rows].max()), 4)}

    return {"source": source, "start_s": {k: round(float(start.get(START_GROUP[k], fallback)), 4) for k in KINDS},
            "s_per_call": float(f"{coef[len(groups)]:.6g}"), "s_per_tflop": round(float(coef[len(groups) + 1]), 4),
            "fit": {k: fit(k) for k in KINDS if any(kk == k for _, kk in keys)}}


def design_line(plan) -> str:
    """What a configuration's design will spend (printed with the estimate when the workflow is parsed): the
    pilot's and the budget's reference minutes; empty without a ``design`` block."""
    design = plan.config.get("design")
    if not design:
        return ""
    return (f"Design: the families as written are its pilot, ≈ {pilot_reference_minutes(plan, design['cores']):.0f} "
            f"reference minutes of training, evaluation and CHE on {design['cores']} cores; the fresh seeds it then "
            f"chooses take at most {design['budget_minutes']:g} more (priced by their jobs' work, the same on every "
            "machine; the design prints their wall time on this one)")


def pilot_reference_minutes(plan, cores: int) -> float:
    """Reference minutes of the plan's LM and CHE jobs as written (a design's pilot) on ``cores`` cores: every
    seed's training and evaluation, the attention maps of its attention seeds, every CHE seed."""
    prices, total = plan_prices(plan), 0.0
    for name, run in plan.lm_runs.items():
        if name in prices:
            p = prices[name]
            total += (len(run["seeds"]) * (p["train"] + p["evaluate"])
                      + len(run["attention_seeds"]) * p.get("attention", 0))
    for name, cell in plan.che_cells.items():
        total += len(cell["seeds"]) * prices.get(name, {}).get("che", 0.0)
    return total / cores / 60
