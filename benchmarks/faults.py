"""Fault injection on a configuration's DAG (the smoke configuration by default): kills and damaged files, then the
final reports compared with an uninterrupted run's.

    python benchmarks/faults.py [--config configs/smoke.yaml] [--workdir /tmp/faults] [--kills 3] [--seed 0]
                                [--kinds …] [--faults …] [--setup-faults …] [--out benchmarks/results/faults.csv]

Every run is what ``make reproduce`` does (:func:`run`): clear a stale lock (``dape_core.workflow_lock``), ``dape
verify`` (damaged results set aside, one console line each), then ``snakemake --profile profiles/default`` with
``--forcerun`` of what verify lists as pending.

1. A reference run, uninterrupted, in ``WORKDIR/reference``.
2. The same DAG in ``WORKDIR/faulted``, killed with SIGKILL (the whole process group, Snakemake and its jobs) at
   ``--kills`` random moments and restarted each time, with no manual step.
3. One file of every kind (:data:`KINDS`) in turn, truncated, garbled, overwritten at the same size, replaced by
   another file of its kind with that file's seal (``foreign``: another run's, seed's or cell's, the second match
   of the kind's glob), changed with its seal removed (``unsealed``), changed in place with its modification
   time restored (``rot``), and changed and sealed again by a job of other settings (``settings``: another
   configuration's run of the same name, with its seal; the kinds whose seals record their job's settings); after
   each the same command runs, and once more if it stopped (a job that failed on a
   damaged input is redone then): named when verify's line or the stopped DAG's output names the file, finished
   when the command succeeded by its second run with no other step; its reports compared with the reference's.
4. Faults of the setting rather than of a file (:data:`SETUP_FAULTS`), each followed by the same command as it was
   before: ``duplicate key`` — the configuration given with one key twice in a mapping; ``missing extra`` — the
   DAG built where ``transformers`` cannot be imported (the fine-tune family's extra); ``write failure`` — a
   training to be done again (one run's model and checkpoints removed, the model the command's target) under a
   file-size limit below the model's size (as a full disk stops a write), then the same command without the limit;
   ``huge eval`` / ``huge train`` — the configuration with an evaluation length of 200000 (no validation document
   holds it) or a training length of 100000 (beyond its job's memory), which must stop before any job runs;
   ``report write limit`` — the HTML report (``make reproduce``'s last step) written under ``ulimit -f 64``, which
   must leave the previous report.html whole. Each must stop with its cause in one line naming the file, key,
   extra or field, leave no seal without its file, and the next run without the fault must finish with the
   reference's reports. ``deleted folder`` — one run's ``results/lm/<run>/seed0/`` removed, files and seals —
   and ``deleted result`` — one evaluation's eval.csv and windows.csv with their seals — must instead be named by
   ``dape verify`` and redone by the run that follows them, with the reference's reports.

Reports are compared on every number a rerun reproduces (:func:`compare_reports`: perplexities and losses,
per-window losses, CHE accuracies, sink masses, leakage ratios, every verdict but the timing claim's); measured
times differ between any two runs and are left out. The counts go to ``--out``: faults injected, runs that
finished without a manual step, files named, reports identical, and reports that differ with no file named (the
goal: 0), with, per case, whether a traceback reached the console or a job log and the seals left without their
file (``orphans``).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if not __package__:  # run as a file, not with -m: the repository root on the path (dape_core)
    sys.path.insert(0, str(ROOT))

from dape_core import config as grid  # noqa: E402
from dape_core import io  # noqa: E402

#: a file of each kind the DAG writes and reads, by glob under the working directory (the first match is damaged)
KINDS = {
    "token file": "results/data/*/val.bin",
    "meta.json": "results/data/*/meta.json",
    "model.pt": "results/lm/*/seed*/model.pt",
    "summary.json": "results/lm/*/seed*/summary.json",
    "eval.csv": "results/lm/*/seed*/eval.csv",
    "windows.csv": "results/lm/*/seed*/windows.csv",
    "sink.csv": "results/lm/*/seed*/attention/L*/sink.csv",
    "maps.npz": "results/lm/*/seed*/attention/L*/maps.npz",
    "timing csv": "results/timing/*[!s].csv",
    "timing repeats": "results/timing/*.repeats.csv",
    "CHE csv": "results/che/*/seed*.csv",
    "report spec": "results/plan*.json",
    "aggregated table": "{reports}/lm_results.csv",
}
FAULTS = ("truncate", "garble", "overwrite", "foreign", "unsealed", "rot", "settings")
OTHER_SETTINGS = "0123456789abcdef"  # the spec digest of a job of another configuration (fault ``settings``)
SETUP_FAULTS = ("duplicate key", "missing extra", "write failure", "huge eval", "huge train", "deleted folder",
                "deleted result", "report write limit")
#: the setting's faults that the same command recovers from in the run that follows them (the others stop it)
RECOVERED_AT_ONCE = ("deleted folder", "deleted result")
#: copies of the smoke configuration with sizes its plan cannot hold: (replaced text, replacement) each
HUGE = {
    "huge eval": [("eval_lens: [32, 64]", "eval_lens: [32, 200000]")],
    "huge train": [("    size: tiny\n    train_len: 32\n", "    size: tiny\n    train_len: 100000\n"),
                   ("eval_lens: [32, 64]", "eval_lens: [100000, 200000]")],
}
REPORT_LIMIT = 64 * 1024  # bytes: the report under `ulimit -f 64`
#: sitecustomize of a Python where `transformers` cannot be imported (find_spec answers None, as without the package)
NO_TRANSFORMERS = "import sys\nsys.modules['transformers'] = None\n"

#: per aggregated table: the key columns and the numbers a rerun reproduces
COMPARED = {
    "lm_results.csv": (["run", "seed", "eval_len"], ["ppl", "loss", "ppl_dp", "ppl_local", "status"]),
    "lm_windows.csv": (["run", "seed", "eval_len", "document", "anchor"], ["loss", "loss_dp", "loss_local"]),
    "che_results.csv": (["cell", "seed", "lr", "row_type", "length"], ["accuracy", "n_samples"]),
    "sink.csv": (["run", "seed", "heatmap_len", "sequence", "layer"], ["sink_mass"]),
    "leakage.csv": (["run", "twin", "seed", "eval_len"], ["ratio", "ppl_tril", "ppl_no_tril"]),
}


def damage(path: Path, fault: str, rng: random.Random, other: Path | None = None) -> None:
    """Cut ``path`` to 60 % of its bytes, garble 16 bytes in its middle, change one byte (a digit where there is
    one) without changing its size, or (``foreign``) copy ``other`` and its seal over it and its seal; ``unsealed``:
    its seal removed and one byte changed; ``rot``: one byte changed with its modification time restored (as bit
    rot leaves a file); ``settings``: one byte changed and the file sealed again as a job with other settings would
    have sealed it (the seal's ``spec:`` another digest: another configuration's run of the same name, brought in
    with its seal), only where its seal records settings (a workflow job's file)."""
    if fault == "settings":
        if io.read_seal(io.hash_path(path)).spec is None:
            raise ValueError(f"{path}: its seal records no job's settings")
        damage(path, "overwrite", rng)
        text = io.hash_path(path).read_text(encoding="utf-8").splitlines()
        text[0] = f"{io.file_sha256(path)}  {path.name}"
        text = [f"{io.SPEC}{OTHER_SETTINGS}" if line.startswith(io.SPEC) else line for line in text]
        io.hash_path(path).write_text("\n".join(text) + "\n", encoding="utf-8")
        return
    if fault == "unsealed":
        io.hash_path(path).unlink(missing_ok=True)
        fault = "overwrite"
    if fault == "rot":
        before = path.stat()
        damage(path, "overwrite", rng)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        return
    if fault == "foreign":
        for source, target in ((other, path), (io.hash_path(other), io.hash_path(path))):
            if source.exists():
                shutil.copyfile(source, target)
        return
    data = bytearray(path.read_bytes())
    if fault == "truncate":
        data = data[: int(len(data) * 0.6)]
    elif fault == "garble":
        middle = len(data) // 2
        data[middle:middle + 16] = bytes(rng.randrange(256) for _ in range(min(16, len(data) - middle)))
    else:
        digits = [i for i, b in enumerate(data) if 0x31 <= b <= 0x38]
        index = rng.choice(digits) if digits else len(data) // 2
        data[index] = data[index] + 1 if digits else data[index] ^ 0x01
    path.write_bytes(bytes(data))


def snakemake_command(workdir: Path, config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
            "--configfile", str(config), "--profile", str(ROOT / "profiles" / "default"), "--cores", "2", *extra]


def clear_stale_lock(workdir: Path, config: Path) -> None:
    """What `make reproduce` does first: a lock left by a killed Snakemake is cleared (a live one is kept)."""
    if workdir.exists():
        subprocess.run([sys.executable, "-m", "dape_core.workflow_lock", "--directory", str(workdir), "--",
                        *snakemake_command(workdir, config)[3:]], capture_output=True, text=True, timeout=600)


def run_snakemake(workdir: Path, config: Path, *extra: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    """What a plain Snakemake user runs: clear a stale lock, then Snakemake (no ``dape verify`` first)."""
    clear_stale_lock(workdir, config)
    return subprocess.run(snakemake_command(workdir, config, *extra), capture_output=True, text=True, timeout=timeout)


def run(workdir: Path, config: Path, *extra: str, timeout: float = 3600, env: dict | None = None,
        file_limit: int | None = None) -> subprocess.CompletedProcess:
    """`make reproduce`'s steps: clear a stale lock, `dape verify` (damaged results set aside, one line each), then
    Snakemake with `--forcerun` of what verify lists as pending (in ``env``; ``file_limit``: bytes a file of
    Snakemake or its jobs may grow to, RLIMIT_FSIZE). One CompletedProcess: verify's output and Snakemake's, and the
    first failing step's status."""
    import resource

    clear_stale_lock(workdir, config)

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))
    dape = [sys.executable, "-m", "dape_core.cli", "verify", "--results", "results"]
    reports = grid.reports_dir(grid.configuration_name([config]))
    verify = subprocess.run([*dape, "--reports", reports, "--configfile", str(config)], cwd=workdir, capture_output=True, text=True,
                            timeout=timeout, env=env) if (workdir / "results").is_dir() else None
    pending = (subprocess.run([*dape, "--pending"], cwd=workdir, capture_output=True, text=True, timeout=timeout,
                              env=env).stdout.split() if verify is not None and verify.returncode == 0 else [])
    done = subprocess.run(snakemake_command(workdir, config, *extra, *pending), capture_output=True, text=True,
                          timeout=timeout, env=env, preexec_fn=limit if file_limit else None)
    if verify is None:
        return done
    return subprocess.CompletedProcess(done.args, verify.returncode or done.returncode, verify.stdout + done.stdout,
                                       verify.stderr + done.stderr)


