"""Jobs per rule and the GPU-hours of the training jobs: from measured throughput where there is one, otherwise
the larger of the FLOP time and the dispatch time (:mod:`dape_core.config.dispatch`).

FLOP counts are arithmetic on each run's settings (:func:`dape_core.model_arithmetic.gpt_flops_per_token`, the
formula the training summary reports; its parameter count is checked against the built model by the tests), so
the estimate — printed whenever the workflow is parsed — imports no torch and builds no model.

A training job's GPU-hours are its tokens (steps × batch_size × grad_accum × train_len) divided by a throughput
in tokens/s of one GPU, taken in this order:

1. **measured**: ``estimate.calibration`` names a CSV written by ``benchmarks/calibrate_gpu.py`` (one row per
   device × size × method × train_len × micro-batch × precision × path, with the tokens/s of training steps).
   A row of the same device whose shape (size, n_layer, n_head, d_model, vocab_size), method (encoding,
   processor, kernel_size, dape_width), train_len, micro-batch (the run's batch_size), precision, attention_impl
   and dape_dtype equal the run's gives its tokens/s as is.
2. **scaled**: otherwise the nearest measured row of the same method (encoding, processor, kernel_size),
   precision, attention_impl, dape_dtype and device — nearest in FLOPs per token (smallest |log ratio|), then in
   tokens per micro-batch — gives tokens/s × flops_per_token(measured) / flops_per_token(run): the same FLOP/s.
3. **FLOP estimate**: otherwise (no CSV, or no row of the method on that device) FLOPs / (``gpu_tflops`` ×
   ``utilisation``).

Unless the row was measured (the bound ``measured``), a job's GPU-hours are the larger of that FLOP time (2. or 3.)
and its **dispatch time**: operator calls per step (:func:`dape_core.config.dispatch.step_calls`, fitted from
``dape_core/config/measured/step_op_counts.csv``) × the host cost of one call (the calibration's, else the one measured on
a CPU in ``dape_core/config/measured/dispatch_cost.csv``) × steps, on each of the job's GPUs. Models this small are bound
by dispatch: the 3-layer model's step makes about a thousand calls whatever its FLOPs. The bound that decides
(``flops``, ``dispatch`` or ``measured``) is reported per job, shape and family; a missing or damaged count or cost
CSV stops the estimate with one line naming the file.

Rows whose status is not ``ok`` (a micro-batch that did not fit) are not used. ``estimate.calibration_device``
picks the device when the CSV holds several. The FLOP time assumes one GPU's throughput per GPU (a job on N GPUs
takes 1/N of the time on each); the dispatch time is paid on each of them.

A ``finetune`` family's job (``dape finetune``, a Hugging Face decoder) always takes the **FLOP estimate**: the
calibration CSV measures ``dape train``'s models only, and the operator counts are the GPT's. Its model is the
run's ``base_config`` (``model_type`` and transformers configuration fields, ``vocab_size`` the data's), the
``config.json`` of its ``base_model`` directory (with that model's vocabulary when it is larger than the data's),
or, for a run of a family's ``base``
(``base_run``), the base run's model; the processor is the run's, or its base's when the run adds none. The model
is built on the meta device (``AutoModelForCausalLM.from_config``, with :func:`dape_core.hf.add_processor` when it
has a processor) and counted by :func:`dape_core.model_arithmetic.decoder_flops_per_token`, the formula of
:meth:`~dape_core.model.GPT.flops_per_token`. ``transformers`` and torch are imported only for a plan with
fine-tune runs; without transformers those jobs are left out of the GPU-hours, and the line says so.

A job that runs its micro-batch in pieces (``resources.train_lm.gpu_mem_gb``: the memory model's micro-batch) makes
more dispatch calls per step; the memory model traces the model with torch, so only ``python -m dape_core.config``
counts the pieces (:func:`dape_core.config.memory_plan.fit_micro_batches`); the line printed when the workflow is
parsed counts one piece per micro-batch and says so.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from dape_core.config import dispatch
from dape_core.encoding_facts import facts
from dape_core.errors import ConfigError
from dape_core.model_arithmetic import decoder_flops_per_token, gpt_flops_per_token
from dape_core.settings.attention import (CUDA_COMPILED_OPTIONS, CUDA_TRAINING_PATH, compiled_options_text,
                                         parse_compiled_options)
from dape_core.settings.finetune import SUPPORTED_MODEL_TYPES, is_finetuned

MEASURED, SCALED, FLOPS = "measured", "scaled", "FLOP estimate"
SHAPE = ("size", "n_layer", "n_head", "d_model", "vocab_size")
METHOD = ("encoding", "processor", "kernel_size")
PATH = ("precision", "attention_impl", "dape_dtype")
# a calibration row's key: the shape, the method with its width, the length, the micro-batch and the path
CALIBRATION_KEY = (*SHAPE, *METHOD, "dape_width", "train_len", "micro_batch", *PATH)
CALIBRATION_COLUMNS = ("device", *CALIBRATION_KEY, "tokens_per_s", "status")
NO_TRANSFORMERS = "fine-tune jobs not counted: transformers not installed (pip install -e '.[hf]')"


def run_shape(settings: dict, vocab_size: int):
    """The run's decoder settings with the shape resolved from its size (n_layer, n_head, d_model, d_ff)."""
    from dape_core.settings import field_names
    from dape_core.settings.model import GPTConfig

    model = {k: settings[k] for k in field_names(GPTConfig) if k in settings}
    model.update(vocab_size=vocab_size)
    model.pop("train_len", None)  # the length enters the count as the FLOPs' argument
    return GPTConfig(**model)


