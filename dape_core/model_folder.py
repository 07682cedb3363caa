"""A fine-tune's Hugging Face model folder as the readers and ``dape seal`` name it: the folder, its run record and
the files that carry seals (torch-free, no transformers code)."""

from __future__ import annotations

from pathlib import Path

from dape_core import io

MODEL_FOLDER = "model"  # a fine-tune's model folder in its run's results
RUN_RECORD = "finetune.json"  # what ``dape finetune`` records of the run in the folder (dape_core.hf.adapter)


def model_files(path: str | Path) -> list[Path]:
    """The files of a model directory that carry seals: all but the seals and hidden files (Snakemake's
    ``.snakemake_timestamp`` of a directory output)."""
    return sorted(p for p in Path(path).rglob("*") if p.is_file() and not p.name.endswith(io.HASH_SUFFIX)
                  and not p.name.startswith("."))
