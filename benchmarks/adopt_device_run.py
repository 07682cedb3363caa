"""Adopts a run of ``benchmarks/fused_device.sh`` into the repository (docs/performance.md, "The compiled path's
options on CUDA"): what the run measured becomes what training runs with and what the estimate and the memory model
read, each by the rule of the script that owns it.

    python benchmarks/adopt_device_run.py RUN NAME      # RUN: the run's $OUT as it came back from the device

1. The run's files are copied to ``benchmarks/results/NAME/`` (writable; its ``gpu_calibration.csv`` goes into the
   committed one instead, step 3), with a ``README.md`` naming the device, the date and what each file holds.
2. The compiled path's options on CUDA that the run's rows support, by ``benchmarks/cuda_options.py``'s rule, are
   written into the package data ``dape_core/config/measured/cuda_compiled_path.json`` (``cuda_compiled_options``,
   read as ``CUDA_COMPILED_OPTIONS``; ``measured`` names the run).
3. The run's calibration rows are merged into ``benchmarks/results/gpu_calibration.csv`` by
   ``benchmarks/calibrate_gpu.py``'s merge (a row of the same device and case replaces the old one), so that the
   estimate (``python -m dape_core.config``) prices those cases as they ran with the options of step 2, and no
   second copy is left for ``benchmarks/memory_fit.py``, which reads every ``gpu_calibration.csv`` under
   ``benchmarks/results``.
4. The memory model is refitted to every committed peak, the run's among them (``benchmarks/memory_fit.py``):
   ``benchmarks/results/memory_fit.csv`` and ``compiled_kept_scale`` in the same JSON (read as
   ``dape_core.memory.COMPILED_KEPT_SCALE``), the scale that script names.

Nothing is committed: it prints what changed and what is left by hand (the figures of docs/performance.md, the test
suite, the commit). Before it writes anything it checks everything it needs, and stops with one line naming the
file where a check fails: a run measured on no GPU (a ``SMOKE`` run: its rows name no device), rows naming
different devices, a run without the layer's rows (``fused_layer.csv``, which the options are read from), a damaged
CSV, a row the memory model cannot trace (a configuration or case not here), a ``NAME`` already under
``benchmarks/results``, and a damaged ``cuda_compiled_path.json``. It writes data only, never Python source.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
from pathlib import Path

import pandas as pd

if not __package__:  # run as a file, not with -m: the repository root on the path (benchmarks, dape_core)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import calibrate_gpu, cuda_options, memory_fit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
from dape_core import measured  # noqa: E402
from dape_core.errors import ConfigError  # noqa: E402
from dape_core.settings.attention import (COMPILED_OPTIONS_OFF, compiled_options_text,  # noqa: E402
                                         measured_compiled_options)

COMPILED_PATH = Path("dape_core/config/measured/cuda_compiled_path.json")
RESULTS = Path("benchmarks/results")
CALIBRATION = "gpu_calibration.csv"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def stop(message: str) -> None:
    raise SystemExit(f"adopt_device_run: {message}")


def read_csv(path: Path) -> pd.DataFrame:
    """A run's CSV; a cut or damaged one stops the script with one line naming it."""
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        stop(f"{path} is damaged ({type(error).__name__}); allowed: the CSV its benchmark writes")


def run_device(run: Path) -> str:
    """The one GPU every row of the run's CSVs names (column ``gpu``, or ``device`` of calibration rows)."""
    devices, named = {}, False
    for path in sorted(run.rglob("*.csv")):
        frame = read_csv(path)
        for column in ("gpu", "device"):
            if column not in frame.columns or frame.empty:
                continue
            named = True
            values = frame[column]
            if values.isna().any() or (values.astype(str).str.strip() == "").any() or (values == "cpu").any():
                stop(f"{path} has rows measured on no GPU (column {column}); allowed: a run on a GPU, not SMOKE=1")
            for value in values.astype(str):
                devices.setdefault(value, path)
    if not named:
        stop(f"{run} has no CSV naming its device (column gpu or device); allowed: a directory "
             "benchmarks/fused_device.sh wrote on a GPU")
    if len(devices) > 1:
        stop(f"{run} names several devices ({', '.join(f'{d} in {p.name}' for d, p in devices.items())}); "
             "allowed: one device run")
    return next(iter(devices))


