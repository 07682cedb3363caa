"""Token files of one corpus (``train.bin``, ``val.bin``, their document offsets, ``token_bytes.npy``,
``tokenizer.json`` and ``meta.json``, written last): writing a split, and loading one verified against the sha256
meta.json records."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dape_core.errors import ArtefactError, ConfigError, require_choice

from dape_core.data.corpora import iter_texts
from dape_core.data.tokenizer import EOT
from dape_core.io import atomic_path, file_sha256, write_npy

SPLITS = ("train", "val")
LONG_DOCUMENT_LENGTHS = (512, 1024, 2048, 4096)
META_FORMAT = 1


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
    with atomic_path(out_dir / f"{split}.bin") as tmp, open(tmp, "wb") as handle:
        for texts in iter_texts(corpus, indices):
            for encoding in encode(texts, add_special_tokens=False):
                data = np.asarray(encoding.ids + [eot_id], dtype=dtype).tobytes()
                handle.write(data)
                digest.update(data)
                lengths.append(len(encoding.ids))
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


def _stale(path: Path, problem: str = "its content does not match the sha256 meta.json recorded for it (overwritten "
           "or damaged since `dape tokenize` wrote it)") -> ArtefactError:
    """A file of a token directory to rewrite: ``problem`` (default: not the recorded content), then how."""
    return ArtefactError(f"{path}: {problem}; redo it: snakemake --forcerun {path.with_name('meta.json')} "
                         "(rule tokenize)")


def read_meta(data_dir: str | Path) -> dict[str, Any]:
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        raise ConfigError(f"data_dir: {str(data_dir)!r} has no meta.json; "
                          "allowed values: an --out-dir of `dape tokenize`")
    from dape_core.artefacts import verify_hash  # (pandas, imported by artefacts, only where a split is loaded)

    verify_hash(path, rule="tokenize")  # the checks below still run behind the seal (a meta.json sealed as it was)
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise _stale(path, f"not valid JSON ({type(err).__name__})") from None
    if not (isinstance(meta, dict) and isinstance(meta.get("tokenizer"), dict) and "dtype" in meta["tokenizer"]
            and isinstance(meta.get("splits"), dict) and all(split in meta["splits"] for split in SPLITS)):
        raise _stale(path, "not the meta.json of `dape tokenize` (no tokenizer dtype or splits)")
    return meta


def verify_token_file(path: Path, wanted: str) -> None:
    """Check ``path`` against the sha256 meta.json recorded, hashed whole at every load (no cache, so a same-size
    overwrite, a restored mtime or bit rot are named all the same); once per job that loads a split (measured cost:
    benchmarks/results/README.md, verify cost)."""
    try:
        digest = file_sha256(path)
    except OSError as err:
        raise _stale(path, f"cannot be read ({err.strerror})") from None
    if digest != wanted:
        raise _stale(path)


def load_split(data_dir: str | Path, split: str) -> TokenSplit:
    """One split's token memmap, document offsets, token byte lengths and metadata, each file checked against the
    sha256 meta.json recorded."""
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


def tokenizer_bytes(data_dir: str | Path) -> bytes:
    """The tokenizer.json saved with the token files, checked against the sha256 its meta.json recorded."""
    path = Path(data_dir) / "tokenizer.json"
    wanted = read_meta(data_dir)["tokenizer"].get("sha256")
    try:
        content = path.read_bytes()
    except OSError as err:
        raise _stale(path, f"cannot be read ({err.strerror})") from None
    if wanted and hashlib.sha256(content).hexdigest() != wanted:
        raise _stale(path)
    return content


def load_tokenizer(data_dir: str | Path):
    """The ``tokenizers.Tokenizer`` saved with the token files (checked against meta.json's sha256), encoding a
    literal ``<|endoftext|>`` as text."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_bytes(data_dir).decode("utf-8"))
    tokenizer.encode_special_tokens = True
    return tokenizer
