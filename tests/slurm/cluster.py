"""A throwaway single-node SLURM cluster on this machine, for integration tests.

What it is for: booting real SLURM daemons (Debian's ``slurmctld slurmd slurm-client munge``
packages) with one node that has this machine's CPUs and memory plus one *declared* GPU
(``File=/dev/null``, so a GPU request can be scheduled where no GPU exists), running a
Snakemake workflow against it through ``snakemake-executor-plugin-slurm``, and stopping every
daemon it started, by PID.

What it is not: a cluster installer or anything for production. It never uses systemd, never
installs packages (``.ci/run`` does, see ``APT_INSTALL_COMMAND``) and refuses to run where a
real SLURM configuration already exists.

Why ``/etc/slurm/slurm.conf`` and not ``SLURM_CONF``: the executor's job step
(snakemake-executor-plugin-slurm-jobstep 0.6) strips every ``SLURM_*`` variable except the job
identity before it calls ``srun`` inside the job, so ``srun`` only finds the configuration at
its compiled-in default path. Everything else (state, spool, logs, the munge key and socket)
lives in a private directory, and the two files under ``/etc/slurm`` are removed at teardown.
A lock file serialises clusters on one machine, and daemons left over by a killed run are
stopped by the PIDs it recorded.

Use as a pytest fixture (``slurm_cluster``, session-scoped) or by hand::

    python tests/slurm/cluster.py          # boots, prints the environment, waits for Ctrl-C
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# The one command that makes this machine able to run the cluster (Debian 12 bookworm ships
# SLURM 22.05 and munge 0.5.15). --no-install-recommends keeps it to a few seconds.
APT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
APT_INSTALL_COMMAND = (
    "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
    "--no-install-recommends " + " ".join(APT_PACKAGES)
)
REQUIRED_BINARIES = ("munged", "slurmctld", "slurmd", "sinfo", "sbatch", "squeue", "scontrol")

# Set to 1 (CI does) to turn "cannot run SLURM here" into a test failure instead of a skip,
# so that a broken install step cannot hide behind a green run.
REQUIRE_ENV_VAR = "NNPERF_REQUIRE_SLURM"

SLURM_CONF_DIR = Path("/etc/slurm")
MARKER = "# written by nnperf tests/slurm/cluster.py; removed at teardown"
LOCK_DIR = Path(tempfile.gettempdir()) / "nnperf-slurm"
PARTITION = "debug"
GPU_TYPE = "testgpu"
# squeue only reports finished jobs for MinJobAge seconds; the executor's squeue status
# polling needs them to stay visible for at least 3x its first-check delay.
MIN_JOB_AGE_S = 300
DECLARED_MIN_MEMORY_MB = 32768


def find_binary(name: str) -> str | None:
    """Path of a SLURM/munge program; daemons live in /usr/sbin, which a non-login PATH lacks."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")


def skip_reason() -> str | None:
    """Why this machine cannot run the cluster, or None when it can."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "SLURM test needs Linux"
    if os.geteuid() != 0:
        return "SLURM test needs root (it starts munged as the munge user and slurmd as root)"
    missing = [b for b in REQUIRED_BINARIES if find_binary(b) is None]
    if missing:
        return (
            f"SLURM binaries missing ({', '.join(missing)}): install with `{APT_INSTALL_COMMAND}`"
        )
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        return (
            "snakemake-executor-plugin-slurm not installed: "
            "pip install snakemake-executor-plugin-slurm"
        )
    for name in ("slurm.conf", "gres.conf"):
        path = SLURM_CONF_DIR / name
        if path.exists() and MARKER not in path.read_text(errors="replace"):
            return f"{path} exists and is not ours: refusing to replace a real SLURM setup"
    return None


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_hardware() -> dict[str, str]:
    """This machine as slurmd sees it (``slurmd -C``): CPUs, sockets, cores, RealMemory."""
    out = subprocess.run(
        [find_binary("slurmd"), "-C"], capture_output=True, text=True, check=True
    ).stdout
    first = out.splitlines()[0]
    fields = dict(item.split("=", 1) for item in first.split())
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    hardware = {k: fields[k] for k in keep if k in fields}
    # Memory is declared at least the size of a small GPU node, so the profile's real
    # requests (16 GB for a GPU measurement) schedule on a small CI machine too; the tiny
    # test jobs use a fraction of it, and nothing enforces the limit (no cgroups).
    # slurm.conf sets SlurmdParameters=config_overrides, so slurmd does not drain the node
    # when it measures less. CPUs stay the real ones: task/affinity binds to real cores.
    hardware["RealMemory"] = str(max(int(fields["RealMemory"]), DECLARED_MIN_MEMORY_MB))
    return hardware


def slurm_conf_text(
    root: Path, nodename: str, hardware: dict[str, str], ports: dict[str, int]
) -> str:
    """slurm.conf for one node, one default partition, no accounting, no cgroups."""
    hw = " ".join(f"{k}={v}" for k, v in hardware.items())
    return f"""{MARKER}