def decided_options(run: Path) -> tuple[dict, list[str]]:
    """The options the run's rows support and the rule's report, by benchmarks/cuda_options.py."""
    layer_csv, step_csv = run / "fused_layer.csv", run / "gpu_step.csv"
    if not layer_csv.is_file():
        stop(f"{run} has no fused_layer.csv; allowed: a run whose layer step ran (STEPS with layer)")
    parser = OneLine(prog="adopt_device_run")
    times, errors = cuda_options.layer_table(cuda_options.read_table(parser, layer_csv, cuda_options.LAYER_COLUMNS))
    steps = cuda_options.step_table(cuda_options.read_table(parser, step_csv, cuda_options.STEP_COLUMNS)
                                    if step_csv.is_file() else None)
    return cuda_options.decide(times, errors, steps)


class OneLine(argparse.ArgumentParser):
    """cuda_options.read_table's refusal of a damaged CSV (the line naming it) as this script's one line."""

    def error(self, message):
        stop(message)


def compiled_path(root: Path) -> tuple[dict, dict]:
    """The committed ``cuda_compiled_path.json`` under ``root`` and its options, checked as the package reads them; a
    damaged one stops the script with one line naming it."""
    try:
        data = measured.read_compiled_path(root / COMPILED_PATH)
        return data, measured_compiled_options(data, f"{COMPILED_PATH}: cuda_compiled_options")
    except ConfigError as err:
        stop(str(err))


def calibration_rows(path: Path) -> pd.DataFrame:
    """Calibration rows, checked as the estimate reads them (the key's columns; ``path_options`` where a row's path
    has options, a missing one meaning all off, as the estimate reads it)."""
    from dape_core.config.estimate import CALIBRATION_COLUMNS

    frame = read_csv(path)
    missing = [c for c in CALIBRATION_COLUMNS if c not in frame.columns]
    if missing:
        stop(f"{path} lacks the columns {', '.join(missing)}; allowed: the CSV benchmarks/calibrate_gpu.py writes")
    return frame


def copy_run(run: Path, target: Path) -> list[str]:
    """The run's files (all but its calibration rows) copied, writable, under ``target``; their relative names."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    names = []
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        name = path.relative_to(run)
        if name == Path(CALIBRATION):
            continue
        (partial / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, partial / name)  # not copy2: a returned run's files are read-only
        names.append(str(name))
    partial.mkdir(parents=True, exist_ok=True)
    partial.replace(target)
    return names


def refit(root: Path) -> float:
    """benchmarks/memory_fit.py over every committed peak under ``root``: its CSV rewritten; the scale it names."""
    results = root / RESULTS
    rows = memory_fit.fit_all(sorted(results.rglob("gpu_step.csv")), sorted(results.rglob(CALIBRATION)),
                              results / "memory_fit.csv")
    print(f"memory fit: {len(rows)} peaks, {sum(not r['bounded'] for r in rows)} above the model's at today's scale")
    return memory_fit.needed_scale(rows)


def run_facts(run: Path) -> tuple[str, str]:
    """(date, versions) the run's log.txt records (benchmarks/fused_device.sh prints both), else 'not recorded'."""
    date = versions = "not recorded"
    log = run / "log.txt"
    if log.is_file():
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("measured ") and date == "not recorded":
                date = line.removeprefix("measured ").strip()
            elif line.startswith("torch ") and " triton " in line and versions == "not recorded":
                versions = line.strip()
    return date, versions


