"""Perplexity at many evaluation lengths, bits per byte, and the ΔP information gain of appendix A.

Every length scores the same final ``window`` tokens (paper: 256; all L when L < window, each row records its window)
of windows cut from single validation documents long enough for the longest length: only the context grows. A
document gives windows ending at its end, then every ``window`` tokens earlier while the longest context fits,
``max_windows`` at most (seeded choice). Up to the training length, where a window costs least and the windows' part
of a comparison's seed noise is largest (benchmarks/results/README.md, window count), ``max_windows_within`` windows
may be scored: those and more from the same documents (:func:`more_anchors`), so lengths still share windows.

ΔP (appendix A, eq. 6) = P(M(x[−T_train:]), w) − P(M(x), w) with w = ``delta_p_window`` (default the training
length): positive when the context beyond the training length helps.

``--windows-out``: per length, each window's mean NLL over its scored tokens and its ΔP window (full and local
context), keyed by (``document``, ``anchor``: the end of its scored tokens). Windows depend on the split, the
evaluation settings and the training length, never on the model, so runs pair window by window (the claims' paired
bootstrap); all hold as many tokens, so exp(mean window loss) is the perplexity. ``--sink-out`` (App. K): the
attention sink at ``heatmap_len`` on ``sink_sequences`` validation windows chosen from the split, length and ``seed``
alone (:func:`dape_core.attention_maps.sink_sequences`), a row per sequence × layer; ``--heatmap-out``: sequence 0's
heat-maps. One device: CUDA when present (TF32 off, so results match the CPU's fp32 to rounding), else the CPU,
recorded as ``eval_device`` (``device`` in the sink and heat-map files).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dape_core import io, settings as fields
from dape_core.errors import ConfigError, require_positive
from dape_core.positions import evaluation_positions, randomized, require_max_position
from dape_core.settings.evaluation import EvalSettings, require_resamples
from dape_core.windows import eval_batch, more_anchors, require_windows, window_anchors  # noqa: F401 (re-exported)


def choose_device() -> torch.device:
    """The device of the evaluation, chosen once: CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(device: torch.device) -> str:
    """``cpu`` or ``cuda:<GPU name>``, as recorded in ``eval_device``."""
    return f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else "cpu"


@torch.no_grad()
def window_nll(model, inputs: np.ndarray, targets: np.ndarray, last: int, batch_size: int, *,
               seed: int = 0) -> np.ndarray:
    """Per-token NLL [n_windows, last] of each window's final ``last`` targets; a ``randrope`` model scores one window
    per forward, at positions drawn for (seed, length, window)."""
    device = next(model.parameters()).device
    batch_size = 1 if randomized(model.cfg) else batch_size
    out = []
    for b in range(0, len(inputs), batch_size):
        x = torch.from_numpy(inputs[b : b + batch_size].astype(np.int64)).to(device)
        y = torch.from_numpy(targets[b : b + batch_size, -last:].astype(np.int64)).to(device)
        positions = evaluation_positions(model.cfg, seed, x.shape[1], b)  # None: 0 … T−1
        logits = model(x, last=last, positions=positions).float()
        out.append(torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none").cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, last))


def bootstrap_ppl(nll_per_window: np.ndarray, n_boot: int, seed: int) -> tuple[float, float]:
    """95 % percentile interval of exp(mean NLL) with windows resampled; NaN bounds for ``n_boot`` 0."""
    require_resamples("bootstrap", n_boot)
    if len(nll_per_window) < 2 or n_boot == 0:
        return float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, len(nll_per_window), size=(n_boot, len(nll_per_window)))
    ppl = np.exp(nll_per_window[idx].mean(axis=1))
    return float(np.percentile(ppl, 2.5)), float(np.percentile(ppl, 97.5))


WINDOW_COLUMNS = ["eval_len", "document", "anchor", "tokens", "loss", "loss_dp", "loss_local"]


def evaluate(model, split, eval_lens: list[int], **options) -> pd.DataFrame:
    """One row per evaluation length (see :func:`evaluate_windows`, whose first result this is)."""
    return evaluate_windows(model, split, eval_lens, **options)[0]


