"""The ledger of looks (benchmarks/ledger.py): every committed block of fresh seeds with the protocol it ran under,
taken from the git history, and the sentence claims.md states from it."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from workflow_fixture import REPO

from benchmarks import ledger


def git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def commit(root, files: dict, message: str):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)


def claims_csv(verdicts: dict) -> str:
    return pd.DataFrame({"claim_id": list(verdicts), "verdict": list(verdicts.values())}).to_csv(index=False)


def test_the_ledger_lists_each_committed_look_with_its_block_protocol_and_verdicts(tmp_path):
    from dape_core.report.protocol import looks_line

    git(tmp_path, "init", "-q")
    commit(tmp_path, {"reports/claims.csv": claims_csv({"a": "CONFIRMED", "b": "UNDECIDED"})}, "no design: no block")
    design = {"version": 3, "fresh_seeds_from": 100, "budget_minutes": 30, "max_seeds": 16, "chosen": [{}, {}]}
    commit(tmp_path, {"reports/design.json": json.dumps(design),
                      "reports/claims.csv": claims_csv({"a": "CONFIRMED", "b": "REFUTED"})}, "block 100")
    commit(tmp_path, {"dape_core/report/claims.py": "X = 1\n"}, "code only: no look")
    commit(tmp_path, {"reports/design.json": json.dumps({**design, "fresh_seeds_from": 200, "chosen": [{}]}),
                      "reports/claims.csv": claims_csv({"a": "UNDECIDED", "b": "REFUTED"})}, "block 200")
    table = ledger.looks("reports", root=tmp_path)
    assert list(table["block"]) == [100, 200] and list(table["chosen"]) == [2, 1]
    assert list(table["a"]) == ["CONFIRMED", "UNDECIDED"] and list(table["REFUTED"]) == [1, 1]
    assert set(table["analysis_digest"]) == {"–"}  # the verdict modules are not all in this history
    line = looks_line(table)
    assert "2 looks at 2 blocks of fresh seeds (100…, 200…" in line and "bounded by 10 %" in line
    markdown = ledger.ledger_markdown(table)
    assert "| `a` | CONFIRMED | UNDECIDED |" in markdown


def test_a_shallow_clone_stops_in_one_line(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    git(source, "init", "-q")
    commit(source, {"reports/claims.csv": "claim_id,verdict\n"}, "one")
    commit(source, {"reports/claims.csv": "claim_id,verdict\na,CONFIRMED\n"}, "two")
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{source}", str(tmp_path / "shallow")], check=True)
    with pytest.raises(SystemExit, match="ledger: this clone is shallow"):
        ledger.looks("reports", root=tmp_path / "shallow")


def test_the_committed_ledger_is_read_checked_and_names_its_blocks():
    from dape_core.report.protocol import looks_line, read_ledger

    table = read_ledger(REPO / "reports" / "ledger.csv")
    blocks = sorted(set(table["block"]))
    assert blocks[:4] == [100, 200, 300, 400]
    # the newest committed look read the block config.yaml now draws
    import yaml
    assert blocks[-1] == yaml.safe_load((REPO / "config.yaml").read_text())["design"]["fresh_seeds_from"] == 500
    assert looks_line(table) in (REPO / "reports" / "ledger.md").read_text()
