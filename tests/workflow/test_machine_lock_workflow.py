"""Two studies started at once on one machine never measure at the same time.

Two real `snakemake` calls in two folders (what two clones, or two targets, do): each has its
own `bench_slot`, so only the machine's measurement lock (`nnperf.core.machinelock`) keeps
their measuring jobs apart. Their job logs say when each held the lock; the spans must not
overlap, and a job that waited says for whom.

The test holds the lock itself until both studies wait for it, then lets go: both then reach
for the machine at the same instant, however slowly each prepared its data. (Started at once
and left alone, a loaded machine could finish the first study's measurement before the
second had built its DAG, and then nothing was tested.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import pytest
from conftest import REPO, TINY_CONFIG, snakemake_command, snakemake_env

from nnperf.core import layout, machinelock

pytestmark = pytest.mark.workflow

# One configuration per study, measured for at least 6 s.
ONE_RUN = (
    "--configfile",
    str(TINY_CONFIG),
    "--config",
    "precisions=[fp32]",
    "batch_sizes=[4]",
    "variants={baseline: {}}",
    "timing={min_seconds: 6, max_seconds: 15}",
)
RUN = layout.path(
    "run",
    dataset="synthetic",
    device="cpu",
    model="resnet18_cifar",
    precision="fp32",
    batch_size=4,
    variant="baseline",
)


WAITING = re.compile(r"waiting to measure until pid (\d+) \(rule (\S+) in (\S+),")


def _job_logs(workdir) -> str:
    return "\n".join(log.read_text() for log in sorted(workdir.rglob("logs/**/*.log")))


def test_two_studies_at_once_measure_one_after_the_other(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = {}
    with machinelock.measuring("test_holder"):
        for name in ("first", "second"):
            workdir = tmp_path / name
            shutil.copytree(REPO / "config", workdir / "config")
            log = open(tmp_path / f"{name}.out", "w")
            calls[name] = (
                workdir,
                subprocess.Popen(
                    snakemake_command(workdir, *ONE_RUN, "--", RUN),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=snakemake_env(),
                    cwd=workdir,
                ),
            )
        deadline = time.monotonic() + 600
        while not all(WAITING.search(_job_logs(workdir)) for workdir, _ in calls.values()):
            for name, (_, process) in calls.items():
                assert process.poll() is None, (tmp_path / f"{name}.out").read_text()[-3000:]
            assert time.monotonic() < deadline, "the studies never reached their measurement"
            time.sleep(0.2)
        # Both wait for this test's hold, and say so by pid, rule and folder.
        for workdir, _ in calls.values():
            pid, rule, folder = WAITING.search(_job_logs(workdir)).groups()
            assert (int(pid), rule, folder) == (os.getpid(), "test_holder", os.getcwd())
    spans = {}
    for name, (workdir, process) in calls.items():
        assert process.wait(timeout=600) == 0, (tmp_path / f"{name}.out").read_text()[-3000:]
        spans[name] = machinelock.held_times(_job_logs(workdir))
        assert spans[name], f"{name}: no measuring job held the machine lock"
    # Released together, they measured one after the other.
    for held, released in spans["first"]:
        for other_held, other_released in spans["second"]:
            assert released <= other_held or other_released <= held, spans
