"""Stage jobs in forks of one warm process: a workflow's hundreds of short jobs without Python's start and torch's
import in each.

A job's command is unchanged (``dape train --spec … > log 2>&1``). With ``DAPE_JOB_SERVER`` naming a socket where
``dape serve`` listens (``auto``: one per installation and interpreter, :func:`socket_path`), the command hands its
arguments, working directory, environment and standard streams to the server, which forks a child that already has
torch and the stages imported. The child runs the command as its own process would (same code, settings and seeds,
so the same bytes on one machine: ``tests/test_job_server.py``) and returns its exit status. The command runs in its
own process when no server listens, when the server's sources have changed (it then stops), for another installation
or interpreter, outside the server's control group (a scheduler's allocation), with limits above its own, and for
commands not in :data:`FORWARDED`. A signal to the command is passed on to its child, and a child whose command has
gone stops: a workflow's kill ends the job.

Snakemake's benchmark files of such a job record the command's wall time but not its child's CPU and memory; the
design stage reads wall seconds only (:func:`dape_core.report.design.measured_prices`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ENV = "DAPE_JOB_SERVER"
#: the commands a server runs: the workflow's many short jobs. Not `time`, whose measurement is its own processes'
#: start, nor the one-off `tokenize`, nor `finetune`, whose transformers the server would import for every job.
FORWARDED = ("train", "evaluate", "che", "report")
#: imported once by the server, so that its children start with them
PRELOAD = ("torch", "torch._dynamo", "numpy", "pandas", "dape_core.train", "dape_core.evaluate", "dape_core.memory",
           "dape_core.data", "dape_core.che.runner", "dape_core.report.cli", "dape_core.report.figures")
#: variables read at interpreter start or preload: a command whose values differ runs in its own process (later-read
#: ones, CUDA's and the allocator's, come from the command's environment; each command sets its own `--threads`)
IMPORT_ENV = ("TRITON_INTERPRET", "PYTHONHASHSEED", "PYTHONPATH")
#: the command's limits its job keeps in the server's child (a disk-full or memory limit set on the job)
LIMITS = ("RLIMIT_FSIZE", "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_CPU", "RLIMIT_CORE")
HEADER = struct.Struct("!I")
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux
PACKAGE = str(Path(__file__).resolve().parent)


def source_key() -> str:
    """The key of a child's code: the interpreter and the package's files (path, size, mtime); a command of another
    key finds the server's code stale, and the server stops."""
    package = Path(PACKAGE)
    digest = hashlib.sha256(f"{sys.executable}\0{sys.version}\0{package}".encode())
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            stat = path.stat()
            digest.update(f"{path.relative_to(package)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def import_env() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in IMPORT_ENV}


def control_group() -> str:
    """This process's control groups: a job of a scheduler's allocation (slurm's cgroup) runs inside it, never in a
    server outside it."""
    try:
        return Path("/proc/self/cgroup").read_text()
    except OSError:
        return ""


def limits() -> dict[str, list[int]]:
    import resource

    return {name: list(resource.getrlimit(getattr(resource, name))) for name in LIMITS if hasattr(resource, name)}


def socket_path(value: str | None = None) -> Path | None:
    """The socket ``DAPE_JOB_SERVER`` (or ``value``) names, None when unset: a path, or ``auto``: one per installation
    and interpreter in the temporary directory, whatever the working directory (nested workflows share it)."""
    value = os.environ.get(ENV) if value is None else value
    if not value:
        return None
    if value != "auto":
        return Path(value)
    where = f"{PACKAGE}\0{sys.executable}"
    return (Path(tempfile.gettempdir())
            / f"dape-jobs-{os.getuid()}-{hashlib.sha256(where.encode()).hexdigest()[:12]}.sock")


# ------------------------------------------------------------------------------------------------ messages
def _send(conn: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(conn, [payload], fds)
    else:
        conn.sendall(payload)


def _receive(conn: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (None when the other side closed first) and the descriptors that came with it."""
    buffer, fds = b"", []
    while len(buffer) < HEADER.size or len(buffer) < HEADER.size + HEADER.unpack_from(buffer)[0]:
        if max_fds and not fds:
            chunk, fds, _, _ = socket.recv_fds(conn, 1 << 16, max_fds)
        else:
            chunk = conn.recv(1 << 16)
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        buffer += chunk
    return json.loads(buffer[HEADER.size:HEADER.size + HEADER.unpack_from(buffer)[0]]), list(fds)


# ------------------------------------------------------------------------------------------------ the command's side
def forward(argv: list[str]) -> int | None:
    """Run ``dape argv`` in a server's child: its exit status, or None when it is to run in this process (no
    server, another key, a command not in :data:`FORWARDED`)."""
    path = socket_path()
    if path is None or not argv or argv[0] not in FORWARDED:
        return None
    child, pending = None, []

    def pass_on(signum, frame):  # a signal that comes before the job's process is known waits for it
        if child is None:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):  # the job has ended already: nothing to pass on
            os.kill(child, signum)

    handlers = {signum: signal.signal(signum, pass_on) for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        _send(conn, {"key": source_key(), "package": PACKAGE, "import_env": import_env(),
                     "argv": [sys.argv[0], *argv], "cwd": os.getcwd(), "env": dict(os.environ),
                     "cgroup": control_group(), "limits": limits()}, [0, 1, 2])
        reply, _ = _receive(conn)
    except OSError:
        reply = None
    if reply is None or "pid" not in reply:
        conn.close()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        for signum in pending:
            os.kill(os.getpid(), signum)
        return None  # refused: another key (that server stops), another control group, or it ended first
    child = int(reply["pid"])
    for signum in pending:
        pass_on(signum, None)
    try:
        done, _ = _receive(conn)
    finally:
        conn.close()
    if done is None:
        print(f"dape {argv[0]}: its process ({child}) ended without a status (killed)", file=sys.stderr, flush=True)
        return 1
    return int(done["exit"])


# ------------------------------------------------------------------------------------------------ the server
def _exit_status(code) -> int:
    """``sys.exit(code)``'s status: None is 0, an int itself, anything else (a message, printed) 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run_job(conn: socket.socket, key: str, imported: dict) -> None:
    """A forked child: take one request from ``conn`` — a job (run as ``dape`` would, its status reported), a ping
    or a stop — and exit. A request of another key stops the server: its code is not the command's."""
    status = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        request, fds = _receive(conn, max_fds=3)
        if request is None:
            os._exit(1)
        if request.get("package", PACKAGE) != PACKAGE:  # another installation's command: it runs its own
            _send(conn, {"refused": "another package"})
            os._exit(0)
        if request.get("key") != key or request.get("stop"):  # these sources changed since the server started
            _send(conn, {"stopped": True} if request.get("key") == key else {"refused": "another key"})
            os.kill(os.getppid(), signal.SIGTERM)
            os._exit(0)
        if request.get("ping"):
            _send(conn, {"pong": True})
            os._exit(0)
        if len(fds) != 3 or request.get("cgroup") != control_group() or request.get("import_env") != imported:
            _send(conn, {"refused": "another control group or environment"})
            os._exit(0)
        import resource

        try:
            for name, (soft, hard) in request.get("limits", {}).items():
                resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError):  # above the server's own: the command keeps them in its own process
            _send(conn, {"refused": "limits"})
            os._exit(0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        _send(conn, {"pid": os.getpid()})

        def watch() -> None:  # the command is gone (killed): so is its job
            with contextlib.suppress(OSError):  # a reset connection is a gone command too
                conn.recv(1)
            os._exit(143)

        threading.Thread(target=watch, daemon=True).start()
        from dape_core import cli

        try:
            status = _exit_status(cli.main(sys.argv[1:]))
        except SystemExit as err:
            status = _exit_status(err.code)
        except BaseException:  # noqa: BLE001 - printed as the interpreter would, the status its
            import traceback

            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        _send(conn, {"exit": status})
    finally:
        os._exit(status)


def ask(path: Path, message: dict) -> dict | None:
    """A server's answer to ``message`` (with this process's key); None when none listens at ``path``."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        _send(conn, {"key": source_key(), "package": PACKAGE, **message})
        return _receive(conn)[0]
    except OSError:
        return None
    finally:
        conn.close()


def _gone(path: Path, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not path.exists()


def _reap(children: set[int]) -> None:
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.discard(pid)


def _listening(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def serve(path: Path, idle_s: float, ready=None) -> None:
    """Listen at ``path`` until ``idle_s`` seconds pass with no job running or arriving, or SIGTERM; each job runs
    in a forked child (:func:`_run_job`). ``ready()`` is called once listening."""
    if len(str(path)) > MAX_SOCKET_PATH:
        raise SystemExit(f"dape serve: {path}: longer than {MAX_SOCKET_PATH} characters, more than a socket's "
                         f"path holds; allowed: a shorter path in {ENV}, or auto")
    if _listening(path):
        raise SystemExit(f"dape serve: {path}: a server already listens there")
    key, imported = source_key(), import_env()  # before the imports, which set variables of their own
    for name in PRELOAD:
        __import__(name)
    path.unlink(missing_ok=True)  # a socket file its server left when killed
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    children: set[int] = set()
    last = time.monotonic()
    if ready is not None:
        ready()
    try:
        while not stop.is_set():
            _reap(children)
            if children:
                last = time.monotonic()
            elif time.monotonic() - last > idle_s:
                break
            try:
                readable, _, _ = select.select([server], [], [], 0.5)
            except InterruptedError:
                continue
            if not readable:
                continue
            conn, _ = server.accept()
            pid = os.fork()
            if pid == 0:
                server.close()
                _run_job(conn, key, imported)
            conn.close()
            children.add(pid)
            last = time.monotonic()
    finally:
        server.close()
        path.unlink(missing_ok=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--socket", default=None,
                   help=f"where to listen (default: ${ENV}, else auto: one socket per installation)")
    p.add_argument("--idle-exit", type=float, default=600.0,
                   help="stop after this many seconds with no job running or arriving")
    p.add_argument("--detach", action="store_true",
                   help="serve in the background and return once listening (at once when a server of this code "
                        "listens; one of other code is stopped first)")
    p.add_argument("--stop", action="store_true", help="stop the server listening there (its running jobs finish)")


def run(args) -> int:
    from dape_core.errors import require_positive

    require_positive("idle_exit", args.idle_exit, integer=False)
    path = socket_path(args.socket or os.environ.get(ENV) or "auto")
    if args.stop:
        answer = ask(path, {"stop": True})
        if answer is not None:
            _gone(path)
        print(f"dape serve: {'stopped the server' if answer is not None else 'no server listens'} at {path}")
        return 0
    answer = ask(path, {"ping": True})
    if answer is not None and answer.get("pong"):
        print(f"dape serve: listening at {path}", flush=True)
        return 0
    if answer is not None and not _gone(path):  # another code's server, asked to stop by the ping
        raise SystemExit(f"dape serve: {path}: the server there (of other code) did not stop")
    if not args.detach:
        serve(path, args.idle_exit)
        return 0
    read, write = os.pipe()
    if os.fork() == 0:  # the server: its own session, no terminal, outliving make
        os.close(read)
        os.setsid()
        if os.fork():
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(devnull, target)

        def ready() -> None:
            os.write(write, b"1")
            os.close(write)

        try:
            serve(path, args.idle_exit, ready)
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    if answer != b"1":
        print(f"dape serve: the server did not start at {path}; jobs run in their own processes", file=sys.stderr)
        return 1
    print(f"dape serve: listening at {path}", flush=True)
    return 0
