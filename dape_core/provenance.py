"""What a run records of where it ran: the checkout's commit, the versions and hardware, and the hash of its
settings (``summary.json`` of ``dape train``, ``dape finetune`` and ``dape evaluate``)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

import numpy as np
import torch


def git_commit() -> str:
    """The commit of the checkout this package runs from ("unknown" outside a git checkout: an installed wheel)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(threads: int) -> dict:
    """The commit, the versions of Python, torch, numpy and dape_core, the hardware and the thread count."""
    import dape_core

    versions = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
                "dape_core": dape_core.__version__}
    hardware = {"machine": platform.machine(), "processor": platform.processor() or platform.machine(),
                "cpu_count": os.cpu_count(),
                "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    return {"git_commit": git_commit(), "versions": versions, "hardware": hardware, "threads": threads}


def config_hash(config: dict) -> str:
    """16 hex digits of the sha256 of a settings dict (sorted keys): what a resume checks it continues."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
