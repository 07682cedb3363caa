"""Train and range-evaluate one CHE cell (Table 6, appendix G): task × encoding × processor × seed × lr.

Protocol of Ruoss et al. (2023), which the paper follows: ``output_length(N)`` query tokens (id = input_size) follow
the input and the encoder's outputs there are the prediction; the loss is the cross-entropy over all output positions,
the accuracy the per-token argmax accuracy averaged over the task's mask per sample, then over samples. Each training
step draws one length uniformly from 1…``train_max_len`` for the whole batch; Adam with a constant learning rate and
global-norm clipping 1.0. With ``randomized_positions`` every batch (training and test) gets sorted positions drawn
without replacement from [0, ``max_position``).

The CSV has one ``row_type="length"`` row per evaluated length (1…``train_max_len`` for reference, then
``eval_min_len``…``eval_max_len``) and one ``row_type="summary"`` row: the mean accuracy over
``eval_min_len``…``eval_max_len`` (Table 6's number).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from dape_core import io, settings as fields
from dape_core.che.tasks import Task, check_positions, get_task
from dape_core.errors import require_choice
from dape_core.methods import method_label
from dape_core.model import Encoder
from dape_core.positions import draw_positions as sorted_random_positions
from dape_core.settings.che import NOT_CHE_OPTIONS, CHESettings
from dape_core.settings.model import EncoderConfig

AGGREGATIONS = ("max", "mean")
COLUMNS = ["task", "encoding", "processor", "kernel_size", "dape_width", "method", "seed", "lr", "steps", "length",
           "accuracy", "n_samples", "row_type"]  # fmt: skip
CELL_COLUMNS = ["task", "encoding", "processor", "kernel_size", "dape_width", "method", "steps"]  # all but seed, lr


def draw_positions(rng: np.random.Generator, length: int, settings: CHESettings) -> torch.Tensor | None:
    """Sorted positions from [0, max_position) by the shared sampler (Ruoss et al., 2023), or None (0…T−1)."""
    return sorted_random_positions(rng, length, settings.max_position) if settings.randomized_positions else None


def output_logits(model: Encoder, task: Task, inputs: np.ndarray, n_outputs: int, settings: CHESettings,
                  rng: np.random.Generator, device) -> torch.Tensor:
    """Logits [B, n_outputs, output_size] at the query tokens appended after ``inputs`` (positions: draw_positions)."""
    positions = draw_positions(rng, inputs.shape[1] + n_outputs, settings)
    queries = np.full((inputs.shape[0], n_outputs), task.input_size, dtype=np.int64)
    tokens = torch.from_numpy(np.concatenate([inputs, queries], axis=1)).to(device)
    return model(tokens, None if positions is None else positions.to(device))[:, -n_outputs:]


def per_sample_accuracy(logits: torch.Tensor, targets: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Argmax accuracy over each sample's masked positions: [B] (float64)."""
    correct = (logits.argmax(dim=-1) == targets) & masks
    return correct.sum(dim=1).double() / masks.sum(dim=1)


