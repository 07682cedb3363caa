"""The tokenize stage (`dape tokenize`): a corpus through `datasets` → byte-level BPE → token files + meta.json, and
their loader.

Sources (each a ``datasets.Dataset`` with a ``text`` column): ``builtin-code`` (the standard library's ``.py`` files
without tests and site-packages, a document per file) and ``builtin-prose`` (``pydoc_data.topics`` and every standard
library docstring, read with ``ast``, nothing imported; a document per topic / module), real text on every Python
installation, its version and file-list hash in meta.json; ``local`` (txt, a document per file; JSON lines, also
``.jsonl.zst`` / ``.jsonl.gz``; parquet); ``hub`` (a Hub dataset name, or a local directory laid out like one).

A seeded shuffle splits the documents into train / val (``--max-docs`` caps after it). The tokenizer is a byte-level
BPE trained on the training split only, or a local byte-level ``tokenizer.json`` (GPT-2's for the paper). Output in
``--out-dir``: ``train.bin`` / ``val.bin`` (token ids, uint16 for a vocabulary of ≤ 65535, else uint32, each document
followed by one ``<|endoftext|>``); ``train.docs.npy`` / ``val.docs.npy`` (int64 offsets, n_docs + 1: document i and
its separator are ``tokens[offsets[i]:offsets[i + 1]]``); ``token_bytes.npy`` (each token's UTF-8 bytes, 0 for special
tokens: bits per byte of a span = Σ nats / (ln 2 · Σ token_bytes[span])); ``tokenizer.json``; ``meta.json`` (written
last, sealed, with the tokenizer's sha256).

Modules: ``corpora`` (sources → datasets, the split), ``tokenizer``, ``token_files`` (writing and verified loading),
settings in :mod:`dape_core.settings.corpus`; this one runs the stage and its command line.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from dape_core.data.corpora import (  # noqa: F401 (the stage's names, importable from dape_core.data)
    HubUnavailableError, builtin_documents, corpus_sha256, iter_texts, load_corpus, module_docstrings, split_documents,
    stdlib_source_files)
from dape_core.settings.corpus import SOURCES, TOKENIZERS, TokenizeSettings  # noqa: F401
from dape_core.data.token_files import META_FORMAT, SPLITS, load_split, load_tokenizer, write_split  # noqa: F401
from dape_core.data.tokenizer import (  # noqa: F401
    EOT, byte_level_alphabet, load_tokenizer_file, token_byte_lengths, token_dtype, train_bpe)
from dape_core.io import file_sha256, write_bytes, write_npy, write_text


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
    description.update(documents=corpus.num_rows, corpus_sha256=corpus_sha256(corpus))
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
    write_text(out_dir / "meta.json", json.dumps(meta, indent=2, ensure_ascii=False) + "\n", seal=True)
    return meta


# ------------------------------------------------------------------------------------------------ CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `dape tokenize`: TokenizeSettings' fields (their defaults, allowed values and help)."""
    from dape_core.settings import fields as settings_fields

    settings_fields.add_arguments(parser, TokenizeSettings, exclude=("out_dir",))
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
