"""The settings of the tokenize stage (`dape tokenize`): where documents come from, how they are split and which
tokenizer reads them; every check runs before anything is read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from dape_core.errors import ConfigError, require_choice, require_positive
from dape_core.settings.fields import setting

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
    source: str = setting("builtin-code", choices=SOURCES, help="where the documents come from: the standard "
                          "library's code or prose (built-in), local files, or a Hub dataset")
    data_files: tuple[str, ...] = setting((), help="local files (local), or files inside the dataset, e.g. "
                                                   "train/00.jsonl.zst (hub)")
    dataset: str | None = setting(None, help="Hub dataset name or local dataset directory (hub)")
    dataset_config: str | None = setting(None, help="dataset configuration name (hub)")
    dataset_split: str = setting("train", help="dataset split to read (hub)")
    text_field: str = setting("text", help="field holding the document text; dotted for nested")
    filter_field: str | None = setting(None, help="keep rows whose (dotted) field equals filter_value, e.g. "
                                                  "meta.pile_set_name")
    filter_value: str | None = setting(None, help="value of filter_field to keep (compared as text)")
    max_docs: int | None = setting(None, help="keep at most this many documents, after the seeded shuffle")
    tokenizer: str = setting("bpe", choices=TOKENIZERS, help="bpe: trained on the training split; file: a "
                             "byte-level tokenizer.json (GPT-2's for the paper)")
    tokenizer_file: str | None = setting(None, help="a byte-level tokenizer.json (tokenizer file)")
    vocab_size: int = setting(4096, help="BPE vocabulary size, > 256 (tokenizer bpe)")
    val_fraction: float = setting(0.05, help="fraction of documents in the val split")
    seed: int = setting(0, help="seed of the document shuffle")

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
        extension = Path(next((name[:-len(s)] for s in COMPRESSION_SUFFIXES if name.endswith(s)), name)).suffix
        if extension not in LOCAL_BUILDERS:
            raise ConfigError(f"data_files: {path!r} has an unknown extension; allowed values: "
                              ".txt, .json, .jsonl, .parquet (json and txt optionally .zst/.gz/.bz2/.xz compressed)")
        builders.add(LOCAL_BUILDERS[extension])
    if len(builders) > 1:
        raise ConfigError(f"data_files: files of one kind only; got {', '.join(sorted(builders))}")
    return builders.pop()