def train(settings: CHESettings, model: Encoder, rng: np.random.Generator, device) -> list[float]:
    """Adam (constant lr, clipping 1.0) on batches of one uniformly drawn length each; returns the losses."""
    task = get_task(settings.task)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    model.train()
    losses = []
    for _ in range(settings.steps):
        length = int(rng.integers(1, settings.train_max_len + 1))
        inputs, targets, _ = task.sample(settings.batch_size, length, rng)
        logits = output_logits(model, task, inputs, targets.shape[1], settings, rng, device)
        loss = F.cross_entropy(logits.flatten(0, 1), torch.from_numpy(targets).to(device).flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


@torch.inference_mode()
def evaluate_length(settings: CHESettings, model: Encoder, length: int, rng: np.random.Generator, device) -> float:
    """Mean per-sample accuracy over ``eval_samples`` samples of one length, in memory-bounded batches."""
    task = get_task(settings.task)
    model.eval()
    total_tokens = length + task.output_length(length)
    batch_size = max(1, min(settings.eval_batch_size, settings.eval_score_budget // total_tokens**2))
    accuracies = []
    for first in range(0, settings.eval_samples, batch_size):
        inputs, targets, masks = task.sample(min(batch_size, settings.eval_samples - first), length, rng)
        logits = output_logits(model, task, inputs, targets.shape[1], settings, rng, device)
        accuracies.append(per_sample_accuracy(logits, torch.from_numpy(targets).to(device),
                                              torch.from_numpy(masks).to(device)).cpu())
    return float(torch.cat(accuracies).mean())


def encoder_config(settings: CHESettings) -> EncoderConfig:
    """The che-spec encoder of one cell: its task's vocabularies, the cell's shape and attention settings."""
    task = get_task(settings.task)
    return EncoderConfig(
        input_vocab=task.input_size, output_vocab=task.output_size, n_layer=settings.n_layer, d_model=settings.d_model,
        n_head=settings.n_head, d_ff=settings.d_ff, dropout=settings.dropout, train_len=settings.train_max_len,
        **dataclasses.asdict(settings.attention_settings()),
    )  # fmt: skip


def run_cell(settings: CHESettings) -> pd.DataFrame:
    """Train one model and evaluate it at every length; returns the CSV's rows (see the module docstring)."""
    check_positions(settings)
    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    train_rng, eval_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(settings.seed).spawn(2))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Encoder(encoder_config(settings)).to(device)
    train(settings, model, train_rng, device)
    accuracy = {n: evaluate_length(settings, model, n, eval_rng, device) for n in settings.eval_lengths}

    cell = {
        "task": settings.task, "encoding": settings.encoding, "processor": settings.processor,
        "kernel_size": settings.kernel_size, "dape_width": settings.dape_width,
        "method": method_label(settings.encoding, settings.processor, settings.kernel_size),
        "seed": settings.seed, "lr": settings.lr, "steps": settings.steps,
    }  # fmt: skip
    rows = [{**cell, "length": n, "accuracy": a, "n_samples": settings.eval_samples, "row_type": "length"}
            for n, a in accuracy.items()]  # fmt: skip
    ood = [accuracy[n] for n in range(settings.eval_min_len, settings.eval_max_len + 1)]
    rows.append({**cell, "length": None, "accuracy": float(np.mean(ood)),
                 "n_samples": settings.eval_samples * len(ood), "row_type": "summary"})  # fmt: skip
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["length"] = frame["length"].astype("Int64")
    return frame


def aggregate_cells(df: pd.DataFrame, aggregation: str = "max") -> pd.DataFrame:
    """One accuracy per cell (every setting but seed and lr, ``CELL_COLUMNS``): max or mean of the summary rows over
    seeds × learning rates; ``n_runs`` counts the runs reduced."""
    require_choice("aggregation", aggregation, AGGREGATIONS)
    summary = df[df["row_type"] == "summary"]
    cells = summary.groupby(CELL_COLUMNS, as_index=False, sort=True).agg(accuracy=("accuracy", aggregation),
                                                                         n_runs=("accuracy", "size"))
    cells["aggregation"] = aggregation
    return cells


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="the CSV to write (atomically)")
    fields.add_arguments(p, CHESettings, exclude=NOT_CHE_OPTIONS)


def run(args) -> int:
    settings = fields.from_args(CHESettings, args)
    start = time.perf_counter()
    frame = run_cell(settings)
    io.write_csv(args.out, frame, seal=True)
    summary = frame[frame["row_type"] == "summary"].iloc[0]
    print(json.dumps({"method": summary["method"], "task": settings.task, "ood_accuracy": round(summary["accuracy"], 4),
                      "wall_s": round(time.perf_counter() - start, 1), "out": str(args.out)}))  # fmt: skip
    return 0