def _flops_per_token(settings: dict, vocab_size: int, seq_len: int) -> float:
    return gpt_flops_per_token(run_shape(settings, vocab_size), seq_len)


def training_flops(settings: dict, vocab_size: int) -> float:
    """Training FLOPs of one LM run: FLOPs per token (arithmetic on its shape) × tokens of all its steps."""
    return _flops_per_token(settings, vocab_size, settings["train_len"]) * training_tokens(settings)


def training_tokens(settings: dict) -> int:
    """Tokens of all steps of one LM run: steps × batch_size × grad_accum × train_len."""
    return settings["steps"] * settings["batch_size"] * settings["grad_accum"] * settings["train_len"]


def run_vocab(plan, settings: dict) -> int:
    """The vocabulary an estimate uses for a run: ``estimate.vocab_size``, or its dataset's ``vocab_size``."""
    return plan.config["estimate"]["vocab_size"] or plan.datasets[settings["dataset"]]["vocab_size"]


def calibration_key(settings: dict, vocab_size: int) -> dict:
    """A run's calibration key (:data:`CALIBRATION_KEY`): its settings with the shape resolved from the size."""
    cfg = run_shape(settings, vocab_size)
    key = {name: settings[name] for name in (*METHOD, "dape_width", "train_len", *PATH)}
    key.update(size=settings["size"], n_layer=cfg.n_layer, n_head=cfg.n_head, d_model=cfg.d_model,
               vocab_size=vocab_size, micro_batch=settings["batch_size"])
    return {name: key[name] for name in CALIBRATION_KEY}


def row_flops_per_token(row: dict) -> float:
    """FLOPs per token of a calibration row's model at its train_len (same formula as a run's)."""
    settings = {name: str(row[name]) for name in ("size", "encoding", "processor", "attention_impl", "dape_dtype")}
    settings.update({name: int(row[name]) for name in ("n_layer", "n_head", "d_model", "kernel_size", "dape_width")})
    return _flops_per_token(settings, int(row["vocab_size"]), int(row["train_len"]))


