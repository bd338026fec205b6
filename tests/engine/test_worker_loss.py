"""A worker killed mid-measurement (what the kernel's OOM killer does) is replaced, once.

Real: a group of two tiny configurations measured by interleaved worker processes forked
from multiprocessing's fork server, and a real SIGKILL sent to one worker after it loaded
its data (the hook wraps how workers start; nothing in the engine knows about it).
"""

from __future__ import annotations

import os
import signal
import sys

import pytest

from nnperf.core.jobs import CAUSE_LINE, logged_job
from nnperf.engine import interleave, processes
from nnperf.engine.runner import run_document
from tiny_training import tiny_data, tiny_model, tiny_request

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="fork workers are Linux's"
)


def killing_starter(victim: tuple[str, int], times: int):
    """Start workers from the fork server; SIGKILL the worker of `victim` (precision,
    process index) right after it starts, the first `times` times it is started."""
    start = processes.worker_starter("forkserver")
    killed: list[int] = []

    def start_worker(job):
        worker = start(job)
        if (job.request.precision, job.process) == victim and len(killed) < times:
            os.kill(worker.pid, signal.SIGKILL)
            killed.append(worker.pid)
        return worker

    return start_worker, killed


def run_group(start_worker):
    requests = [tiny_request("fp32"), tiny_request("bf16")]
    return requests, interleave.run_group(
        requests,
        method="forkserver",
        start_worker=start_worker,
        model_factory=tiny_model,
        data=tiny_data(),
    )


def test_a_killed_worker_is_replaced_and_the_loss_recorded(tmp_path):
    start_worker, killed = killing_starter(("fp32", 1), times=1)
    log = tmp_path / "timed_group.log"
    with logged_job(log, "timed_group"):
        requests, group = run_group(start_worker)
    assert len(killed) == 1
    fp32, bf16 = group.measurements
    assert fp32.status == bf16.status == "ok"
    # The slot was measured again from its start: two processes, each with its own windows.
    assert [r["process"] for r in fp32.processes] == [0, 1]
    assert killed[0] not in [r["pid"] for r in fp32.processes]
    assert sorted({w["process"] for w in fp32.windows}) == [0, 1]
    document = run_document(requests[0], fp32, fp32.started_at_unix, fp32.ended_at_unix)
    (loss,) = document["worker_losses"]
    assert loss["process"] == 1 and loss["signal"] == "SIGKILL" and loss["exit_code"] == -9
    assert loss["phase"] == "startup" and loss["round"] is not None
    assert run_document(requests[1], bf16, 0.0, 1.0)["worker_losses"] == []
    text = log.read_text()
    assert "worker 1 of fp32 baseline killed by SIGKILL — the kernel's OOM killer?" in text
    assert group.comparisons and group.comparisons[0]["measured"]


def test_a_slot_lost_twice_fails_the_group_with_one_line_naming_the_signal(tmp_path):
    start_worker, killed = killing_starter(("fp32", 1), times=2)
    log = tmp_path / "timed_group.log"
    with pytest.raises(SystemExit) as exit_info:
        with logged_job(log, "timed_group"):
            run_group(start_worker)
    assert exit_info.value.code == 1 and len(killed) == 2
    cause = [line for line in log.read_text().splitlines() if CAUSE_LINE.match(line)]
    assert len(cause) == 1
    assert cause[0].startswith(
        "nnperf timed_group: failed: RuntimeError: worker process 1 ended without a result: "
        "killed by SIGKILL"
    )
    assert cause[0].endswith(
        "lost twice (the kernel's OOM killer?), the process it replaced: killed by SIGKILL "
        f"(traceback in {log})"
    )
