"""The tokenize stage: a corpus through `datasets` → byte-level BPE → token files + meta.json, and their loader.

Sources (all become a ``datasets.Dataset`` with a ``text`` column):

- ``builtin-code``: the standard library's ``.py`` files (test directories and site-packages excluded), one
  document per file; ``builtin-prose``: the ``pydoc_data.topics`` texts and the docstrings of every standard
  library module, class and function (read with ``ast``, nothing imported), one document per topic / module.
  Real text present on every Python installation; the Python version and file-list hash go into meta.json.
- ``local``: txt (one document per file), JSON lines (also ``.jsonl.zst`` / ``.jsonl.gz``) or parquet files.
- ``hub``: a Hugging Face Hub dataset name, or a local directory laid out like one (e.g. a downloaded copy).

Documents are split into train / val by a seeded shuffle (``--max-docs`` caps after the shuffle). The tokenizer
is either a byte-level BPE trained on the training split only, or a local byte-level ``tokenizer.json`` (GPT-2's
for the paper). Output, in ``--out-dir``:

- ``train.bin`` / ``val.bin``: flat token ids (uint16 if the vocabulary has ≤ 65535 entries, else uint32), each
  document followed by one ``<|endoftext|>``;
- ``train.docs.npy`` / ``val.docs.npy``: int64 offsets, length n_docs + 1; document i and its separator occupy
  ``tokens[offsets[i]:offsets[i + 1]]``;
- ``token_bytes.npy``: UTF-8 bytes of every token id (0 for special tokens), so that bits per byte of a scored
  span = Σ nats / (ln 2 · Σ token_bytes[span]);
- ``tokenizer.json`` and ``meta.json`` (written last).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import os
import platform
import sys
import sysconfig
import tokenize as py_tokenize
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import numpy as np

from dape_core.errors import ArtefactError, ConfigError, require_choice, require_positive
from dape_core.io import atomic_path, file_sha256

SOURCES = ("builtin-code", "builtin-prose", "local", "hub")
TOKENIZERS = ("bpe", "file")
SPLITS = ("train", "val")
EOT = "<|endoftext|>"
LONG_DOCUMENT_LENGTHS = (512, 1024, 2048, 4096)
TEST_DIR_NAMES = frozenset({"test", "tests", "idle_test"})
EXCLUDED_DIR_NAMES = TEST_DIR_NAMES | {"site-packages", "dist-packages", "__pycache__"}
COMPRESSION_SUFFIXES = (".zst", ".zstd", ".gz", ".bz2", ".xz")
LOCAL_BUILDERS = {".txt": "text", ".text": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
BATCH_DOCUMENTS = 256
DATASET_VALUES = "a Hub name or a local dataset directory"
TOKENIZER_FILE_VALUES = "a byte-level tokenizer.json path (e.g. GPT-2's)"
META_FORMAT = 1


class HubUnavailableError(ConfigError):
    """A Hub dataset was asked for but the Hub cannot be reached (offline mode or no network)."""


@dataclass(frozen=True)
class TokenizeSettings:
    """Every setting of the tokenize stage; names match the CLI options (``--dataset-split`` → ``dataset_split``)."""

    out_dir: str
    source: str = "builtin-code"
    data_files: tuple[str, ...] = ()
    dataset: str | None = None
    dataset_config: str | None = None
    dataset_split: str = "train"
    text_field: str = "text"
    filter_field: str | None = None
    filter_value: str | None = None
    max_docs: int | None = None
    tokenizer: str = "bpe"
    tokenizer_file: str | None = None
    vocab_size: int = 4096
    val_fraction: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_files", tuple(self.data_files or ()))
        self.validate()

    def validate(self) -> None:
        require_choice("source", self.source, SOURCES)
        if self.source == "local":
            if not self.data_files:
                raise ConfigError("data_files: required for source 'local'; allowed values: one or more existing files")
            for path in self.data_files:
                if not Path(path).is_file():
                    raise ConfigError(f"data_files: path {path!r} does not exist; allowed values: existing files")
            local_builder(self.data_files)
        elif self.data_files and self.source != "hub":
            raise ConfigError(f"data_files: not used by source {self.source!r}; allowed with sources: local, hub")
        if self.source == "hub":
            if not self.dataset:
                raise ConfigError(f"dataset: required for source 'hub'; allowed values: {DATASET_VALUES}")
            if self.dataset.startswith(("/", "./", "../", "~")) and not Path(self.dataset).expanduser().is_dir():
                raise ConfigError(f"dataset: path {self.dataset!r} does not exist; allowed values: {DATASET_VALUES}")
        if self.source != "hub":
            for name in ("dataset", "dataset_config"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"{name}: not used by source {self.source!r}; allowed with source: hub")
        if not self.text_field:
            raise ConfigError("text_field: must not be empty; allowed values: a (dotted) field name")
        if (self.filter_field is None) != (self.filter_value is None):
            raise ConfigError("filter_field / filter_value: give both or neither; "
                              "allowed values: a (dotted) field name and a value")
        if self.max_docs is not None:
            require_positive("max_docs", self.max_docs)
            if self.max_docs < 2:
                raise ConfigError(f"max_docs: {self.max_docs!r} is not allowed; "
                                  "allowed values: an integer ≥ 2 (one per split)")
        require_choice("tokenizer", self.tokenizer, TOKENIZERS)
        if self.tokenizer == "bpe":
            if self.tokenizer_file is not None:
                raise ConfigError("tokenizer_file: not used by tokenizer 'bpe'; allowed with tokenizer: file")
            require_positive("vocab_size", self.vocab_size)
            if self.vocab_size <= 256:
                raise ConfigError(f"vocab_size: {self.vocab_size!r} is not allowed; allowed values: an integer > 256 "
                                  "(the 256 byte symbols plus <|endoftext|> come first)")
        else:
            if not self.tokenizer_file:
                raise ConfigError(f"tokenizer_file: required for tokenizer 'file'; "
                                  f"allowed values: {TOKENIZER_FILE_VALUES}")
            if not Path(self.tokenizer_file).is_file():
                raise ConfigError(f"tokenizer_file: path {self.tokenizer_file!r} does not exist; "
                                  f"allowed values: {TOKENIZER_FILE_VALUES}")
        fraction_ok = isinstance(self.val_fraction, (int, float)) and not isinstance(self.val_fraction, bool)
        if not (fraction_ok and 0 < self.val_fraction < 1):
            raise ConfigError(f"val_fraction: {self.val_fraction!r} is not allowed; allowed values: a number in (0, 1)")
        if not (isinstance(self.seed, int) and not isinstance(self.seed, bool) and self.seed >= 0):
            raise ConfigError(f"seed: {self.seed!r} is not allowed; allowed values: a non-negative integer")


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
    names, texts = [], []
    if kind == "builtin-prose":
        for topic, text in sorted(pydoc_topics(root).items()):
            names.append(f"pydoc_data.topics:{topic}")
            texts.append(text.strip())
    unreadable = 0
    for relative in files:
        try:
            source = read_python_source(root / relative)
            text = source if kind == "builtin-code" else module_docstrings(source, module_name(relative))
        except (SyntaxError, ValueError):  # undecodable or unparsable: counted in the metadata
            unreadable += 1
            continue
        names.append(relative if kind == "builtin-code" else module_name(relative))
        texts.append(text)
    kept = [(n, t) for n, t in zip(names, texts) if t.strip()]
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
def local_builder(data_files: Iterable[str]) -> str:
    """The ``datasets`` builder for local files: text, json or parquet, by extension (compression allowed)."""
    builders = set()
    for path in data_files:
        name = Path(path).name.lower()
        for suffix in COMPRESSION_SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        extension = Path(name).suffix
        if extension not in LOCAL_BUILDERS:
            raise ConfigError(f"data_files: {path!r} has an unknown extension; allowed values: "
                              ".txt, .json, .jsonl, .parquet (json and txt optionally .zst/.gz/.bz2/.xz compressed)")
        builders.add(LOCAL_BUILDERS[extension])
    if len(builders) > 1:
        raise ConfigError(f"data_files: files of one kind only; got {', '.join(sorted(builders))}")
    return builders.pop()


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
    """One ``text`` column: (dotted) fields resolved by flattening, rows kept where str(filter) == value, empty
    or missing texts dropped."""
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

    if filter_field is None:
        def keep(texts):
            return [isinstance(t, str) and bool(t.strip()) for t in texts]

        kept = flat.filter(keep, batched=True, input_columns=[text_field])
    else:
        def keep(texts, values):
            return [isinstance(t, str) and bool(t.strip()) and str(v) == filter_value for t, v in zip(texts, values)]

        kept = flat.filter(keep, batched=True, input_columns=[text_field, filter_field])
    kept = kept.select_columns([text_field])
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


# ------------------------------------------------------------------------------------------------ tokenizers
def train_bpe(batches: Iterable[list[str]], vocab_size: int, n_docs: int):
    """Byte-level BPE (GPT-2 pre-tokenisation, no normaliser) with ``<|endoftext|>`` as id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(batches, trainer=trainer, length=n_docs)
    return tokenizer