# ----------------------------------------------------------------------------------------------- fine-tunes
def finetune_model(plan, name: str) -> tuple[dict, dict]:
    """A fine-tune run's model as its job builds it: (``model_type`` and the transformers configuration fields,
    ``vocab_size`` included; the attention settings of its processor). A run of a family's base (``base_run``)
    starts from that run's model; the processor is the first one met from the run down to its base directory's
    ``config.json`` (none met: the run's own settings, processor none)."""
    from dape_core.settings import AttentionSettings, field_names

    attention = None
    chain = [name]
    settings = plan.finetune_runs[name]["settings"]
    own = {k: settings[k] for k in field_names(AttentionSettings)}
    while True:
        if attention is None and settings["processor"] != "none":
            attention = {k: settings[k] for k in field_names(AttentionSettings)}
        if settings["base_run"] is None:
            break
        if settings["base_run"] in chain:
            raise ConfigError(f"finetune_runs.{name}.base_run: {' → '.join(chain + [settings['base_run']])} is a "
                              "cycle; allowed values: a chain of runs that ends at a base_config or base_model")
        chain.append(settings["base_run"])
        settings = plan.finetune_runs[settings["base_run"]]["settings"]
    vocab = run_vocab(plan, settings)
    if settings["base_model"] is None:
        config = {**settings["base_config"], "vocab_size": vocab}
    else:
        config = _directory_config(str(settings["base_model"]))
        if config.get("model_type") not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(f"base_model: {settings['base_model']!r} holds a {config.get('model_type')!r} model; "
                              f"allowed values: a directory of a {', '.join(SUPPORTED_MODEL_TYPES)} model")
        saved = config.pop("dape", None)  # dape_core.hf.patch.CONFIG_KEY: the directory's own processor
        if attention is None and isinstance(saved, dict):
            attention = {**own, **{k: saved[k] for k in field_names(AttentionSettings) if k in saved}}
        config["vocab_size"] = max(int(config.get("vocab_size") or 0), vocab)
    return config, attention or own


