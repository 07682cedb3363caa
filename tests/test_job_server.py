"""Jobs in forks of a warm server (dape_core.job_server): the same outputs as in their own process, the job's
status and streams, a killed command ends its job, and a server of other code is never used."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from dape_core import job_server

DAPE = [sys.executable, "-m", "dape_core.command"]  # what the `dape` script runs
TRAIN = ["--size", "tiny", "--train-len", "32", "--batch-size", "4", "--threads", "1", "--no-progress", "--encoding",
         "kerple", "--processor", "dape_v2", "--kernel-size", "3", "--lr", "3e-3", "--log-every", "2"]


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(word) for word in text.split()]


def wait_for(condition, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def start_server(socket: Path, idle_s: float = 120.0) -> subprocess.Popen:
    server = subprocess.Popen([*DAPE, "serve", "--socket", str(socket), "--idle-exit", str(idle_s)])
    assert wait_for(lambda: socket.exists() or server.poll() is not None), "the server did not start"
    assert server.poll() is None
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    socket = tmp_path_factory.mktemp("srv") / "jobs.sock"
    process = start_server(socket)
    yield process, socket
    process.terminate()
    process.wait(timeout=30)


def served(server, *args, **kwargs) -> subprocess.CompletedProcess:
    """``dape args`` through ``server``, which must run it: a child of the server is seen while it runs."""
    process, socket = server
    earlier = set(children(process.pid))  # earlier jobs the server has not reaped yet
    env = {**os.environ, job_server.ENV: str(socket)}
    command = subprocess.Popen([*DAPE, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               **kwargs)
    seen = set()
    while command.poll() is None:
        seen |= set(children(process.pid)) - earlier
        time.sleep(0.01)
    stdout, stderr = command.communicate()
    assert seen, "the command ran in its own process"
    return subprocess.CompletedProcess(command.args, command.returncode, stdout, stderr)


def dape(*args, socket=None, env=None, **kwargs):
    env = {**os.environ, **(env or {}), job_server.ENV: str(socket) if socket else ""}
    return subprocess.run([*DAPE, *args], env=env, capture_output=True, text=True, timeout=600, **kwargs)


def test_a_job_in_the_server_writes_what_its_own_process_writes(server, tiny_corpus, tmp_path):
    for name in ("alone", "server"):
        out = tmp_path / name
        train = ["train", "--data-dir", str(tiny_corpus), "--out-dir", str(out), "--steps", "6", *TRAIN]
        evaluate = ["evaluate", "--checkpoint", str(out / "model.pt"), "--data-dir", str(tiny_corpus), "--eval-lens",
                    "32", "64", "--max-windows", "8", "--min-scored-tokens", "128", "--threads", "1", "--out",
                    str(out / "eval.csv")]
        for command in (train, evaluate):
            done = dape(*command) if name == "alone" else served(server, *command)
            assert done.returncode == 0, done.stderr[-2000:]
            if command is train:
                assert '"status": "ok"' in done.stdout  # the job's own streams
    alone, forked = (torch.load(tmp_path / n / "model.pt", weights_only=False) for n in ("alone", "server"))
    assert alone["config_hash"] == forked["config_hash"]
    assert all(torch.equal(alone["model"][k], forked["model"][k]) for k in alone["model"])
    losses = [[json.loads(line)["loss"] for line in (tmp_path / n / "metrics.jsonl").read_text().splitlines()]
              for n in ("alone", "server")]
    assert losses[0] == losses[1]
    assert (tmp_path / "alone" / "eval.csv").read_bytes() == (tmp_path / "server" / "eval.csv").read_bytes()
    assert not pd.read_csv(tmp_path / "server" / "eval.csv").empty


def test_a_refused_setting_comes_back_as_the_commands_status_and_message(server, tiny_corpus, tmp_path):
    done = served(server, "train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path / "o"), *TRAIN,
                  "--steps", "0")
    assert done.returncode == 2
    assert "dape train: error: steps" in done.stderr


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_command_ends_its_job(server, tiny_corpus, tmp_path, how):
    process, socket = server
    env = {**os.environ, job_server.ENV: str(socket)}
    earlier = set(children(process.pid))  # earlier jobs the server has not reaped yet
    command = subprocess.Popen([*DAPE, "train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path / "o"),
                                *TRAIN, "--steps", "100000"], env=env, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: set(children(process.pid)) - earlier), "the job did not start in the server"
    (job,) = set(children(process.pid)) - earlier
    command.send_signal(how)
    command.wait(timeout=30)
    assert wait_for(lambda: job not in children(process.pid), timeout_s=30), "the job outlived its command"
    if how == signal.SIGTERM:  # passed on: the job ended, and the command says so
        assert command.returncode != 0 and "ended without a status" in command.stderr.read()
    assert not (tmp_path / "o" / "model.pt").exists()


def test_a_server_whose_sources_changed_stops_and_one_of_another_environment_refuses(tiny_corpus, tmp_path):
    socket = tmp_path / "jobs.sock"
    server = start_server(socket)
    other = {"TRITON_INTERPRET": "0" if os.environ.get("TRITON_INTERPRET") == "1" else "1"}  # read at import
    done = dape("train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path / "o"), "--steps", "2", *TRAIN,
                socket=socket, env=other)
    assert done.returncode == 0, done.stderr[-2000:]  # in its own process: the server keeps listening
    assert server.poll() is None and job_server.ask(socket, {"ping": True}) == {"pong": True}
    conn = job_server.socket.socket(job_server.socket.AF_UNIX, job_server.socket.SOCK_STREAM)
    conn.connect(str(socket))
    job_server._send(conn, {"key": "sources edited since", "package": job_server.PACKAGE, "ping": True})
    assert job_server._receive(conn)[0] == {"refused": "another key"}
    conn.close()
    assert server.wait(timeout=30) == 0 and not socket.exists()


def test_serve_detaches_once_stops_on_request_and_when_idle(tmp_path):
    socket = tmp_path / "jobs.sock"
    first = dape("serve", "--detach", "--socket", str(socket), "--idle-exit", "300")
    assert first.returncode == 0 and f"listening at {socket}" in first.stdout and socket.exists()
    again = dape("serve", "--detach", "--socket", str(socket))
    assert again.returncode == 0 and "listening" in again.stdout
    stop = dape("serve", "--stop", "--socket", str(socket))
    assert "stopped the server" in stop.stdout and not socket.exists()
    assert "no server listens" in dape("serve", "--stop", "--socket", str(socket)).stdout
    idle = start_server(socket, idle_s=1)
    assert idle.wait(timeout=60) == 0 and not socket.exists()


def test_auto_names_one_short_socket_per_installation(tmp_path, monkeypatch):
    auto = job_server.socket_path("auto")
    assert len(str(auto)) <= job_server.MAX_SOCKET_PATH and job_server.socket_path("") is None
    monkeypatch.chdir(tmp_path)  # a nested workflow's jobs run elsewhere and find the same server
    assert job_server.socket_path("auto") == auto
    monkeypatch.setattr(job_server, "PACKAGE", str(tmp_path / "dape_core"))
    assert job_server.socket_path("auto") != auto
    too_long = dape("serve", "--socket", str(tmp_path / ("x" * 120)))
    assert too_long.returncode != 0 and "longer than" in too_long.stderr


def test_the_commands_file_size_limit_holds_in_the_server(server, tiny_corpus, tmp_path):
    """A limit set on the job (a disk-full fault) holds where it runs: the model cannot be written."""
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))

    done = served(server, "train", "--data-dir", str(tiny_corpus), "--out-dir", str(tmp_path / "o"), "--steps", "2",
                  *TRAIN, preexec_fn=small_files)
    assert done.returncode != 0 and not (tmp_path / "o" / "model.pt").exists()
    assert "File too large" in done.stderr or "No space" in done.stderr or "EFBIG" in done.stderr, done.stderr[-1500:]


def test_a_command_of_another_environment_runs_in_its_own_process(server, tmp_path):
    """PYTHONPATH (read when the interpreter starts) differs: the server's modules are not the command's."""
    where = tmp_path / "no_torch"
    (where / "torch").mkdir(parents=True)
    (where / "torch" / "__init__.py").write_text("raise ImportError('the command imported its own torch')\n")
    _, socket = server
    done = dape("evaluate", "--checkpoint", str(tmp_path / "model.pt"), "--data-dir", str(tmp_path), "--out",
                str(tmp_path / "x.csv"), socket=socket, env={"PYTHONPATH": str(where)})
    assert done.returncode != 0 and "the command imported its own torch" in done.stderr
