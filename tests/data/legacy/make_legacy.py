"""How the artefacts in this folder were made; ``tests/test_legacy_artefacts.py`` loads and resumes them with the
current code. Not run by the tests.

They were written by the code of the commit recorded in ``expected.json`` (``written_by``), so run this script with
an interpreter whose ``dape_core`` is that commit (a separate checkout with its own virtual environment)::

    /path/to/checkout/.venv/bin/python tests/data/legacy/make_legacy.py

Outputs, next to this script:

- ``data/``: a tokenized corpus (10 standard-library files, 300-token BPE), so the tests need no local corpus;
- ``model.pt``: the ``model.pt`` of an uninterrupted 12-step ``dape train`` (DAPE1x3-Kerple, so the state dict
  holds processor weights);
- ``resume/last.pt``: the resume checkpoint of the same run stopped after step 8;
- ``expected.json``: the commands, the uninterrupted run's loss curve and final loss, the checkpoint's history
  (its throughput values were measured by that run, so a run that carries them on has resumed), and the logits of
  ``model.pt`` on fixed tokens (20 tokens: beyond the training length of 16).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
TOKENIZE = ["tokenize", "--source", "builtin-code", "--max-docs", "10", "--vocab-size", "300", "--val-fraction",
            "0.2", "--seed", "0"]
TRAIN = ["--size", "tiny", "--d-model", "16", "--encoding", "kerple", "--processor", "dape_v2", "--kernel-size", "3",
         "--train-len", "16", "--batch-size", "4", "--steps", "12", "--checkpoint-every", "4", "--log-every", "2",
         "--threads", "1", "--seed", "0", "--no-progress"]
STOP_AFTER = 8
LOGIT_TOKENS = 20


def float32_rows(values: np.ndarray) -> list[list[float]]:
    """The rows of a float32 matrix as the shortest decimals that read back as the same float32 values."""
    return [[float(np.format_float_positional(v, unique=True)) for v in row] for row in values.astype(np.float32)]


def interrupted_run(data: Path, out_dir: Path, checkpoint_dir: Path) -> None:
    """The run of ``dape train`` with TRAIN, stopped after STOP_AFTER steps (settings built as ``dape train`` does)."""
    from dape_core import train

    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    args = parser.parse_args(["--data-dir", str(data), "--out-dir", str(out_dir), "--checkpoint-dir",
                              str(checkpoint_dir), *TRAIN])
    names = {f.name for f in dataclasses.fields(train.TrainSettings)}
    settings = train.TrainSettings(**{k: v for k, v in vars(args).items() if k in names})
    config = train.model_config_from_args(args, train_len=settings.train_len)
    train.train(config, settings, data, out_dir, checkpoint_dir, progress=False, stop_after=STOP_AFTER)


def main() -> None:
    import dape_core
    from dape_core.cli import main as dape
    from dape_core.data import load_split
    from dape_core.model_file import load_model
    from dape_core.provenance import git_commit

    data = HERE / "data"
    shutil.rmtree(data, ignore_errors=True)
    assert dape([*TOKENIZE, "--out-dir", str(data)]) == 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        assert dape(["train", "--data-dir", str(data), "--out-dir", str(tmp / "full"), "--checkpoint-dir",
                     str(tmp / "full-checkpoints"), *TRAIN]) == 0
        shutil.copy(tmp / "full" / "model.pt", HERE / "model.pt")
        summary = json.loads((tmp / "full" / "summary.json").read_text())
        curve = [json.loads(line) for line in (tmp / "full" / "metrics.jsonl").read_text().splitlines()]
        interrupted_run(data, tmp / "part", tmp / "part-checkpoints")
        (HERE / "resume").mkdir(exist_ok=True)
        shutil.copy(tmp / "part-checkpoints" / "last.pt", HERE / "resume" / "last.pt")

    checkpoint = torch.load(HERE / "resume" / "last.pt", map_location="cpu", weights_only=False)
    assert checkpoint["step"] == STOP_AFTER
    model, _ = load_model(HERE / "model.pt")
    tokens = np.asarray(load_split(data, "val").tokens[:LOGIT_TOKENS], dtype=np.int64)
    with torch.no_grad():
        logits = model(torch.from_numpy(tokens)[None])[0].numpy()
    expected = {
        "written_by": {"dape_core_commit": git_commit(), "dape_core_version": dape_core.__version__,
                       "torch": torch.__version__, "numpy": np.__version__},
        "tokenize": shlex.join(["dape", *TOKENIZE, "--out-dir", "data"]),
        "train": shlex.join(["dape", "train", "--data-dir", "data", "--out-dir", "OUT", "--checkpoint-dir",
                             "CHECKPOINTS", *TRAIN]),
        "stop_after": STOP_AFTER,
        "final_loss": summary["final_loss"],
        "loss_curve": [[h["step"], h["loss"]] for h in curve],
        "checkpoint_history": checkpoint["history"],
        "logits": {"tokens": tokens.tolist(), "values": float32_rows(logits)},
    }
    rows = ",\n".join("   " + json.dumps(row, separators=(",", ":")) for row in expected["logits"]["values"])
    expected["logits"]["values"] = "ROWS"  # written below as one line per position
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1).replace('"ROWS"', "[\n" + rows + "\n  ]") + "\n")


if __name__ == "__main__":
    main()
