"""What verifying the token files costs a job: ``load_split`` hashes every token file whole at each load (no cache of
verified files), so this is the price of naming bit rot, a same-size overwrite or a restored modification time.

    python benchmarks/verify_cost.py --data-dir results/data/code [--paper-gb 3.3] [--repeats 5]

Times, medians over ``--repeats`` (after one warm read, so the files come from the page cache as a job's repeated
loads do): ``load_split`` of each split of ``--data-dir`` (hashing included), the sha256 of each of its files, and
the hashing rate on a scratch file of ``--scratch-mb``, from which the cost at ``--paper-gb`` of tokens is
extrapolated (3.3 GB: what a 125M run of the paper reads, 50k steps × 32,768 uint16 tokens; its train.bin holds at
least that). Rows go to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine_info, write_rows  # noqa: E402

from dape_core.data.token_files import SPLITS, load_split  # noqa: E402
from dape_core.io import file_sha256  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "verify_cost.csv"


def median_seconds(action, repeats: int) -> float:
    action()  # warm: the page cache, as a job's later loads find it
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True, help="an --out-dir of `dape tokenize`")
    parser.add_argument("--scratch-mb", type=int, default=512)
    parser.add_argument("--paper-gb", type=float, default=3.3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    info = machine_info()
    rows = []
    for split in SPLITS:
        seconds = median_seconds(lambda: load_split(args.data_dir, split), args.repeats)
        rows.append({**info, "case": f"load_split {split}", "bytes": None, "ms": 1000 * seconds})
    for path in sorted(p for p in args.data_dir.iterdir() if p.is_file() and not p.name.startswith(".")):
        seconds = median_seconds(lambda: file_sha256(path), args.repeats)
        rows.append({**info, "case": f"sha256 {path.name}", "bytes": path.stat().st_size, "ms": 1000 * seconds})
    with tempfile.NamedTemporaryFile(dir=args.data_dir.parent, delete=False) as handle:
        handle.write(os.urandom(args.scratch_mb * 2**20))
        scratch = Path(handle.name)
    try:
        seconds = median_seconds(lambda: file_sha256(scratch), args.repeats)
    finally:
        scratch.unlink()
    rate = args.scratch_mb * 2**20 / seconds
    rows.append({**info, "case": f"sha256 {args.scratch_mb} MiB scratch", "bytes": args.scratch_mb * 2**20,
                 "ms": 1000 * seconds, "gb_per_s": rate / 1e9})
    rows.append({**info, "case": f"extrapolated: {args.paper_gb} GB of tokens", "bytes": int(args.paper_gb * 1e9),
                 "ms": 1000 * args.paper_gb * 1e9 / rate, "gb_per_s": rate / 1e9})
    for row in rows:
        size = "" if row["bytes"] is None else f"{row['bytes'] / 1e6:10.1f} MB"
        print(f"{row['case']:<40} {size:>14} {row['ms']:10.2f} ms", flush=True)
    write_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
