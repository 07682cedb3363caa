"""A fine-tune's Hugging Face model/ folder is sealed file by file as it is written (each seal naming the file it
becomes), verified whole where it is read, set aside whole by `dape verify` when one of its files is damaged, and
sealed once by `dape seal` when an older version wrote it."""

from __future__ import annotations

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # never reach the Hub

import pytest

pytest.importorskip("transformers")

from dape_core import io, seal  # noqa: E402
from dape_core.artefacts import verify_model_directory  # noqa: E402
from dape_core.errors import ArtefactError  # noqa: E402
from dape_core.hf import build_causal_lm, save_causal_lm  # noqa: E402
from dape_core.hf.adapter import RUN_RECORD  # noqa: E402
from dape_core.verify import verify  # noqa: E402

TINY = dict(model_type="llama", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=64, max_position_embeddings=32)


def written(root: Path) -> Path:
    path = root / "results" / "lm" / "run" / "seed0" / "model"
    save_causal_lm(build_causal_lm(TINY, seed=0), path, files={"tokenizer.json": "{}", RUN_RECORD: "{}"})
    return path


def test_every_file_is_sealed_as_the_file_it_becomes_and_verified_where_read(tmp_path):
    model = written(tmp_path)
    files = [p for p in model.iterdir() if not p.name.endswith(io.HASH_SUFFIX)]
    assert {"config.json", "model.safetensors", "tokenizer.json", RUN_RECORD} <= {p.name for p in files}
    for file in files:
        assert io.names_file(io.read_seal(io.hash_path(file)).identity, file)  # not the temporary folder's name
    assert verify_model_directory(model) is True
    assert seal.RUN_RECORD == RUN_RECORD


def test_a_changed_or_unsealed_file_stops_the_reader_naming_it(tmp_path):
    model = written(tmp_path)
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ArtefactError, match="model.safetensors.*does not match"):
        verify_model_directory(model)
    io.seal_file(weights)
    io.hash_path(model / "tokenizer.json").unlink()
    with pytest.raises(ArtefactError, match="tokenizer.json.*has no seal"):
        verify_model_directory(model)


def test_a_directory_of_another_origin_is_read_as_it_is(tmp_path):
    other = tmp_path / "downloaded"
    save_causal_lm(build_causal_lm(TINY, seed=0), other)
    for record in other.glob(f"*{io.HASH_SUFFIX}"):
        record.unlink()
    assert verify_model_directory(other) is False  # no run record: not this project's output


def test_dape_verify_sets_the_whole_folder_aside_and_dape_seal_migrates_an_older_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = written(Path("."))
    (model / "config.json").write_text((model / "config.json").read_text() + " ")
    checked, findings, folder = verify("results")
    assert [f.path for f in findings] == [model] and "config.json" in findings[0].problem
    assert not model.exists() and (folder / model.relative_to("results") / "config.json").is_file()
    older = written(Path("."))
    for record in older.glob(f"*{io.HASH_SUFFIX}"):
        record.unlink()
    assert sorted(seal.unsealed("results")) == sorted(p for p in older.iterdir())
    assert len(seal.seal_unsealed("results")) == len(list(older.iterdir())) // 2
    assert verify_model_directory(older) and verify("results")[1] == []