def readme(name: str, device: str, date: str, versions: str, files: list[str], before: dict, after: dict,
           merged: pd.DataFrame | None, scale: tuple[float, float]) -> str:
    lines = [f"# Device run on an {device} ({date}; {versions})", "",
             f"Adopted with `python benchmarks/adopt_device_run.py RUN {name}` from the directory "
             "`benchmarks/fused_device.sh` wrote (its command is in docs/performance.md; `log.txt` is its log).", "",
             "- Files: " + ", ".join(f"`{f}`" for f in files) + ".",
             f"- The compiled path's options on CUDA by `benchmarks/cuda_options.py`'s rule (`cuda_options.txt` "
             f"has each pair and verdict): `{compiled_options_text(after)}`"
             + (" (unchanged" if after == before else f" (before `{compiled_options_text(before)}`")
             + "; `dape_core/config/measured/cuda_compiled_path.json`)."]
    if merged is None:
        lines.append("- No calibration rows (the run had no `calibrate` step).")
    else:
        cases = "; ".join(f"{r.method} T {r.train_len} × {r.micro_batch}: "
                          + (f"{r.tokens_per_s:.0f} tokens/s" if r.status == "ok" else str(r.status))
                          for r in merged.itertuples(index=False))
        lines.append(f"- {len(merged)} calibration row{'s' * (len(merged) != 1)} merged into "
                     "`benchmarks/results/gpu_calibration.csv` "
                     f"({cases}), " + ("with the options they ran with (column `path_options`)."
                                       if "path_options" in merged.columns
                                       else "which record no options (`path_options`): every option off."))
    lines.append(f"- The memory model refitted to every committed peak, this run's among them: "
                 f"`COMPILED_KEPT_SCALE` {scale[0]:g} → {scale[1]:g} (`benchmarks/results/memory_fit.csv`).")
    return "\n".join(lines) + "\n"


def adopt(run: Path, name: str, root: Path = ROOT) -> int:
    if not NAME.match(name):
        stop(f"NAME {name!r} is not allowed; allowed: letters, digits, '.', '_' and '-' (a directory name)")
    target = root / RESULTS / name
    if target.exists():
        stop(f"{target} exists; allowed: a NAME not yet under benchmarks/results")
    if not run.is_dir():
        stop(f"RUN {run} is not a directory; allowed: the run's $OUT as it came back")
    device = run_device(run)
    chosen, report = decided_options(run)
    data, before = compiled_path(root)
    calibration = run / CALIBRATION
    merged = calibration_rows(calibration) if calibration.is_file() else None
    committed = root / RESULTS / CALIBRATION
    if merged is not None and committed.is_file():
        calibration_rows(committed)
    if (run / "gpu_step.csv").is_file():  # the run's peaks trace on the model: a foreign row stops here, unwritten
        memory_fit.step_rows(run / "gpu_step.csv")
    if merged is not None:
        memory_fit.calibration_rows(calibration)
    # every check passed: write
    date, versions = run_facts(run)
    files = copy_run(run, target)
    data["measured"] = f"benchmarks/results/{name} ({device}, {date})"
    data["cuda_compiled_options"] = {**COMPILED_OPTIONS_OFF, **chosen}
    print("\n".join(report))
    print(f"CUDA_COMPILED_OPTIONS: {compiled_options_text(before)} → {compiled_options_text(chosen)} ({COMPILED_PATH})")
    if merged is not None:
        from dape_core import io as artefact_io

        artefact_io.write_csv(committed, calibrate_gpu.merge(committed, merged.to_dict("records")))
        print(f"{len(merged)} calibration row{'s' * (len(merged) != 1)} merged into {RESULTS / CALIBRATION}")
    old_scale = float(data["compiled_kept_scale"])
    scale = refit(root)
    if not math.isnan(scale):
        data["compiled_kept_scale"] = scale
    partial = (root / COMPILED_PATH).with_suffix(".json.partial")
    partial.write_text(json.dumps(data, indent=2) + "\n")
    partial.replace(root / COMPILED_PATH)
    print(f"COMPILED_KEPT_SCALE: {old_scale:g} → {scale if math.isnan(scale) else format(scale, 'g')} ({COMPILED_PATH})")
    (target / "README.md").write_text(readme(name, device, date, versions, files, before, chosen, merged,
                                             (old_scale, old_scale if math.isnan(scale) else scale)))
    print(f"wrote {RESULTS / name}/ ({len(files)} files and README.md). Left by hand: the figures of "
          "docs/performance.md, the estimates (python -m dape_core.config configs/paper.yaml), the test suite (make "
          "test), the commit.")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the run's $OUT as it came back (fused_layer.csv, gpu_step.csv, …)")
    parser.add_argument("name", help="its directory under benchmarks/results (e.g. h200-options)")
    args = parser.parse_args(argv)
    return adopt(args.run, args.name)


if __name__ == "__main__":
    raise SystemExit(main())
