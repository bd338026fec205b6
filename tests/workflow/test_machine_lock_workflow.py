"""Two studies started at once on one machine never measure at the same time.

Two real `snakemake` calls in two folders (what two clones, or two targets, do): each has its
own `bench_slot`, so only the machine's measurement lock (`nnperf.core.machinelock`) keeps
their measuring jobs apart. Their job logs say when each held the lock; the spans must not
overlap, and the job that waited says for whom.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from conftest import REPO, TINY_CONFIG, snakemake_command, snakemake_env

from nnperf.core import layout, machinelock

pytestmark = pytest.mark.workflow

# One configuration per study, measured for at least 6 s: both studies prepare their data
# at the same time, so the second reaches its measurement while the first still measures.
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


def test_two_studies_at_once_measure_one_after_the_other(tmp_path):
    calls = {}
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
    spans, texts = {}, {}
    for name, (workdir, process) in calls.items():
        assert process.wait(timeout=600) == 0, (tmp_path / f"{name}.out").read_text()[-3000:]
        texts[name] = "\n".join(log.read_text() for log in sorted(workdir.rglob("logs/**/*.log")))
        spans[name] = machinelock.held_times(texts[name])
        assert spans[name], f"{name}: no measuring job held the machine lock"
    for held, released in spans["first"]:
        for other_held, other_released in spans["second"]:
            assert released <= other_held or other_released <= held, (spans, texts)
    # Whichever came second waited, and its log names who it waited for.
    waited = [
        re.search(r"waiting to measure until pid \d+ \(rule timed_group in (\S+),", text)
        for text in texts.values()
    ]
    found = [match.group(1) for match in waited if match]
    assert len(found) == 1, texts
    assert found[0] in {str(workdir) for workdir, _ in calls.values()}
