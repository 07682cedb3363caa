"""docs/extending.md's three worked examples, run as they stand: a new encoding (facts + module) builds a causal
model on every attention path with the counted parameters, a new claim is evaluated on the committed reports, and a
new family adds exactly its new runs to the default plan."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from dape_core import config as grid
from dape_core.encoding_facts import ENCODING_FACTS
from dape_core.encodings import ENCODINGS
from dape_core.methods import method_label, parse_method
from dape_core.model import GPT, GPTConfig
from dape_core.model_arithmetic import decoder_non_embedding_parameters
from dape_core.report.intervals import CONFIRMED, REFUTED, UNDECIDED

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "extending.md"


def examples(test_name: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block marked ``<!-- exercised by tests/test_extending.py::NAME -->``."""
    marker = re.escape(f"<!-- exercised by tests/test_extending.py::{test_name} -->")
    found = re.findall(marker + r"\n```(\w+)\n(.*?)```", DOC.read_text(), flags=re.S)
    assert found, f"no example marked for {test_name} in {DOC}"
    return found


@pytest.fixture
def new_encoding():
    """The example's registrations, removed again afterwards."""
    yield
    ENCODING_FACTS.pop("linbias", None)
    ENCODINGS.pop("linbias", None)


def test_a_new_encoding(new_encoding):
    namespace: dict = {}
    for language, code in examples("test_a_new_encoding"):
        assert language == "python"
        exec(compile(code, str(DOC), "exec"), namespace)
    assert parse_method("DAPE1x3-LinBias") == {"encoding": "linbias", "processor": "dape_v2", "kernel_size": 3,
                                               "tril": True}
    assert method_label("linbias", "dape_v2", 3) == "DAPE1x3-LinBias"
    from dape_core.config.schema import SCHEMA_PATH, full_schema, load_yaml

    assert "linbias" in full_schema(load_yaml(SCHEMA_PATH))["$defs"]["lm_settings"]["properties"]["encoding"]["enum"]
    torch.manual_seed(0)
    cfg = GPTConfig(size="tiny", encoding="linbias", processor="dape_v2", kernel_size=3, vocab_size=50, train_len=32)
    model = GPT(cfg).eval()
    assert decoder_non_embedding_parameters(cfg) == model.non_embedding_parameters()
    tokens = torch.randint(0, 50, (2, 24))
    changed = tokens.clone()
    changed[:, 16:] = (changed[:, 16:] + 7) % 50  # only the future of position 15 changes
    with torch.no_grad():
        reference = model(tokens, fast_path=False)
        for impl in ("fast", "materialized"):
            model.cfg.attention_impl = impl
            torch.testing.assert_close(model(tokens), reference, rtol=1e-5, atol=1e-5)  # every path: one function
            torch.testing.assert_close(model(changed)[:, :16], reference[:, :16], rtol=1e-5, atol=1e-5)  # causal


def test_a_new_claim(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    namespace: dict = {}
    for language, code in examples("test_a_new_claim"):
        assert language == "python"
        exec(compile(code, str(DOC), "exec"), namespace)
    records = namespace["records"]
    assert list(records["claim_id"]) == ["fire_beats_alibi_beyond"]
    assert records.loc[0, "verdict"] in (CONFIRMED, REFUTED, UNDECIDED)  # the committed run has both methods
    assert "FIRE" in records.loc[0, "summary"] and "ALiBi" in records.loc[0, "summary"]
    assert "fire_beats_alibi_beyond" in capsys.readouterr().out


def test_a_new_family():
    [(language, code)] = examples("test_a_new_family")
    assert language == "yaml"
    family = yaml.safe_load(code)
    config = grid.load_yaml(REPO / "config.yaml")
    before = grid.build_plan(config)
    config["families"].update(family)
    after = grid.build_plan(config)
    new = sorted(set(after.lm_runs) - set(before.lm_runs))
    widths = {after.lm_runs[name]["settings"]["dape_width"] for name in after.families["width_on_code"]["runs"]}
    assert widths == {8, 16, 32}
    assert sorted(after.lm_runs[name]["settings"]["dape_width"] for name in new) == [8, 16]  # 32 is shared
    assert all("-kerple-dape_v2-k3-" in name for name in new)
    assert len(after.train_jobs()) - len(before.train_jobs()) == 2 * len(after.families["width_on_code"]["seeds"])
    assert pd.Series(after.job_counts()["width_on_code"])["train_lm"] == 3 * len(after.families["width_on_code"]["seeds"])
