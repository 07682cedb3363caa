"""A single-node slurm cluster on localhost, for integration tests.

The cluster lives in one state directory: a private munge key and socket,
``etc/slurm.conf`` and ``etc/cgroup.conf``, spool and log directories, and one
PID file per daemon under ``pids/``.  Daemons and clients find the
configuration through ``SLURM_CONF``.  One global file is unavoidable: the
slurm executor's job step strips ``SLURM_*`` variables (``SLURM_CONF`` among
them) before its nested ``srun``, which then reads the compiled-in
``/etc/slurm/slurm.conf``.  ``up`` therefore copies slurm.conf there (moving
an existing file aside into the state directory) and ``down`` removes the copy
and restores what was there.

Usage::

    python tests/cluster/slurm_localhost.py up|down|status --state-dir DIR

or, from a test, ``with slurm_cluster(state_dir) as env: ...`` where ``env``
holds the variables (``SLURM_CONF``) that slurm clients need.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

PACKAGES = ("slurm-wlm", "munge")
REQUIRED_BINARIES = (
    "munged",
    "munge",
    "unmunge",
    "slurmctld",
    "slurmd",
    "sinfo",
    "squeue",
    "sbatch",
    "srun",
    "scontrol",
    "scancel",
)
DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITION = "debug"
CLUSTER_NAME = "dape"
DEFAULT_CTLD_PORT = 6817
DEFAULT_SLURMD_PORT = 6818
GLOBAL_SLURM_CONF = Path("/etc/slurm/slurm.conf")
MARKER = "# single-node test cluster, state dir: "
SOCKET_PATH_MAX = 107


class PreconditionError(RuntimeError):
    """The machine cannot host the cluster (not root, no apt-get, install failed, port busy)."""


class ClusterError(RuntimeError):
    """The cluster was set up but a daemon failed to start, come up or stop."""


def host_unsuitable_reason() -> str | None:
    """Why this machine is not a root Linux host with apt-get, or None when it is."""
    if not sys.platform.startswith("linux"):
        return f"needs Linux, this is {sys.platform}"
    if os.geteuid() != 0:
        return f"needs root to install packages and run slurm daemons (euid {os.geteuid()})"
    if shutil.which("apt-get") is None:
        return "apt-get not found (the harness installs slurm-wlm and munge from Debian packages)"
    return None


def _binaries_missing() -> list[str]:
    return [b for b in REQUIRED_BINARIES if _which(b) is None]


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin:/bin")


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, timeout=timeout, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def ensure_packages(packages: tuple[str, ...] = PACKAGES, *, log=print) -> bool:
    """Install the Debian packages unless their binaries are present; True when apt-get ran.

    ``apt-get update`` runs only when a plain install fails (missing or stale lists).
    Service start-up by maintainer scripts is suppressed for the duration of the install.
    """
    if not _binaries_missing():
        return False
    reason = host_unsuitable_reason()
    if reason:
        raise PreconditionError(reason)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "-o", "Dpkg::Options::=--force-confold", *packages]
    with _no_service_start():
        log("installing " + " ".join(packages))
        res = _run(install, env=env, timeout=900)
        if res.returncode != 0:
            log("apt-get install failed; running apt-get update")
            upd = _run(["apt-get", "update", "-q"], env=env, timeout=600)
            if upd.returncode != 0:
                raise PreconditionError("apt-get update failed:\n" + _tail_text(upd.stdout))
            res = _run(install, env=env, timeout=900)
            if res.returncode != 0:
                raise PreconditionError("apt-get install failed:\n" + _tail_text(res.stdout))
    missing = _binaries_missing()
    if missing:
        raise PreconditionError("installed " + " ".join(packages) + " but still missing: " + " ".join(missing))
    return True


@contextlib.contextmanager
def _no_service_start() -> Iterator[None]:
    """Make invoke-rc.d refuse to start services during the install (a temporary policy-rc.d exiting 101)."""
    policy = Path("/usr/sbin/policy-rc.d")
    if policy.exists():
        yield
        return
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    try:
        yield
    finally:
        policy.unlink(missing_ok=True)


def _tail_text(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _tail_file(path: Path, lines: int = 30) -> str:
    try:
        return _tail_text(path.read_text(errors="replace"), lines)
    except OSError as exc:
        return f"<unreadable: {exc}>"


def _mem_total_mb() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    raise ClusterError("MemTotal not found in /proc/meminfo")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _nvidia_devices() -> list[str]:
    return sorted(glob.glob("/dev/nvidia[0-9]*"), key=lambda p: int(p.rsplit("nvidia", 1)[1]))


def process_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie; reaps it if it is our child."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class SlurmLocalhost:
    """One single-node cluster rooted at ``state_dir``."""

    state_dir: Path
    ctld_port: int = DEFAULT_CTLD_PORT
    slurmd_port: int = DEFAULT_SLURMD_PORT
    ready_timeout: float = 90.0
    stop_grace: float = 10.0
    gpu_files: list[str] | None = None  # GPU device files for gres.conf; None: /dev/nvidia[0-9]*

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir).resolve()
        self.host = socket.gethostname().split(".")[0]

    # layout -----------------------------------------------------------------
    @property
    def conf_dir(self) -> Path:
        return self.state_dir / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.conf_dir / "slurm.conf"

    @property
    def munge_dir(self) -> Path:
        return self.state_dir / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def pid_dir(self) -> Path:
        return self.state_dir / "pids"

    def pid_file(self, daemon: str) -> Path:
        return self.pid_dir / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        return self.log_dir / f"{daemon}.log"

    @property
    def global_conf_backup(self) -> Path:
        return self.conf_dir / "global-slurm.conf.orig"

    def env(self) -> dict[str, str]:
        """Variables slurm clients need to talk to this cluster."""
        return {"SLURM_CONF": str(self.slurm_conf)}

    def client_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env())
        return env

    # configuration ------------------------------------------------------------
    def write_config(self) -> None:
        """Write the munge key, slurm.conf and cgroup.conf into the state directory."""
        for sub in ("etc", "log", "pids", "run", "spool/slurmctld", "spool/slurmd"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        if len(str(self.munge_socket)) > SOCKET_PATH_MAX:
            raise PreconditionError(f"state dir path too long for a unix socket: {self.munge_socket}")
        self.munge_dir.mkdir(exist_ok=True)
        self.munge_dir.chmod(0o711)
        key = self.munge_dir / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)

        cpus = os.cpu_count() or 1
        real_memory = max(256, int(_mem_total_mb() * 0.8))
        gpus = _nvidia_devices() if self.gpu_files is None else list(self.gpu_files)
        gres_node = f" Gres=gpu:{len(gpus)}" if gpus else ""
        s = self.state_dir
        conf = f"""\
{MARKER}{self.state_dir}
ClusterName={CLUSTER_NAME}
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={s}/spool/slurmctld
SlurmdSpoolDir={s}/spool/slurmd
SlurmctldPidFile={s}/run/slurmctld.pid
SlurmdPidFile={s}/run/slurmd.pid
SlurmctldLogFile={self.log_file("slurmctld")}
SlurmdLogFile={self.log_file("slurmd")}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
MinJobAge=300
InactiveLimit=0
KillWait=5
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=30
{"GresTypes=gpu" if gpus else ""}
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={real_memory}{gres_node} State=UNKNOWN
PartitionName={PARTITION} Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
"""
        self.slurm_conf.write_text(conf)
        (self.conf_dir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n")
        gres = self.conf_dir / "gres.conf"
        if gpus:
            gres.write_text("".join(f"NodeName={self.host} Name=gpu File={dev}\n" for dev in gpus))
        else:
            gres.unlink(missing_ok=True)

    def _owns_global_conf(self) -> bool:
        try:
            with GLOBAL_SLURM_CONF.open() as fh:
                return fh.readline().rstrip("\n") == f"{MARKER}{self.state_dir}"
        except OSError:
            return False

    def install_global_conf(self) -> None:
        """Copy slurm.conf to /etc/slurm for clients that lost SLURM_CONF, keeping any existing file."""
        if GLOBAL_SLURM_CONF.exists() and not self._owns_global_conf():
            if GLOBAL_SLURM_CONF.read_text().startswith(MARKER):
                raise PreconditionError(f"{GLOBAL_SLURM_CONF} belongs to another running test cluster")
            if not self.global_conf_backup.exists():
                shutil.copy2(GLOBAL_SLURM_CONF, self.global_conf_backup)
        GLOBAL_SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        tmp = GLOBAL_SLURM_CONF.with_name(".slurm.conf.tmp")
        shutil.copyfile(self.slurm_conf, tmp)
        tmp.chmod(0o644)
        os.replace(tmp, GLOBAL_SLURM_CONF)

    def remove_global_conf(self) -> None:
        """Remove the /etc/slurm copy written by ``up`` and restore the file it replaced."""
        if self._owns_global_conf():
            if self.global_conf_backup.exists():
                shutil.copy2(self.global_conf_backup, GLOBAL_SLURM_CONF)
                self.global_conf_backup.unlink()
            else:
                GLOBAL_SLURM_CONF.unlink()

    # daemons ---------------------------------------------------------------------
    def _daemon_command(self, daemon: str) -> list[str]:
        if daemon == "munged":
            m = self.munge_dir
            return [_which("munged"), "--foreground", "--force", f"--key-file={m / 'munge.key'}",
                    f"--socket={self.munge_socket}", f"--pid-file={self.state_dir / 'run/munged.pid'}",
                    f"--log-file={self.log_file('munged')}", f"--seed-file={m / 'munged.seed'}"]
        if daemon == "slurmctld":
            return [_which("slurmctld"), "-D", "-c", "-f", str(self.slurm_conf)]
        if daemon == "slurmd":
            return [_which("slurmd"), "-D", "-f", str(self.slurm_conf)]
        raise ValueError(daemon)

    def _spawn(self, daemon: str) -> int:
        """Start ``daemon`` detached in its own session and record its PID."""
        script = '"$@" </dev/null >>"$DAEMON_OUT" 2>&1 & echo $!'
        env = self.client_env()
        env["DAEMON_OUT"] = str(self.log_dir / f"{daemon}.out")
        res = subprocess.run(["sh", "-c", script, "sh", *self._daemon_command(daemon)], env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, check=True,
                             timeout=30, start_new_session=True)
        pid = int(res.stdout.strip())
        self.pid_file(daemon).write_text(f"{pid}\n")
        return pid

    def read_pid(self, daemon: str) -> int | None:
        try:
            return int(self.pid_file(daemon).read_text().strip())
        except (OSError, ValueError):
            return None

    def daemon_alive(self, daemon: str) -> bool:
        pid = self.read_pid(daemon)
        return pid is not None and process_alive(pid) and _process_name(pid) == daemon

    def logs_tail(self, lines: int = 25) -> str:
        """The tails of all daemon logs, for error messages."""
        parts = []
        for daemon in DAEMONS:
            for path in (self.log_file(daemon), self.log_dir / f"{daemon}.out"):
                if path.exists():
                    parts.append(f"--- {path} ---\n{_tail_file(path, lines)}")
        return "\n".join(parts) or "(no daemon logs)"

    def _fail(self, message: str) -> ClusterError:
        return ClusterError(f"{message}\n{self.logs_tail()}")

    def _wait(self, what: str, daemon: str, probe, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            ok, last = probe()
            if ok:
                return
            if not self.daemon_alive(daemon):
                raise self._fail(f"{daemon} exited while waiting for {what}; last probe: {last}")
            time.sleep(0.5)
        raise self._fail(f"timed out after {timeout:.0f}s waiting for {what}; last probe: {last}")

    def _probe_munge(self) -> tuple[bool, str]:
        sock = f"--socket={self.munge_socket}"
        cred = _run([_which("munge"), sock, "-n"], timeout=10)
        if cred.returncode != 0:
            return False, cred.stdout.strip()
        res = subprocess.run([_which("unmunge"), sock], input=cred.stdout, text=True, timeout=10,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return res.returncode == 0, res.stdout.strip().splitlines()[0] if res.stdout else ""

    def _probe_ctld(self) -> tuple[bool, str]:
        res = _run([_which("scontrol"), "ping"], env=self.client_env(), timeout=15)
        return res.returncode == 0 and " is UP" in res.stdout, res.stdout.strip()

    def node_state(self) -> str:
        """The node's sinfo state (``idle``, ``down*``, ...), followed by its reason when it has one."""
        res = _run([_which("sinfo"), "-h", "-N", "-n", self.host, "-o", "%t|%E"], env=self.client_env(), timeout=15)
        if res.returncode != 0:
            return f"sinfo failed: {res.stdout.strip()}"
        state, _, reason = res.stdout.strip().partition("|")
        return state if reason in ("", "none") else f"{state} ({reason})"

    def _probe_node(self) -> tuple[bool, str]:
        state = self.node_state()
        return state == "idle", state

    # lifecycle -----------------------------------------------------------------
    def up(self, log=print) -> dict[str, str]:
        """Install packages if needed, write the configuration, start the daemons, wait for an idle node."""
        reason = host_unsuitable_reason()
        if reason:
            raise PreconditionError(reason)
        ensure_packages(log=log)
        if all(self.daemon_alive(d) for d in DAEMONS):
            self._wait("node idle", "slurmd", self._probe_node, self.ready_timeout)
            return self.env()
        self.down(log=log)
        for port in (self.ctld_port, self.slurmd_port):
            if not _port_free(port):
                raise PreconditionError(f"TCP port {port} is in use (another slurm daemon?)")
        self.write_config()
        start = time.monotonic()
        try:
            self.install_global_conf()
            for daemon, what, probe, timeout in (
                ("munged", "munge credentials", self._probe_munge, 20.0),
                ("slurmctld", "slurmctld UP", self._probe_ctld, self.ready_timeout),
                ("slurmd", f"node {self.host} idle", self._probe_node, self.ready_timeout),
            ):
                log(f"{daemon} pid {self._spawn(daemon)}")
                self._wait(what, daemon, probe, timeout)
        except BaseException:
            with contextlib.suppress(ClusterError):
                self.down(log=log)
            raise
        log(f"cluster up in {time.monotonic() - start:.1f}s: node {self.host} idle, SLURM_CONF={self.slurm_conf}")
        return self.env()

    def _stop(self, daemon: str, log=print) -> None:
        pid = self.read_pid(daemon)
        pid_file = self.pid_file(daemon)
        if pid is None:
            pid_file.unlink(missing_ok=True)
            return
        if not process_alive(pid):
            pid_file.unlink(missing_ok=True)
            return
        if _process_name(pid) != daemon:
            log(f"pid {pid} from {pid_file} is now {_process_name(pid)!r}, not {daemon}; leaving it alone")
            pid_file.unlink(missing_ok=True)
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if process_alive(pid):
            log(f"{daemon} (pid {pid}) ignored SIGTERM for {self.stop_grace:.0f}s; sending SIGKILL")
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
        if process_alive(pid):
            raise ClusterError(f"{daemon} (pid {pid}) survived SIGKILL")
        pid_file.unlink(missing_ok=True)
        log(f"stopped {daemon} (pid {pid})")

    def down(self, log=print) -> None:
        """Cancel remaining jobs, then stop slurmd, slurmctld and munged by their recorded PIDs."""
        if self.daemon_alive("slurmctld") and self.slurm_conf.exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                _run([_which("scancel"), "--user", pwd.getpwuid(os.geteuid()).pw_name],
                     env=self.client_env(), timeout=15)
        errors = []
        for daemon in reversed(DAEMONS):
            try:
                self._stop(daemon, log=log)
            except (ClusterError, OSError) as exc:
                errors.append(str(exc))
        self.remove_global_conf()
        still = [d for d in DAEMONS if self.read_pid(d) is not None and process_alive(self.read_pid(d))]
        if errors or still:
            raise ClusterError("could not stop: " + "; ".join(errors + still))

    def job_state(self, job_id: str | int) -> str:
        """A job's state as squeue reports it (finished jobs stay visible for MinJobAge)."""
        res = _run([_which("squeue"), "-h", "--states=all", "-j", str(job_id), "-o", "%T"],
                   env=self.client_env(), timeout=30)
        return res.stdout.strip()

    def status(self) -> dict[str, object]:
        """PID and liveness of each daemon, and the node state when slurmctld runs."""
        info: dict[str, object] = {}
        for daemon in DAEMONS:
            info[daemon] = {"pid": self.read_pid(daemon), "alive": self.daemon_alive(daemon)}
        info["node"] = self.node_state() if self.daemon_alive("slurmctld") else "slurmctld not running"
        return info


