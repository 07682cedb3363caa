"""The protocol of a block of fresh seeds (dape_core/report/protocol.py): sealed before the seeds run, and a block
read under changed rules, code or seeds, or sealed after its data, is not called confirmatory."""

from __future__ import annotations

import dataclasses

import pytest

from dape_core import io
from dape_core.report import claims, protocol

DESIGN = {"fresh_seeds_from": 100, "fresh": {"run-a": [100, 101], "cell-b": [100]},
          "chosen": [{"claim_id": "dape1x3_best_within", "run_seeds": {"run-a": 2}}]}


def sealed(tmp_path, results=None):
    path = tmp_path / "protocol.json"
    io.write_json(path, protocol.protocol(DESIGN, results or tmp_path / "results"), seal=True)
    return protocol.read_protocol(path)


def test_a_block_read_under_the_protocol_it_sealed_is_confirmatory(tmp_path):
    state, reasons = protocol.status(sealed(tmp_path), DESIGN)
    assert state == protocol.CONFIRMATORY and reasons == []
    assert "**confirmatory**" in protocol.status_line(state, reasons, "abc")


def test_changed_thresholds_code_or_seeds_make_the_block_exploratory(tmp_path, monkeypatch):
    before = sealed(tmp_path)
    changed = tuple(dataclasses.replace(c, thresholds={**c.thresholds, "within": 0.004})
                    if c.claim_id == "dape1x3_best_within" else c for c in claims.CLAIMS)
    monkeypatch.setattr(claims, "CLAIMS", changed)
    state, reasons = protocol.status(before, DESIGN)
    assert state == "exploratory" and reasons == ["the rules or thresholds of dape1x3_best_within changed after it "
                                                  "was sealed"]
    monkeypatch.undo()
    monkeypatch.setattr(protocol, "analysis_digest", lambda: "000000000000")
    assert "the analysis code changed after it was sealed" in protocol.status(before, DESIGN)[1][0]
    monkeypatch.undo()
    other = {**DESIGN, "fresh": {"run-a": [100, 101, 102], "cell-b": [100]}}
    assert protocol.status(before, other)[1] == ["its seeds differ from those the protocol sealed"]
    line = protocol.status_line(*protocol.status(None, DESIGN), None)
    assert "exploratory, not confirmatory**: no protocol was sealed before its fresh seeds ran" in line


def test_a_protocol_sealed_after_its_fresh_results_existed_is_not_a_first_look(tmp_path):
    results = tmp_path / "results"
    (results / "lm/run-a/seed101").mkdir(parents=True)
    (results / "lm/run-a/seed101/eval.csv").write_text("eval_len,status,ppl\n")
    (results / "che/cell-b").mkdir(parents=True)
    (results / "che/cell-b/seed100.csv").write_text("x\n")
    (results / "lm/run-a/seed3").mkdir(parents=True)  # a pilot seed's results are expected
    (results / "lm/run-a/seed3/eval.csv").write_text("eval_len,status,ppl\n")
    late = sealed(tmp_path, results)
    assert late["fresh_results_present"] == [str(results / "che/cell-b/seed100.csv"),
                                             str(results / "lm/run-a/seed101/eval.csv")]
    state, reasons = protocol.status(late, DESIGN)
    assert state == "exploratory" and reasons[0].startswith("its protocol was sealed after 2 of its fresh results")


def test_the_digest_ignores_docstrings_and_comments_but_not_code():
    source = 'def f(x):\n    """Say."""\n    # why\n    return x + 1\n'
    assert protocol.code_tree(source) == protocol.code_tree('def f(x):\n    """Said otherwise."""\n    return x + 1\n')
    assert protocol.code_tree(source) != protocol.code_tree('def f(x):\n    """Say."""\n    return x + 2\n')


def test_a_damaged_protocol_is_named_in_one_line(tmp_path):
    from dape_core.errors import ArtefactError

    path = tmp_path / "protocol.json"
    io.write_json(path, {"version": 1}, seal=True)
    with pytest.raises(ArtefactError, match=r"protocol.json"):
        protocol.read_protocol(path)
