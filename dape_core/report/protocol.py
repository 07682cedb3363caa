"""The protocol of a block of fresh seeds, sealed before any of them runs: what decides the claims, fixed in advance.

The design checkpoint (:mod:`dape_core.report.design`) writes ``protocol.json`` beside ``design.json``, sealed, in the
same job, before the DAG can run a fresh seed: the claims chosen and their seeds per run, every claim's rule and
thresholds (:data:`dape_core.report.claims.CLAIMS`), the digest of the analysis code that turns results into verdicts
(:data:`VERDICT_MODULES`), and the fresh results that already existed (a protocol written after them, the design
redone on a finished block, was not fixed before the data).

The claims step reads the block under its protocol (:func:`status`): *confirmatory* only when it was sealed before
its fresh results existed and the rules, thresholds and analysis code are still those it sealed; otherwise claims.md
says the block is exploratory and why: its verdicts were read by rules changed after the data, so their 5 % per
claim and Holm's family-wise 5 % are not a first look's.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import sys
from pathlib import Path

from dape_core import artefacts

VERSION = 1
PROTOCOL = artefacts.Kind("protocol of the fresh seeds (rule design)", "design",
                          keys=("version", "fresh_seeds_from", "chosen", "fresh", "rules", "analysis_digest",
                                "fresh_results_present"))
#: the modules whose code turns results into verdicts (rendering and costs excluded)
VERDICT_MODULES = ("aggregate", "che_check", "claim_context", "claims", "design", "holm", "intervals", "lm_checks",
                   "seed_noise", "sink_check", "timing_check")
CONFIRMATORY = "confirmatory"


def code_tree(source: str) -> str:
    """A module's syntax tree without its docstrings: what runs, not how it is described."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _installed_source(name: str) -> str:
    return inspect.getsource(importlib.import_module(f"dape_core.report.{name}"))


def analysis_digest(source=_installed_source) -> str | None:
    """sha256 of the code of :data:`VERDICT_MODULES` (syntax trees, docstrings and comments aside), in that
    order, under this Python's ``ast`` (12 hex digits); ``source(name)`` gives a module's text (None: missing,
    and so is the digest)."""
    digest = hashlib.sha256(sys.version.split()[0].rsplit(".", 1)[0].encode())
    for name in VERDICT_MODULES:
        text = source(name)
        if text is None:
            return None
        digest.update(code_tree(text).encode())
    return digest.hexdigest()[:12]


def claim_rules() -> dict[str, dict]:
    """Every claim's rule text and thresholds, as JSON (tuples as lists)."""
    import json

    from dape_core.report.claims import CLAIMS

    return {c.claim_id: json.loads(json.dumps({"rule": c.rule, "thresholds": dict(c.thresholds)}, default=list))
            for c in CLAIMS}


def fresh_results(design: dict, results: str | Path) -> list[str]:
    """The fresh seeds' result files of ``design`` already under ``results`` (LM eval.csv, CHE cell CSV)."""
    results = Path(results)
    return [str(path) for unit, seeds in sorted(design["fresh"].items()) for seed in seeds
            for path in (results / "lm" / unit / f"seed{seed}" / "eval.csv", results / "che" / unit / f"seed{seed}.csv")
            if path.exists()]


def protocol(design: dict, results: str | Path) -> dict:
    """The protocol of ``design``'s fresh seeds, as the design job seals it."""
    return {"version": VERSION, "fresh_seeds_from": design["fresh_seeds_from"],
            "chosen": {c["claim_id"]: c["run_seeds"] for c in design["chosen"]}, "fresh": design["fresh"],
            "rules": claim_rules(), "analysis_digest": analysis_digest(),
            "fresh_results_present": fresh_results(design, results)}


def read_protocol(path: str | Path) -> dict:
    """A protocol.json, verified (its seal, its keys)."""
    return artefacts.read_json(path, PROTOCOL)


def status(sealed: dict | None, design: dict) -> tuple[str, list[str]]:
    """(``confirmatory`` or ``exploratory``, the reasons) of a block read now under the ``sealed`` protocol."""
    if sealed is None:
        return "exploratory", ["no protocol was sealed before its fresh seeds ran"]
    reasons = []
    if sealed["fresh_results_present"]:
        reasons.append(f"its protocol was sealed after {len(sealed['fresh_results_present'])} of its fresh results "
                       "existed (the design redone on a finished block)")
    if sealed["fresh"] != design["fresh"] or sealed["fresh_seeds_from"] != design["fresh_seeds_from"]:
        reasons.append("its seeds differ from those the protocol sealed")
    now = claim_rules()
    changed = sorted(c for c in set(now) | set(sealed["rules"]) if now.get(c) != sealed["rules"].get(c))
    if changed:
        reasons.append(f"the rules or thresholds of {', '.join(changed)} changed after it was sealed")
    if sealed["analysis_digest"] != analysis_digest():
        reasons.append(f"the analysis code changed after it was sealed ({sealed['analysis_digest']} then, "
                       f"{analysis_digest()} now)")
    return ("exploratory", reasons) if reasons else (CONFIRMATORY, [])


def status_line(state: str, reasons: list[str], digest: str | None) -> str:
    """claims.md's sentence on the block's protocol."""
    if state == CONFIRMATORY:
        return (f"Protocol: **confirmatory**. The claims, seeds, rules, thresholds and analysis code (digest "
                f"{digest}) were sealed in protocol.json before any fresh seed ran, and these verdicts were read "
                "under exactly that protocol.")
    return ("Protocol: **exploratory, not confirmatory**: " + "; ".join(reasons) + ". The verdicts below were read "
            "by rules fixed after the data, so their 5 % per claim and Holm's family-wise 5 % are not those of a "
            "first look; a new block of fresh seeds (design.fresh_seeds_from above every seed read) under the "
            "current rules is one.")


LEDGER = artefacts.Kind("ledger of looks (python benchmarks/ledger.py)", "ledger",
                        columns=("commit", "block", "analysis_digest"), numeric=("block",))


def looks_line(ledger) -> str:
    """claims.md's sentence on the looks a configuration's committed history holds (``ledger``: ledger.csv's table,
    from ``benchmarks/ledger.py``): how many, at which blocks, and what that does to the family-wise statement."""
    looks, blocks = len(ledger), sorted(int(b) for b in set(ledger["block"]))
    starts = ", ".join(f"{b}…" for b in blocks)
    bound = min(100.0, 5.0 * looks)
    return (f"Looks: this configuration's committed history holds {looks} looks at {len(blocks)} blocks of fresh "
            f"seeds ({starts}; ledger.md), under {ledger['analysis_digest'].nunique()} versions of the analysis "
            f"code. Holm's family-wise 5 % speaks for one look: over all {looks}, the chance that some look decided "
            f"a claim of two identical methods is bounded by {bound:g} % (Bonferroni over looks), and only a block "
            "whose protocol was sealed before its seeds ran is a first look at its own data.")


def read_ledger(path: str | Path):
    """A ledger.csv, verified (its seal and columns)."""
    return artefacts.read_csv(path, LEDGER)
