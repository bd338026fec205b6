"""One warm server for every Snakemake invocation of one environment, in real Snakemake runs.

Snakemake runs each `script:` job with a per-invocation script cache on `sys.path`; when the
server's key held `sys.path`, every `snakemake` call started a server of its own (six alive
at once, ~380 MB each). Two studies here, one `snakemake` call each, must share one.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import REPO, TINY_CONFIG, run_snakemake

from nnperf.core import layout
from nnperf.engine import warmserver

pytestmark = [
    pytest.mark.workflow,
    pytest.mark.skipif(not warmserver.enabled(), reason="the warm server is switched off"),
]

ONE_RUN = (
    "--configfile",
    str(TINY_CONFIG),
    "--config",
    "precisions=[fp32]",
    "batch_sizes=[4]",
    "variants={baseline: {}}",
    "timing={max_seconds: 15}",
)
KEYS = {
    "device": "cpu",
    "model": "resnet18_cifar",
    "precision": "fp32",
    "batch_size": 4,
    "variant": "baseline",
}
MARK = "nnperf.engine.warmserver import main"


def servers_of_this_checkout() -> dict[int, float]:
    """{pid: start time} of the warm servers whose sys.path holds this checkout's src."""
    found = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
            started = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
        except (OSError, IndexError, ValueError):
            continue
        if MARK in command and str(REPO / "src") in command:
            found[int(entry.name)] = started
    return found


def test_two_snakemake_invocations_share_one_warm_server(tmp_path):
    before = servers_of_this_checkout()
    run = layout.path("run", dataset="synthetic", **KEYS)
    documents, servers = [], []
    for study in ("first", "second"):
        workdir = tmp_path / study
        shutil.copytree(REPO / "config", workdir / "config")
        result = run_snakemake(workdir, *ONE_RUN, "--", run)
        assert result.returncode == 0, result.stderr[-3000:]
        documents.append(json.loads((workdir / run).read_text()))
        servers.append(set(servers_of_this_checkout()))
        time.sleep(0.1)
    for document in documents:
        assert document["start_method"] == "warm_server", document.get("error")
        assert document["processes"], document.get("error")
    first = servers[0] - set(before)
    assert len(first) <= 1, f"one snakemake call started several servers: {sorted(first)}"
    # Served, and no server of its own: the second study's workers came from the first's.
    assert servers[1] - servers[0] == set(), "the second snakemake call started its own server"
    assert servers_of_this_checkout(), "no server outlived the jobs to serve the next study"
