"""The `dape` command rejects wrong settings before any work, naming the field and the allowed values."""

import pytest

from dape_core.cli import main

TRAIN = ["train", "--out-dir", "unused", "--size", "tiny", "--no-progress"]


@pytest.mark.parametrize("args,field,allowed", [
    (["--encoding", "sinusoidal"], "encoding", "kerple"),
    (["--processor", "dape_v3"], "processor", "dape_v2"),
    (["--processor", "dape_v2", "--kernel-size", "4"], "kernel_size", "odd positive"),
    (["--processor", "dape_v2", "--kernel-size", "0"], "kernel_size", "odd positive"),
    (["--processor", "dape_v2", "--kernel-size", "3", "--padding", "valid"], "padding", "same, causal"),
    (["--processor", "dape_v2", "--kernel-size", "3", "--dape-width", "0"], "dape_width", "positive integer"),
    (["--steps", "0"], "steps", "positive integer"),
    (["--batch-size", "-4"], "batch_size", "positive integer"),
    (["--train-len", "0"], "train_len", "positive integer"),
    (["--size", "1B"], "size", "125M"),
    (["--precision", "fp8"], "precision", "bf16"),
    (["--lr", "0"], "lr", "positive number"),
    (["--distributed", "mpi"], "distributed", "ddp"),
    (["--attention-impl", "flash"], "attention_impl", "fast, plain"),
    (["--dape-dtype", "float16"], "dape_dtype", "bfloat16"),
])
def test_train_rejects_bad_settings(tiny_corpus, capsys, args, field, allowed):
    with pytest.raises(SystemExit) as exit_info:
        main([*TRAIN, "--data-dir", str(tiny_corpus), *args])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert f"error: {field}:" in message and "allowed values" in message and allowed in message


def test_train_rejects_a_missing_data_dir(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([*TRAIN, "--data-dir", str(tmp_path / "nowhere")])
    assert "data_dir:" in capsys.readouterr().err


@pytest.mark.parametrize("args,field", [
    (["--eval-lens", "0"], "eval_lens"),
    (["--eval-lens", "32", "--query-chunk-size", "0"], "query_chunk_size"),
    (["--eval-lens", "32", "--bootstrap", "-1"], "bootstrap"),
])
def test_evaluate_rejects_bad_settings(tmp_path, capsys, args, field):
    with pytest.raises(SystemExit):
        main(["evaluate", "--checkpoint", str(tmp_path / "missing.pt"), "--data-dir", str(tmp_path),
              "--out", str(tmp_path / "e.csv"), *args])
    assert f"{field}:" in capsys.readouterr().err


@pytest.mark.parametrize("args,field", [
    (["--mode", "backward", "--batch-size", "1"], "mode"),
    (["--size", "huge", "--batch-size", "1"], "size"),
    (["--seq-lens", "128", "--equal-tokens", "64"], "equal_tokens"),
    (["--batch-size", "0"], "batch_size"),
    (["--batch-size", "1", "--attention-impl", "flash"], "attention_impl"),
])
def test_time_rejects_bad_settings(tmp_path, capsys, args, field):
    base = ["time", "--seq-lens", "32", "--out", str(tmp_path / "t.csv")]
    with pytest.raises(SystemExit):
        main(base + args)
    assert f"{field}:" in capsys.readouterr().err
