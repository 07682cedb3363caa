"""``dape seal``: the migration of results written before every output was sealed. Readers treat a file without
its seal (``<file>.sha256``) as damage (its seal removed, or not what its job wrote), so an older version's results
are sealed once, as they are now::

    dape seal                       # every unsealed file under results/
    dape seal results reports       # several folders

It trusts what it finds: run it only on results nobody has edited since they were made. An older version's seal (a
sha256 without the file's identity) is upgraded where the file still matches it. Sealed: the kinds the readers check
(CSV, JSON, model files, NumPy archives, and every file of a fine-tune's ``model/`` folder with its run record
``finetune.json``). Left unsealed: other files (figures, Markdown, logs), seals, the ``.damaged`` and ``.snakemake``
folders, resume checkpoints (``checkpoints/``, checked by their own loader), and the token files whose sha256 a data
folder's ``meta.json`` records (``*.bin``, ``*.docs.npy``, ``token_bytes.npy``, ``tokenizer.json``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dape_core import io
from dape_core.model_folder import MODEL_FOLDER, RUN_RECORD, model_files

# not sealed by their jobs: Snakemake's, logs, set-aside files, resume checkpoints (rewritten every few steps, checked
# by their own loader with its fallback); a fine-tune's `model/` is sealed file by file (model_directories)
SKIPPED_FOLDERS = {".damaged", ".snakemake", "logs", "checkpoints", "model"}
SEALED_SUFFIXES = (".csv", ".json", ".pt", ".npz")  # the kinds the readers check (dape_core.artefacts)
TOKEN_FILES = ("token_bytes.npy", "tokenizer.json")


def _covered_by_meta(path: Path) -> bool:
    """A token file whose sha256 its folder's meta.json records."""
    token_file = path.name in TOKEN_FILES or path.name.endswith((".bin", ".docs.npy"))
    return token_file and (path.parent / "meta.json").is_file()


def model_directories(folder: str | Path) -> list[Path]:
    """The fine-tune model folders under ``folder`` (``model/`` with a run record; not in .damaged or .snakemake)."""
    folder = Path(folder)
    return sorted(p.parent for p in folder.rglob(f"{MODEL_FOLDER}/{RUN_RECORD}")
                  if not {".damaged", ".snakemake"} & set(p.relative_to(folder).parts))


def model_directory_of(path: str | Path) -> Path | None:
    """The fine-tune model folder ``path`` lies in (a ``model/`` with a run record), or None."""
    for parent in Path(path).parents:
        if parent.name == MODEL_FOLDER and (parent / RUN_RECORD).is_file():
            return parent
    return None


def unsealed(folder: str | Path) -> list[Path]:
    """The files under ``folder`` that a reader would take for damage for want of a seal (module docstring)."""
    folder = Path(folder)
    found = [p for model in model_directories(folder) for p in model_files(model) if not io.hash_path(p).exists()]
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        parts = path.relative_to(folder).parts
        if (not path.name.endswith(SEALED_SUFFIXES) or SKIPPED_FOLDERS & set(parts)
                or path.name.startswith(".")):
            continue
        if not io.hash_path(path).exists() and not _covered_by_meta(path):
            found.append(path)
    return found


def without_identity(folder: str | Path) -> list[Path]:
    """The files under ``folder`` whose older version's seal (no identity) still matches their content."""
    found = []
    for record in sorted(Path(folder).rglob(f"*{io.HASH_SUFFIX}")):
        path = record.with_name(record.name[:-len(io.HASH_SUFFIX)])
        if SKIPPED_FOLDERS & set(record.relative_to(folder).parts) or not path.is_file():
            continue
        try:
            seal = io.read_seal(record)
        except (OSError, UnicodeDecodeError, IndexError, ValueError):
            continue
        if seal.identity is None and seal.digest == io.file_sha256(path):
            found.append(path)
    return found


def seal_unsealed(*folders: str | Path) -> list[Path]:
    """Seal every unsealed file under ``folders`` and upgrade older seals that still match; returns the files."""
    sealed = []
    for folder in folders:
        for path in unsealed(folder) + without_identity(folder):
            io.seal_file(path)
            sealed.append(path)
    return sealed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folders", nargs="*", default=["results"], help="folders to seal (default: results)")


def run(args: argparse.Namespace) -> int:
    for folder in args.folders:
        if not Path(folder).is_dir():
            raise SystemExit(f"dape seal: {folder}: not a folder; allowed: folders of results (default: results)")
    sealed = seal_unsealed(*args.folders)
    print(f"dape seal: {len(sealed)} files of {', '.join(args.folders)} sealed as they are now (unsealed, or an older "
          "version's seal without the file's identity)", flush=True)
    return 0
