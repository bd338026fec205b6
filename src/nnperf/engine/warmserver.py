"""A warm fork server shared by the measurement jobs of a study, and by the next study.

Every `timed_run` job is its own process (Snakemake's unit of work, resume and scheduling),
and a fresh process pays the imports before it can time anything: 5.4 s here, 9 s on the
H100 machine for torch and torchvision. multiprocessing's fork server (started by
`nnperf.engine.manager`) pays them once per *job*; this server pays them once per
*environment*. The first job starts it; it imports torch and the worker's side of nnperf
(`worker.PRELOAD`), never runs a torch op or touches a device, and forks one worker per
request. Later jobs connect to it, so a job reaches its first warm-up step in about a second
(its own interpreter start, the request, the fork, device init and model build) instead of
after the imports.

**One server per environment and code.** Its address is a hash of what a worker's behaviour
depends on besides its request (`identity()`): the interpreter and its prefix, where nnperf
is imported from and the hash of its code (`codehash`), the torch/torchvision/numpy
versions, the environment variables that steer the libraries a worker runs
(`ENVIRONMENT_PREFIXES`: CUDA_*, OMP_*, MKL_*, KMP_*, GOMP_*, TORCH*, PYTORCH*, NNPERF_*,
LD_* and a few more), the resource limits, the CPU affinity and the user. Change any of them
(edit the engine, set `CUDA_VISIBLE_DEVICES`, upgrade torch) and the next job gets a server
of its own. What is *not* in it: `sys.path` and every other variable. Snakemake runs each
`script:` with its own temporary script cache on `sys.path`, so a key with them gave every
`snakemake` call a server of its own (six alive at once, ~380 MB each); without them, one
server serves a whole study and the next study of the same environment. A worker sees the
other variables of the job that started the server, not of its own job: none of them
changes what is measured.

**Private to your user, for real.** A local neighbour must not be able to stand in for the
server (a request or a reply it forged would be code run or a PID killed), so:

* the files live in `nnperf-warm-<uid>` under `$XDG_RUNTIME_DIR` when that is a usable
  private directory, else under the temporary directory; the folder is created with mode
  0700 and refused (a one-line NnperfError) unless `os.lstat` shows a real directory owned by
  this user with mode 0700, and a shared parent must be sticky (nobody else may rename it);
* the lock and log files are opened with `O_NOFOLLOW`: a symlink planted in their place is an
  error, never followed;
* every connection's peer is checked (`SO_PEERCRED`): the server refuses a client of another
  user and the client refuses a server of another user; the job SIGKILLs only a PID whose
  parent is the server it checked;
* nothing read from the socket is unpickled: requests and replies are length-prefixed JSON
  objects with a version (`{"v": 1, "m": ...}`), the request a `RunRequest` in its plain-data
  form rebuilt strictly (`nnperf.core.plaindata`). A worker given a model factory or data
  objects (the tests) cannot be served: those run in forked workers.

**Workers are forked fresh per process of a measurement**, as from multiprocessing's server;
the job talks to its worker over the accepted connection with the protocol of
`nnperf.engine.worker`, and kills it on a missed deadline. The job hands the server, with the
request, the write end of a pipe (SCM_RIGHTS): the worker's stdout and stderr, so its
warnings, prints and a native library's last words reach the job's log
(`nnperf.engine.workerlog`), not the server's.

**Nothing lingers.** The server exits after `IDLE_EXIT_S` without a request, or on SIGTERM,
and removes its socket, lock and log then (under the lock, so a job that connects meanwhile
either is served or starts a new server). Set `NNPERF_WARM_SERVER=0` to fork each job's
workers from its own fork server.

No library offers a fork server shared across unrelated processes (multiprocessing's is
private to the process that started it), so this one is written by hand on its primitives.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from nnperf.core.errors import NnperfError

IDLE_EXIT_S = 300.0
START_TIMEOUT_S = 120.0
ENABLE_VARIABLE = "NNPERF_WARM_SERVER"
# The environment variables a worker's behaviour may depend on (thread pools, the devices it
# sees, allocators, compilers, the dynamic linker): the server's key includes them.
ENVIRONMENT_PREFIXES = (
    "CUDA_",
    "CUBLAS",
    "CUDNN",
    "NCCL_",
    "NVIDIA_",
    "OMP_",
    "MKL_",
    "KMP_",
    "GOMP_",
    "TORCH",
    "PYTORCH",
    "TRITON",
    "NNPERF_",
    "LD_",
    "MALLOC_",
    "PYTHONHASHSEED",
    "PYTHONWARNINGS",
    "PYTHONMALLOC",
)
PROTOCOL_VERSION = 1
# A request or a reply larger than this is not one of ours (the largest, a window's steps
# with the environment record, is kilobytes).
MAX_MESSAGE_BYTES = 64 * 2**20
# The one byte sent with the job's output descriptor, ahead of the request.
OUTPUT_HEADER = b"N"


def enabled() -> bool:
    """Whether jobs use the shared server (Linux only; NNPERF_WARM_SERVER=0 turns it off)."""
    return sys.platform.startswith("linux") and os.environ.get(ENABLE_VARIABLE, "1") != "0"


def _versions() -> dict:
    from importlib import metadata

    versions = {}
    for name in ("torch", "torchvision", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _limits() -> list:
    import resource

    names = ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_NOFILE", "RLIMIT_STACK", "RLIMIT_NPROC")
    return [resource.getrlimit(getattr(resource, n)) for n in names if hasattr(resource, n)]


def identity() -> dict:
    """Everything a worker's behaviour depends on besides its request (module docstring):
    not `sys.path`, not the variables outside `ENVIRONMENT_PREFIXES`."""
    from nnperf.core.codehash import PACKAGE_DIR, code_hash

    return {
        "python": sys.executable,
        "prefix": sys.prefix,
        "nnperf": str(PACKAGE_DIR),
        "code": code_hash("nnperf.engine.warmserver"),
        "versions": _versions(),
        "environment": {
            key: value
            for key, value in sorted(os.environ.items())
            if key.startswith(ENVIRONMENT_PREFIXES)
        },
        "limits": _limits(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "uid": os.geteuid(),
    }


# --- the private directory and its files ----------------------------------------------------


def _describe(info: os.stat_result) -> str:
    kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a directory"
    if stat.S_ISLNK(info.st_mode):
        kind = "a symlink"
    return f"{kind} owned by uid {info.st_uid} with mode {stat.S_IMODE(info.st_mode):04o}"


def _is_private_dir(info: os.stat_result) -> bool:
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and stat.S_IMODE(info.st_mode) == 0o700
    )


def runtime_base() -> Path:
    """$XDG_RUNTIME_DIR where it is a private directory of this user, else the temp dir."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        with contextlib.suppress(OSError):
            if _is_private_dir(os.lstat(runtime)) and os.access(runtime, os.W_OK | os.X_OK):
                return Path(runtime)
    return Path(tempfile.gettempdir())