def orphan_seals(workdir: Path) -> list[Path]:
    """Seals under ``workdir/results`` whose file is not there (set-aside files apart)."""
    return [seal for seal in (workdir / "results").rglob(f"*{io.HASH_SUFFIX}")
            if ".damaged" not in seal.parts and not seal.with_name(seal.name[:-len(io.HASH_SUFFIX)]).exists()]


def with_duplicate_key(config: Path, target: Path) -> tuple[Path, str]:
    """A copy of ``config`` with a key given twice: the first second-level key below ``defaults:`` that has its
    value on its line, repeated on the next line; (the copy, that key)."""
    lines = config.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("defaults:"))
    index = next(i for i in range(start + 1, len(lines)) if re.match(r"^  \w+:", lines[i]) and
                 lines[i].split(":", 1)[1].strip() and not lines[i].split(":", 1)[1].strip().startswith("#"))
    key = lines[index].split(":", 1)[0].strip()
    target.write_text("\n".join(lines[:index + 1] + [lines[index]] + lines[index + 1:]) + "\n", encoding="utf-8")
    return target, key


def with_sizes(config: Path, target: Path, changes: list[tuple[str, str]]) -> Path:
    """A copy of ``config`` with each (text, replacement) of ``changes`` made (the smoke configuration's lines)."""
    text = config.read_text(encoding="utf-8")
    for old, new in changes:
        if old not in text:
            raise SystemExit(f"{config}: no {old.strip()!r} to change for a size fault")
        text = text.replace(old, new)
    target.write_text(text, encoding="utf-8")
    return target


