"""Perplexity at many evaluation lengths, bits per byte, and the ΔP information gain of appendix A.

Evaluation windows come from single validation documents long enough for the longest length; every length
scores the same final tokens of each window and only the context grows, so lengths compare like with like.
The score at length L is the perplexity of the last ``window`` tokens (paper: 256; at L < window, all L — the
effective window is in each row). A document contributes windows ending at its end, then every ``window``
tokens earlier, while the longest context still fits; ``max_windows`` caps them (seeded choice).

ΔP (appendix A, eq. 6) = P(M(x[−T_train:]), w) − P(M(x), w) with w = ``delta_p_window`` (default the training
length): positive when the context beyond the training length helps.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dape_core import io, settings as fields
from dape_core.errors import ConfigError, require_positive
from dape_core.settings import setting


@dataclass(kw_only=True)
class EvalSettings:
    """Options of `dape evaluate`: which lengths, which tokens are scored, and the interval."""

    eval_lens: list[int] = setting(default_factory=lambda: [512, 1024, 2048, 4096, 8192],
                                   help="evaluation lengths (paper: 512 … 8192)")
    window: int = setting(256, help="score the last WINDOW tokens (paper: 256)")
    delta_p_window: int | None = setting(None, help="ΔP window of appendix A (default: the training length)")
    min_scored_tokens: int = setting(8192, help="fail below this many scored tokens per length")
    max_windows: int = setting(64, help="windows per length at most (seeded choice)")
    batch_size: int = setting(8, help="windows per forward (1 beyond length 1024)")
    query_chunk_size: int = setting(1024, help="exact query-chunked attention beyond this length")
    bootstrap: int = setting(1000, help="bootstrap resamples of the perplexity interval")
    seed: int = setting(0, help="seed of the window choice and the bootstrap")
    threads: int = setting(2, help="CPU threads")
    heatmap_len: int | None = setting(None, help="sequence length of the sink and heat-maps (default: train_len)")

    def __post_init__(self):
        for length in self.eval_lens:
            require_positive("eval_lens", length)
        for name in ("window", "min_scored_tokens", "max_windows", "batch_size", "query_chunk_size", "bootstrap",
                     "threads"):
            require_positive(name, getattr(self, name))
        for name in ("delta_p_window", "heatmap_len"):
            if getattr(self, name) is not None:
                require_positive(name, getattr(self, name))


def window_anchors(doc_lengths: np.ndarray, max_len: int, window: int, max_windows: int | None, seed: int):
    """(document, end) pairs: targets are doc[end − L : end] and inputs doc[end − L − 1 : end − 1]."""
    anchors = []
    for doc in np.flatnonzero(doc_lengths >= max_len + 1):
        end = int(doc_lengths[doc])
        while end - max_len - 1 >= 0:
            anchors.append((int(doc), end))
            end -= window
    if max_windows is not None and len(anchors) > max_windows:
        rng = np.random.default_rng(seed)
        keep = np.sort(rng.choice(len(anchors), size=max_windows, replace=False))
        anchors = [anchors[i] for i in keep]
    return anchors


@torch.no_grad()
def window_nll(model, inputs: np.ndarray, targets: np.ndarray, last: int, batch_size: int) -> np.ndarray:
    """Per-token negative log-likelihood [n_windows, last] of the final ``last`` targets of each window."""
    out = []
    for b in range(0, len(inputs), batch_size):
        x = torch.from_numpy(inputs[b : b + batch_size].astype(np.int64))
        y = torch.from_numpy(targets[b : b + batch_size, -last:].astype(np.int64))
        logits = model(x, last=last).float()
        out.append(torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none").numpy())
    return np.concatenate(out) if out else np.zeros((0, last))


def bootstrap_ppl(nll_per_window: np.ndarray, n_boot: int, seed: int) -> tuple[float, float]:
    """95 % percentile interval of exp(mean NLL) with windows resampled."""
    if len(nll_per_window) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(nll_per_window), size=(n_boot, len(nll_per_window)))
    ppl = np.exp(nll_per_window[idx].mean(axis=1))
    return float(np.percentile(ppl, 2.5)), float(np.percentile(ppl, 97.5))


def evaluate(
    model,
    split,
    eval_lens: list[int],
    *,
    train_len: int,
    window: int = 256,
    delta_p_window: int | None = None,
    min_scored_tokens: int = 1,
    max_windows: int | None = 64,
    batch_size: int = 8,
    seed: int = 0,
    n_boot: int = 1000,
) -> pd.DataFrame:
    """One row per evaluation length: ppl, its bootstrap interval, bits per byte, ΔP and the data it used."""
    eval_lens = sorted(set(int(x) for x in eval_lens))
    for x in eval_lens:
        require_positive("eval_lens", x)
    require_positive("window", window)
    delta_p_window = delta_p_window or train_len
    if delta_p_window > train_len:
        raise ConfigError(f"delta_p_window: {delta_p_window} is not allowed; allowed values: 1 … train_len ({train_len})")
    lengths = split.document_lengths
    anchors = window_anchors(lengths, max(eval_lens), window, max_windows, seed)
    scored = len(anchors) * min(window, max(eval_lens))
    if scored < min_scored_tokens:
        raise ConfigError(
            f"eval_lens: only {len(anchors)} windows ({scored} scored tokens) in documents of ≥ {max(eval_lens) + 1} "
            f"tokens, below min_scored_tokens {min_scored_tokens}; allowed values: shorter eval_lens, a smaller "
            "min_scored_tokens, or a corpus with longer documents"
        )
    longest = max(eval_lens)
    seqs = np.stack([np.asarray(split.document(d)[e - longest - 1 : e], dtype=np.int64) for d, e in anchors]) \
        if anchors else np.zeros((0, longest + 1), dtype=np.int64)
    token_bytes = np.asarray(split.token_bytes)
    rows = []
    for n in eval_lens:
        w, wdp = min(window, n), min(delta_p_window, n)
        last = max(w, wdp)
        x, y = seqs[:, -n - 1 : -1], seqs[:, -n:]
        nll = window_nll(model, x, y, last, batch_size if n <= 1024 else 1)
        main = nll[:, -w:]
        per_window = main.mean(axis=1)
        loss = float(main.mean()) if main.size else float("nan")
        n_bytes = float(token_bytes[y[:, -w:]].sum())
        lo, hi = bootstrap_ppl(per_window, n_boot, seed)
        ppl_dp = float(np.exp(nll[:, -wdp:].mean())) if nll.size else float("nan")
        if n > train_len:
            local = window_nll(model, x[:, -train_len:], y[:, -train_len:], wdp, batch_size)
            ppl_local = float(np.exp(local.mean()))
        else:
            ppl_local = ppl_dp  # the whole sequence already fits the training length
        rows.append({
            "eval_len": n, "window": w, "n_docs": len({d for d, _ in anchors}), "n_windows": len(anchors),
            "n_tokens": int(main.size), "loss": loss, "ppl": math.exp(loss) if main.size else float("nan"),
            "ppl_ci_low": lo, "ppl_ci_high": hi,
            "bpb": float(main.sum() / (math.log(2) * n_bytes)) if n_bytes else float("nan"),
            "delta_p_window": wdp, "ppl_dp": ppl_dp, "ppl_local": ppl_local, "delta_p": ppl_local - ppl_dp,
            "status": "ok",
        })
        print(f"eval_len {n}: ppl {rows[-1]['ppl']:.3f} over {rows[-1]['n_tokens']} tokens", file=sys.stderr)
    return pd.DataFrame(rows)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="model.pt written by `dape train`")
    p.add_argument("--data-dir", required=True, help="an --out-dir of `dape tokenize` (its validation split is used)")
    fields.add_arguments(p, EvalSettings)
    p.add_argument("--out", required=True, help="CSV, one row per evaluation length")
    p.add_argument("--sink-out", default=None, help="CSV of the attention-sink statistic per layer (appendix K)")
    p.add_argument("--heatmap-out", default=None, help="NPZ of A, B and the DAPE term for one sequence (appendix K)")


def run(args) -> int:
    from dape_core.attention_maps import layer_maps, sink_mass
    from dape_core.data import load_split
    from dape_core.train import load_model

    ev = fields.from_args(EvalSettings, args)
    if not Path(args.checkpoint).is_file():
        raise ConfigError(f"checkpoint: {args.checkpoint!r} does not exist; allowed values: a model.pt of `dape train`")
    torch.set_num_threads(ev.threads)
    model, ckpt = load_model(args.checkpoint)
    model.cfg.query_chunk_size = ev.query_chunk_size
    mc, ts = ckpt["model_config"], ckpt["train_settings"]
    settings = {
        "method": ckpt["method"], "encoding": mc["encoding"], "processor": mc["processor"],
        "kernel_size": mc["kernel_size"], "dape_width": mc["dape_width"], "tril": mc["tril"], "padding": mc["padding"],
        "size": mc["size"], "n_layer": mc["n_layer"], "d_model": mc["d_model"], "train_len": ts["train_len"],
        "seed": ts["seed"], "lr": ts["lr"], "steps": ts["steps"], "batch_size": ts["batch_size"],
        "config_hash": ckpt["config_hash"],
    }
    from dape_core.train import git_commit

    split = load_split(args.data_dir, "val")
    if ckpt["status"] == "diverged":
        frame = pd.DataFrame({"eval_len": sorted(set(ev.eval_lens)), "status": "diverged"})
        for col in ("loss", "ppl", "ppl_ci_low", "ppl_ci_high", "bpb", "ppl_dp", "ppl_local", "delta_p"):
            frame[col] = float("nan")
    else:
        frame = evaluate(model, split, ev.eval_lens, train_len=ts["train_len"], window=ev.window,
                         delta_p_window=ev.delta_p_window, min_scored_tokens=ev.min_scored_tokens,
                         max_windows=ev.max_windows, batch_size=ev.batch_size, seed=ev.seed,
                         n_boot=ev.bootstrap)
    for key, value in settings.items():
        frame[key] = value
    frame["git_commit"] = git_commit()
    frame["data_dir"] = str(args.data_dir)
    io.write_csv(args.out, frame)
    if args.sink_out or args.heatmap_out:
        n = ev.heatmap_len or ts["train_len"]
        docs = split.long_documents(n)
        if len(docs) == 0:
            raise ConfigError(f"heatmap_len: no validation document has {n} tokens; allowed values: a shorter length")
        tokens = torch.from_numpy(np.asarray(split.document(int(docs[0]))[:n], dtype=np.int64))[None]
        maps = [] if ckpt["status"] == "diverged" else layer_maps(model, tokens)
        if args.sink_out:
            sink = pd.DataFrame([{"method": ckpt["method"], "eval_len": n, "layer": i, "sink_mass": sink_mass(m["probs"])}
                                 for i, m in enumerate(maps)], columns=["method", "eval_len", "layer", "sink_mass"])
            for key in ("encoding", "processor", "kernel_size", "train_len", "seed"):
                sink[key] = settings[key]
            io.write_csv(args.sink_out, sink)
        if args.heatmap_out:
            arrays = {f"layer{i}_{name}": m[name][:, -1, :] for i, m in enumerate(maps) for name in ("A", "B", "dape", "probs")}
            with io.atomic_path(Path(args.heatmap_out)) as tmp:
                with open(tmp, "wb") as handle:
                    np.savez_compressed(handle, method=np.array(ckpt["method"]), **arrays)
    return 0
