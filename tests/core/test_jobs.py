"""What a failed job leaves for the person at the terminal (nnperf.core.jobs)."""

from __future__ import annotations

import os
import time

import pytest

from nnperf.core.errors import NnperfError
from nnperf.core.jobs import failure_causes, logged_job


def test_a_failed_job_s_cause_is_read_back_from_its_log(tmp_path):
    logs = tmp_path / "logs"
    with pytest.raises(SystemExit) as exit_info:
        with logged_job(logs / "runs/a.log", "timed_run"):
            print("progress line")
            raise NnperfError("device 'cuda' is not available on this machine")
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        with logged_job(logs / "tables/b.log", "aggregate_runs"):
            raise KeyError("throughput")
    ok = logs / "tables/ok.log"
    ok.write_text("everything fine\n")

    causes = failure_causes(logs, since=0)
    assert causes == [
        (
            os.fspath(logs / "runs/a.log"),
            "nnperf timed_run: error: device 'cuda' is not available on this machine",
        ),
        (
            os.fspath(logs / "tables/b.log"),
            f"nnperf aggregate_runs: failed: KeyError: 'throughput' (traceback in {logs / 'tables/b.log'})",
        ),
    ]


def test_logs_of_earlier_runs_are_not_blamed(tmp_path):
    old = tmp_path / "old.log"
    old.write_text("nnperf ceilings: error: from yesterday\n")
    past = time.time() - 3600
    os.utime(old, (past, past))
    assert failure_causes(tmp_path, since=time.time() - 60) == []
    assert failure_causes(tmp_path / "missing", since=0) == []