def private_dir(base: Path) -> Path:
    """`base/nnperf-warm-<uid>`, created with mode 0700, or NnperfError when what is there is
    not a real directory of this user with mode 0700, or `base` lets others rename it."""
    base_info = os.stat(base)
    shared = stat.S_IMODE(base_info.st_mode) & 0o022
    if shared and not base_info.st_mode & stat.S_ISVTX:
        raise NnperfError(
            f"warm server: {base} is writable by others and not sticky ({_describe(base_info)}); "
            f"required: a private or sticky parent (set TMPDIR, or {ENABLE_VARIABLE}=0)"
        )
    folder = base / f"nnperf-warm-{os.geteuid()}"
    try:
        os.mkdir(folder, 0o700)
        os.chmod(folder, 0o700)  # the umask may have narrowed it; nobody else can reach it
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not _is_private_dir(info):
        raise NnperfError(
            f"warm server directory {folder} is {_describe(info)}; required: a directory owned "
            f"by uid {os.geteuid()} with mode 0700 (remove it, or set {ENABLE_VARIABLE}=0)"
        )
    return folder


def address(ident: dict) -> Path:
    """The server's socket path for this identity, in the private directory."""
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]
    return private_dir(runtime_base()) / f"{digest}.sock"


def open_private(path: Path, flags: int) -> int:
    """A descriptor of `path` (created 0600), never through a symlink (`O_NOFOLLOW`)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NnperfError(
                f"warm server file {path} is a symlink; required: a regular file of uid "
                f"{os.geteuid()} (remove it, or set {ENABLE_VARIABLE}=0)"
            ) from None
        raise


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold the server's lock: one job starts a server, and a server removes its files under
    it. The file may be removed while someone waits on it, so the lock held must still be the
    file at `lock_path`; otherwise wait on the new one."""
    import fcntl

    while True:
        fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            current = os.lstat(lock_path)
        except FileNotFoundError:
            current = None
        if current is not None and current.st_ino == os.fstat(fd).st_ino:
            break
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)


# --- the messages ---------------------------------------------------------------------------


