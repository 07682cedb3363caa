"""Effect of ``dape_dtype="bfloat16"`` (DAPE's GEMMs in bf16) on perplexity, against fp32.

Two DAPE1×3-Kerple models of the default preset are trained from the same seed on the same batches of the
built-in code corpus, one with the processor's GEMMs in fp32 and one in bf16; each is then evaluated with both
settings, on held-out windows at the training length and at 4× it (the last ``train_len`` tokens of each
window are scored, as the paper's evaluation scores the last tokens). Rows: trained-with × evaluated-with × length.

    python benchmarks/bf16_perplexity.py --out benchmarks/results/bf16_perplexity.csv
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from dape_core.cli import main as dape_main
from dape_core.data import load_split
from dape_core.model import GPT, GPTConfig


def corpus(data_dir: Path, vocab: int) -> Path:
    if not (data_dir / "meta.json").is_file():
        code = dape_main(["tokenize", "--source", "builtin-code", "--max-docs", "600", "--vocab-size", str(vocab),
                          "--val-fraction", "0.1", "--seed", "0", "--out-dir", str(data_dir)])
        if code != 0:
            raise SystemExit(f"tokenize failed with exit code {code}")
    return data_dir


def batch(tokens: np.ndarray, rng: np.random.Generator, batch_size: int, length: int):
    starts = rng.integers(0, len(tokens) - length - 1, size=batch_size)
    rows = torch.from_numpy(np.stack([np.asarray(tokens[s : s + length + 1], dtype=np.int64) for s in starts]))
    return rows[:, :-1], rows[:, 1:]


def train(cfg: GPTConfig, tokens: np.ndarray, steps: int, batch_size: int, lr: float) -> GPT:
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    rng = np.random.default_rng(0)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        x, y = batch(tokens, rng, batch_size, cfg.train_len)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return model


@torch.no_grad()
def perplexity(model: GPT, tokens: np.ndarray, length: int, scored: int, windows: int) -> float:
    model.eval()
    rng = np.random.default_rng(1)
    total = 0.0
    for _ in range(windows):
        x, y = batch(tokens, rng, 1, length)
        logits = model(x, last=scored)
        total += float(F.cross_entropy(logits[0], y[0, -scored:]))
    return math.exp(total / windows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--data-dir", default=None, help="token directory (default: built in a temporary directory)")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--train-len", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--windows", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = corpus(Path(args.data_dir) if args.data_dir else Path(tmp) / "tokens", args.vocab_size)
        train_tokens, val_tokens = load_split(data_dir, "train").tokens, load_split(data_dir, "val").tokens
        vocab = int(load_split(data_dir, "train").meta["tokenizer"]["vocab_size"])
        rows = []
        for trained_with in ("float32", "bfloat16"):
            cfg = GPTConfig(vocab_size=vocab, size="small", encoding="kerple", processor="dape_v2", kernel_size=3,
                            train_len=args.train_len, dape_dtype=trained_with)
            start = time.perf_counter()
            model = train(cfg, train_tokens, args.steps, args.batch_size, args.lr)
            train_s = time.perf_counter() - start
            for evaluated_with in ("float32", "bfloat16"):
                model.cfg.dape_dtype = evaluated_with
                for factor in (1, 4):
                    ppl = perplexity(model, val_tokens, args.train_len * factor, args.train_len, args.windows)
                    rows.append(dict(trained_with=trained_with, evaluated_with=evaluated_with,
                                     eval_len=args.train_len * factor, scored_tokens=args.train_len, ppl=ppl,
                                     steps=args.steps, batch_size=args.batch_size, train_len=args.train_len,
                                     train_seconds=train_s, windows=args.windows))
                    print(f"trained {trained_with:8s} evaluated {evaluated_with:8s} L={args.train_len * factor:4d}: "
                          f"ppl {ppl:.3f}", file=sys.stderr, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