ClusterName=nnperftest
SlurmctldHost={nodename}(127.0.0.1)
SlurmctldPort={ports["slurmctld"]}
SlurmdPort={ports["slurmd"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/slurmd
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
# no systemd and no writable cgroup tree here: track processes through /proc
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# no slurmdbd: sacct cannot work, so the executor profile must poll with squeue
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge={MIN_JOB_AGE_S}
SlurmctldTimeout=60
SlurmdTimeout=60
NodeName={nodename} NodeAddr=127.0.0.1 {hw} Gres=gpu:{GPU_TYPE}:1 State=UNKNOWN
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def gres_conf_text(nodename: str) -> str:
    """gres.conf declaring one GPU backed by /dev/null: schedulable, never usable."""
    return f"""{MARKER}
NodeName={nodename} Name=gpu Type={GPU_TYPE} File=/dev/null
"""


@dataclass
class SlurmCluster:
    """One munged + slurmctld + slurmd, all under ``root``; ``start()`` then ``stop()``.

    ``root`` defaults to a fresh directory under ``LOCK_DIR`` that ``stop()`` removes; a root
    passed in is kept (with its logs) and must be reachable by the munge user.
    """

    root: Path | None = None
    nodename: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    _lock_fd: int | None = None
    _written: list[Path] = field(default_factory=list)
    _own_root: bool = False

    @property
    def partition(self) -> str:
        return PARTITION

    @property
    def gpu_type(self) -> str:
        return GPU_TYPE

    def log_tail(self, lines: int = 30) -> str:
        """Last lines of every daemon log: the first thing to read when a start fails."""
        if self.root is None:
            return ""
        parts = []
        # daemon logs, their stdout/stderr (config errors land there) and munged's log
        for log in [*sorted((self.root / "log").glob("*")), self.root / "munge" / "munged.log"]:
            if log.is_file():
                text = log.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {log}\n" + "\n".join(text))
        return "\n".join(parts)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> SlurmCluster:
        reason = skip_reason()
        if reason:
            raise RuntimeError(reason)
        self._acquire_lock()
        try:
            self._stop_leftovers()
            if self.root is None:
                # 0711: munged runs as munge and must pass through to root/munge
                self.root = Path(tempfile.mkdtemp(prefix="run-", dir=LOCK_DIR))
                os.chmod(self.root, 0o711)
                self._own_root = True
            self._write_config()
            self._start_munged()
            conf = str(SLURM_CONF_DIR / "slurm.conf")
            # -D: stay in the foreground, so the PID we hold is the daemon's; -c: no old state
            self._start("slurmctld", ["slurmctld", "-D", "-c", "-f", conf])
            self._start("slurmd", ["slurmd", "-D", "-N", self.nodename, "-f", conf])
            self._record_pids()
            self._wait_idle(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Cancel our jobs, then stop every daemon we started (by PID) and remove our config."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run(
                ["scancel", "--quiet", "--full", "--user", "root"], capture_output=True, timeout=30
            )
            self._wait_no_running_jobs(15.0)
        # Job steps run in slurmstepd processes that slurmd double-forks into sessions of
        # their own; after the scancel above they normally end by themselves. Any still
        # there were started by our slurmd (only one cluster can hold the lock and own
        # /etc/slurm), so they are ours: found by name and start time, stopped by PID.
        slurmd = self.procs.get("slurmd")
        strays = _slurmstepd_pids_since(_start_ticks(slurmd.pid)) if slurmd else []
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is not None:
                _terminate(proc.pid, proc)
        for pid in strays:
            _terminate(pid)
        self.procs.clear()
        for path in self._written:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._written.clear()
        with contextlib.suppress(FileNotFoundError):
            (LOCK_DIR / "daemons.json").unlink()
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
            self._own_root = False
        self._release_lock()

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- pieces ----------------------------------------------------------------------------

    def _acquire_lock(self, timeout_s: float = 600.0) -> None:
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        os.chmod(LOCK_DIR, 0o711)
        fd = os.open(LOCK_DIR / "lock", os.O_CREAT | os.O_RDWR, 0o600)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise RuntimeError(f"another SLURM test cluster holds {LOCK_DIR / 'lock'}")
                time.sleep(1.0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _stop_leftovers(self) -> None:
        """Stop daemons a killed earlier run recorded, if they are still those daemons."""
        record = LOCK_DIR / "daemons.json"
        if record.exists():
            for pid, cmdline in json.loads(record.read_text()).items():
                # a recycled PID runs something else: only the exact command line counts
                if _cmdline(int(pid)) == cmdline:
                    _terminate(int(pid))
            record.unlink()
        # run directories of killed runs: nothing uses them while we hold the lock
        for old_root in LOCK_DIR.glob("run-*"):
            shutil.rmtree(old_root, ignore_errors=True)

    def _record_pids(self) -> None:
        doc = {str(p.pid): _cmdline(p.pid) for p in self.procs.values()}
        (LOCK_DIR / "daemons.json").write_text(json.dumps(doc))

    def _write_config(self) -> None:
        for sub in ("state", "spool/slurmd", "run", "log", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        ports = {"slurmctld": free_port(), "slurmd": free_port()}
        SLURM_CONF_DIR.mkdir(parents=True, exist_ok=True)
        files = {
            "slurm.conf": slurm_conf_text(self.root, self.nodename, node_hardware(), ports),
            "gres.conf": gres_conf_text(self.nodename),
        }
        for name, text in files.items():
            path = SLURM_CONF_DIR / name
            path.write_text(text)
            self._written.append(path)

    def _start_munged(self) -> None:
        """munged as the munge user with a fresh key; its files live under root/munge."""
        mdir = self.root / "munge"
        # munged refuses key and socket directories others can write to, and runs as munge:
        # mdir belongs to munge, and its parents (0711, see _make_root) let munge pass.
        key = mdir / "munge.key"
        key.write_bytes(os.urandom(1024))
        for path in (mdir, key):
            shutil.chown(path, "munge", "munge")
        os.chmod(mdir, 0o700)
        os.chmod(key, 0o400)
        self._start(
            "munged",
            [
                "munged", "--foreground", "--force",
                f"--socket={mdir}/munge.socket",
                f"--key-file={key}",
                f"--pid-file={mdir}/munged.pid",
                f"--log-file={mdir}/munged.log",
                f"--seed-file={mdir}/munged.seed",
            ],
            user="munge",
        )
        _wait_for(lambda: (mdir / "munge.socket").exists(), 15.0, "munged socket", self)

    def _start(self, name: str, argv: list[str], user: str | None = None) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "wb")  # noqa: SIM115 (owned by Popen)
        self.procs[name] = subprocess.Popen(
            [find_binary(argv[0]), *argv[1:]],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, user=user,
        )
        log.close()

    def _wait_idle(self, timeout_s: float) -> None:
        def idle() -> bool:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}\n{self.log_tail()}")
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True
            )
            return out.returncode == 0 and out.stdout.split() == [self.nodename, "idle"]

        _wait_for(idle, timeout_s, "node idle in sinfo", self)

    def _wait_no_running_jobs(self, timeout_s: float) -> None:
        def drained() -> bool:
            out = subprocess.run(
                ["squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING,SUSPENDED", "-o", "%i"],
                capture_output=True, text=True,
            )
            return out.returncode != 0 or not out.stdout.strip()

        with contextlib.suppress(TimeoutError):
            _wait_for(drained, timeout_s, "jobs drained", self)


def _wait_for(predicate, timeout_s: float, what: str, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{cluster.log_tail()}")


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _stat_fields(pid: int) -> tuple[str, list[str]] | None:
    """(comm, fields after comm) from /proc/PID/stat; see proc(5) for the field order."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    return comm, stat[stat.rindex(")") + 1 :].split()


def _start_ticks(pid: int) -> int:
    """Start time of a process in clock ticks since boot (proc(5) field 22)."""
    parsed = _stat_fields(pid)
    return int(parsed[1][19]) if parsed else 0


def _slurmstepd_pids_since(ticks: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        parsed = _stat_fields(int(entry.name))
        if parsed and parsed[0] == "slurmstepd" and int(parsed[1][19]) >= ticks:
            found.append(int(entry.name))
    return found


def _terminate(pid: int, proc: subprocess.Popen | None = None, grace_s: float = 10.0) -> None:
    """SIGTERM one PID, then SIGKILL after grace_s; reaps it when we are its parent."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait(timeout=10)


def main() -> int:
    """Boot a cluster for trying the profile by hand; Ctrl-C stops it."""
    reason = skip_reason()
    if reason:
        print(reason)
        return 1
    with SlurmCluster() as cluster:
        print(f"SLURM up: node {cluster.nodename}, partition {cluster.partition}, "
              f"GPU gres gpu:{cluster.gpu_type}:1; logs in {cluster.root}/log. Ctrl-C stops it.",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
