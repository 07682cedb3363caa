"""The tokenize stage: built-in, local and Hub-shaped sources, the BPE, the token files and their loader."""

from __future__ import annotations

import gzip
import json
import platform
import sys
from pathlib import Path

import datasets
import huggingface_hub.constants
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tokenizers
import zstandard
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from dape_core import cli, data, io
from dape_core.errors import ArtefactError, ConfigError

HUB_FIXTURE = Path(__file__).parent / "data" / "hub_pile_like"
OUTPUT_FILES = ("train.bin", "val.bin", "train.docs.npy", "val.docs.npy", "token_bytes.npy", "tokenizer.json", "meta.json",
                "meta.json.sha256")


@pytest.fixture(autouse=True)
def offline_datasets(tmp_path_factory, monkeypatch):
    """No network, and a private `datasets` cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.getbasetemp() / "hf-datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    datasets.disable_progress_bars()


def read_jsonl_zst(path: Path) -> list[dict]:
    text = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes()).decode("utf-8")
    return [json.loads(line) for line in text.splitlines()]


PILE_ROWS = read_jsonl_zst(HUB_FIXTURE / "train" / "00.jsonl.zst") + read_jsonl_zst(HUB_FIXTURE / "train" / "01.jsonl.zst")


def texts_of(rows, pile_set_name=None):
    return [r["text"] for r in rows if pile_set_name is None or r["meta"]["pile_set_name"] == pile_set_name]


def tokenize(out_dir: Path, **settings):
    settings.setdefault("vocab_size", 300)
    meta = data.tokenize_corpus(data.TokenizeSettings(out_dir=str(out_dir), **settings))
    return out_dir, meta


def decoded_documents(out_dir: Path, split: str) -> list[str]:
    tokens = data.load_split(out_dir, split)
    tokenizer = data.load_tokenizer(out_dir)
    return [tokenizer.decode(tokens.document(i).tolist(), skip_special_tokens=False) for i in range(tokens.n_documents)]


def all_documents(out_dir: Path) -> list[str]:
    return decoded_documents(out_dir, "train") + decoded_documents(out_dir, "val")


# ------------------------------------------------------------------------------------------- built-in corpora
def test_stdlib_file_list_excludes_tests_and_site_packages():
    files = data.stdlib_source_files()
    assert {"os.py", "json/__init__.py", "asyncio/events.py"} <= set(files)
    assert files == sorted(files) and len(files) > 200
    for path in files:
        parts = path.split("/")[:-1]
        assert not {"test", "tests", "idle_test", "site-packages"} & set(parts), path


def test_builtin_code_corpus_is_real_python_source(tmp_path):
    out, meta = tokenize(tmp_path, source="builtin-code", max_docs=12)
    source = meta["source"]
    assert source["python_version"] == platform.python_version()
    assert source["files"] == len(data.stdlib_source_files())
    assert len(source["file_list_sha256"]) == 64 and len(source["corpus_sha256"]) == 64
    assert source["documents"] > 200
    documents = all_documents(out)
    assert len(documents) == 12
    stdlib_texts = set(data.builtin_documents("builtin-code")[1])
    assert all(doc in stdlib_texts for doc in documents)
    assert sum(("def " in doc or "import " in doc) for doc in documents) >= 10


def test_builtin_prose_corpus_is_english_from_topics_and_docstrings(tmp_path):
    names, texts, _ = data.builtin_documents("builtin-prose")
    assert any(n.startswith("pydoc_data.topics:") for n in names) and "json" in names and "collections" in names
    json_doc = texts[names.index("json")]
    assert json_doc.startswith("json\n\nJSON (JavaScript Object Notation)")
    assert "json.dumps\n\nSerialize ``obj`` to a JSON formatted ``str``." in json_doc
    assert all(text.strip() for text in texts)

    out, meta = tokenize(tmp_path, source="builtin-prose", max_docs=12)
    assert meta["source"]["python_version"] == platform.python_version()
    words = " ".join(all_documents(out)).lower().split()
    assert sum(w in {"the", "a", "of", "is", "and", "to"} for w in words) > 0.05 * len(words)


def test_module_docstrings_reads_nested_definitions_without_importing():
    source = '''"""Module text."""
import does_not_exist
class Box:
    """A box."""
    def open(self):
        """Open the box."""
    def close(self):
        pass
async def wait():
    """Wait a while."""
'''
    assert data.module_docstrings(source, "pkg.mod") == (
        "pkg.mod\n\nModule text.\n\n\npkg.mod.Box\n\nA box.\n\n\npkg.mod.Box.open\n\nOpen the box.\n\n\n"
        "pkg.mod.wait\n\nWait a while.")


# ------------------------------------------------------------------------------------------- local and Hub sources
def write_local(tmp_path: Path, kind: str, rows) -> list[str]:
    if kind == "txt":
        paths = []
        for i, row in enumerate(rows):
            path = tmp_path / f"doc{i:02d}.txt"
            path.write_text(row["text"], encoding="utf-8")
            paths.append(str(path))
        return paths
    lines = "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")
    if kind == "jsonl":
        path = tmp_path / "rows.jsonl"
        path.write_bytes(lines)
    elif kind == "jsonl.gz":
        path = tmp_path / "rows.jsonl.gz"
        path.write_bytes(gzip.compress(lines, mtime=0))
    elif kind == "jsonl.zst":
        path = tmp_path / "rows.jsonl.zst"
        path.write_bytes(zstandard.ZstdCompressor().compress(lines))
    else:
        path = tmp_path / "rows.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    return [str(path)]


@pytest.mark.parametrize("kind", ["jsonl", "jsonl.gz", "jsonl.zst", "parquet"])
def test_local_records_with_dotted_filter(tmp_path, kind):
    files = write_local(tmp_path, kind, PILE_ROWS)
    out, meta = tokenize(tmp_path / "out", source="local", data_files=tuple(files),
                         filter_field="meta.pile_set_name", filter_value="ArXiv", val_fraction=0.25)
    assert sorted(all_documents(out)) == sorted(texts_of(PILE_ROWS, "ArXiv"))
    assert meta["source"]["raw_documents"] == len(PILE_ROWS) and meta["source"]["documents"] == 8
    assert meta["source"]["builder"] == ("parquet" if kind == "parquet" else "json")


def test_local_records_with_renamed_nested_text_field(tmp_path):
    rows = [{"body": {"content": r["text"]}, "id": i} for i, r in enumerate(PILE_ROWS)]
    files = write_local(tmp_path, "jsonl", rows)
    out, _ = tokenize(tmp_path / "out", source="local", data_files=tuple(files), text_field="body.content")
    assert sorted(all_documents(out)) == sorted(texts_of(PILE_ROWS))


def test_local_text_files_are_one_document_each(tmp_path):
    files = write_local(tmp_path, "txt", PILE_ROWS[:6])
    out, meta = tokenize(tmp_path / "out", source="local", data_files=tuple(files), val_fraction=0.3)
    assert meta["source"]["builder"] == "text"
    assert sorted(all_documents(out)) == sorted(Path(f).read_text(encoding="utf-8") for f in files)


def test_hub_shaped_directory_goes_through_the_hub_source(tmp_path):
    out, meta = tokenize(tmp_path / "gutenberg", source="hub", dataset=str(HUB_FIXTURE),
                         filter_field="meta.pile_set_name", filter_value="Gutenberg (PG-19)", val_fraction=0.25)
    assert sorted(all_documents(out)) == sorted(texts_of(PILE_ROWS, "Gutenberg (PG-19)"))
    assert meta["source"]["kind"] == "hub" and meta["source"]["local_dir"] is True

    out, _ = tokenize(tmp_path / "validation", source="hub", dataset=str(HUB_FIXTURE), dataset_split="validation")
    assert sorted(all_documents(out)) == sorted(texts_of(read_jsonl_zst(HUB_FIXTURE / "val" / "00.jsonl.zst")))

    out, _ = tokenize(tmp_path / "one-shard", source="hub", dataset=str(HUB_FIXTURE), data_files=("train/01.jsonl.zst",))
    assert sorted(all_documents(out)) == sorted(texts_of(read_jsonl_zst(HUB_FIXTURE / "train" / "01.jsonl.zst")))


def test_unreachable_hub_says_how_to_get_the_data(tmp_path):
    with pytest.raises(data.HubUnavailableError) as err:
        tokenize(tmp_path, source="hub", dataset="monology/pile-uncopyrighted",
                 filter_field="meta.pile_set_name", filter_value="ArXiv")
    message = str(err.value)
    assert isinstance(err.value, ConfigError) and message.startswith("dataset: ")
    assert "hf download monology/pile-uncopyrighted --repo-type dataset --local-dir" in message
    assert "huggingface-cli download monology/pile-uncopyrighted --repo-type dataset" in message
    assert "--dataset data/hub/monology--pile-uncopyrighted" in message and "--source local" in message


# ------------------------------------------------------------------------------------------- splits and tokenizer
def test_same_settings_give_byte_identical_output(tmp_path):
    tokenize(tmp_path / "a", source="builtin-code", max_docs=10, seed=3)
    tokenize(tmp_path / "b", source="builtin-code", max_docs=10, seed=3)
    for name in OUTPUT_FILES:
        a, b = ((tmp_path / folder / name).read_bytes() for folder in "ab")
        if name.endswith(".sha256"):  # the same sha256; each seal names its own file
            a, b = a.splitlines()[0], b.splitlines()[0]
            assert (tmp_path / "b" / name).read_text().endswith(f"file: {(tmp_path / 'b' / 'meta.json').as_posix()}\n")
        assert a == b, name
    assert not [p for p in (tmp_path / "a").iterdir() if p.name not in OUTPUT_FILES]  # no temporary files left


def test_split_is_by_document_and_seeded(tmp_path):
    out, meta = tokenize(tmp_path / "s0", source="hub", dataset=str(HUB_FIXTURE), val_fraction=0.25, seed=0)
    train, val = decoded_documents(out, "train"), decoded_documents(out, "val")
    assert not set(train) & set(val)
    assert sorted(train + val) == sorted(texts_of(PILE_ROWS))
    assert (meta["splits"]["train"]["documents"], meta["splits"]["val"]["documents"]) == (16, 6)

    other_val = decoded_documents(tokenize(tmp_path / "s1", source="hub", dataset=str(HUB_FIXTURE),
                                           val_fraction=0.25, seed=1)[0], "val")
    assert set(other_val) != set(val)

    out, meta = tokenize(tmp_path / "capped", source="hub", dataset=str(HUB_FIXTURE), max_docs=10, val_fraction=0.2)
    assert (meta["splits"]["train"]["documents"], meta["splits"]["val"]["documents"]) == (8, 2)
    assert meta["source"]["documents"] == 22


def test_bpe_is_trained_on_the_training_split_only(tmp_path):
    rng = np.random.default_rng(0)
    markers = ["".join(rng.choice(list("bcdfghjklmnpqrstvwxz"), 8)) for _ in range(30)]
    assert len(set(markers)) == 30
    rows = [{"text": "The quick brown fox jumps over the lazy dog." + f" {m}" * 40} for m in markers]
    files = write_local(tmp_path, "jsonl", rows)
    out, _ = tokenize(tmp_path / "out", source="local", data_files=tuple(files), vocab_size=2000, val_fraction=0.2)
    vocab = data.load_tokenizer(out).get_vocab()

    def marker(document: str) -> str:
        return document.split()[-1]

    train_markers = {marker(d) for d in decoded_documents(out, "train")}
    val_markers = {marker(d) for d in decoded_documents(out, "val")}
    assert len(val_markers) == 6 and len(train_markers) == 24
    assert all("Ġ" + m in vocab for m in train_markers)  # a training word is learned whole
    assert not any("Ġ" + m in vocab for m in val_markers)  # a validation-only word is not


def test_token_dtype_follows_vocab_size():
    assert data.token_dtype(4096) == np.uint16 and data.token_dtype(65535) == np.uint16
    assert data.token_dtype(65536) == np.uint32 and data.token_dtype(50257) == np.uint16


def test_byte_level_alphabet_matches_tokenizers():
    alphabet = data.byte_level_alphabet()
    assert set(alphabet) == set(pre_tokenizers.ByteLevel.alphabet())
    assert sorted(alphabet.values()) == list(range(256)) and alphabet["Ġ"] == ord(" ")


def test_tokenizer_file_larger_than_uint16_writes_uint32(tmp_path):
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {data.EOT: 0, **{ch: i + 1 for i, ch in enumerate(alphabet)}}
    for a in alphabet:
        for b in alphabet:
            vocab[a + b] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([data.EOT])
    tokenizer.save(str(tmp_path / "big.json"))
    out, meta = tokenize(tmp_path / "out", source="hub", dataset=str(HUB_FIXTURE), tokenizer="file",
                         tokenizer_file=str(tmp_path / "big.json"))
    assert meta["tokenizer"]["vocab_size"] == 65793 and meta["tokenizer"]["dtype"] == "uint32"
    assert (out / "train.bin").stat().st_size == 4 * meta["splits"]["train"]["tokens"]
    assert sorted(all_documents(out)) == sorted(texts_of(PILE_ROWS))


def test_trained_tokenizer_reused_as_file_gives_the_same_tokens(tmp_path):
    first, _ = tokenize(tmp_path / "bpe", source="builtin-prose", max_docs=10)
    second, meta = tokenize(tmp_path / "file", source="builtin-prose", max_docs=10, tokenizer="file",
                            tokenizer_file=str(first / "tokenizer.json"))
    assert meta["tokenizer"]["kind"] == "file" and len(meta["tokenizer"]["file_sha256"]) == 64
    for name in ("train.bin", "val.bin", "token_bytes.npy"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


# ------------------------------------------------------------------------------------------- loader
def test_loader_round_trip_and_layout(tmp_path):
    text_with_separator = "A document that mentions <|endoftext|> literally, and ünïcödé ✓."
    rows = [*PILE_ROWS, {"text": text_with_separator, "meta": {"pile_set_name": "Pile-CC"}}]
    files = write_local(tmp_path, "jsonl", rows)
    out, meta = tokenize(tmp_path / "out", source="local", data_files=tuple(files), val_fraction=0.3)
    tokenizer = data.load_tokenizer(out)
    seen = []
    for split in ("train", "val"):
        tokens = data.load_split(out, split)
        assert tokens.tokens.dtype == np.uint16 and not tokens.tokens.flags.writeable
        assert tokens.doc_offsets.dtype == np.int64 and tokens.doc_offsets[0] == 0
        assert tokens.doc_offsets[-1] == len(tokens.tokens) == meta["splits"][split]["tokens"]
        assert np.all(tokens.tokens[tokens.doc_offsets[1:] - 1] == tokens.eot_id)
        assert np.sum(tokens.tokens == tokens.eot_id) == tokens.n_documents  # a literal separator stays text
        assert sum(meta["splits"][split]["length_histogram"]["documents"]) == tokens.n_documents
        for i in range(tokens.n_documents):
            document = tokens.document(i)
            text = tokenizer.decode(document.tolist(), skip_special_tokens=False)
            assert int(tokens.token_bytes[document].sum()) == len(text.encode("utf-8"))
            seen.append(text)
        lengths = tokens.document_lengths
        median = int(np.median(lengths))
        assert list(tokens.long_documents(median)) == [i for i, n in enumerate(lengths) if n >= median]
        assert len(tokens.long_documents(int(lengths.max()))) >= 1
        assert len(tokens.long_documents(int(lengths.max()) + 1)) == 0
    assert sorted(seen) == sorted(texts_of(rows))
    assert data.load_split(out, "train").token_bytes[tokens.eot_id] == 0


def test_meta_records_sources_hashes_versions_and_settings(tmp_path):
    out, meta = tokenize(tmp_path, source="hub", dataset=str(HUB_FIXTURE), seed=5)
    assert json.loads((out / "meta.json").read_text()) == meta
    assert meta["versions"] == {"python": platform.python_version(), "datasets": datasets.__version__,
                                "tokenizers": tokenizers.__version__, "numpy": np.__version__}
    assert meta["settings"]["seed"] == 5 and meta["settings"]["source"] == "hub" and "out_dir" not in meta["settings"]
    assert meta["splits"]["train"]["docs_sha256"] == data.file_sha256(out / "train.docs.npy")
    assert meta["splits"]["val"]["tokens_sha256"] == data.file_sha256(out / "val.bin")
    assert meta["tokenizer"]["sha256"] == data.file_sha256(out / "tokenizer.json")
    assert meta["tokenizer"]["token_bytes_sha256"] == data.file_sha256(out / "token_bytes.npy")


def test_failed_run_leaves_no_meta_json(tmp_path):
    out, _ = tokenize(tmp_path, source="hub", dataset=str(HUB_FIXTURE))
    with pytest.raises(ConfigError):
        tokenize(tmp_path, source="hub", dataset=str(HUB_FIXTURE), text_field="body")
    assert not (out / "meta.json").exists()


# ------------------------------------------------------------------------------------------- CLI
def test_cli_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    out = tmp_path / "prose"
    assert cli.main(["tokenize", "--source", "builtin-prose", "--max-docs", "20", "--vocab-size", "400",
                     "--val-fraction", "0.1", "--seed", "1", "--out-dir", str(out)]) == 0
    assert all((out / name).is_file() for name in OUTPUT_FILES)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["settings"]["vocab_size"] == 400 and meta["tokenizer"]["vocab_size"] <= 400
    assert (meta["splits"]["train"]["documents"], meta["splits"]["val"]["documents"]) == (18, 2)
    assert "train: 18 documents" in capsys.readouterr().out


def test_cli_reports_config_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["tokenize", "--source", "web", "--out-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "source: 'web' is not allowed; allowed values: builtin-code, builtin-prose, local, hub" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- configuration errors
@pytest.mark.parametrize("settings, message", [
    ({"source": "web"}, "source: 'web' is not allowed; allowed values: builtin-code, builtin-prose, local, hub"),
    ({"source": "local"}, "data_files: required for source 'local'"),
    ({"source": "local", "data_files": ("missing.jsonl",)}, "data_files: path 'missing.jsonl' does not exist"),
    ({"source": "local", "data_files": (__file__,)}, "data_files: "),
    ({"source": "builtin-code", "data_files": (__file__,)}, "data_files: not used by source 'builtin-code'"),
    ({"source": "hub"}, "dataset: required for source 'hub'"),
    ({"source": "hub", "dataset": "./no/such/dir"}, "dataset: path './no/such/dir' does not exist"),
    ({"source": "builtin-prose", "dataset": "x/y"}, "dataset: not used by source 'builtin-prose'"),
    ({"source": "builtin-prose", "dataset_config": "ArXiv"}, "dataset_config: not used by source 'builtin-prose'"),
    ({"text_field": ""}, "text_field: must not be empty"),
    ({"filter_field": "meta.pile_set_name"}, "filter_field / filter_value: give both or neither"),
    ({"filter_value": "ArXiv"}, "filter_field / filter_value: give both or neither"),
    ({"max_docs": 0}, "max_docs: 0 is not allowed; allowed values: a positive integer"),
    ({"max_docs": 1}, "max_docs: 1 is not allowed; allowed values: an integer ≥ 2"),
    ({"tokenizer": "gpt2"}, "tokenizer: 'gpt2' is not allowed; allowed values: bpe, file"),
    ({"vocab_size": 256}, "vocab_size: 256 is not allowed; allowed values: an integer > 256"),
    ({"vocab_size": -5}, "vocab_size: -5 is not allowed; allowed values: a positive integer"),
    ({"tokenizer_file": __file__}, "tokenizer_file: not used by tokenizer 'bpe'"),
    ({"tokenizer": "file"}, "tokenizer_file: required for tokenizer 'file'"),
    ({"tokenizer": "file", "tokenizer_file": "gpt2.json"}, "tokenizer_file: path 'gpt2.json' does not exist"),
    ({"val_fraction": 0.0}, "val_fraction: 0.0 is not allowed; allowed values: a number in (0, 1)"),
    ({"val_fraction": 1.0}, "val_fraction: 1.0 is not allowed; allowed values: a number in (0, 1)"),
    ({"seed": -1}, "seed: -1 is not allowed; allowed values: a non-negative integer"),
])
def test_invalid_settings_raise_config_error(tmp_path, settings, message):
    with pytest.raises(ConfigError) as err:
        data.TokenizeSettings(out_dir=str(tmp_path), **settings)
    assert str(err.value).startswith(message)


def test_mixed_and_unknown_file_kinds_raise_config_error(tmp_path):
    jsonl = write_local(tmp_path, "jsonl", PILE_ROWS)
    txt = write_local(tmp_path, "txt", PILE_ROWS[:1])
    with pytest.raises(ConfigError, match="data_files: files of one kind only; got json, text"):
        data.TokenizeSettings(out_dir=str(tmp_path), source="local", data_files=(*jsonl, *txt))
    csv = tmp_path / "rows.csv"
    csv.write_text("text\nhello\n")
    with pytest.raises(ConfigError, match="data_files: '.*rows.csv' has an unknown extension; allowed values: .txt, .json"):
        data.TokenizeSettings(out_dir=str(tmp_path), source="local", data_files=(str(csv),))


@pytest.mark.parametrize("settings, message", [
    ({"text_field": "body"}, "text_field: 'body' is not a field of the data; allowed values: meta.pile_set_name, text"),
    ({"text_field": "meta"}, "text_field: 'meta' is a record with sub-fields; allowed values: meta.pile_set_name, text"),
    ({"text_field": "meta.pile_set_name", "filter_field": "meta", "filter_value": "x"}, "filter_field: 'meta' is a record"),
    ({"filter_field": "meta.set", "filter_value": "ArXiv"}, "filter_field: 'meta.set' is not a field of the data"),
    ({"filter_field": "meta.pile_set_name", "filter_value": "Books3"}, "source: 0 non-empty document(s) selected"),
    ({"filter_field": "meta.pile_set_name", "filter_value": "Wikipedia (en)"}, "source: 1 non-empty document(s) selected"),
    ({"dataset_split": "test"}, "dataset_split: 'test' is not allowed; Unknown split"),
])
def test_data_dependent_errors_raise_config_error(tmp_path, settings, message):
    with pytest.raises(ConfigError) as err:
        tokenize(tmp_path, source="hub", dataset=str(HUB_FIXTURE), **settings)
    assert str(err.value).startswith(message)


def test_unusable_tokenizer_files_raise_config_error(tmp_path):
    no_separator = Tokenizer(models.BPE(vocab={"a": 0, "b": 1}, merges=[]))
    no_separator.save(str(tmp_path / "no_eot.json"))
    with pytest.raises(ConfigError, match="tokenizer_file: '.*no_eot.json' has no <\\|endoftext\\|> token"):
        tokenize(tmp_path / "out", source="hub", dataset=str(HUB_FIXTURE), tokenizer="file",
                 tokenizer_file=str(tmp_path / "no_eot.json"))
    word_level = Tokenizer(models.WordLevel(vocab={data.EOT: 0, "[UNK]": 1, "▁the": 2}, unk_token="[UNK]"))
    word_level.add_special_tokens([data.EOT])
    word_level.save(str(tmp_path / "words.json"))
    with pytest.raises(ConfigError, match="tokenizer_file: '.*words.json' is not a byte-level tokenizer"):
        tokenize(tmp_path / "out", source="hub", dataset=str(HUB_FIXTURE), tokenizer="file",
                 tokenizer_file=str(tmp_path / "words.json"))


def test_loader_errors_raise_config_error(tmp_path):
    with pytest.raises(ConfigError, match="data_dir: .* has no meta.json"):
        data.load_split(tmp_path, "train")
    out, _ = tokenize(tmp_path / "out", source="hub", dataset=str(HUB_FIXTURE))
    with pytest.raises(ConfigError, match="split: 'test' is not allowed; allowed values: train, val"):
        data.load_split(out, "test")
    with pytest.raises(IndexError):
        data.load_split(out, "train").document(10_000)
    with open(out / "val.bin", "ab") as handle:
        handle.write(b"\0\0")
    with pytest.raises(ArtefactError, match=r"val.bin: its content does not match the sha256 meta.json recorded.*"
                                            r"snakemake --forcerun .*meta.json \(rule tokenize\)"):
        data.load_split(out, "val")
    meta = json.loads((out / "meta.json").read_text())  # a meta.json without hashes: the lengths still tell
    del meta["splits"]["val"]["tokens_sha256"]
    (out / "meta.json").write_text(json.dumps(meta))
    io.seal_file(out / "meta.json")  # sealed as it is (an older version's, after `dape seal`)
    with pytest.raises(ConfigError, match="data_dir: val.bin in .* does not match meta.json"):
        data.load_split(out, "val")
    (out / "meta.json").write_text("{not json")
    io.seal_file(out / "meta.json")
    with pytest.raises(ArtefactError, match="meta.json: not valid JSON"):
        data.load_split(out, "val")


def test_meta_json_and_tokenizer_json_are_checked_where_they_are_read(tmp_path):
    """meta.json is sealed (a description field edited at the same size, such as vocab_size, is named: the model's
    shape is read from it); tokenizer.json is checked against the sha256 meta.json recorded; dape verify sets both
    aside."""
    from dape_core import verify

    out, _ = tokenize(tmp_path / "results" / "data", source="hub", dataset=str(HUB_FIXTURE))
    assert data.load_tokenizer(out).get_vocab_size() > 0
    tokenizer = (out / "tokenizer.json").read_bytes()
    (out / "tokenizer.json").write_bytes(tokenizer.replace(b'"', b"'", 1) if tokenizer.count(b'"') else tokenizer + b" ")
    with pytest.raises(ArtefactError, match="tokenizer.json: its content does not match the sha256 meta.json recorded"):
        data.load_tokenizer(out)
    text = (out / "meta.json").read_text()
    vocab = json.loads(text)["tokenizer"]["vocab_size"]
    other = str(vocab)[:-1] + str((vocab + 1) % 10)  # the last digit changed: the same size
    edited = text.replace(f'"vocab_size": {vocab}', f'"vocab_size": {other}')
    assert edited != text and len(edited) == len(text)
    (out / "meta.json").write_text(edited)
    with pytest.raises(ArtefactError, match=r"meta.json: its content does not match the sha256 its job recorded.*"
                                            r"rule tokenize"):
        data.load_split(out, "val")
    _, findings, _ = verify.verify(tmp_path / "results")
    assert sorted(f.path.name for f in findings) == ["meta.json", "tokenizer.json"]


def test_a_same_size_overwrite_of_a_token_file_is_named(tmp_path):
    """The length matches, the content does not: the sha256 meta.json recorded tells (the DAG's train.bin case)."""
    out, _ = tokenize(tmp_path / "out", source="hub", dataset=str(HUB_FIXTURE))
    data.load_split(out, "train")
    content = bytearray((out / "train.bin").read_bytes())
    content[:4] = bytes(4) if content[:4] != bytes(4) else b"\1\1\1\1"
    (out / "train.bin").write_bytes(bytes(content))  # same size
    with pytest.raises(ArtefactError, match="train.bin: its content does not match the sha256 meta.json recorded"):
        data.load_split(out, "train")


def test_a_token_file_changed_in_place_with_its_time_restored_is_named(tmp_path):
    """Bit rot leaves size, modification time and inode as they were: the file is hashed at every load all the
    same (no cache of verified files)."""
    import os

    out, _ = tokenize(tmp_path / "out", source="hub", dataset=str(HUB_FIXTURE))
    data.load_split(out, "val")
    path = out / "val.bin"
    stat = path.stat()
    with open(path, "r+b") as handle:  # one byte flipped in place: same inode, same size
        handle.seek(stat.st_size // 2)
        byte = handle.read(1)
        handle.seek(stat.st_size // 2)
        handle.write(bytes([byte[0] ^ 1]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    with pytest.raises(ArtefactError, match="val.bin: its content does not match the sha256 meta.json recorded"):
        data.load_split(out, "val")
