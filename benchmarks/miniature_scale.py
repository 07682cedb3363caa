"""What it takes for the miniature to show NoPE's and RoPE's failure beyond the training length (README "What the
miniature takes"): the default model shape trained with one setting changed at a time, evaluated at 1× … 16× the
training length.

Each variant is a `dape tokenize` (built-in code corpus, BPE of the variant's vocabulary), a `dape train` (one
thread, seed 0, the default config's optimiser settings) and a `dape evaluate` (perplexity of the last 32 tokens of
32 validation windows at each length); two variants train side by side. The statistic is the claims' explosion
statistic for one seed: the largest ppl(×m) / ppl(×1) over m = 2 … 16.

    python benchmarks/miniature_scale.py --work /tmp/miniature --out benchmarks/results/miniature_scale.csv

``--only NAME …`` runs some variants; finished variants (an ``eval.csv`` in their directory) are not rerun.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

MULTIPLES = (1, 2, 4, 8, 16)
OPTIMISER = dict(lr=0.002, warmup_ratio=0.08, min_lr_ratio=0.1, weight_decay=0.1)  # config.yaml's defaults.lm
# name: (vocabulary, layers, training length, batch, steps, encodings)
VARIANTS = {
    "v1024-L4-T64": (1024, 4, 64, 32, 600, ("nope", "rope", "kerple")),
    "v1024-L2-T64-S1200": (1024, 2, 64, 32, 1200, ("nope", "rope")),
    "v1024-L2-T64-S2400": (1024, 2, 64, 32, 2400, ("nope",)),
    "v1024-L2-T32-S1200": (1024, 2, 32, 32, 1200, ("nope", "rope")),
    "v320-L2-T64": (320, 2, 64, 32, 600, ("nope", "rope", "kerple")),
    "v320-L2-T64-S1200": (320, 2, 64, 32, 1200, ("nope",)),
    "v320-L4-T32": (320, 4, 32, 32, 600, ("nope", "rope", "kerple")),
    "v320-L2-T32-S1200": (320, 2, 32, 32, 1200, ("nope", "rope", "kerple")),
}


def dape(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "dape_core.cli", *args], check=True, stdout=subprocess.DEVNULL)


def data_dir(work: Path, vocab: int) -> Path:
    out = work / f"data-code-{vocab}"
    if not (out / "meta.json").exists():
        dape("tokenize", "--source", "builtin-code", "--tokenizer", "bpe", "--vocab-size", str(vocab),
             "--val-fraction", "0.05", "--seed", "0", "--out-dir", str(out))
    return out


def run_variant(work: Path, name: str, encoding: str) -> Path:
    vocab, layers, train_len, batch, steps, _ = VARIANTS[name]
    out = work / "runs" / f"{name}-{encoding}"
    if (out / "eval.csv").exists():
        return out
    data = data_dir(work, vocab)
    if not (out / "model.pt").exists():
        settings = dict(encoding=encoding, size="small", n_layer=layers, train_len=train_len, batch_size=batch,
                        steps=steps, seed=0, max_position=4096, **OPTIMISER)
        options = [x for k, v in settings.items() for x in (f"--{k.replace('_', '-')}", str(v))]
        dape("train", "--data-dir", str(data), "--out-dir", str(out), "--threads", "1", "--no-progress",
             "--checkpoint-every", "100000", *options)
    dape("evaluate", "--checkpoint", str(out / "model.pt"), "--data-dir", str(data), "--eval-lens",
         *(str(train_len * m) for m in MULTIPLES), "--window", "32", "--max-windows", "32", "--min-scored-tokens",
         "1024", "--batch-size", "8", "--bootstrap", "0", "--threads", "1", "--out", str(out / "eval.csv"))
    return out


def collect(work: Path) -> pd.DataFrame:
    rows = []
    for name, (vocab, layers, train_len, batch, steps, encodings) in VARIANTS.items():
        for encoding in encodings:
            out = work / "runs" / f"{name}-{encoding}"
            if not (out / "eval.csv").exists():
                continue
            ppl = pd.read_csv(out / "eval.csv").set_index("eval_len")["ppl"]
            summary = json.loads((out / "summary.json").read_text())
            row = dict(variant=name, encoding=encoding, vocab_size=vocab, n_layer=layers, train_len=train_len,
                       batch_size=batch, steps=steps, train_wall_s=round(summary["wall_s"], 1))
            row.update({f"ppl_x{m}": round(float(ppl[train_len * m]), 3) for m in MULTIPLES})
            row["largest_ratio"] = round(max(row[f"ppl_x{m}"] for m in MULTIPLES[1:]) / row["ppl_x1"], 3)
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True, type=Path, help="directory for the token files and runs")
    p.add_argument("--out", required=True, type=Path, help="CSV, one row per (variant, encoding)")
    p.add_argument("--only", nargs="+", choices=sorted(VARIANTS), help="run only these variants")
    p.add_argument("--parallel", type=int, default=2, help="variants trained side by side")
    args = p.parse_args(argv)
    names = args.only or list(VARIANTS)
    jobs = [(name, encoding) for name in names for encoding in VARIANTS[name][5]]
    with futures.ThreadPoolExecutor(args.parallel) as pool:
        for done in futures.as_completed([pool.submit(run_variant, args.work, *job) for job in jobs]):
            print(f"done {done.result().name}", file=sys.stderr, flush=True)
    table = collect(args.work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    table.to_csv(partial, index=False)
    partial.replace(args.out)
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
