"""The parent's handle on one worker process: how it starts, and how the parent talks to it
and kills it (`nnperf.engine.manager` drives the workers of a measurement through it).

Workers are forked from multiprocessing's *fork server*, not from the job's own process: a
server started fresh that imports torch and nnperf (`worker.PRELOAD`) and never runs a torch
op or touches a device. Forking a process that has run a parallel CPU op deadlocks the child
(GNU OpenMP's thread pool does not survive fork()), and forking one that has initialised CUDA
breaks CUDA in the child; the server is clean by construction, whatever its caller did
before. The job's process itself imports no torch at all. A forked worker starts in a
fraction of a second: it initialises the device itself, loads the prepared data, builds the
model, warms up and runs the windows the parent asks for. With the machine's warm server
(`nnperf.engine.warmserver`) the worker is forked by that server instead (`_ServedWorker`).

Where there is no fork server (macOS, where fork is unsafe; Windows), workers are spawned:
each pays the imports, just as correct. What a worker runs, and the protocol over the pipe,
is `nnperf.engine.worker`: this module imports it, never the other way.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
from typing import Any, Callable

from nnperf.core.errors import NnperfError
from nnperf.engine.worker import PRELOAD, WARM, WorkerJob, forked_main, start_method
from nnperf.engine.workerlog import OutputRelay, exit_status, signal_name


class Overrun(Exception):
    """A worker missed its deadline and was killed."""

    def __init__(self, waited_s: float):
        self.waited_s = waited_s


class WorkerLost(RuntimeError):
    """A worker ended without its result: killed (the kernel's OOM killer sends SIGKILL),
    crashed, or exited. `signal` is the signal's name and `exit_code` the exit status, when
    they are known; the text is the one line a job log shows."""

    def __init__(self, index: int, exit_code: int | None, how: str):
        self.index = index
        self.exit_code = exit_code
        self.signal = signal_name(exit_code)
        super().__init__(f"worker process {index} ended without a result: {how}")


UNPICKLABLE = (
    "the measurement's model factory or data cannot be sent to a worker process ({}); "
    "allowed: a module-level function (or functools.partial of one) and picklable data"
)


class Worker:
    """One live worker process and the parent's end of its connection (the protocol in
    `nnperf.engine.worker`'s docstring). Subclasses start it; `nnperf.engine.rehearsal`
    replays recorded timings through the same interface."""

    conn: Any
    index: int
    started_at_unix: float
    pid: int | None = None

    def receive(self, deadline_unix: float):
        """The next message, or Overrun (worker killed) when `deadline_unix` passes."""
        waited_from = time.time()
        timeout = max(0.0, deadline_unix - waited_from)
        try:
            ready = self.conn.poll(timeout)
        except (EOFError, OSError):
            ready = True
        if not ready:
            self.kill()
            raise Overrun(time.time() - waited_from)
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            how = self.ended_how()
            raise WorkerLost(self.index, self.exit_code(), how) from None
        if message[0] == "started":
            self.pid = message[1]
            return self.receive(deadline_unix)
        return message

    def send(self, command: str) -> None:
        self.conn.send(command)

    def finish(self, deadline_unix: float) -> dict:
        """Ask the worker to stop and return its closing record."""
        self.send("stop")
        message = self.receive(deadline_unix)
        self.join()
        if message[0] != "done":
            raise_for(message, self.index)
        return message[1]

    def kill(self) -> None:
        raise NotImplementedError

    def join(self) -> None:
        raise NotImplementedError

    def ended_how(self) -> str:
        raise NotImplementedError

    def exit_code(self) -> int | None:
        """How the process ended (multiprocessing's convention: -N for signal N), or None
        when unknown; asked after `ended_how`."""
        return None


class _ForkedWorker(Worker):
    """A worker started by multiprocessing (its fork server, or spawn). Its stdout and
    stderr are a pipe this job relays into its log (`nnperf.engine.workerlog`)."""

    def __init__(self, context, job: WorkerJob):
        from multiprocessing.connection import Connection

        self.conn, child_conn = context.Pipe()
        self.index = job.process
        self.started_at_unix = time.time()
        self.output = OutputRelay(job.process)
        # multiprocessing hands a child a descriptor only inside a connection object.
        output_end = Connection(self.output.detach_write_end(), readable=False)
        # Not daemonic: a daemonic process may not start children, and a variant with
        # DataLoader workers (num_workers > 0) starts them. The job kills every worker it
        # started (MeasurementRun.run_process), and an orphaned one ends at its pipe's EOF.
        self.process = context.Process(
            target=forked_main, args=(child_conn, job, output_end), daemon=False
        )
        try:
            self.process.start()
        except (AttributeError, TypeError, pickle.PicklingError) as exc:
            raise NnperfError(UNPICKLABLE.format(exc)) from None
        finally:
            child_conn.close()
            output_end.close()
        self.pid = self.process.pid

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.join()

    def join(self) -> None:
        self.process.join(10)

    def ended_how(self) -> str:
        self.process.join(5)
        return f"{exit_status(self.process.exitcode)}; {self.output.summary()}"

    def exit_code(self) -> int | None:
        return self.process.exitcode


# How long a killed served worker may take to be gone (its CUDA context torn down) before
# the next one starts anyway.
REAP_TIMEOUT_S = 10.0


def is_gone(pid: int) -> bool:
    """Whether process `pid` has exited (gone, or a zombie: its resources are released)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def reap(pid: int, timeout_s: float = REAP_TIMEOUT_S) -> bool:
    """Wait until `pid` is gone; False when it outlived `timeout_s`. The warm server (its
    parent) has the kernel reap its workers, so this process can only watch, not wait."""
    end = time.monotonic() + timeout_s
    while not is_gone(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


class _ServedWorker(Worker):
    """A worker forked by the machine's warm server (`nnperf.engine.warmserver`): the job
    sends the request as plain data with its output pipe, and talks JSON with the worker."""

    def __init__(self, job: WorkerJob):
        from nnperf.engine import warmprotocol, warmserver

        self.index = job.process
        self.started_at_unix = time.time()
        message = warmprotocol.job_message(job, os.getcwd())  # refused before a server starts
        self.output = OutputRelay(job.process)
        try:
            self.conn = warmserver.connect()
            try:
                warmprotocol.send_job(self.conn, message, self.output.write_fd)
            except BaseException:
                self.conn.close()
                raise
        finally:
            self.output.close_write_end()

    # When the process `pid` started (/proc ticks), once it was seen as the server's child.
    _pinned_start: int | None = None

    def _is_ours(self) -> bool:
        """Whether `pid` (what the worker said) is still the process the server forked. A
        PID from a message is never killed on its word alone: it must be a child of the
        server whose user was checked, and keep the start time it had then (the server may
        idle out and leave its worker to init during a long measurement)."""
        from nnperf.engine import warmserver

        if self._pinned_start is None:
            if not warmserver.is_child_of(self.pid, self.conn.peer_pid):
                return False
            self._pinned_start = warmserver.process_start(self.pid)
        return self._pinned_start is not None and (
            warmserver.process_start(self.pid) == self._pinned_start
        )

    def receive(self, deadline_unix: float):
        message = super().receive(deadline_unix)
        self._is_ours()  # pinned while the server is surely its parent
        return message

    def kill(self) -> None:
        """Kill the worker and wait until it is gone: the next process's CUDA init and
        autotuning must not overlap this one's teardown."""
        if self._is_ours():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            reap(self.pid)
        self.conn.close()

    def join(self) -> None:
        if self._is_ours():
            reap(self.pid)
        self.conn.close()

    def ended_how(self) -> str:
        return f"{exit_status(self.exit_code())}; {self.output.summary()}"

    def exit_code(self) -> int | None:
        """What the server recorded when it reaped the worker (its child, not the job's)."""
        from nnperf.engine import warmserver

        if getattr(self, "_exit_code", None) is None:
            self._exit_code = warmserver.worker_exit_code(self.conn, self.pid)
        return self._exit_code


def raise_for(message: tuple, index: int) -> None:
    if message[0] == "error" and message[1] == "nnperf":
        raise NnperfError(message[2])
    if message[0] == "error":
        raise RuntimeError(f"worker process {index} failed:\n{message[2]}")
    raise RuntimeError(f"worker process {index} sent an unexpected message {message[0]!r}")


def worker_starter(method: str | None = None) -> Callable[[WorkerJob], Worker]:
    """How workers start: from the warm server (`worker.WARM`), from multiprocessing's fork
    server, or spawned (`worker.start_method()` when None)."""
    method = method or start_method()
    context = None if method == WARM else multiprocessing.get_context(method)
    if method == "forkserver":
        # Takes effect when the server starts (the first measurement of this process).
        context.set_forkserver_preload(list(PRELOAD))

    def start_worker(job: WorkerJob) -> Worker:
        return _ServedWorker(job) if method == WARM else _ForkedWorker(context, job)

    return start_worker
