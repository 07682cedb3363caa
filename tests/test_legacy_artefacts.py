"""Artefacts written by an earlier version of the code keep working once `dape seal` has sealed them (the
migration: a file without its seal is otherwise named as damage): its ``model.pt`` loads and gives the same logits,
and its resume checkpoint resumes to the loss and weights of its uninterrupted run.

The files in ``tests/data/legacy`` were written by the commit named in ``expected.json``; ``make_legacy.py`` there
says how. Tolerances: logits rtol 1e-5 (atol 1e-6), final loss and loss curve 1e-6 relative, weights rtol 1e-5
(atol 1e-6); on CPU with the same torch they are met bitwise."""

import json
import math
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dape_core.cli import main
from dape_core.errors import ArtefactError
from dape_core.seal import seal_unsealed
from dape_core.model_file import load_model

LEGACY = Path(__file__).parent / "data" / "legacy"
EXPECTED = json.loads((LEGACY / "expected.json").read_text())


@pytest.fixture
def legacy(tmp_path):
    """A copy of the earlier version's files, migrated by `dape seal` (sealed as they are)."""
    copy = tmp_path / "legacy"
    shutil.copytree(LEGACY, copy)
    assert seal_unsealed(copy)
    return copy


def test_legacy_model_loads_with_the_same_logits(legacy):
    with pytest.raises(ArtefactError, match=r"model.pt: has no seal .*sealed once with `dape seal`"):
        load_model(LEGACY / "model.pt")  # unmigrated
    model, _ = load_model(legacy / "model.pt")
    assert any("processor" in name for name, _ in model.named_parameters())  # DAPE weights were restored
    tokens = torch.tensor([EXPECTED["logits"]["tokens"]], dtype=torch.int64)
    with torch.no_grad():
        logits = model(tokens)[0].numpy()
    np.testing.assert_allclose(logits, np.array(EXPECTED["logits"]["values"], dtype=np.float32), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_legacy_checkpoint_resumes_to_the_uninterrupted_result(legacy, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(sys, "argv", sys.argv[:1])  # cli.main rewrites sys.argv
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "out"
    checkpoints.mkdir()
    for name in ("last.pt", "last.pt.sha256"):
        if (legacy / "resume" / name).exists():
            shutil.copy(legacy / "resume" / name, checkpoints / name)
    places = {"data": str(legacy / "data"), "OUT": str(out), "CHECKPOINTS": str(checkpoints)}
    command = [places.get(arg, arg) for arg in shlex.split(EXPECTED["train"])[1:]]  # the recorded `dape train`
    threads = torch.get_num_threads()
    try:
        assert main(command) == 0
    finally:
        torch.set_num_threads(threads)
    log = capfd.readouterr().err

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    carried = [h for h in metrics if h["step"] <= EXPECTED["stop_after"]]
    # the throughput values were measured by the old run: only a resumed run carries them on
    assert carried == EXPECTED["checkpoint_history"], f"the checkpoint was not resumed:\n{log}"
    assert [h["step"] for h in metrics] == [step for step, _ in EXPECTED["loss_curve"]]
    for h, (_, loss) in zip(metrics, EXPECTED["loss_curve"]):
        assert math.isclose(h["loss"], loss, rel_tol=1e-6), (h, loss)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps_done"] == EXPECTED["loss_curve"][-1][0]
    assert math.isclose(summary["final_loss"], EXPECTED["final_loss"], rel_tol=1e-6)
    resumed, _ = load_model(out / "model.pt")
    uninterrupted, _ = load_model(legacy / "model.pt")
    torch.testing.assert_close(resumed.state_dict(), uninterrupted.state_dict(), rtol=1e-5, atol=1e-6)