def load_tokenizer_file(path: str | Path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    if tokenizer.token_to_id(EOT) is None:
        raise ConfigError(f"tokenizer_file: {str(path)!r} has no {EOT} token; allowed values: a byte-level BPE "
                          f"tokenizer.json with {EOT} (e.g. GPT-2's)")
    return tokenizer


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte ↔ printable-character map, character → byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_byte_lengths(tokenizer, source: str = "tokenizer") -> np.ndarray:
    """UTF-8 byte length of every token id: characters of a byte-level token, 0 for special tokens."""
    alphabet = byte_level_alphabet()
    added = tokenizer.get_added_tokens_decoder()
    lengths = np.zeros(tokenizer.get_vocab_size(with_added_tokens=True), dtype=np.int32)
    for token_id in range(len(lengths)):
        if token_id in added:
            token = added[token_id]
            lengths[token_id] = 0 if token.special else len(token.content.encode("utf-8"))
            continue
        piece = tokenizer.id_to_token(token_id)
        if piece is None:
            continue
        if not all(ch in alphabet for ch in piece):
            raise ConfigError(f"tokenizer_file: {source!r} is not a byte-level tokenizer (token {piece!r}); "
                              "allowed values: a byte-level BPE tokenizer.json (e.g. GPT-2's)")
        lengths[token_id] = len(piece)
    return lengths


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 65535 else np.uint32)


