"""What one timed run is: a method × length built in this process, warmed up, then timed once per turn (its row,
its repeats' times and peak memory), and the summary row of its repeats.

A worker computes on ``compute_threads`` torch threads (default: the job's ``threads``), leaving the rest to the
parent, the workflow and the system. It runs on CUDA when a GPU is present, else on the CPU (:func:`timing_device`);
on CUDA every timed region is bracketed by ``torch.cuda.synchronize``, and in a cell of several methods a worker frees
its model between turns (the cell's models need not fit the GPU together), then rebuilds it (same seed) and runs it
once untimed before each timed run. Each row names its device (and CPU model) and the path ``attention_impl``
resolved to there (``attention_path``). ``precision``: autocast in bf16 or fp16 (the paper timed fp16, appendix I
Table 8), or fp32; an fp16 training step scales its loss (``torch.amp.GradScaler``). A method that does not fit the
GPU gives a summary row with status ``out_of_memory``, no time and no repeat rows.
"""

from __future__ import annotations

import gc
import statistics
import time

import torch

from dape_core import settings as fields
from dape_core.machine import cpu_model, rss_mb
from dape_core.methods import method_label
from dape_core.model import GPT, GPTConfig
from dape_core.settings import AttentionSettings
from dape_core.settings.timing import TimingSettings
from dape_core.timing.device import (AUTOCAST_DTYPES, device_name, pass_autocast, pass_path, synchronize,
                                     timing_device)

#: the statistics of a summary row (:func:`summary_row`), recomputed by a merge
SUMMARY_STATS = ("status", "median_ms", "min_ms", "per_layer_ms", "tokens_per_s", "peak_mem_mb",
                 "peak_mem_over_baseline_mb")


def timed_method(cfg: AttentionSettings, precision: str = TimingSettings.precision) -> str:
    """The paper's label, qualified by a path or precision other than the default: "DAPE1x3-Kerple (plain, fp16)"."""
    label = method_label(cfg.encoding, cfg.processor, cfg.kernel_size)
    qualifiers = [getattr(cfg, key) for key in ("attention_impl", "dape_dtype")
                  if getattr(cfg, key) != getattr(AttentionSettings, key)]  # the one default
    if precision != TimingSettings.precision:
        qualifiers.append(precision)
    return f"{label} ({', '.join(qualifiers)})" if qualifiers else label


