"""A warm fork server shared by the measurement jobs of one machine.

Every `timed_run` job is its own process (Snakemake's unit of work, resume and scheduling),
and a fresh process pays the imports before it can time anything: 5.4 s here, 9 s on the
H100 machine for torch and torchvision. multiprocessing's fork server (started by
`nnperf.engine.manager`) pays them once per *job*; this server pays them once per *study*.
The first job starts it; it imports torch and the worker's side of nnperf (`worker.PRELOAD`),
never runs a torch op or touches a device, and forks one worker per request. Later jobs
connect to it, so a job reaches its first warm-up step in about a second (its own interpreter
start, the request, the fork, device init and model build) instead of after the imports.

Isolation is kept where it matters:

* A server serves only jobs that would have run exactly what it runs: its address is a hash
  of the interpreter, `sys.path`, the nnperf code (`codehash`), the torch/torchvision/numpy
  versions, every environment variable, the resource limits and the CPU affinity. Change any
  of them (edit the engine, set `CUDA_VISIBLE_DEVICES`, upgrade torch) and the next job gets
  a server of its own.
* Workers are forked fresh per process of a measurement, as from multiprocessing's server;
  the job talks to its worker over the accepted connection with the same protocol, and kills
  it on a missed deadline.
* The server lives in a private directory (mode 0700) under the temporary directory and
  exits after `IDLE_EXIT_S` without a request, so nothing lingers after a study.

What is not shared: a worker's stdout/stderr go to the server's log (`<address>.log` beside
the socket), not the job's log; every result and every error still reaches the job over the
connection. Set `NNPERF_WARM_SERVER=0` to fork each job's workers from its own fork server.

No library offers a fork server shared across unrelated processes (multiprocessing's is
private to the process that started it), so this one is written by hand on its primitives.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from multiprocessing.connection import Connection

IDLE_EXIT_S = 300.0
START_TIMEOUT_S = 120.0
ENABLE_VARIABLE = "NNPERF_WARM_SERVER"


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
    """Everything a worker's behaviour depends on besides its request."""
    from nnperf.core.codehash import code_hash

    return {
        "python": sys.executable,
        "sys_path": list(sys.path),
        "code": code_hash("nnperf.engine.warmserver"),
        "versions": _versions(),
        "environment": dict(sorted(os.environ.items())),
        "limits": _limits(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "uid": os.getuid(),
    }


def address(ident: dict) -> Path:
    """The server's socket path for this identity, in a private directory."""
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]
    folder = Path(tempfile.gettempdir()) / f"nnperf-warm-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder / f"{digest}.sock"


def _connect(path: Path) -> Connection | None:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(path))
    except OSError:
        client.close()
        return None
    return Connection(client.detach())


def connect() -> tuple[Connection, Path]:
    """A connection to this identity's server (started when there is none), and its log."""
    path = address(identity())
    log_path = path.with_suffix(".log")
    connection = _connect(path)
    if connection is not None:
        return connection, log_path
    lock_path = path.with_suffix(".lock")
    with open(lock_path, "w") as lock:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)  # one job starts the server; the others wait for it
        connection = _connect(path)
        if connection is not None:
            return connection, log_path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a server that died left its socket behind
        log = open(log_path, "ab")
        server = subprocess.Popen(
            [sys.executable, "-m", "nnperf.engine.warmserver", str(path), json.dumps(sys.path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            connection = _connect(path)
            if connection is not None:
                return connection, log_path
            if server.poll() is not None:
                break
            time.sleep(0.05)
    raise RuntimeError(
        f"the warm fork server did not start (see {log_path}); "
        f"set {ENABLE_VARIABLE}=0 to run without it"
    )


# --- the server ---------------------------------------------------------------------------


def _serve_one(client: socket.socket) -> None:
    """Body of a forked worker: read the job, move to its directory, run it."""
    from nnperf.engine.worker import worker_main

    conn = Connection(client.detach())
    try:
        cwd, job = pickle.loads(conn.recv_bytes())
    except EOFError:
        return  # the client went away before sending a job
    os.chdir(cwd)
    worker_main(conn, job)


def serve(path: Path, idle_exit_s: float = IDLE_EXIT_S) -> None:
    """Import once, then fork one worker per connection until idle for `idle_exit_s`."""
    import importlib

    from nnperf.engine.worker import PRELOAD

    for name in PRELOAD:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished workers
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    listener.settimeout(idle_exit_s)
    print(f"nnperf warm server {os.getpid()} serving {path}", flush=True)
    try:
        while True:
            try:
                client, _ = listener.accept()
            except socket.timeout:
                break
            if os.fork() == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                code = 0
                try:
                    _serve_one(client)
                except BaseException:  # noqa: BLE001 - a worker must never return into the loop
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            client.close()
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        print(f"nnperf warm server {os.getpid()} idle for {idle_exit_s:g} s: exiting", flush=True)


if __name__ == "__main__":
    sys.path[:] = json.loads(sys.argv[2])
    serve(Path(sys.argv[1]))