def evaluate_windows(
    model,
    split,
    eval_lens: list[int],
    *,
    train_len: int,
    window: int = 256,
    delta_p_window: int | None = None,
    min_scored_tokens: int = 1,
    max_windows: int | None = 64,
    max_windows_within: int | None = None,
    batch_size: int = 8,
    seed: int = 0,
    n_boot: int = 1000,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per length: ppl, its bootstrap interval, bits per byte, ΔP and the data used; per length × window:
    ``document``, ``anchor`` and mean NLL ``loss``, ``loss_dp``, ``loss_local`` over the scored and ΔP tokens)."""
    eval_lens = sorted(set(int(x) for x in eval_lens))
    for x in eval_lens:
        require_positive("eval_lens", x)
    longest = max(eval_lens)
    require_max_position(model.cfg, longest, "eval_lens")
    require_positive("window", window)
    require_resamples("bootstrap", n_boot)
    delta_p_window = delta_p_window or train_len
    if delta_p_window > train_len:
        raise ConfigError(f"delta_p_window: {delta_p_window} is not allowed; "
                          f"allowed values: 1 … train_len ({train_len})")
    lengths = split.document_lengths
    anchors = require_windows(lengths, longest, window, max_windows, min_scored_tokens, seed)
    within = anchors
    if max_windows_within is not None and max_windows is not None and any(n <= train_len for n in eval_lens):
        within = more_anchors(lengths, longest, window, anchors, max_windows_within, seed)

    def sequences(chosen):
        seqs = np.stack([np.asarray(split.document(d)[e - longest - 1 : e], dtype=np.int64) for d, e in chosen]) \
            if chosen else np.zeros((0, longest + 1), dtype=np.int64)
        return (seqs, np.array([d for d, _ in chosen], dtype=np.int64),
                np.array([e for _, e in chosen], dtype=np.int64))

    every_length = sequences(anchors)
    at_most_train_len = sequences(within) if within is not anchors else every_length
    token_bytes = np.asarray(split.token_bytes)
    rows, windows = [], []
    for n in eval_lens:
        seqs, documents, ends = at_most_train_len if n <= train_len else every_length
        w, wdp = min(window, n), min(delta_p_window, n)
        last = max(w, wdp)
        x, y = seqs[:, -n - 1 : -1], seqs[:, -n:]
        nll = window_nll(model, x, y, last, eval_batch(n, batch_size), seed=seed)
        main = nll[:, -w:]
        per_window = main.mean(axis=1)
        loss = float(main.mean()) if main.size else float("nan")
        n_bytes = float(token_bytes[y[:, -w:]].sum())
        lo, hi = bootstrap_ppl(per_window, n_boot, seed)
        dp_window = nll[:, -wdp:].mean(axis=1)
        ppl_dp = float(np.exp(nll[:, -wdp:].mean())) if nll.size else float("nan")
        if n > train_len:
            local = window_nll(model, x[:, -train_len:], y[:, -train_len:], wdp, batch_size, seed=seed)
            ppl_local = float(np.exp(local.mean()))
            local_window = local.mean(axis=1)
        else:
            ppl_local = ppl_dp  # the whole sequence already fits the training length
            local_window = dp_window
        rows.append({
            "eval_len": n, "window": w, "n_docs": len(set(documents.tolist())), "n_windows": len(documents),
            "n_tokens": int(main.size), "loss": loss, "ppl": math.exp(loss) if main.size else float("nan"),
            "ppl_ci_low": lo, "ppl_ci_high": hi,
            "bpb": float(main.sum() / (math.log(2) * n_bytes)) if n_bytes else float("nan"),
            "delta_p_window": wdp, "ppl_dp": ppl_dp, "ppl_local": ppl_local, "delta_p": ppl_local - ppl_dp,
            "status": "ok",
        })
        windows.append(pd.DataFrame({"eval_len": n, "document": documents, "anchor": ends, "tokens": w,
                                     "loss": per_window, "loss_dp": dp_window, "loss_local": local_window},
                                    columns=WINDOW_COLUMNS))
        print(f"eval_len {n}: ppl {rows[-1]['ppl']:.3f} over {rows[-1]['n_tokens']} tokens", file=sys.stderr)
    return pd.DataFrame(rows), pd.concat(windows, ignore_index=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="model.pt written by `dape train`, or a Hugging Face model "
                                                        "directory (`dape finetune`'s model/; dape_core.hf.adapter)")
    p.add_argument("--data-dir", required=True, help="an --out-dir of `dape tokenize` (its validation split is used)")
    fields.add_arguments(p, EvalSettings)
    p.add_argument("--out", required=True, help="CSV, one row per evaluation length")
    p.add_argument("--windows-out", default=None,
                   help="CSV of per-window losses: one row per evaluation length × window (document, anchor)")
    p.add_argument("--sink-out", default=None, help="CSV of the attention-sink statistic (appendix K): one row per "
                                                    "sequence × layer, sequences as --sink-sequences says")
    p.add_argument("--heatmap-out", default=None, help="NPZ of A, B and the DAPE term for one sequence (appendix K)")


def run(args) -> int:
    from dape_core.attention_maps import layer_rows, layer_sinks, sink_frame, sink_sequences, write_heatmaps
    from dape_core.data import load_split
    from dape_core.model_file import load_model
    from dape_core.provenance import git_commit

    ev = fields.from_args(EvalSettings, args)
    hf_directory = Path(args.checkpoint).is_dir()
    if not (Path(args.checkpoint).is_file() or hf_directory):
        raise ConfigError(f"checkpoint: {args.checkpoint!r} does not exist; allowed values: a model.pt of `dape train` "
                          "or a Hugging Face model directory")
    if hf_directory and (args.sink_out or args.heatmap_out):
        raise ConfigError("sink_out / heatmap_out: not available for a Hugging Face model directory; allowed values: "
                          "a model.pt of `dape train`")
    torch.set_num_threads(ev.threads)
    device = choose_device()
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if hf_directory:  # `dape finetune`'s model/ (or any local transformers checkpoint) behind the GPT interface
        from dape_core.hf.adapter import load_for_evaluation

        model, ckpt = load_for_evaluation(args.checkpoint)
    else:
        model, ckpt = load_model(args.checkpoint)
    model.to(device)
    model.cfg.query_chunk_size = ev.query_chunk_size
    mc, ts = ckpt["model_config"], ckpt["train_settings"]
    settings = {"method": ckpt["method"],
                **{key: mc[key] for key in ("encoding", "processor", "kernel_size", "dape_width", "tril", "padding",
                                            "size", "n_layer", "d_model")},
                **{key: ts[key] for key in ("train_len", "seed", "lr", "steps", "batch_size")},
                "config_hash": ckpt["config_hash"]}
    split = load_split(args.data_dir, "val")
    diverged = ckpt["status"] == "diverged"
    if diverged:
        frame = pd.DataFrame({"eval_len": sorted(set(ev.eval_lens)), "status": "diverged"})
        for col in ("loss", "ppl", "ppl_ci_low", "ppl_ci_high", "bpb", "ppl_dp", "ppl_local", "delta_p"):
            frame[col] = float("nan")
        windows = pd.DataFrame(columns=WINDOW_COLUMNS)  # a diverged run scores no window
    else:
        frame, windows = evaluate_windows(
            model, split, ev.eval_lens, train_len=ts["train_len"], window=ev.window,
            delta_p_window=ev.delta_p_window, min_scored_tokens=ev.min_scored_tokens, max_windows=ev.max_windows,
            max_windows_within=ev.max_windows_within, batch_size=ev.batch_size, seed=ev.seed, n_boot=ev.bootstrap)
    for key, value in settings.items():
        frame[key] = value
    frame["eval_device"] = eval_device = device_name(device)
    frame["git_commit"] = git_commit()
    frame["data_dir"] = str(args.data_dir)
    io.write_csv(args.out, frame, seal=True)
    if args.windows_out:
        io.write_csv(args.windows_out, windows, seal=True)
    if args.sink_out or args.heatmap_out:
        n = ev.heatmap_len or ts["train_len"]
        sequences = sink_sequences(split, n, ev.sink_sequences if args.sink_out else 1, seed=ev.seed)
        if not sequences:
            raise ConfigError(f"heatmap_len: no validation document has {n} tokens; allowed values: a shorter length")
        if len(sequences) < ev.sink_sequences and args.sink_out:
            print(f"sink_sequences: the validation documents hold {len(sequences)} distinct windows of {n} tokens, "
                  f"fewer than {ev.sink_sequences}; the sink is measured on {len(sequences)}", file=sys.stderr)

        def tokens(document: int, start: int) -> torch.Tensor:
            return torch.from_numpy(np.asarray(split.document(document)[start : start + n], dtype=np.int64))[None]

        layers = [] if diverged else layer_rows(model, tokens(*sequences[0]))  # sequence 0: sink and heat-maps
        if args.sink_out:
            frames = []
            for index, (document, start) in enumerate(sequences[:1] if diverged else sequences):
                # sequence 0's are `layers`; each other sequence's are taken one layer's maps at a time
                masses = layers if index == 0 else layer_sinks(model, tokens(document, start))
                frames.append(sink_frame(masses, method=ckpt["method"], eval_len=n, device=eval_device,
                                         sequence=index, document=document, start=start))
            sink = pd.concat(frames, ignore_index=True)
            for key in ("encoding", "processor", "kernel_size", "train_len", "seed"):
                sink[key] = settings[key]
            io.write_csv(args.sink_out, sink, seal=True)
        if args.heatmap_out:
            write_heatmaps(args.heatmap_out, layers, method=ckpt["method"], device=eval_device)
    return 0