class TimedCase:
    """One method × length in this process: built and warmed up (``warmup`` untimed runs), then one timed run per
    :meth:`time_once` (ms, between device synchronisations); with ``park``, freed between turns as the module says."""

    def __init__(self, case: dict, park: bool | None = None):
        threads = case.get("compute_threads") or case["threads"]
        torch.set_num_threads(threads)
        self.case, self.device = case, timing_device()
        self.park = park if park is not None else self.device.type == "cuda" and case.get("cell_size", 1) > 1
        precision = case.get("precision", TimingSettings.precision)
        self.dtype = AUTOCAST_DTYPES[precision]
        self.baseline = self._memory_mb()
        attention = {name: case[name] for name in fields.field_names(AttentionSettings) if name in case}
        cfg = self.cfg = GPTConfig(vocab_size=case["vocab_size"], size=case["size"], n_layer=case.get("n_layer"),
                                   train_len=case["seq_len"], query_chunk_size=case.get("query_chunk_size"),
                                   **attention)
        self.row = {
            "method": timed_method(cfg, precision), "encoding": cfg.encoding, "processor": cfg.processor,
            "kernel_size": cfg.kernel_size, "dape_width": cfg.dape_width, "size": case["size"], "n_layer": cfg.n_layer,
            "d_model": cfg.d_model, "n_head": cfg.n_head, "vocab_size": cfg.vocab_size, "seq_len": case["seq_len"],
            "batch_size": case["batch_size"], "mode": case["mode"], "repeats": case["repeats"],
            "warmup": case["warmup"], "device": device_name(self.device), "device_type": self.device.type,
            "cpu_model": cpu_model(), "threads": threads, "blocks": case.get("blocks", 1),
            "attention_impl": cfg.attention_impl,
            "attention_path": pass_path(cfg, self.device, case["mode"], self.dtype), "dape_dtype": cfg.dape_dtype,
            "precision": precision,
        }
        self.peak = 0.0
        self._build()
        for _ in range(case["warmup"]):
            self._once()
        synchronize(self.device)
        if self.park:
            self._free()

    def _memory_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device) / 2**20
        return rss_mb()

    def _build(self) -> None:
        """The model (seed 0, initialised on the timing device), its input and, for a training step, AdamW."""
        torch.manual_seed(0)
        with self.device:
            self.model = GPT(self.cfg).to(self.device)
        self.x = torch.randint(0, self.cfg.vocab_size, (self.case["batch_size"], self.case["seq_len"]),
                               device=self.device)
        train_step = self.case["mode"] == "train_step"
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4) if train_step else None
        self.scaler = (torch.amp.GradScaler(self.device.type) if train_step and self.dtype == torch.float16
                       else None)
        self.model.train(train_step)

    def _free(self) -> None:
        """Release the model, its optimizer and input, and the allocator's cache (a parked worker holds nothing)."""
        self.model = self.x = self.optimizer = self.scaler = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _once(self) -> None:
        autocast = pass_autocast(self.device, self.dtype)
        if self.optimizer is None:
            with torch.no_grad(), autocast:
                self.model(self.x)
            return
        self.optimizer.zero_grad(set_to_none=True)
        with autocast:
            _, loss = self.model(self.x, self.x)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

    def time_once(self) -> float:
        """One timed run (ms); the peak memory of the timed runs so far is updated."""
        device = self.device
        if self.park:
            self._build()
            self._once()  # untimed: the allocator's cache (and AdamW's state) refilled after parking
        synchronize(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        self._once()
        synchronize(device)
        ms = (time.perf_counter() - start) * 1000
        peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else rss_mb()
        self.peak = max(self.peak, peak)
        if self.park:
            self._free()
        return ms


def summary_row(row: dict, times: list[float], peak: float, baseline: float) -> dict:
    """A method's row: median and min over its repeats, per layer, tokens/s, peak memory (and over the baseline)."""
    median = statistics.median(times)
    return {**row, "status": "ok", "median_ms": median, "min_ms": min(times), "per_layer_ms": median / row["n_layer"],
            "tokens_per_s": row["batch_size"] * row["seq_len"] / (median / 1000), "peak_mem_mb": peak,
            "peak_mem_over_baseline_mb": peak - baseline}


def out_of_memory_row(row: dict) -> dict:
    """A method that does not fit the GPU: status ``out_of_memory``, no time."""
    return {**row, "status": "out_of_memory", **dict.fromkeys(SUMMARY_STATS[1:], float("nan"))}


def measure(case: dict) -> dict:
    """Time one method × length alone in this process (``warmup`` then ``repeats`` runs): its summary row."""
    try:
        timed = TimedCase(case, park=False)
        times = [timed.time_once() for _ in range(case["repeats"])]
    except torch.cuda.OutOfMemoryError:
        return out_of_memory_row(failed_row(case))
    return summary_row(timed.row, times, timed.peak, timed.baseline)


def failed_row(case: dict) -> dict:
    """The settings part of a row for a case whose model could not be built or run."""
    keys = ("size", "n_layer", "seq_len", "batch_size", "mode", "repeats", "warmup", "threads", "precision",
            *fields.field_names(AttentionSettings))
    device = timing_device()
    cfg = GPTConfig(vocab_size=case["vocab_size"], size=case["size"], n_layer=case.get("n_layer"),
                    **{k: case[k] for k in fields.field_names(AttentionSettings) if k in case})
    return {**{k: case.get(k) for k in keys}, "method": timed_method(cfg, case.get("precision", "fp32")),
            "n_layer": cfg.n_layer, "d_model": cfg.d_model, "n_head": cfg.n_head, "vocab_size": cfg.vocab_size,
            "device": device_name(device), "device_type": device.type, "cpu_model": cpu_model(),
            "attention_path": pass_path(cfg, device, case["mode"], AUTOCAST_DTYPES[case.get("precision", "fp32")])}
