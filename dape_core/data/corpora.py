"""Corpora as ``datasets.Dataset`` objects with a ``text`` column: the built-in ones (the standard library's code
and prose), local files and Hub datasets; their seeded train / val split and content hash."""

from __future__ import annotations

import ast
import hashlib
import io
import os
import platform
import sysconfig
import tokenize as py_tokenize
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from dape_core.settings.corpus import TokenizeSettings, local_builder
from dape_core.errors import ConfigError
from dape_core.io import file_sha256

TEST_DIR_NAMES = frozenset({"test", "tests", "idle_test"})
EXCLUDED_DIR_NAMES = TEST_DIR_NAMES | {"site-packages", "dist-packages", "__pycache__"}
BATCH_DOCUMENTS = 256


class HubUnavailableError(ConfigError):
    """A Hub dataset was asked for but the Hub cannot be reached (offline mode or no network)."""


# --------------------------------------------------------------------------------------------- built-in corpora
def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def stdlib_source_files(root: Path | None = None) -> list[str]:
    """Standard-library ``.py`` files, relative POSIX paths in sorted order, without tests and site-packages."""
    root = root or stdlib_dir()
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in EXCLUDED_DIR_NAMES]
        relative = Path(directory).relative_to(root)
        files += [(relative / n).as_posix() for n in names
                  if n.endswith(".py") and os.path.isfile(os.path.join(directory, n))]
    return sorted(files)


def read_python_source(path: Path) -> str:
    """Source text decoded with the file's declared encoding (PEP 263), as the interpreter reads it."""
    raw = path.read_bytes()
    encoding, _ = py_tokenize.detect_encoding(io.BytesIO(raw).readline)
    text = raw.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text


def module_name(relative: str) -> str:
    parts = relative[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def module_docstrings(source: str, name: str) -> str:
    """The module's docstring and those of its classes and functions, each under its qualified name."""
    tree = ast.parse(source)
    sections = []

    def visit(node: ast.AST, qualname: str) -> None:
        doc = ast.get_docstring(node, clean=True)  # type: ignore[arg-type]
        if doc:
            sections.append(f"{qualname}\n\n{doc.strip()}")
        for child in getattr(node, "body", []):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, f"{qualname}.{child.name}")

    visit(tree, name)
    return "\n\n\n".join(sections)


def pydoc_topics(root: Path) -> dict[str, str]:
    """``pydoc_data.topics.topics`` read with ``ast`` (the language reference texts behind ``help('topic')``)."""
    tree = ast.parse(read_python_source(root / "pydoc_data" / "topics.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "topics" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


@lru_cache(maxsize=2)
def builtin_documents(kind: str) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Any]]:
    """(names, texts, description) of a built-in corpus; empty documents are left out."""
    root = stdlib_dir()
    files = stdlib_source_files(root)
    topics = sorted(pydoc_topics(root).items()) if kind == "builtin-prose" else []
    documents = [(f"pydoc_data.topics:{topic}", text.strip()) for topic, text in topics]  # (name, text)
    unreadable = 0
    for relative in files:
        name = relative if kind == "builtin-code" else module_name(relative)
        try:
            source = read_python_source(root / relative)
            documents.append((name, source if kind == "builtin-code" else module_docstrings(source, name)))
        except (SyntaxError, ValueError):  # undecodable or unparsable: counted in the metadata
            unreadable += 1
    kept = [(n, t) for n, t in documents if t.strip()]
    description = {
        "kind": kind,
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "stdlib_dir": str(root),
        "files": len(files),
        "file_list_sha256": hashlib.sha256("\n".join(files).encode()).hexdigest(),
        "excluded_dirs": sorted(EXCLUDED_DIR_NAMES),
        "unreadable_files": unreadable,
    }
    return tuple(n for n, _ in kept), tuple(t for _, t in kept), description


# ------------------------------------------------------------------------------------------ sources → datasets
def hub_offline_message(dataset: str, reason: str) -> str:
    local_dir = f"data/hub/{dataset.replace('/', '--')}"
    return (f"dataset: cannot load {dataset!r} from the Hugging Face Hub ({reason}). On a machine with network run "
            f"`hf download {dataset} --repo-type dataset --local-dir {local_dir}` (older huggingface_hub: "
            f"`huggingface-cli download {dataset} --repo-type dataset --local-dir {local_dir}`; add --include "
            f"'<pattern>' for part of it), copy the directory here and pass --dataset {local_dir}; "
            "or use --source local --data-files ... or a built-in source")