@contextlib.contextmanager
def slurm_cluster(state_dir: str | os.PathLike, **kwargs) -> Iterator[dict[str, str]]:
    """Bring a cluster up in ``state_dir``, yield the client environment variables, stop it by PID."""
    cluster = SlurmLocalhost(Path(state_dir), **kwargs)
    try:
        yield cluster.up()
    finally:
        cluster.down()


REPO_ROOT = Path(__file__).resolve().parents[2]
SLURM_PROFILE = REPO_ROOT / "profiles" / "slurm"
FAST_STATUS_ENV = {
    "DAPE_SLURM_STATUS_INIT_S": "2",
    "DAPE_SLURM_LATENCY_WAIT": "5",
    "DAPE_SLURM_MEM_MB": "1000",
}


class SnakemakeRunError(AssertionError):
    """A Snakemake run through slurm exited non-zero."""


def slurm_job_logs(workdir: Path, lines: int = 20) -> str:
    """Tails of the per-job slurm logs Snakemake wrote under ``workdir``."""
    logs = sorted((Path(workdir) / ".snakemake" / "slurm_logs").rglob("*.log"))
    return "\n".join(f"--- {p} ---\n{_tail_file(p, lines)}" for p in logs) or "(no slurm job logs)"


def run_snakemake_on_slurm(workdir: str | os.PathLike, snakefile: str | os.PathLike,
                           extra_args: list[str] | tuple[str, ...] = (), env: dict[str, str] | None = None, *,
                           profile: str | os.PathLike = SLURM_PROFILE, timeout: float = 1800,
                           check: bool = True) -> subprocess.CompletedProcess:
    """Run Snakemake with ``--profile profiles/slurm`` in ``workdir``; ``env`` must carry ``SLURM_CONF``.

    ``--workflow-profile none`` keeps ``profiles/default`` (found relative to the working directory and
    the Snakefile) out of the run; pass another ``--workflow-profile`` in ``extra_args`` to use one.
    Status checks start after 2 s and outputs are awaited 5 s unless ``env`` says otherwise.  The
    output of the run is in the result's ``stdout`` and in ``workdir/snakemake-slurm.log``; with
    ``check``, a non-zero exit raises SnakemakeRunError carrying the tails of it and of the job logs.
    """
    workdir = Path(workdir).resolve()
    run_env = {**FAST_STATUS_ENV, **os.environ, **(env or {})}
    run_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), run_env.get("PATH", "")])
    run_env.pop("SLURM_JOB_ID", None)
    extra = list(extra_args)
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(Path(snakefile).resolve()),
           "--directory", str(workdir), "--profile", str(profile)]
    if "--workflow-profile" not in extra:
        cmd += ["--workflow-profile", "none"]
    cmd += extra
    res = subprocess.run(cmd, cwd=workdir, env=run_env, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    (workdir / "snakemake-slurm.log").write_text(res.stdout)
    if check and res.returncode != 0:
        raise SnakemakeRunError(
            f"snakemake exited {res.returncode}: {shlex.join(cmd)}\n{_tail_text(res.stdout, 60)}\n"
            f"{slurm_job_logs(workdir)}")
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the node to be idle")
    args = parser.parse_args(argv)
    cluster = SlurmLocalhost(args.state_dir, ready_timeout=args.timeout)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    start = time.monotonic()
    try:
        if args.action == "up":
            env = cluster.up(log=log)
            for key, value in env.items():
                print(f"export {key}={shlex.quote(value)}")
        elif args.action == "down":
            cluster.down(log=log)
        else:
            info = cluster.status()
            for daemon in DAEMONS:
                d = info[daemon]
                print(f"{daemon}: pid {d['pid']} {'running' if d['alive'] else 'not running'}")
            print(f"node: {info['node']}")
            return 0 if all(info[d]["alive"] for d in DAEMONS) else 1
    except PreconditionError as exc:
        log(f"precondition not met: {exc}")
        return 2
    except ClusterError as exc:
        log(f"error: {exc}")
        return 1
    log(f"{args.action} took {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
