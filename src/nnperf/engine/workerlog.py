"""A worker's stdout and stderr, relayed into its job's log and kept for its error.

A worker writes where its file descriptors 1 and 2 point, and neither kind of worker would
write into the job's log by itself: multiprocessing's fork server hands its children its own
descriptors (those of the terminal that started the job: `nnperf.core.jobs.logged_job`
redirects Python's `sys.stdout`/`sys.stderr`, not the descriptors), and the warm server's
children would write into the server's log. So the job makes a pipe per worker, gives the
worker its write end as fd 1 and 2 (`nnperf.engine.worker.adopt_output`), and a thread here
copies every line to the job's `sys.stderr` (its log, inside `logged_job`) as
`worker <n>: <line>`, keeping the last `TAIL_LINES`. A worker that dies without a result (a
segfault, `libgomp: Out of memory`, an abort in a CUDA library) has said why on fd 2, and
`summary()` puts those last lines into the job's error, after how it ended (`exit_status`).

This is the manager's side: the job reads; the worker only writes to a descriptor.
"""

from __future__ import annotations

import collections
import os
import signal
import sys
import threading

TAIL_LINES = 20
# A "line" longer than this is cut and relayed (a progress bar without newlines).
MAX_LINE_BYTES = 64 * 1024
# How long the relay may take to see the end of a dead worker's output.
DRAIN_TIMEOUT_S = 5.0


class OutputRelay:
    """The pipe one worker writes to, and the thread that relays it (module docstring)."""

    def __init__(self, index: int, stream=None):
        read_fd, self.write_fd = os.pipe()
        self.prefix = f"worker {index}: "
        self.stream = stream if stream is not None else sys.stderr
        self.lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.thread = threading.Thread(
            target=self._relay, args=(read_fd,), name=f"worker-{index}-output", daemon=True
        )
        self.thread.start()

    def detach_write_end(self) -> int:
        """The write end, which the caller now owns (and must close once it is handed on)."""
        fd, self.write_fd = self.write_fd, None
        return fd

    def close_write_end(self) -> None:
        """Drop this process's copy of the write end: the relay ends when the worker's do."""
        if self.write_fd is not None:
            os.close(self.detach_write_end())

    def _relay(self, read_fd: int) -> None:
        pending = b""
        with open(read_fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    self._emit(line)
                if len(pending) > MAX_LINE_BYTES:
                    self._emit(pending)
                    pending = b""
        if pending:
            self._emit(pending)

    def _emit(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        self.lines.append(text)
        try:
            self.stream.write(f"{self.prefix}{text}\n")
            self.stream.flush()
        except (OSError, ValueError):  # the job's log is closed already
            pass

    def last_lines(self, timeout_s: float = DRAIN_TIMEOUT_S) -> list[str]:
        """The worker's last lines, once its output has ended (or after `timeout_s`)."""
        self.close_write_end()
        self.thread.join(timeout_s)
        return list(self.lines)

    def summary(self, timeout_s: float = DRAIN_TIMEOUT_S) -> str:
        """Its last words on the first line, its last lines below (for an error message)."""
        lines = [line for line in self.last_lines(timeout_s) if line.strip()]
        if not lines:
            return "it wrote nothing to stdout or stderr"
        last = f"its last words: {lines[-1].strip()}"
        if len(lines) == 1:
            return last
        shown = "\n".join(f"  {line}" for line in lines)
        return f"{last}\nits last {len(lines)} lines of output:\n{shown}"


def signal_name(exit_code: int | None) -> str | None:
    """The name of the signal that ended a process (multiprocessing's exit code -9 is
    SIGKILL), or None when it exited."""
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def exit_status(code: int | None) -> str:
    """How a process ended, in words: killed by SIGKILL, exit code 1, or unknown."""
    if code is None:
        return "its exit status is unknown"
    if code < 0:
        return f"killed by {signal_name(code)}"
    return f"exit code {code}"