def load_hub_dataset(settings: TokenizeSettings):
    """``datasets.load_dataset`` on a Hub name or a local dataset directory; offline → what to do instead."""
    import datasets

    dataset = os.path.expanduser(str(settings.dataset))
    try:
        return datasets.load_dataset(dataset, name=settings.dataset_config, split=settings.dataset_split,
                                     data_files=list(settings.data_files) or None)
    except ConnectionError as err:
        raise HubUnavailableError(hub_offline_message(dataset, str(err))) from err
    except ValueError as err:
        message = str(err)
        if "Unknown split" in message:
            raise ConfigError(f"dataset_split: {settings.dataset_split!r} is not allowed; {message}") from err
        if "BuilderConfig" in message or "config name" in message.lower():
            raise ConfigError(f"dataset_config: {settings.dataset_config!r} is not allowed; {message}") from err
        raise


def text_dataset(ds, text_field: str, filter_field: str | None, filter_value: str | None):
    """One ``text`` column: (dotted) fields resolved by flattening, rows kept where str(filter) == value, empty or
    missing texts dropped."""
    roots = {text_field.split(".")[0]} | ({filter_field.split(".")[0]} if filter_field else set())
    flat = ds.select_columns(sorted(roots & set(ds.column_names))).flatten()
    for name, value in (("text_field", text_field), ("filter_field", filter_field)):
        if value is not None and value not in flat.column_names:
            columns = ds.flatten().column_names
            problem = ("is a record with sub-fields" if any(c.startswith(f"{value}.") for c in columns)
                       else "is not a field of the data")
            raise ConfigError(f"{name}: {value!r} {problem}; allowed values: {', '.join(sorted(columns))}")
    feature = flat.features[text_field]
    if getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise ConfigError(f"text_field: {text_field!r} is not a text field (type {feature}); "
                          "allowed values: a string field")

    def keep(texts, values=None):
        if values is None:  # no filter
            return [isinstance(t, str) and bool(t.strip()) for t in texts]
        return [isinstance(t, str) and bool(t.strip()) and str(v) == filter_value for t, v in zip(texts, values)]

    columns = [text_field] if filter_field is None else [text_field, filter_field]
    kept = flat.filter(keep, batched=True, input_columns=columns).select_columns([text_field])
    return kept.rename_column(text_field, "text") if text_field != "text" else kept


def load_corpus(settings: TokenizeSettings):
    """(``datasets.Dataset`` with one ``text`` column, source description) for any of the three kinds of source."""
    import datasets

    if settings.source in ("builtin-code", "builtin-prose"):
        names, texts, description = builtin_documents(settings.source)
        raw = datasets.Dataset.from_dict({"name": list(names), "text": list(texts)})
        description = dict(description)
    elif settings.source == "local":
        builder = local_builder(settings.data_files)
        options = {"sample_by": "document"} if builder == "text" else {}
        raw = datasets.load_dataset(builder, data_files=list(settings.data_files), split="train", **options)
        description = {"kind": "local", "builder": builder, "data_files": list(settings.data_files),
                       "data_files_sha256": {p: file_sha256(Path(p)) for p in settings.data_files}}
    else:
        raw = load_hub_dataset(settings)
        description = {"kind": "hub", "dataset": settings.dataset, "config": settings.dataset_config,
                       "split": settings.dataset_split, "data_files": list(settings.data_files) or None,
                       "local_dir": Path(settings.dataset).is_dir()}
    description.update(text_field=settings.text_field, filter_field=settings.filter_field,
                       filter_value=settings.filter_value, raw_documents=raw.num_rows)
    corpus = text_dataset(raw, settings.text_field, settings.filter_field, settings.filter_value)
    return corpus, description


# ------------------------------------------------------------------------------------------------ splitting
def split_documents(n_docs: int, val_fraction: float, seed: int, max_docs: int | None) -> dict[str, np.ndarray]:
    """Document indices per split: a seeded permutation, capped at ``max_docs``, the first part to val."""
    order = np.random.default_rng(seed).permutation(n_docs)
    if max_docs is not None:
        order = order[:max_docs]
    if len(order) < 2:
        raise ConfigError(f"source: {len(order)} non-empty document(s) selected; "
                          "allowed values: a corpus of ≥ 2 documents")
    n_val = min(max(1, round(val_fraction * len(order))), len(order) - 1)
    return {"train": order[n_val:], "val": order[:n_val]}


def iter_texts(corpus, indices: np.ndarray) -> Iterator[list[str]]:
    """Batches of document texts in the order of ``indices``."""
    for start in range(0, len(indices), BATCH_DOCUMENTS):
        yield corpus.select(indices[start:start + BATCH_DOCUMENTS])["text"]


def corpus_sha256(corpus) -> str:
    """sha256 over every document (8-byte little-endian length, then UTF-8 bytes) in source order."""
    digest = hashlib.sha256()
    for batch in corpus.iter(batch_size=BATCH_DOCUMENTS):
        for text in batch["text"]:
            data = text.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
    return digest.hexdigest()
