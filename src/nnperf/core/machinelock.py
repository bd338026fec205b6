"""One measurement at a time on a machine: the lock every measuring job holds.

Snakemake's `bench_slot` resource keeps the measuring jobs of one `snakemake` call apart, but
two calls (two targets in one folder, two clones, two studies) know nothing of each other:
their measurements ran side by side, every window was flagged "host overloaded" and one
configuration came out `over_budget` at 3.6 s a step because of the other study. So every
measuring job (`nnperf.core.vocab.MEASURING_RULES`: timing, ncu and torch.profiler
profiles, the ceilings, training) takes this lock first: an `flock` on `measuring.lock` in
nnperf's private runtime directory (`nnperf.core.runtime_dir`, where the warm server lives),
so it holds across Snakemake calls and clones of one user. The kernel drops it when its job
ends, however it ends (kill -9 included): nothing stale can block the next study.

The holder writes its PID, rule, folder and start time into the file; a job that has to
wait says for whom in one line of its log, and waits *before* its measurement starts: the
budget's clock (`timing.max_seconds`) starts after the lock is held, so waiting is never
counted as measuring. The job's log then records when it held the lock and when it let go
(`HELD`, `RELEASED`), the times a reader checks two studies against.

Other users' jobs are not seen (their runtime directories are private to them).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Iterator

from nnperf.core.runtime_dir import open_private, private_dir, runtime_base

LOCK_NAME = "measuring.lock"
# The lines a job's log gets (after "nnperf <rule>: "): `held_times` reads them back.
HELD = "measuring alone on this machine since unix"
RELEASED = "machine measurement lock released at unix"


def lock_path() -> Path:
    return private_dir(runtime_base()) / LOCK_NAME


def _holder(fd: int) -> str:
    """Who holds the lock, in words, from what it wrote into the file."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 4096).decode("utf-8") or "{}")
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict) or "pid" not in data:
        return "another nnperf job (it has not said which yet)"
    since = time.strftime("%H:%M:%S", time.localtime(float(data.get("since_unix", 0))))
    return (
        f"pid {data['pid']} (rule {data.get('rule')} in {data.get('folder')}, measuring "
        f"since {since})"
    )


def _write_holder(fd: int, rule: str) -> None:
    record = {"pid": os.getpid(), "rule": rule, "folder": os.getcwd(), "since_unix": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode("utf-8"), 0)


@contextlib.contextmanager
def measuring(rule: str) -> Iterator[None]:
    """Hold the machine's measurement lock for the body; wait for it first, saying for whom
    on stderr (the job's log)."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): one call's bench_slot is all there is
        yield
        return
    path = lock_path()
    fd = open_private(path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waited_from = time.time()
            print(
                f"nnperf {rule}: waiting to measure until {_holder(fd)} has finished: one "
                f"measurement at a time on this machine ({path})",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
            print(
                f"nnperf {rule}: waited {time.time() - waited_from:.1f} s for the machine",
                file=sys.stderr,
                flush=True,
            )
        _write_holder(fd, rule)
        print(f"nnperf {rule}: {HELD} {time.time():.6f}", file=sys.stderr, flush=True)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            print(f"nnperf {rule}: {RELEASED} {time.time():.6f}", file=sys.stderr, flush=True)
    finally:
        os.close(fd)  # closing the last descriptor drops the flock


def held_times(log_text: str) -> list[tuple[float, float]]:
    """(held, released) unix times of every lock a job's log says it held."""
    held, spans = None, []
    for line in log_text.splitlines():
        if HELD in line:
            held = float(line.rsplit(" ", 1)[1])
        elif RELEASED in line and held is not None:
            spans.append((held, float(line.rsplit(" ", 1)[1])))
            held = None
    return spans
