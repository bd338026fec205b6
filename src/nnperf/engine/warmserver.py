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

* the files live in nnperf's private runtime directory (`nnperf.core.runtime_dir`: a folder
  of this user with mode 0700, its files opened with `O_NOFOLLOW`);
* every connection's peer is checked (`SO_PEERCRED`): the server refuses a client of another
  user and the client refuses a server of another user; the job SIGKILLs only a PID whose
  parent is the server it checked;
* nothing read from the socket is unpickled: requests and replies are length-prefixed JSON
  objects with a version (`nnperf.engine.warmprotocol`), the request a `RunRequest` in its
  plain-data form rebuilt strictly. A worker given a model factory or data
  objects (the tests) cannot be served: those run in forked workers.

**Workers are forked fresh per process of a measurement**, as from multiprocessing's server;
the job talks to its worker over the accepted connection with the protocol of
`nnperf.engine.worker`, and kills it on a missed deadline. The job hands the server, with the
request, the write end of a pipe (SCM_RIGHTS): the worker's stdout and stderr, so its
warnings, prints and a native library's last words reach the job's log
(`nnperf.engine.workerlog`), not the server's. A worker is the server's child, not the job's:
the server reaps it and appends its PID and exit status to the `.ends` file, where a job whose
worker went silent reads whether it was killed, and by which signal (`worker_exit_code`).

**A server that cannot start says why and leaves nothing.** Its output goes to its `.log`;
an import that fails is one line there, and the job's error names in its first line how the
server ended (exit code or signal), that line, and a native library's first words (OpenBLAS
under `ulimit -v` cannot start its threads), then quotes the output. The job that tried
removes the socket, log and lock under the lock.

**Nothing lingers.** The server exits after `IDLE_EXIT_S` without a request, or on SIGTERM,
and removes its socket, lock and log then (under the lock, so a job that connects meanwhile
either is served or starts a new server). Set `NNPERF_WARM_SERVER=0` to fork each job's
workers from its own fork server.

No library offers a fork server shared across unrelated processes (multiprocessing's is
private to the process that started it), so this one is written by hand on its primitives.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nnperf.core.errors import NnperfError
from nnperf.core.runtime_dir import locked, open_private, private_dir, runtime_base
from nnperf.engine.warmprotocol import (
    OUTPUT_HEADER,
    JsonConnection,
    job_from_message,
    peer_credentials,
)

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


def address(ident: dict) -> Path:
    """The server's socket path for this identity, in the private directory."""
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]
    return private_dir(runtime_base()) / f"{digest}.sock"


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
    if connection is None:
        connection = _connect_or_start(path)
    connection.ends_path = path.with_suffix(".ends")
    return connection


def _connect_or_start(path: Path) -> JsonConnection:
    lock_path = path.with_suffix(".lock")
    with locked(lock_path):
        connection = open_connection(path)  # another job may have started it meanwhile
        if connection is not None:
            return connection
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a server that died left its socket behind
        try:
            return _start(path)
        except BaseException:
            # Under the lock, as a server removes its files: whoever waits on it re-checks
            # that the lock it got is still the file at its path (`locked`).
            for leftover in (path, lock_path, path.with_suffix(".ends")):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
            raise


def _server_command(path: Path) -> list[str]:
    """The server's command line: this process's sys.path (made absolute), then `main`."""
    search = [os.path.abspath(entry) if entry else os.getcwd() for entry in sys.path]
    code = (
        "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
        "from nnperf.engine.warmserver import main; main(sys.argv[2])"
    )
    # -X faulthandler: a native crash while importing leaves a traceback in the log.
    return [sys.executable, "-X", "faulthandler", "-c", code, json.dumps(search), str(path)]


def _start(path: Path) -> JsonConnection:
    """Start the server for `path` (under the lock) and connect to it; when it does not
    come up, a RuntimeError whose first line names why (`start_failure`)."""
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
    except OSError as exc:
        raise RuntimeError(start_failure(f"it could not be run: {exc}", "")) from None
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
    how = f"not listening after {START_TIMEOUT_S:g} s"
    if server.poll() is not None:
        from nnperf.engine.workerlog import exit_status

        how = exit_status(server.returncode)
    with contextlib.suppress(ProcessLookupError):
        server.kill()
    server.wait()
    output = _tail(log_path)
    with contextlib.suppress(FileNotFoundError):
        log_path.unlink()
    raise RuntimeError(start_failure(how, output))


# What the server prints when an import fails (`serve`): the job's line quotes it.
IMPORT_FAILED = "nnperf warm server: could not import"


def start_failure(how: str, output: str) -> str:
    """Why the server did not start, in its first line (how it ended, the exception it
    reported, a native library's first words), then its output for the log."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    reported = next((line for line in lines if line.startswith(IMPORT_FAILED)), None)
    first = next((line for line in lines if line != reported), None)
    cause = "; ".join(
        part
        for part in (
            how,
            reported and reported.removeprefix("nnperf warm server: "),
            first and f"its first words: {first}",
            None if lines else "it wrote nothing",
        )
        if part
    )
    tail = "".join(output.splitlines(keepends=True)[-40:])
    return (
        f"the warm fork server did not start: {cause} (set {ENABLE_VARIABLE}=0 to run "
        f"without it); its output:\n{tail or '(none)'}"
    )


def _tail(path: Path, limit: int = 1 << 16) -> str:
    """The start of the server's output (a failing import's traceback is short)."""
    try:
        with open(open_private(path, os.O_RDONLY), encoding="utf-8", errors="replace") as handle:
            return handle.read(limit)
    except (OSError, NnperfError):
        return ""


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


def worker_exit_code(connection: JsonConnection, pid: int | None, wait_s: float = 1.0):
    """How the server's worker `pid` ended (-N for signal N), from the server's `.ends`
    file, or None when it does not say within `wait_s` (the server is gone)."""
    ends = connection.ends_path
    if ends is None or pid is None:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        with contextlib.suppress(OSError, ValueError, NnperfError):
            with open(open_private(ends, os.O_RDONLY), encoding="ascii") as handle:
                codes = [line.split() for line in handle if line.split()[:1] == [str(pid)]]
            if codes:
                return int(codes[-1][1])
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)


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
        for suffix in (".lock", ".log", ".ends"):
            with contextlib.suppress(FileNotFoundError):
                path.with_suffix(suffix).unlink()
    listener.close()


# The server's record of how its workers ended (`_record_ends`), open while it serves.
_ENDS_FD: int | None = None


def _record_ends(signum, frame) -> None:
    """SIGCHLD: reap every ended worker and append "<pid> <exit code>" (-N: signal N) to
    the `.ends` file, where a job whose worker went silent reads how it ended
    (`worker_exit_code`): the worker is the server's child, not the job's."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if _ENDS_FD is not None:
            with contextlib.suppress(OSError):
                os.write(_ENDS_FD, f"{pid} {code}\n".encode("ascii"))


def serve(path: Path, idle_exit_s: float = IDLE_EXIT_S) -> None:
    """Import once, then fork one worker per connection until idle for `idle_exit_s` or
    SIGTERM; the socket, lock and log are removed on the way out."""
    import importlib

    from nnperf.engine.worker import PRELOAD

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - OpenBLAS under a limit raises SIGINT
            print(f"{IMPORT_FAILED} {name}: {type(exc).__name__}: {exc}", flush=True)
            raise SystemExit(3) from None
    os.umask(0o077)
    global _ENDS_FD
    _ENDS_FD = open_private(path.with_suffix(".ends"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    signal.signal(signal.SIGCHLD, _record_ends)
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
