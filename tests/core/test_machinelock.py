"""The machine's measurement lock: a measuring job waits for another's, says for whom, and
only then starts; a job that is killed leaves nothing to unlock. Real processes, a real
flock, in a private runtime directory of the test's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from nnperf.core import machinelock
from nnperf.core.jobs import logged_job

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock is POSIX")
SRC = Path(__file__).resolve().parents[2] / "src"
HOLDER = """
import sys
from nnperf.core import machinelock
with machinelock.measuring("ceilings"):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes it (or kills this process)
"""


@pytest.fixture
def runtime(monkeypatch) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="nnperf-l", dir="/tmp"))
    os.chmod(folder, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def start_holder(folder: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(SRC), "XDG_RUNTIME_DIR": str(folder)},
    )
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_measuring_job_waits_for_the_holder_and_says_for_whom(runtime, tmp_path):
    holder = start_holder(runtime)
    log = tmp_path / "timed_group.log"
    # Let the holder go a moment after the job started waiting.
    threading.Timer(1.0, holder.stdin.close).start()
    with logged_job(log, "timed_group"):
        body_started = time.time()
    holder.wait(timeout=30)
    text = log.read_text()
    assert (
        f"nnperf timed_group: waiting to measure until pid {holder.pid} (rule ceilings in "
        f"{runtime}, measuring since " in text
    )
    ((held, released),) = machinelock.held_times(text)
    assert held <= body_started <= released  # the wait came before the body
    assert text.index("waiting to measure") < text.index(machinelock.HELD)


def test_a_job_that_measures_nothing_takes_no_lock(runtime, tmp_path):
    holder = start_holder(runtime)
    try:
        log = tmp_path / "aggregate_runs.log"
        with logged_job(log, "aggregate_runs"):  # would block forever if it took the lock
            pass
        assert machinelock.HELD not in log.read_text()
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_leaves_nothing_to_unlock(runtime, tmp_path):
    holder = start_holder(runtime)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    log = tmp_path / "ceilings.log"
    with logged_job(log, "ceilings"):
        pass
    text = log.read_text()
    assert "waiting" not in text and len(machinelock.held_times(text)) == 1