def report_command(workdir: Path, config: Path, file_limit: int | None = None) -> subprocess.CompletedProcess:
    """`make reproduce`'s last step: the HTML report, written by dape_core.report_html (``file_limit``: bytes a file
    of it may grow to, RLIMIT_FSIZE)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))
    reports = grid.reports_dir(grid.configuration_name([config]))
    return subprocess.run([sys.executable, "-m", "dape_core.report_html", f"{reports}/report.html", "--",
                           *snakemake_command(workdir, config)], cwd=workdir, capture_output=True, text=True,
                          timeout=1800, preexec_fn=limit if file_limit else None)


def setup_fault(fault: str, faulted: Path, config: Path,
                scratch: Path) -> tuple[subprocess.CompletedProcess, str, tuple[str, ...]]:
    """Run the DAG once with ``fault`` (:data:`SETUP_FAULTS`); (the run, what its output must name, the arguments
    of the command, which the run after the fault repeats without the fault). ``huge eval`` / ``huge train``: the
    configuration with an evaluation length no validation document holds, or a training length beyond its job's
    memory (:data:`HUGE`); ``deleted folder``: one run's ``results/lm/<run>/seed0/`` removed, files and seals;
    ``deleted result``: a fine-tune's eval.csv and windows.csv removed with their seals; ``report write
    limit``: the HTML report written under a file-size limit (:data:`REPORT_LIMIT`), the run's report.html there
    from before."""
    scratch.mkdir(parents=True, exist_ok=True)
    if fault in HUGE:
        broken = with_sizes(config, scratch / config.name, HUGE[fault])
        field = "eval.eval_lens: 200000 leaves only" if fault == "huge eval" else "train_len: 100000 needs at least"
        return run(faulted, broken), field, ()
    if fault in ("deleted folder", "deleted result"):  # a trained run's folder with its attention maps; a fine-tune's
        evaluation = sorted(faulted.glob(KINDS["eval.csv"]))[-1]  # evaluation
        if fault == "deleted folder":
            evaluation = sorted(faulted.glob(KINDS["sink.csv"]))[0].parents[2] / "eval.csv"
            shutil.rmtree(evaluation.parent)
        else:
            for name in ("eval.csv", "windows.csv"):
                for path in (evaluation.with_name(name), io.hash_path(evaluation.with_name(name))):
                    path.unlink()
        return run(faulted, config), f"dape verify: {evaluation.relative_to(faulted)}: is gone", ()
    if fault == "report write limit":
        return report_command(faulted, config, file_limit=REPORT_LIMIT), "File too large", ()
    if fault == "duplicate key":
        broken, key = with_duplicate_key(config, scratch / config.name)
        return run(faulted, broken), f"the key {key!r} is given twice", ()
    if fault == "missing extra":
        (scratch / "sitecustomize.py").write_text(NO_TRANSFORMERS, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(scratch), os.environ.get("PYTHONPATH")]))}
        return run(faulted, config, env=env), "needs transformers", ()
    # one run's training to be done again (its model, seal and checkpoints removed, the model asked for as the target)
    # under a file-size limit below the model's size
    model = sorted(faulted.glob(KINDS["model.pt"]))[0]
    limit = model.stat().st_size // 2
    seed_folder = model.parent.relative_to(faulted / "results" / "lm")
    shutil.rmtree(faulted / "results" / "checkpoints" / seed_folder, ignore_errors=True)
    model.unlink()
    io.hash_path(model).unlink(missing_ok=True)
    target = (str(model.relative_to(faulted)),)
    return run(faulted, config, *target, file_limit=limit), ": not written: File too large", target


def killed_run(workdir: Path, config: Path, after_s: float) -> None:
    """Start the DAG and SIGKILL its whole process group after ``after_s`` seconds (or let it end first)."""
    clear_stale_lock(workdir, config)
    process = subprocess.Popen(snakemake_command(workdir, config), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        process.wait(timeout=after_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def compare_reports(reference: Path, candidate: Path) -> list[str]:
    """The differences between two runs' reports folders, on the numbers a rerun reproduces (empty: identical)."""
    differences = []
    for name, (keys, values) in COMPARED.items():
        a_path, b_path = reference / name, candidate / name
        if not a_path.exists() and not b_path.exists():
            continue
        if not b_path.exists():
            differences.append(f"{name}: missing")
            continue
        a, b = pd.read_csv(a_path), pd.read_csv(b_path)
        keys = [k for k in keys if k in a]
        values = [v for v in values if v in a]
        a, b = a[keys + values].sort_values(keys).reset_index(drop=True), b[keys + values].sort_values(keys)
        b = b.reset_index(drop=True)
        if len(a) != len(b) or not a.equals(b):
            differences.append(f"{name}: {len(a)} vs {len(b)} rows, values differ")
    a, b = pd.read_csv(reference / "claims.csv"), pd.read_csv(candidate / "claims.csv")
    verdicts = [(x, y) for x, y in zip(a[["claim_id", "verdict"]].itertuples(index=False),
                                       b[["claim_id", "verdict"]].itertuples(index=False))
                if x.claim_id != "timing_overhead_shrinks" and tuple(x) != tuple(y)]
    differences += [f"claims.csv: {x.claim_id} {x.verdict} → {y.verdict}" for x, y in verdicts]
    return differences


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "smoke.yaml"))
    parser.add_argument("--workdir", default="/tmp/dape-faults")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="*", default=list(KINDS), choices=list(KINDS),
                        help="file kinds to damage (default: all)")
    parser.add_argument("--faults", nargs="*", default=list(FAULTS), choices=FAULTS,
                        help="faults injected into each kind's file (default: all)")
    parser.add_argument("--setup-faults", nargs="*", default=list(SETUP_FAULTS), choices=SETUP_FAULTS,
                        help="faults of the setting, after the files' (default: all)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "faults.csv"))
    args = parser.parse_args(argv)
    rng, config = random.Random(args.seed), Path(args.config).resolve()
    reports = grid.reports_dir(grid.configuration_name([config]))
    root = Path(args.workdir)
    shutil.rmtree(root, ignore_errors=True)
    reference, faulted = root / "reference", root / "faulted"
    rows = []

    started = time.perf_counter()
    done = run(reference, config)
    reference_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the reference run failed:\n{(done.stdout + done.stderr)[-3000:]}")
    print(f"reference run: {reference_s:.0f} s", flush=True)

    if args.kills == 0:  # only damaged files: they are injected into a copy of the finished reference run
        shutil.copytree(reference, faulted, symlinks=True)
    else:
        for kill in range(args.kills):
            after = rng.uniform(0.1, 0.8) * reference_s
            killed_run(faulted, config, after)
            print(f"kill {kill + 1}: SIGKILL after {after:.0f} s")
        done = run(faulted, config)
        differences = compare_reports(reference / reports, faulted / reports) if done.returncode == 0 else ["failed"]
        rows.append({"fault": f"{args.kills} kills", "kind": "process group", "file": "", "named": False,
                     "finished": done.returncode == 0, "identical": not differences, "differences": "; ".join(differences)})
        print(f"after the kills: finished {done.returncode == 0}, identical {not differences}", flush=True)

    for kind in args.kinds:
        matches = sorted(faulted.glob(KINDS[kind].format(reports=reports)))
        if not matches:
            print(f"{kind}: no file")
            continue
        path = matches[0]
        seal = io.hash_path(path)
        original, stat = path.read_bytes(), path.stat()
        original_seal = seal.read_bytes() if seal.exists() else None
        for fault in args.faults:
            if fault == "foreign" and len(matches) < 2:
                print(f"{kind} foreign: no other file of the kind")
                continue
            if fault == "settings" and (not seal.exists() or io.read_seal(seal).spec is None):
                print(f"{kind} settings: its seal records no job's settings")
                continue
            damage(path, fault, rng, matches[1] if len(matches) > 1 else None)
            since = time.time()
            damaged = run(faulted, config)
            console = damaged.stdout + damaged.stderr
            out = console + "".join(p.read_text(errors="replace") for p in (faulted / "logs").rglob("*.log")
                                    if p.stat().st_mtime >= since)
            relative = str(path.relative_to(faulted))
            # named: by dape verify's line (the file set aside), or where the DAG stopped on it
            named = f"dape verify: {relative}:" in console or (damaged.returncode != 0 and relative in out)
            # the same command again where the first stopped (a job that failed on a damaged input is redone then)
            finished = damaged if damaged.returncode == 0 else run(faulted, config)
            if finished.returncode != 0:  # not recovered: the file and its seal as they were, for the next fault
                if path.exists() and path.read_bytes() != original:
                    path.write_bytes(original)
                    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
                if original_seal is not None and (not seal.exists() or seal.read_bytes() != original_seal):
                    seal.write_bytes(original_seal)
            differences = (compare_reports(reference / reports, faulted / reports) if finished.returncode == 0
                           else ["the run after the fault failed"])
            rows.append({"fault": fault, "kind": kind, "file": relative, "named": named,
                         "on_console": relative in console, "finished": finished.returncode == 0,
                         "identical": not differences, "differences": "; ".join(differences),
                         "traceback": "Traceback" in out, "orphans": len(orphan_seals(faulted))})
            print(f"{kind} {fault}: named {named}, finished {finished.returncode == 0}, identical {not differences}",
                  flush=True)
            pd.DataFrame(rows).to_csv(args.out, index=False)  # every case as it ends: a cut-short run keeps its rows
            original, stat = path.read_bytes(), path.stat()  # a redone file is the new original
            original_seal = seal.read_bytes() if seal.exists() else None

    for fault in args.setup_faults:
        html = faulted / reports / "report.html"
        if fault == "report write limit" and not html.is_file():  # the report the limited write must leave whole
            report_command(faulted, config)
        before = html.read_bytes() if html.is_file() else None
        since = started = time.time()
        damaged, expected, command = setup_fault(fault, faulted, config, root / "setup")
        kept = (html.read_bytes() == before if html.is_file() else before is None) and not list(
            html.parent.glob(f".{html.stem}.*"))  # the previous report whole, no temporary file left
        console = damaged.stdout + damaged.stderr
        out = console + "".join(
            p.read_text(errors="replace") for p in (faulted / "logs").rglob("*.log") if p.stat().st_mtime >= since)
        # named: in one line of the console (the stopped run's cause, or dape verify's line for a deleted result)
        named = (damaged.returncode == 0 if fault in RECOVERED_AT_ONCE else damaged.returncode != 0) and any(
            expected in line for line in console.splitlines())
        if fault == "write failure":  # the file the job could not write, as its line names it
            written = re.search(r"(\S+): not written: File too large", out)
            expected = written.group(1) if written else expected
        orphans = orphan_seals(faulted)
        # the same command, the fault gone (a deleted result is redone by the run after the damage itself)
        if fault in RECOVERED_AT_ONCE:
            finished = damaged
        else:
            finished = report_command(faulted, config) if fault == "report write limit" else run(faulted, config, *command)
        differences = (compare_reports(reference / reports, faulted / reports) if finished.returncode == 0
                       else ["the run after the fault failed"])
        if fault == "report write limit" and (before is None or not kept or damaged.returncode == 0):
            differences.append("report.html: not the previous one, whole, after the write under the limit")
        if fault in HUGE and re.search(r"^\s*(local)?rule \w+:", console, re.MULTILINE):
            differences.append("a job ran under the configuration that was refused")
        rows.append({"fault": fault, "kind": "setting", "file": expected, "named": named,
                     "on_console": named and expected in console, "finished": finished.returncode == 0,
                     "identical": not differences,
                     "differences": "; ".join(differences), "traceback": "Traceback" in out,
                     "orphans": len(orphans), "seconds": round(time.time() - started, 1)})
        print(f"{fault}: named {named}, traceback {'Traceback' in out}, orphans {len(orphans)}, finished "
              f"{finished.returncode == 0}, identical {not differences}", flush=True)
        pd.DataFrame(rows).to_csv(args.out, index=False)

    table = pd.DataFrame(rows)
    silent = table[~table["named"] & ~table["identical"]]
    table.to_csv(args.out, index=False)
    print(f"{len(table)} faults injected; {int(table['finished'].sum())} runs finished with no manual step; "
          f"{int(table['named'].sum())} files named; {int(table['identical'].sum())} reports identical to the "
          f"uninterrupted run's; {len(silent)} reports differing with no file named; "
          f"{int(table.get('traceback', pd.Series(dtype=bool)).fillna(False).sum())} with a traceback; "
          f"{int(table.get('orphans', pd.Series(dtype=float)).fillna(0).sum())} orphan seals → {args.out}")
    return 0 if silent.empty else 1


if __name__ == "__main__":
    sys.exit(main())
