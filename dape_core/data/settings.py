"""The settings of the tokenize stage (`dape tokenize`): where documents come from, how they are split and which
tokenizer reads them; every check runs before anything is read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from dape_core.errors import ConfigError, require_choice, require_positive

SOURCES = ("builtin-code", "builtin-prose", "local", "hub")
TOKENIZERS = ("bpe", "file")
COMPRESSION_SUFFIXES = (".zst", ".zstd", ".gz", ".bz2", ".xz")
LOCAL_BUILDERS = {".txt": "text", ".text": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
DATASET_VALUES = "a Hub name or a local dataset directory"
TOKENIZER_FILE_VALUES = "a byte-level tokenizer.json path (e.g. GPT-2's)"


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
