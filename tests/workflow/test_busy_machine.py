"""A real study while another process holds a core through its measurement (issue 31).

The tiny study keeps disturbed windows (`timing.disturbed_windows: keep`, so that its statuses
do not depend on the runner); here they are measured again, as a user's study does by
default. A busy loop starts once the group's job holds the machine's measurement lock and
spins until the study ends: a loop of a fixed few seconds can end inside the first worker's
start on a fast machine and disturb no window at all. Whatever the loop did to which window, no window the engine judged
disturbed may enter an estimate or a comparison, and a configuration that lost windows to it
is either measured again to an `ok` estimate of clean windows or ends `host_busy`, compared
with nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pandas as pd
import pytest
from conftest import REPO, TINY_CONFIG, snakemake_command, snakemake_env

from nnperf.engine import stability, stopping

pytestmark = pytest.mark.workflow

TABLES = "results/tables/synthetic"
GROUP_LOG = "logs/runs/synthetic/cpu/resnet18_cifar/groups/bs4.log"
STUDY = (
    "--configfile",
    str(TINY_CONFIG),
    "--config",
    "precisions=[fp32]",
    "batch_sizes=[4]",
    "timing={min_seconds: 0, max_seconds: 15, min_processes: 2, max_processes: 3, "
    "min_windows: 1, max_windows: 3, disturbed_windows: remeasure}",
    "--",
    f"{TABLES}/summary.csv",
    f"{TABLES}/windows.csv",
    f"{TABLES}/comparisons.csv",
)
SPIN = "while True:\n    pass\n"


def _measure_beside_a_busy_loop(workdir):
    """Run the study, a loop spinning from the start of its measurement to its end; the study's
    exit code and whether the loop ran."""
    out = open(workdir / "snakemake.out", "w")
    study = subprocess.Popen(
        snakemake_command(workdir, *STUDY),
        stdout=out,
        stderr=subprocess.STDOUT,
        env=snakemake_env(),
        cwd=workdir,
    )
    log, loop = workdir / GROUP_LOG, None
    deadline = time.time() + 600
    try:
        while study.poll() is None and time.time() < deadline:
            if loop is None and log.exists() and "measuring alone" in log.read_text():
                loop = subprocess.Popen([sys.executable, "-c", SPIN])
            time.sleep(0.2)
        study.wait(timeout=max(1.0, deadline - time.time()))
    finally:
        if loop is not None:
            loop.kill()
            loop.wait(timeout=30)
    return study.returncode, loop is not None


def test_windows_beside_a_busy_loop_are_measured_again_never_averaged_in(tmp_path):
    workdir = tmp_path / "study"
    shutil.copytree(REPO / "config", workdir / "config")
    returncode, loaded = _measure_beside_a_busy_loop(workdir)
    assert returncode == 0, (workdir / "snakemake.out").read_text()[-4000:]
    assert loaded, "the group's log never said that it measures"

    windows = pd.read_csv(f"{workdir}/{TABLES}/windows.csv")
    summary = pd.read_csv(f"{workdir}/{TABLES}/summary.csv")
    comparisons = pd.read_csv(f"{workdir}/{TABLES}/comparisons.csv")
    windows["discarded"] = windows["discarded"].astype(bool)
    # The loop was seen: a neighbour's load discarded windows.
    assert windows["discarded"].any(), windows[["variant", "other_cores", "own_threads"]]
    # Every window beside a neighbour's load was left out, and only for that cause here (a
    # CPU has no clock the engine reads, steal aside).
    beside_load = windows.apply(lambda row: stability.neighbour_load(row.to_dict()), axis=1)
    assert (windows.loc[beside_load, "discarded"]).all()
    assert set(windows.loc[windows["discarded"], "discard_reasons"]) <= {
        "host_overloaded",
        "cpu_steal",
        "host_overloaded|cpu_steal",
    }

    compared = set(comparisons["a_variant"]) | set(comparisons["b_variant"])
    for row in summary.itertuples():
        mine = windows[windows["variant"] == row.variant]
        clean = mine[~mine["discarded"]]
        assert row.discarded_windows == mine["discarded"].sum()
        assert row.n_windows == len(clean)
        if row.status == "host_busy":
            # Never compared (nor plotted: tests/report/test_host_busy.py).
            assert row.discarded_windows > 0 and row.variant not in compared
            continue
        assert row.status == "ok"
        # The estimate is the clean windows' alone.
        samples = [
            stopping.WindowSample(int(w.process), int(w.images), float(w.window_s))
            for w in clean.itertuples()
        ]
        assert row.throughput_img_s_mean == pytest.approx(
            stopping.estimate(samples).throughput, rel=1e-6
        )