class JsonConnection:
    """A Unix socket carrying length-prefixed JSON messages `{"v": 1, "m": ...}`: what the
    worker and the job say to each other (tuples arrive as lists). Nothing is unpickled: a
    message that is not JSON, not an object, or of another version is an NnperfError."""

    def __init__(self, sock: socket.socket, peer_pid: int | None = None):
        self.sock = sock
        self.peer_pid = peer_pid

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: Any) -> None:
        body = json.dumps({"v": PROTOCOL_VERSION, "m": message}, default=_plain).encode("utf-8")
        self.sock.sendall(struct.pack("!I", len(body)) + body)

    def poll(self, timeout: float | None = 0.0) -> bool:
        if self.sock.fileno() < 0:
            raise OSError(errno.EBADF, "connection closed")
        return bool(select.select([self.sock], [], [], timeout)[0])

    def recv(self) -> Any:
        (length,) = struct.unpack("!I", self._read(4))
        if length > MAX_MESSAGE_BYTES:
            raise NnperfError(f"warm server protocol: a message of {length} bytes; refused")
        return decode(self._read(length))

    def _read(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise EOFError("the connection closed")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def _plain(value: Any) -> Any:
    """numpy/torch scalars and paths, which json does not know, as plain values."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot send {type(value).__name__} to the job: not plain data")


def decode(body: bytes) -> Any:
    """The message inside one frame's body, or NnperfError (nothing else is ever evaluated)."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise NnperfError("warm server protocol: a message that is not JSON; refused") from None
    if not isinstance(data, dict) or set(data) != {"v", "m"}:
        raise NnperfError('warm server protocol: expected {"v": 1, "m": ...}; refused')
    if data["v"] != PROTOCOL_VERSION:
        raise NnperfError(
            f"warm server protocol: version {data['v']!r}; this side speaks {PROTOCOL_VERSION}"
        )
    return data["m"]


def job_message(job, cwd: str) -> dict:
    """A `WorkerJob` as the plain data the server rebuilds it from."""
    from nnperf.core.plaindata import to_dict

    if job.model_factory is not None or job.data is not None:
        raise NnperfError(
            "a warm server worker loads its model and data by name; a measurement given a "
            "model factory or data objects runs in forked workers (method forkserver)"
        )
    return {
        "kind": "job",
        "cwd": cwd,
        "process": job.process,
        "collect_environment": job.collect_environment,
        "workflow_dir": job.workflow_dir,
        "request": to_dict(job.request),
    }


def job_from_message(message: Any):
    """(WorkerJob, cwd) from a request message, strictly; NnperfError naming what is wrong."""
    from nnperf.core.contract import RunRequest
    from nnperf.core.plaindata import from_dict
    from nnperf.engine.worker import WorkerJob

    keys = {"kind", "cwd", "process", "collect_environment", "workflow_dir", "request"}
    if not isinstance(message, dict) or set(message) != keys or message["kind"] != "job":
        raise NnperfError(f"warm server protocol: a request needs exactly {sorted(keys)}")
    cwd, process, workflow_dir = message["cwd"], message["process"], message["workflow_dir"]
    if not (isinstance(cwd, str) and os.path.isabs(cwd)):
        raise NnperfError(f"warm server protocol: cwd = {cwd!r}; expected an absolute path")
    if not (type(process) is int and process >= 0):
        raise NnperfError(f"warm server protocol: process = {process!r}; expected an int >= 0")
    if not isinstance(message["collect_environment"], bool):
        raise NnperfError("warm server protocol: collect_environment must be true or false")
    if workflow_dir is not None and not isinstance(workflow_dir, str):
        raise NnperfError("warm server protocol: workflow_dir must be a string or null")
    job = WorkerJob(
        request=from_dict(RunRequest, message["request"], "request"),
        process=process,
        collect_environment=message["collect_environment"],
        workflow_dir=workflow_dir,
    )
    return job, cwd


# --- the client -----------------------------------------------------------------------------


def open_connection(path: Path) -> JsonConnection | None:
    """A connection to the server at `path` (None when none listens there), or NnperfError
    when a process of another user does."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(path))
    except OSError:
        client.close()
        return None
    pid, uid, _ = peer_credentials(client)
    if uid != os.geteuid():
        client.close()
        raise NnperfError(
            f"warm server socket {path} is served by uid {uid} (pid {pid}); required: uid "
            f"{os.geteuid()}; refused (remove it, or set {ENABLE_VARIABLE}=0)"
        )
    return JsonConnection(client, peer_pid=pid)


def connect() -> JsonConnection:
    """A connection to this identity's server, started when there is none."""
    path = address(identity())
    connection = open_connection(path)
    if connection is not None:
        return connection
    with locked(path.with_suffix(".lock")):
        connection = open_connection(path)  # another job may have started it meanwhile
        if connection is not None:
            return connection
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a server that died left its socket behind
        return _start(path)


def _server_command(path: Path) -> list[str]:
    """The server's command line: this process's sys.path (made absolute), then `main`."""
    search = [os.path.abspath(entry) if entry else os.getcwd() for entry in sys.path]
    code = (
        "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
        "from nnperf.engine.warmserver import main; main(sys.argv[2])"
    )
    return [sys.executable, "-c", code, json.dumps(search), str(path)]


def _start(path: Path) -> JsonConnection:
    """Start the server for `path` (under the lock) and connect to it."""
    log_path = path.with_suffix(".log")
    log = open_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        server = subprocess.Popen(
            _server_command(path),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            cwd="/",
        )
    finally:
        os.close(log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        connection = open_connection(path)
        if connection is not None:
            return connection
        if server.poll() is not None:
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        server.kill()
    server.wait()
    tail = _tail(log_path)
    with contextlib.suppress(FileNotFoundError):
        log_path.unlink()
    raise RuntimeError(
        f"the warm fork server did not start (set {ENABLE_VARIABLE}=0 to run without it); "
        f"its output:\n{tail}"
    )


def _tail(path: Path, lines: int = 20) -> str:
    try:
        with open(open_private(path, os.O_RDONLY), encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except (OSError, NnperfError):
        return "(none)"


def send_job(connection: JsonConnection, message: dict, output_fd: int) -> None:
    """Send the server a job (`job_message`) and the descriptor its worker writes stdout and
    stderr to."""
    socket.send_fds(connection.sock, [OUTPUT_HEADER], [output_fd])
    connection.send(message)


def _stat_fields(pid: Any) -> list[str] | None:
    """/proc/<pid>/stat after the command name (field 3 on), or None."""
    if type(pid) is not int or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def is_child_of(pid: Any, parent: int | None) -> bool:
    """Whether `pid` is a live process whose parent is `parent` (Linux /proc)."""
    fields = _stat_fields(pid)
    return fields is not None and parent is not None and fields[1] == str(parent)


def process_start(pid: Any) -> int | None:
    """When process `pid` started (clock ticks since boot): with the PID, who it is."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else None


# --- the server -----------------------------------------------------------------------------


class _Stop(Exception):
    """SIGTERM: leave the accept loop and remove the files."""


def _stop(signum, frame):
    raise _Stop()


def _serve_one(client: socket.socket) -> None:
    """Body of a forked worker: take the job's output descriptor, read the job, run it."""
    from nnperf.engine.worker import adopt_output, worker_main

    header, fds, _, _ = socket.recv_fds(client, len(OUTPUT_HEADER), 1)
    connection = JsonConnection(client)
    try:
        if header != OUTPUT_HEADER or len(fds) != 1:
            raise NnperfError("warm server protocol: a request starts with its output descriptor")
        adopt_output(fds[0])
        job, cwd = job_from_message(connection.recv())
    except (NnperfError, EOFError, ValueError, TypeError) as exc:
        print(f"nnperf warm server: refused a request: {exc}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            connection.send(("error", "nnperf", f"the warm server refused the request: {exc}"))
        return
    os.chdir(cwd)
    worker_main(connection, job)


def _fork_worker(client: socket.socket, listener: socket.socket) -> None:
    """Fork one worker for `client`; the server keeps nothing of it."""
    if os.fork() == 0:
        code = 1
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            listener.close()
            _serve_one(client)
            code = 0
        except BaseException:  # noqa: BLE001 - a worker must never return into the loop
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    client.close()


def _accept(listener: socket.socket) -> None:
    """Serve one connection: fork a worker for a peer of this user, refuse any other."""
    client, _ = listener.accept()
    client.setblocking(True)
    pid, uid, _ = peer_credentials(client)
    if uid != os.geteuid():
        print(f"nnperf warm server: refused pid {pid} of uid {uid}", flush=True)
        client.close()
        return
    _fork_worker(client, listener)


def _remove_files(path: Path, listener: socket.socket) -> None:
    """Under the lock: unlink the socket (no new connection reaches it), serve what already
    connected, then remove the lock and the log."""
    with locked(path.with_suffix(".lock")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        listener.setblocking(False)
        while True:
            try:
                _accept(listener)
            except (BlockingIOError, socket.timeout):
                break
        for suffix in (".lock", ".log"):
            with contextlib.suppress(FileNotFoundError):
                path.with_suffix(suffix).unlink()
    listener.close()


def serve(path: Path, idle_exit_s: float = IDLE_EXIT_S) -> None:
    """Import once, then fork one worker per connection until idle for `idle_exit_s` or
    SIGTERM; the socket, lock and log are removed on the way out."""
    import importlib

    from nnperf.engine.worker import PRELOAD

    for name in PRELOAD:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished workers
    os.umask(0o077)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    listener.settimeout(idle_exit_s)
    why = f"idle for {idle_exit_s:g} s"
    signal.signal(signal.SIGTERM, _stop)
    print(f"nnperf warm server {os.getpid()} serving {path}", flush=True)
    try:
        while True:
            try:
                _accept(listener)
            except socket.timeout:
                break
    except _Stop:
        why = "SIGTERM"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"nnperf warm server {os.getpid()}: {why}, exiting", flush=True)
        _remove_files(path, listener)


def main(path: str) -> None:
    serve(Path(path))
