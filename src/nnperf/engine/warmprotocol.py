"""The warm server's messages (`nnperf.engine.warmserver`): length-prefixed JSON objects with
a version, never a pickle, and the request a `RunRequest` in its plain-data form rebuilt
strictly (`nnperf.core.plaindata`). What the job and a served worker say to each other is the
protocol of `nnperf.engine.worker`, carried by `JsonConnection`.
"""

from __future__ import annotations

import errno
import json
import os
import select
import socket
import struct
from typing import Any

from nnperf.core.errors import NnperfError

PROTOCOL_VERSION = 1
# A request or a reply larger than this is not one of ours (the largest, a window's steps
# with the environment record, is kilobytes).
MAX_MESSAGE_BYTES = 64 * 2**20
# The one byte sent with the job's output descriptor, ahead of the request.
OUTPUT_HEADER = b"N"


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)


class JsonConnection:
    """A Unix socket carrying length-prefixed JSON messages `{"v": 1, "m": ...}`: what the
    worker and the job say to each other (tuples arrive as lists). Nothing is unpickled: a
    message that is not JSON, not an object, or of another version is an NnperfError."""

    def __init__(self, sock: socket.socket, peer_pid: int | None = None):
        self.sock = sock
        self.peer_pid = peer_pid
        # The server's record of how its workers ended (`warmserver.worker_exit_code`).
        self.ends_path: os.PathLike | None = None

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
    message = {
        "kind": "job",
        "cwd": cwd,
        "process": job.process,
        "collect_environment": job.collect_environment,
        "workflow_dir": job.workflow_dir,
        "request": to_dict(job.request),
    }
    if job.partners:
        message["partners"] = [[to_dict(request), process] for request, process in job.partners]
    return message


def job_from_message(message: Any):
    """(WorkerJob, cwd) from a request message, strictly; NnperfError naming what is wrong."""
    from nnperf.core.contract import RunRequest
    from nnperf.core.plaindata import from_dict
    from nnperf.engine.worker import WorkerJob

    keys = {"kind", "cwd", "process", "collect_environment", "workflow_dir", "request"}
    if (
        not isinstance(message, dict)
        or not keys <= set(message) <= keys | {"partners"}
        or message["kind"] != "job"
    ):
        raise NnperfError(
            f"warm server protocol: a request needs exactly {sorted(keys)} (and partners, "
            "for a shared process)"
        )
    cwd, process, workflow_dir = message["cwd"], message["process"], message["workflow_dir"]
    if not (isinstance(cwd, str) and os.path.isabs(cwd)):
        raise NnperfError(f"warm server protocol: cwd = {cwd!r}; expected an absolute path")
    if not (type(process) is int and process >= 0):
        raise NnperfError(f"warm server protocol: process = {process!r}; expected an int >= 0")
    if not isinstance(message["collect_environment"], bool):
        raise NnperfError("warm server protocol: collect_environment must be true or false")
    if workflow_dir is not None and not isinstance(workflow_dir, str):
        raise NnperfError("warm server protocol: workflow_dir must be a string or null")
    partners = message.get("partners", [])
    if not isinstance(partners, list) or not all(
        isinstance(p, list) and len(p) == 2 and type(p[1]) is int and p[1] >= 0 for p in partners
    ):
        raise NnperfError("warm server protocol: partners must be [request, process] pairs")
    job = WorkerJob(
        request=from_dict(RunRequest, message["request"], "request"),
        process=process,
        collect_environment=message["collect_environment"],
        workflow_dir=workflow_dir,
        partners=tuple(
            (from_dict(RunRequest, request, "partner"), index) for request, index in partners
        ),
    )
    return job, cwd


def send_job(connection: JsonConnection, message: dict, output_fd: int) -> None:
    """Send the server a job (`job_message`) and the descriptor its worker writes stdout and
    stderr to."""
    socket.send_fds(connection.sock, [OUTPUT_HEADER], [output_fd])
    connection.send(message)