# ------------------------------------------------------------------------------------------------ writing
@contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """A binary file written under a temporary name in the same directory, then renamed into place."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        yield handle


def write_bytes(path: Path, data: bytes) -> str:
    with atomic_output(path) as handle:
        handle.write(data)
    return hashlib.sha256(data).hexdigest()


def write_npy(path: Path, array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return write_bytes(path, buffer.getvalue())


def length_histogram(lengths: np.ndarray) -> dict[str, list[int]]:
    """Documents per log2 bin: bin k counts lengths in [2^k, 2^(k+1))."""
    if len(lengths) == 0:
        return {"bin_lower_bounds": [], "documents": []}
    bins = np.floor(np.log2(np.maximum(lengths, 1))).astype(int)
    counts = np.bincount(bins)
    return {"bin_lower_bounds": [2 ** k for k in range(len(counts))], "documents": counts.tolist()}


def write_split(out_dir: Path, split: str, corpus, indices: np.ndarray, tokenizer, dtype: np.dtype) -> dict[str, Any]:
    """Encode the split's documents (each followed by ``<|endoftext|>``) into ``<split>.bin`` / ``<split>.docs.npy``."""
    eot_id = tokenizer.token_to_id(EOT)
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    digest = hashlib.sha256()
    lengths = []
    with atomic_output(out_dir / f"{split}.bin") as handle:
        for texts in iter_texts(corpus, indices):
            for encoding in encode(texts, add_special_tokens=False):
                ids = np.asarray(encoding.ids + [eot_id], dtype=dtype)
                data = ids.tobytes()
                handle.write(data)
                digest.update(data)
                lengths.append(len(ids) - 1)
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths + 1)]).astype(np.int64)
    return {
        "documents": int(len(lengths)),
        "tokens": int(offsets[-1]),
        "text_tokens": int(lengths.sum()),
        "tokens_sha256": digest.hexdigest(),
        "docs_sha256": write_npy(out_dir / f"{split}.docs.npy", offsets),
        "length_histogram": length_histogram(lengths),
        "long_documents": {str(n): int((lengths >= n).sum()) for n in LONG_DOCUMENT_LENGTHS},
    }


def library_versions() -> dict[str, str]:
    import datasets
    import tokenizers

    return {"python": platform.python_version(), "datasets": datasets.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__}