def _directory_config(path: str) -> dict:
    """The configuration fields of a local model directory's config.json (``model_type`` among them)."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise ConfigError(f"base_model: {path!r} has no config.json; allowed values: a local Hugging Face model "
                          "directory (config.json, safetensors weights, tokenizer.json)")
    return dict(json.loads(file.read_text()))


def finetune_shape(config: dict, attention: dict) -> dict:
    """The counted shape of a fine-tune model: model_type, hidden_size, layers, heads, attention width (heads ×
    head_dim), vocab_size, non-embedding parameters (on the meta device) and whether its encoding adds a bias."""
    return dict(_finetune_shape(json.dumps(config, sort_keys=True), json.dumps(attention, sort_keys=True)))


@lru_cache(maxsize=None)
def _finetune_shape(config_json: str, attention_json: str) -> tuple:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from dape_core.finetune import non_embedding_parameters
    from dape_core.hf.patch import add_processor, attention_layers

    fields = json.loads(config_json)
    attention = json.loads(attention_json)
    model_type = fields.pop("model_type")
    config = AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
        if attention["processor"] != "none":
            add_processor(model, attention)
    layers = attention_layers(model)
    heads = config.num_attention_heads
    return (("model_type", model_type), ("hidden_size", config.hidden_size), ("n_layer", len(layers)),
            ("n_head", heads), ("attention_width", heads * layers[0].head_dim),
            ("vocab_size", config.vocab_size), ("non_embedding", non_embedding_parameters(model)),
            ("bias_channels", attention["processor"] != "none" and facts(attention["encoding"]).has_bias))


def finetune_flops_per_token(shape: dict, attention: dict, train_len: int) -> float:
    """FLOPs per token of a fine-tune model (:func:`~dape_core.model_arithmetic.decoder_flops_per_token`, as the
    GPT's)."""
    return decoder_flops_per_token(
        non_embedding=shape["non_embedding"], vocab_size=shape["vocab_size"], d_model=shape["hidden_size"],
        n_layer=shape["n_layer"], n_head=shape["n_head"], attention_width=shape["attention_width"], seq_len=train_len,
        processor=attention["processor"], bias_channels=shape["bias_channels"], kernel_size=attention["kernel_size"],
        dape_width=attention["dape_width"])


def finetune_flops(plan, name: str) -> float:
    """Training FLOPs of one fine-tune job: FLOPs per token × tokens of all its steps (0 for steps 0)."""
    settings = plan.finetune_runs[name]["settings"]
    config, attention = finetune_model(plan, name)
    return finetune_flops_per_token(finetune_shape(config, attention), attention,
                                    settings["train_len"]) * training_tokens(settings)


def transformers_available() -> bool:
    """Whether ``transformers`` (the ``hf`` extra) can be imported."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------------------------------------- calibration
def load_calibration(assumptions: dict) -> tuple[list[dict] | None, str]:
    """The usable rows (status ok, one device) of ``estimate.calibration`` and a sentence saying what was read;
    ``None`` when there is no calibration to read."""
    path = assumptions.get("calibration")
    if not path:
        return None, "no estimate.calibration: FLOP estimate"
    if not Path(path).is_file():
        return None, (f"calibration {path} not found (benchmarks/calibrate_gpu.py writes it on a GPU): "
                      "FLOP estimate")
    import pandas as pd

    try:
        frame = pd.read_csv(path, comment="#")
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as err:
        raise ConfigError(f"estimate.calibration: {path} is not a readable CSV ({err}); allowed values: a CSV of "
                          "benchmarks/calibrate_gpu.py") from None
    missing = [c for c in CALIBRATION_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"estimate.calibration: {path} lacks the columns {', '.join(missing)}; allowed values: a "
                          f"CSV of benchmarks/calibrate_gpu.py (columns {', '.join(CALIBRATION_COLUMNS)})")
    if frame.empty:
        raise ConfigError(f"estimate.calibration: {path} holds no rows; allowed values: a CSV of "
                          "benchmarks/calibrate_gpu.py with at least one measured case")
    rate = pd.to_numeric(frame["tokens_per_s"], errors="coerce")
    whole = frame[list(CALIBRATION_COLUMNS)].notna().all(axis=1) & (rate > 0)
    damaged = [i for i, (status, fine) in enumerate(zip(frame["status"], whole)) if pd.isna(status) or
               (status == "ok" and not fine)]
    if damaged:
        raise ConfigError(f"estimate.calibration: {path} data row {damaged[0] + 1} is cut or damaged (no status, or an "
                          "`ok` row without every key and a positive tokens_per_s); allowed values: a whole CSV of "
                          "benchmarks/calibrate_gpu.py, which rewrites it")
    devices = sorted(frame["device"].astype(str).unique())
    device = assumptions.get("calibration_device")
    if device is None and len(devices) > 1:
        raise ConfigError(f"estimate.calibration_device: null, but {path} holds several devices; allowed values: "
                          f"{', '.join(devices)}")
    if device is not None and device not in devices:
        raise ConfigError(f"estimate.calibration_device: {device!r} is not in {path}; allowed values: "
                          f"{', '.join(devices) or 'none (the CSV has no rows)'}")
    device = device if device is not None else (devices[0] if devices else "none")
    rows = frame[(frame["device"].astype(str) == device) & (frame["status"] == "ok")].to_dict("records")
    return rows, (f"calibration {path}, device {device}: {len(rows)} measured rows{_older_path(rows)}"
                  f"{_older_options(rows)}")


def _older_options(rows: list[dict]) -> str:
    """What the estimate says of DAPE rows measured on the compiled path (with ``attention_impl: auto``) with other
    options than its options on CUDA now (:data:`~dape_core.settings.attention.CUDA_COMPILED_OPTIONS`; a row
    without a ``path_options`` column was measured with all of them off): each option is set only where it
    measured faster, so their throughput is a lower bound."""
    now = compiled_options_text(CUDA_COMPILED_OPTIONS)
    older = [text for row in rows if row.get("processor") != "none" and str(row.get("attention_impl")) == "auto"
             and str(row.get("attention_path")) == CUDA_TRAINING_PATH
             and (text := _recorded_options(row.get("path_options"))) != now]
    if not older:
        return ""
    return (f" ({len(older)} DAPE rows measured with the {CUDA_TRAINING_PATH} path's options "
            f"{' / '.join(sorted(set(older)))}, not today's {now} on CUDA, each set where it measured faster "
            "(docs/performance.md): their GPU-hours are upper bounds until benchmarks/calibrate_gpu.py is rerun)")


def _recorded_options(value) -> str:
    """A calibration row's ``path_options``, checked; missing (measured before the column): all off."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return compiled_options_text({})
    return compiled_options_text(parse_compiled_options(str(value), field="estimate.calibration's path_options"))


def _older_path(rows: list[dict]) -> str:
    """What the estimate says of DAPE rows measured with ``attention_impl: auto`` on another path than the one auto
    trains with on CUDA now (:data:`~dape_core.settings.attention.CUDA_TRAINING_PATH`): their throughput is that
    path's."""
    older = sorted({str(row.get("attention_path")) for row in rows
                    if row.get("processor") != "none" and str(row.get("attention_impl")) == "auto"
                    and str(row.get("attention_path")) not in (CUDA_TRAINING_PATH, "nan", "None")})
    if not older:
        return ""
    count = sum(1 for row in rows if str(row.get("attention_path")) in older and row.get("processor") != "none")
    return (f" ({count} DAPE rows measured on the {', '.join(older)} path, which auto trained with before; it now "
            f"trains with {CUDA_TRAINING_PATH} on CUDA, whose step measured 0.57–0.67× the materialized one on an "
            "H200 (docs/performance.md): their GPU-hours are upper bounds until benchmarks/calibrate_gpu.py is "
            "rerun)")


def throughput(key: dict, flops_per_token: float, rows: list[dict] | None) -> tuple[float | None, str]:
    """Tokens/s of one GPU for a run's calibration key, and where it comes from: ``measured``, ``scaled from …``,
    or (None, ``FLOP estimate``) — the rule of the module docstring."""
    if not rows:
        return None, FLOPS
    for row in rows:
        if all(_same(row[name], key[name]) for name in CALIBRATION_KEY):
            return float(row["tokens_per_s"]), MEASURED
    candidates = [row for row in rows if all(_same(row[name], key[name]) for name in (*METHOD, *PATH))]
    if not candidates:
        return None, FLOPS
    tokens = key["micro_batch"] * key["train_len"]

    def distance(row):
        return (abs(math.log(row_flops_per_token(row) / flops_per_token)),
                abs(math.log(row["micro_batch"] * row["train_len"] / tokens)))

    nearest = min(candidates, key=distance)
    rate = float(nearest["tokens_per_s"]) * row_flops_per_token(nearest) / flops_per_token
    width = f" D={nearest['dape_width']}" if not _same(nearest["dape_width"], key["dape_width"]) else ""
    return rate, (f"{SCALED} from {nearest['size']} T={nearest['train_len']} B={nearest['micro_batch']}{width} "
                  f"({float(nearest['tokens_per_s']):.4g} tokens/s)")


def _same(a, b) -> bool:
    """Equal, comparing numbers as numbers (a CSV reads 32 as 32 or 32.0) and anything else as text."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


# ----------------------------------------------------------------------------------------------- estimate
def estimate(plan) -> dict:
    """Jobs per rule and GPU-hours of the training jobs, with the figure used for each training shape: ``dape train``
    jobs by the measured throughput, else the larger of the FLOP time (scaled or FLOP throughput) and the dispatch
    time (as above), ``dape finetune`` jobs by the FLOP estimate (the calibration and the operator counts describe
    ``dape train`` models only). ``gpu_hours`` is both together (``lm_gpu_hours`` + ``finetune_gpu_hours``);
    ``flop_gpu_hours`` the LM jobs' FLOP time alone; ``bounds`` counts the jobs each bound decides; ``family_hours``
    family → {gpu_hours, bounds} (a job shared by families counts in each); ``finetune_note`` says why fine-tunes
    were left out (None: counted)."""
    from dape_core.methods import method_label

    assumptions = plan.config["estimate"]
    rate = assumptions["gpu_tflops"] * 1e12 * assumptions["utilisation"]
    rows, note = load_calibration(assumptions)
    cost = dispatch.per_call_cost(rows, device=assumptions.get("calibration_device"))
    flops, hours, flop_hours = 0.0, 0.0, 0.0
    shapes: dict[tuple, dict] = {}
    sources = {MEASURED: 0, SCALED: 0, FLOPS: 0}
    bounds = {dispatch.FLOPS: 0, dispatch.DISPATCH: 0, dispatch.MEASURED: 0}
    per_job: dict[str, tuple[float, str]] = {}
    uncounted = 0  # jobs without an operator count (a CPU path, or a method the count CSV lacks): the FLOP bound
    for name, seed in plan.train_jobs():
        settings = plan.lm_runs[name]["settings"]
        vocab = run_vocab(plan, settings)
        per_token = _flops_per_token(settings, vocab, settings["train_len"])
        run_flops = per_token * training_tokens(settings)
        key = calibration_key(settings, vocab)
        tokens_per_s, source = throughput(key, per_token, rows)
        if name not in per_job:
            per_job[name] = job_hours(plan, name, key, per_token, tokens_per_s, source, cost)
        run_hours, bound = per_job[name]
        uncounted += source != MEASURED and dispatch.method_calls(settings) is None
        flops += run_flops
        hours += run_hours
        flop_hours += run_flops / rate / 3600
        sources[source.split(" from ")[0]] += 1
        bounds[bound] += 1
        shape = shapes.setdefault(tuple(key.values()), {**key, "method": method_label(
            settings["encoding"], settings["processor"], settings["kernel_size"]), "jobs": 0, "gpu_hours": 0.0,
            "source": source, "bound": bound})
        shape["jobs"] += 1
        shape["gpu_hours"] += run_hours
    family_hours: dict[str, dict] = {}
    for member in plan.lm_members:
        if member["run"] in per_job:
            entry = family_hours.setdefault(member["family"], {"gpu_hours": 0.0, "bounds": {}})
            run_hours, bound = per_job[member["run"]]
            entry["gpu_hours"] += run_hours
            entry["bounds"][bound] = entry["bounds"].get(bound, 0) + 1
    finetunes = finetune_estimate(plan, rate)
    jobs = {"tokenize": len(plan.datasets), "train_lm": len(plan.train_jobs()),
            "finetune_lm": len(plan.finetune_jobs()), "evaluate_lm": len(plan.lm_jobs()),
            "attention_maps": len(plan.attention_jobs()), "time_lm": sum(int(job["settings"]["replicates"]) for job in plan.timing_jobs.values()), "che": len(plan.che_jobs())}
    return {"jobs": jobs, "train_flops": flops, "lm_gpu_hours": hours, "flop_gpu_hours": flop_hours, **finetunes,
            "gpu_hours": hours + finetunes["finetune_gpu_hours"], "gpu_tflops": assumptions["gpu_tflops"],
            "utilisation": assumptions["utilisation"], "calibration": note, "calibrated": rows is not None,
            "sources": sources, "bounds": bounds, "uncounted": uncounted, "per_call": cost,
            "family_hours": family_hours, "pieces_uncounted": pieces_uncounted(plan),
            "shapes": list(shapes.values())}


def job_hours(plan, name: str, key: dict, per_token: float, tokens_per_s: float | None, source: str,
              cost: dispatch.PerCallCost) -> tuple[float, str]:
    """GPU-hours of one training job of LM run ``name`` and the bound that decides them
    (:func:`dape_core.config.dispatch.job_gpu_hours`): a measured row's tokens/s; otherwise the larger of the FLOP
    time (at a scaled row's FLOP/s, or ``gpu_tflops`` × ``utilisation``) and the dispatch time of its steps on each
    of its GPUs (``resources.train_lm.gpu``), a micro-batch in the pieces the memory model chose."""
    settings = {**plan.lm_runs[name]["settings"], "n_layer": key["n_layer"]}
    if source == MEASURED:
        return dispatch.job_gpu_hours(settings, flops_per_token=per_token, gpu_tflops=0.0, utilisation=0.0,
                                      tokens_per_s=tokens_per_s)
    assumptions = plan.config["estimate"]
    tflops, utilisation = assumptions["gpu_tflops"], assumptions["utilisation"]
    if tokens_per_s is not None:  # scaled: the measured row's FLOP/s
        tflops, utilisation = tokens_per_s * per_token / 1e12, 1.0
    processes = max(1, int(plan.resources("train_lm", settings["size"]).get("gpu") or 0))
    micro = plan.micro_batch_size(name)
    pieces = max(1, settings["batch_size"] // processes // micro) if micro else 1
    return dispatch.job_gpu_hours(settings, flops_per_token=per_token, gpu_tflops=tflops, utilisation=utilisation,
                                  cost=cost, pieces=pieces, gpus=processes)


def pieces_uncounted(plan) -> int:
    """LM runs whose job has ``gpu_mem_gb`` but whose micro-batch was not modelled (the workflow's parse: one piece
    per micro-batch counted; ``python -m dape_core.config`` models them)."""
    return sum(1 for name, run in plan.lm_runs.items() if name not in plan.memory
               and plan.resources("train_lm", run["settings"]["size"]).get("gpu_mem_gb") is not None)


def finetune_estimate(plan, rate: float) -> dict:
    """FLOPs and GPU-hours of the ``dape finetune`` jobs at ``rate`` FLOP/s (the FLOP estimate), one entry per
    fine-tune shape; nothing counted, with ``finetune_note`` saying so, when transformers cannot be imported."""
    from dape_core.methods import hf_method_label

    out = {"finetune_flops": 0.0, "finetune_gpu_hours": 0.0, "finetune_shapes": [], "finetune_note": None}
    jobs = plan.finetune_jobs()
    if not jobs:
        return out
    if not transformers_available():
        return {**out, "finetune_note": NO_TRANSFORMERS}
    shapes: dict[tuple, dict] = {}
    for name, seed in jobs:
        settings = plan.finetune_runs[name]["settings"]
        config, attention = finetune_model(plan, name)
        shape = finetune_shape(config, attention)
        run_flops = finetune_flops_per_token(shape, attention, settings["train_len"]) * training_tokens(settings)
        run_hours = run_flops / rate / 3600
        out["finetune_flops"] += run_flops
        out["finetune_gpu_hours"] += run_hours
        finetuned = is_finetuned(settings["base_run"] is not None or settings["base_model"] is not None,
                                 settings["steps"])
        method = hf_method_label(shape["model_type"], attention["encoding"], attention["processor"],
                                 attention["kernel_size"], attention["tril"], finetuned=finetuned)
        width = attention["dape_width"] if attention["processor"] != "none" else None
        key = (shape["model_type"], shape["hidden_size"], shape["n_layer"], shape["vocab_size"], method, width,
               settings["train_len"], settings["batch_size"], settings["precision"])
        entry = shapes.setdefault(key, {
            "model_type": shape["model_type"], "hidden_size": shape["hidden_size"], "n_layer": shape["n_layer"],
            "vocab_size": shape["vocab_size"], "method": method, "dape_width": width,
            "train_len": settings["train_len"], "micro_batch": settings["batch_size"],
            "precision": settings["precision"], "jobs": 0, "gpu_hours": 0.0, "source": FLOPS})
        entry["jobs"] += 1
        entry["gpu_hours"] += run_hours
    return {**out, "finetune_shapes": list(shapes.values())}


def _hours(value: float) -> str:
    """GPU-hours to one decimal, or two significant digits below 0.1 (a miniature plan's hours are not 0.0)."""
    return f"{value:.1f}" if value == 0 or value >= 0.1 else f"{value:.2g}"


def bound_text(bounds: dict) -> str:
    """Which bound decided how many jobs, e.g. ``dispatch for 180 jobs, flops for 20``."""
    parts = [f"{bound} for {n} job{'s' if n != 1 else ''}" for bound, n in sorted(bounds.items(), key=lambda x: -x[1])
             if n]
    return ", ".join(parts) or "no jobs"


def estimate_line(plan, e: dict | None = None) -> str:
    """One line: jobs per rule, training FLOPs and GPU-hours of the LM runs (which bound decides: flops, dispatch or
    measured) and of the fine-tunes, and which figures they rest on."""
    e = e or estimate(plan)
    jobs = ", ".join(f"{n} {rule}" for rule, n in e["jobs"].items() if n)
    flop_rate = f"{e['gpu_tflops']:g} TFLOP/s × {e['utilisation']:g} utilisation"
    if e["sources"][MEASURED] or e["sources"][SCALED]:
        flop_basis = (f"tokens/s measured for {e['sources'][MEASURED]} jobs, scaled by FLOPs for "
                      f"{e['sources'][SCALED]}, FLOP estimate at {flop_rate} for {e['sources'][FLOPS]}")
    else:
        flop_basis = f"FLOPs at {flop_rate}"
    line = (f"plan: {jobs}; training the LM runs ≈ {e['train_flops']:.3g} FLOPs ≈ {_hours(e['lm_gpu_hours'])} "
            f"GPU-hours, each job the larger of its FLOP and dispatch time (bound: {bound_text(e['bounds'])}; "
            f"{flop_basis}: ≈ {_hours(e['flop_gpu_hours'])} GPU-hours alone; dispatch at {e['per_call'].source}; "
            f"{e['calibration']})")
    if e.get("uncounted"):
        line += (f"; no operator count for {e['uncounted']} jobs (attention_impl fast/plain, or a method not in "
                 f"{dispatch.STEP_COUNTS.name}: `{dispatch.STEP_COUNTS_COMMAND}`), the FLOP bound")
    if e.get("pieces_uncounted"):
        line += (f"; dispatch of {e['pieces_uncounted']} jobs counted without the pieces their micro-batch may run "
                 "in (gpu_mem_gb; `python -m dape_core.config CONFIG` models them)")
    if e["finetune_note"]:
        line += f"; {e['finetune_note']}"
    elif e["jobs"]["finetune_lm"]:
        line += (f"; fine-tunes ≈ {e['finetune_flops']:.3g} FLOPs ≈ {_hours(e['finetune_gpu_hours'])} GPU-hours "
                 f"({FLOPS} at {flop_rate}, bound flops: the calibration and the operator counts describe `dape "
                 f"train` models only); ≈ {_hours(e['gpu_hours'])} GPU-hours in all")
    line += "; evaluation, timing and CHE jobs not included"
    return line


def family_hours_text(e: dict, family: str) -> str:
    """A family's training GPU-hours and the bounds deciding them (empty for a family without LM training)."""
    entry = e.get("family_hours", {}).get(family)
    if not entry:
        return ""
    return f"; ≈ {_hours(entry['gpu_hours'])} GPU-hours (bound: {bound_text(entry['bounds'])})"


def estimate_details(e: dict) -> list[str]:
    """One line per training shape: its jobs, GPU-hours, the bound that decides them and the throughput figure
    used (measured / scaled from … / FLOP estimate); then one per fine-tune shape (model_type, hidden size, layers,
    method, always the FLOP estimate)."""
    lines = []
    for s in e["shapes"]:
        width = "" if s["processor"] == "none" else f" D={s['dape_width']}"
        lines.append(f"  {s['size']} {s['method']}{width} T={s['train_len']} B={s['micro_batch']} {s['precision']} "
                     f"{s['attention_impl']}/{s['dape_dtype']}: {s['jobs']} jobs, {s['gpu_hours']:.4g} GPU-hours "
                     f"(bound {s['bound']}), {s['source']}")
    for s in e.get("finetune_shapes", []):
        width = "" if s["dape_width"] is None else f" D={s['dape_width']}"
        lines.append(f"  {s['model_type']} d={s['hidden_size']} L={s['n_layer']} {s['method']}{width} "
                     f"T={s['train_len']} B={s['micro_batch']} {s['precision']}: {s['jobs']} jobs, "
                     f"{s['gpu_hours']:.4g} GPU-hours, {s['source']}")
    return lines
