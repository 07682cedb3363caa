"""Tokenizers of the token files: a byte-level BPE trained on the training split, or a local byte-level
``tokenizer.json`` (GPT-2's for the paper); the bytes of every token, and the token dtype."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from dape_core.errors import ConfigError

EOT = "<|endoftext|>"


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
    others = [byte for byte in range(256) if byte not in printable]  # shown as chr(256), chr(257), …
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(others)}}


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