def tokenize_corpus(settings: TokenizeSettings) -> dict[str, Any]:
    """Build the token files of ``settings.out_dir`` and return the metadata written to ``meta.json``."""
    out_dir = Path(settings.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "meta.json").unlink(missing_ok=True)  # a directory without meta.json is never mistaken for complete

    corpus, description = load_corpus(settings)
    description["documents"] = corpus.num_rows
    description["corpus_sha256"] = corpus_sha256(corpus)
    splits = split_documents(corpus.num_rows, settings.val_fraction, settings.seed, settings.max_docs)

    if settings.tokenizer == "bpe":
        tokenizer = train_bpe(iter_texts(corpus, splits["train"]), settings.vocab_size, len(splits["train"]))
        tokenizer_info: dict[str, Any] = {"kind": "bpe", "trained_on": "train",
                                          "requested_vocab_size": settings.vocab_size}
    else:
        tokenizer = load_tokenizer_file(settings.tokenizer_file)
        tokenizer_info = {"kind": "file", "file": settings.tokenizer_file,
                          "file_sha256": file_sha256(Path(settings.tokenizer_file))}
    tokenizer.encode_special_tokens = True  # a literal "<|endoftext|>" inside a document is text, not a separator
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    token_bytes = token_byte_lengths(tokenizer, settings.tokenizer_file or "bpe")
    dtype = token_dtype(vocab_size)
    tokenizer_info.update(vocab_size=vocab_size, eot_token=EOT, eot_id=tokenizer.token_to_id(EOT), dtype=dtype.name,
                          sha256=write_bytes(out_dir / "tokenizer.json", tokenizer.to_str(pretty=True).encode("utf-8")),
                          token_bytes_sha256=write_npy(out_dir / "token_bytes.npy", token_bytes))

    split_meta = {name: write_split(out_dir, name, corpus, splits[name], tokenizer, dtype) for name in SPLITS}
    meta = {
        "format": META_FORMAT,
        "source": description,
        "tokenizer": tokenizer_info,
        "splits": split_meta,
        "layout": "each document followed by one <|endoftext|>; "
                  "<split>.docs.npy[i]:[i+1] spans document i and its separator",
        "versions": library_versions(),
        "settings": {k: (list(v) if isinstance(v, tuple) else v)
                     for k, v in asdict(settings).items() if k != "out_dir"},
    }
    write_bytes(out_dir / "meta.json", (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return meta


# ------------------------------------------------------------------------------------------------ loading
@dataclass(frozen=True)
class TokenSplit:
    """One split of a token directory: ``tokens`` is a read-only memmap, document i is
    ``tokens[doc_offsets[i]:doc_offsets[i + 1] - 1]`` (its separator excluded)."""

    tokens: np.ndarray
    doc_offsets: np.ndarray
    token_bytes: np.ndarray
    meta: dict[str, Any] = field(repr=False)

    @property
    def n_documents(self) -> int:
        return len(self.doc_offsets) - 1

    @property
    def eot_id(self) -> int:
        return int(self.meta["tokenizer"]["eot_id"])

    @property
    def document_lengths(self) -> np.ndarray:
        """Tokens per document, separator excluded."""
        return np.diff(self.doc_offsets) - 1

    def document(self, index: int) -> np.ndarray:
        if not -self.n_documents <= index < self.n_documents:
            raise IndexError(f"document {index} out of range for {self.n_documents} documents")
        index %= self.n_documents
        return self.tokens[self.doc_offsets[index]:self.doc_offsets[index + 1] - 1]

    def long_documents(self, min_len: int) -> np.ndarray:
        """Indices of documents with at least ``min_len`` tokens."""
        return np.flatnonzero(self.document_lengths >= min_len)


def read_meta(data_dir: str | Path) -> dict[str, Any]:
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        raise ConfigError(f"data_dir: {str(data_dir)!r} has no meta.json; "
                          "allowed values: an --out-dir of `dape tokenize`")
    redo = f"redo it: snakemake --forcerun {path} (rule tokenize)"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ArtefactError(f"{path}: not valid JSON ({type(err).__name__}); {redo}") from None
    if not (isinstance(meta, dict) and isinstance(meta.get("tokenizer"), dict) and "dtype" in meta["tokenizer"]
            and isinstance(meta.get("splits"), dict) and all(split in meta["splits"] for split in SPLITS)):
        raise ArtefactError(f"{path}: not the meta.json of `dape tokenize` (no tokenizer dtype or splits); {redo}")
    return meta


def verify_token_file(path: Path, wanted: str) -> None:
    """``path`` against the sha256 meta.json recorded for it (a same-size overwrite changes no length). A file once
    verified is not hashed again while its size, modification time and inode stay those of the verification (a
    stamp ``.<name>.verified`` beside it; a read-only directory simply hashes every time)."""
    try:
        stat = path.stat()
    except OSError as err:
        raise ArtefactError(f"{path}: cannot be read ({err.strerror}); redo it: snakemake --forcerun "
                            f"{path.with_name('meta.json')} (rule tokenize)") from None
    key = f"{wanted} {stat.st_size} {stat.st_mtime_ns} {stat.st_ino}\n"
    stamp = path.with_name(f".{path.name}.verified")
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == key:
        return
    if file_sha256(path) != wanted:
        raise ArtefactError(f"{path}: its content does not match the sha256 meta.json recorded for it (overwritten or "
                            f"damaged since `dape tokenize` wrote it); redo it: snakemake --forcerun "
                            f"{path.with_name('meta.json')} (rule tokenize)")
    try:
        with atomic_path(stamp) as tmp:
            tmp.write_text(key, encoding="utf-8")
    except OSError:  # a read-only data directory keeps no stamp: its files are hashed at every load
        return


def load_split(data_dir: str | Path, split: str) -> TokenSplit:
    """The token memmap, document offsets, token byte lengths and metadata of one split, each file checked against
    the sha256 meta.json recorded."""
    require_choice("split", split, SPLITS)
    data_dir = Path(data_dir)
    meta = read_meta(data_dir)
    recorded = meta["splits"][split]
    for name, key in ((f"{split}.bin", "tokens_sha256"), (f"{split}.docs.npy", "docs_sha256")):
        if key in recorded:
            verify_token_file(data_dir / name, recorded[key])
    if "token_bytes_sha256" in meta["tokenizer"]:
        verify_token_file(data_dir / "token_bytes.npy", meta["tokenizer"]["token_bytes_sha256"])
    dtype = np.dtype(meta["tokenizer"]["dtype"])
    tokens = np.memmap(data_dir / f"{split}.bin", dtype=dtype, mode="r")
    offsets = np.load(data_dir / f"{split}.docs.npy")
    if len(tokens) != recorded["tokens"] or offsets[-1] != len(tokens):
        raise ConfigError(f"data_dir: {split}.bin in {str(data_dir)!r} does not match meta.json; rerun `dape tokenize`")
    return TokenSplit(tokens=tokens, doc_offsets=offsets, token_bytes=np.load(data_dir / "token_bytes.npy"), meta=meta)


def load_tokenizer(data_dir: str | Path):
    """The ``tokenizers.Tokenizer`` saved with the token files, encoding a literal ``<|endoftext|>`` as text."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(data_dir) / "tokenizer.json"))
    tokenizer.encode_special_tokens = True
    return tokenizer


# ------------------------------------------------------------------------------------------------ CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", default="builtin-code", help=f"one of {', '.join(SOURCES)}")
    parser.add_argument("--data-files", nargs="+", default=[],
                        help="local files (local), or files inside the dataset, e.g. train/00.jsonl.zst (hub)")
    parser.add_argument("--dataset", help="Hub dataset name or local dataset directory (hub)")
    parser.add_argument("--dataset-config", help="dataset configuration name (hub)")
    parser.add_argument("--dataset-split", default="train", help="dataset split to read (hub)")
    parser.add_argument("--text-field", default="text", help="field holding the document text; dotted for nested")
    parser.add_argument("--filter-field",
                        help="keep rows whose (dotted) field equals --filter-value, e.g. meta.pile_set_name")
    parser.add_argument("--filter-value", help="value of --filter-field to keep (compared as text)")
    parser.add_argument("--max-docs", type=int, help="keep at most this many documents, after the seeded shuffle")
    parser.add_argument("--tokenizer", default="bpe", help=f"one of {', '.join(TOKENIZERS)}")
    parser.add_argument("--tokenizer-file", help="a byte-level tokenizer.json (tokenizer file)")
    parser.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary size, > 256 (tokenizer bpe)")
    parser.add_argument("--val-fraction", type=float, default=0.05, help="fraction of documents in the val split")
    parser.add_argument("--seed", type=int, default=0, help="seed of the document shuffle")
    parser.add_argument("--out-dir", required=True, help="directory for the token files and meta.json")


def run(args: argparse.Namespace) -> int:
    import datasets

    datasets.disable_progress_bars()
    settings = TokenizeSettings(**{f.name: getattr(args, f.name) for f in fields(TokenizeSettings)})
    meta = tokenize_corpus(settings)
    for split in SPLITS:
        counts = meta["splits"][split]
        print(f"{split}: {counts['documents']} documents, {counts['tokens']} tokens")
    print(f"vocab {meta['tokenizer']['vocab_size']} ({meta['tokenizer']['kind']}) → {settings.out_dir}")
    return 0


if __name__ == "__main__":
    from dape_core.cli import main

    sys.exit(main(["tokenize", *sys.argv[1:]]))
